"""Tests of the Word Embedding Association Test (chapter 11): ``weat`` and ``weat_from_vectors``.

Expected values come from plain loops written here (cosines, associations, and every partition
enumerated with itertools), or from cases whose answer is known in closed form, never from the
code under test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from transformer_book.embeddings.evaluation import WEAT_TESTS, WEATResult, WEATTest, weat, weat_from_vectors

pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------------------
# Helpers: independent reference computations
# --------------------------------------------------------------------------------------


def _cos(u, v):
    return sum(a * b for a, b in zip(u, v)) / math.sqrt(sum(a * a for a in u) * sum(b * b for b in v))


def _s(w, A, B):
    return sum(_cos(w, a) for a in A) / len(A) - sum(_cos(w, b) for b in B) / len(B)


def _reference(X, Y, A, B):
    """(effect size, S, exact one-sided p) by loops over every partition of X + Y."""
    sx, sy = [_s(x, A, B) for x in X], [_s(y, A, B) for y in Y]
    both = sx + sy
    mean = sum(both) / len(both)
    sd = math.sqrt(sum((v - mean) ** 2 for v in both) / (len(both) - 1))
    effect = (sum(sx) / len(sx) - sum(sy) / len(sy)) / sd
    S = sum(sx) - sum(sy)
    n, count, total = len(X), 0, 0
    for half in itertools.combinations(range(2 * n), n):
        other = [i for i in range(2 * n) if i not in half]
        S_i = sum(both[i] for i in half) - sum(both[i] for i in other)
        count += S_i >= S - 1e-9
        total += 1
    return effect, S, count / total, total


def _sets(seed, n=4, n_attr=5, d=3):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(k, d)) for k in (n, n, n_attr, n_attr + 1)]


# --------------------------------------------------------------------------------------
# The statistic, the effect size and the exact p-value
# --------------------------------------------------------------------------------------


def test_hand_computation_in_two_dimensions():
    # A points along the x axis, B along y; X leans to x, Y to y; every cosine is written out
    X = np.array([[1.0, 0.0], [2.0, 1.0]])
    Y = np.array([[0.0, 1.0], [1.0, 3.0]])
    A = np.array([[1.0, 0.0], [3.0, 0.0]])
    B = np.array([[0.0, 1.0], [0.0, 2.0]])
    # s = mean cos with A - mean cos with B: (1, 0) -> 1 - 0; (2, 1) -> 2/sqrt5 - 1/sqrt5; (0, 1) -> 0 - 1;
    # (1, 3) -> 1/sqrt10 - 3/sqrt10
    s = [1.0, 1 / math.sqrt(5), -1.0, -2 / math.sqrt(10)]
    mean = sum(s) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in s) / 3)
    result = weat_from_vectors(X, Y, A, B)
    assert result.statistic == pytest.approx(s[0] + s[1] - s[2] - s[3], abs=1e-12)
    assert result.effect_size == pytest.approx((s[0] + s[1] - s[2] - s[3]) / 2 / sd, abs=1e-12)
    # 6 partitions of 4 into halves; only the observed one has S_i >= S, the others are smaller
    assert result.exact and result.permutations == 6
    assert result.p_value == pytest.approx(1 / 6)
    assert result.sizes == (2, 2, 2, 2) and result.missing == () and result.trimmed == ()


def test_targets_on_their_attributes_reach_the_bound_and_the_smallest_p():
    n = 4
    A = np.array([[1.0, 0.0, 0.0]] * 3)
    B = np.array([[0.0, 1.0, 0.0]] * 3)
    X, Y = np.repeat(A[:1], n, axis=0), np.repeat(B[:1], n, axis=0)
    result = weat_from_vectors(X, Y, A, B)
    # s = +1 on X and -1 on Y: d = 2 sqrt((2n - 1) / (2n)), below 2, and S = 2n
    assert result.effect_size == pytest.approx(2 * math.sqrt((2 * n - 1) / (2 * n)), abs=1e-12)
    assert result.effect_size < 2
    assert result.statistic == pytest.approx(2 * n)
    assert result.p_value == pytest.approx(1 / math.comb(2 * n, n))  # the observed partition alone
    # near, not on: still close to the bound, still the smallest p
    rng = np.random.default_rng(0)
    near = weat_from_vectors(X + 0.05 * rng.normal(size=X.shape), Y + 0.05 * rng.normal(size=Y.shape), A, B)
    assert 1.8 < near.effect_size < 2 * math.sqrt(7 / 8) + 1e-12
    assert near.p_value == pytest.approx(1 / 70)


def test_swapping_the_attributes_flips_the_sign():
    X, Y, A, B = _sets(1)
    forward, backward = weat_from_vectors(X, Y, A, B), weat_from_vectors(X, Y, B, A)
    assert backward.effect_size == pytest.approx(-forward.effect_size, abs=1e-12)
    assert backward.statistic == pytest.approx(-forward.statistic, abs=1e-12)
    assert forward.effect_size != pytest.approx(0, abs=1e-3)  # not a trivial case
    # the two one-sided p-values cover every partition once, and the tied ones (S_i = +-S) twice
    swapped_targets = weat_from_vectors(Y, X, A, B)
    assert swapped_targets.effect_size == pytest.approx(-forward.effect_size, abs=1e-12)
    assert forward.p_value + backward.p_value >= 1


def test_identical_target_sets_have_no_effect():
    X, _, A, B = _sets(2)
    result = weat_from_vectors(X, X.copy(), A, B)
    assert result.effect_size == 0 and result.statistic == pytest.approx(0, abs=1e-12)
    assert result.p_value >= 0.5  # S_i and -S_i are both partitions: at least half are >= 0
    # every target the same vector: s is constant, the standard deviation zero, d undefined
    same = np.repeat(X[:1], 4, axis=0)
    flat = weat_from_vectors(same, same.copy(), A, B)
    assert math.isnan(flat.effect_size) and flat.p_value == 1.0


@pytest.mark.parametrize("seed, n", [(3, 4), (4, 4), (5, 5), (6, 4)])
def test_exact_p_value_matches_every_partition_enumerated(seed, n):
    X, Y, A, B = _sets(seed, n=n)
    effect, S, p, total = _reference(X.tolist(), Y.tolist(), A.tolist(), B.tolist())
    result = weat_from_vectors(X, Y, A, B)
    assert result.exact and result.permutations == total == math.comb(2 * n, n)
    assert result.p_value == pytest.approx(p, abs=1e-12)
    assert result.effect_size == pytest.approx(effect, abs=1e-10)
    assert result.statistic == pytest.approx(S, abs=1e-10)
    assert 0 < result.p_value <= 1


def test_effect_size_stays_within_its_bound():
    for seed in range(20):
        X, Y, A, B = _sets(100 + seed, n=5, d=4)
        d = weat_from_vectors(X, Y, A, B).effect_size
        assert abs(d) < 2 * math.sqrt(9 / 10)


def test_scaling_the_vectors_changes_nothing():
    X, Y, A, B = _sets(7)
    rng = np.random.default_rng(8)
    scaled = [v * rng.uniform(0.01, 100.0, size=(len(v), 1)) for v in (X, Y, A, B)]
    plain, rescaled = weat_from_vectors(X, Y, A, B), weat_from_vectors(*scaled)
    assert rescaled.effect_size == pytest.approx(plain.effect_size, abs=1e-12)
    assert rescaled.statistic == pytest.approx(plain.statistic, abs=1e-12)
    assert rescaled.p_value == plain.p_value


def test_tensors_and_float32_give_the_arrays_result():
    X, Y, A, B = _sets(9)
    from_arrays = weat_from_vectors(X, Y, A, B)
    from_tensors = weat_from_vectors(*(torch.from_numpy(v).float() for v in (X, Y, A, B)))
    assert from_tensors.effect_size == pytest.approx(from_arrays.effect_size, abs=1e-5)
    assert from_tensors.p_value == from_arrays.p_value


# --------------------------------------------------------------------------------------
# The sampled p-value
# --------------------------------------------------------------------------------------


def test_sampled_p_value_is_seeded_and_near_the_exact_one():
    X, Y, A, B = _sets(10, n=6)  # C(12, 6) = 924 partitions
    exact = weat_from_vectors(X, Y, A, B, permutations=924)
    assert exact.exact and exact.permutations == 924
    sampled = weat_from_vectors(X, Y, A, B, permutations=923, seed=1)
    assert not sampled.exact and sampled.permutations == 923
    assert sampled.effect_size == exact.effect_size
    assert sampled == weat_from_vectors(X, Y, A, B, permutations=923, seed=1)  # deterministic
    assert sampled.p_value != weat_from_vectors(X, Y, A, B, permutations=923, seed=2).p_value
    assert abs(sampled.p_value - exact.p_value) < 0.06  # about 4 standard errors
    many = weat_from_vectors(X, Y, A, B, permutations=20_000, seed=3)
    assert abs(many.p_value - exact.p_value) < 0.015


def test_sampled_p_value_counts_the_observed_partition():
    n = 10  # C(20, 10) = 184,756 partitions: sampled
    A, B = np.eye(3)[[0, 0]], np.eye(3)[[1, 1]]
    X, Y = np.repeat(A[:1], n, axis=0), np.repeat(B[:1], n, axis=0)
    result = weat_from_vectors(X, Y, A, B, permutations=1_000)
    assert not result.exact
    # only the observed partition reaches S; a random half almost never is it
    assert result.p_value == pytest.approx(1 / 1_001)


# --------------------------------------------------------------------------------------
# Words: lookup, missing words, trimming
# --------------------------------------------------------------------------------------


def _vocabulary():
    X, Y, A, B = _sets(11, n=4, n_attr=4, d=3)
    words = ["x1", "x2", "x3", "x4", "y1", "y2", "y3", "y4", "a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"]
    return np.concatenate([X, Y, A, B[:4]]), words


def test_words_are_looked_up_like_vectors():
    vectors, words = _vocabulary()
    result = weat(
        vectors,
        words,
        ["x1", "x2", "x3", "x4"],
        ["y1", "y2", "y3", "y4"],
        ["a1", "a2", "a3", "a4"],
        ["b1", "b2", "b3", "b4"],
    )
    direct = weat_from_vectors(vectors[0:4], vectors[4:8], vectors[8:12], vectors[12:16])
    assert isinstance(result, WEATResult)
    assert result == direct


def test_missing_words_are_dropped_and_reported():
    vectors, words = _vocabulary()
    result = weat(
        vectors,
        words,
        ["x1", "zinnia", "x2", "x3"],
        ["y1", "y2", "weevil", "y3"],
        ["a1", "a2", "caress", "a3"],
        ["b1", "b2", "b3", "b4", "agony"],
    )
    assert result.missing == ("zinnia", "weevil", "caress", "agony")
    assert result.sizes == (3, 3, 3, 4) and result.trimmed == ()
    direct = weat_from_vectors(vectors[[0, 1, 2]], vectors[[4, 5, 6]], vectors[[8, 9, 10]], vectors[12:16])
    assert result.effect_size == direct.effect_size and result.p_value == direct.p_value


def test_the_longer_target_list_is_trimmed_in_list_order():
    vectors, words = _vocabulary()
    result = weat(vectors, words, ["x3", "x1", "x4", "x2"], ["y2", "gnat", "y4"], ["a1", "a2"], ["b1", "b2"])
    assert result.missing == ("gnat",)
    assert result.trimmed == ("x4", "x2")  # the last two of X, as listed
    assert result.sizes == (2, 2, 2, 2)
    direct = weat_from_vectors(vectors[[2, 0]], vectors[[5, 7]], vectors[[8, 9]], vectors[[12, 13]])
    assert result.effect_size == direct.effect_size and result.statistic == direct.statistic


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


def test_too_few_words_name_the_list():
    vectors, words = _vocabulary()
    with pytest.raises(
        ValueError,
        match=r"only 1 of the 3 words of attributes_b are in the vocabulary "
        r"\(missing: agony, vomit\)",
    ):
        weat(vectors, words, ["x1", "x2"], ["y1", "y2"], ["a1", "a2"], ["b1", "agony", "vomit"])
    with pytest.raises(ValueError, match="targets_y must be a list of words, got the single str 'y1'"):
        weat(vectors, words, ["x1", "x2"], "y1", ["a1", "a2"], ["b1", "b2"])
    X, Y, A, B = _sets(12)
    with pytest.raises(ValueError, match=r"attributes_a has 1 vector\(s\); the test needs at least 2"):
        weat_from_vectors(X, Y, A[:1], B)


def test_bad_vectors_are_refused():
    X, Y, A, B = _sets(13)
    with pytest.raises(ValueError, match="attributes_b has vectors of width 2, targets_x of width 3"):
        weat_from_vectors(X, Y, A, B[:, :2])
    with pytest.raises(ValueError, match="targets_x has 4 vectors and targets_y 3; .* equal size"):
        weat_from_vectors(X, Y[:3], A, B)
    with pytest.raises(ValueError, match=r"targets_y has a zero vector \(row 1\)"):
        weat_from_vectors(X, np.vstack([Y[:1], np.zeros((1, 3)), Y[2:]]), A, B)
    with pytest.raises(ValueError, match="attributes_a contains NaN"):
        weat_from_vectors(X, Y, np.vstack([A[:-1], [[np.nan, 0, 1]]]), B)
    with pytest.raises(ValueError, match=r"targets_x must be a 2-D \(n, d\) array"):
        weat_from_vectors(X[0], Y, A, B)
    with pytest.raises(ValueError, match="permutations must be a positive int, got 0"):
        weat_from_vectors(X, Y, A, B, permutations=0)
    with pytest.raises(ValueError, match="seed must be a non-negative int, got -1"):
        weat_from_vectors(X, Y, A, B, seed=-1)
    vectors, words = _vocabulary()
    with pytest.raises(ValueError, match="words has 15 entries but vectors has 16 rows"):
        weat(vectors, words[:-1], ["x1", "x2"], ["y1", "y2"], ["a1", "a2"], ["b1", "b2"])


# --------------------------------------------------------------------------------------
# The word lists
# --------------------------------------------------------------------------------------


def test_the_papers_word_lists():
    assert set(WEAT_TESTS) == {"weat1", "weat6", "weat7"}
    sizes = {"weat1": (25, 25, 25, 25), "weat6": (8, 8, 8, 8), "weat7": (8, 8, 8, 8)}
    for name, test in WEAT_TESTS.items():
        assert isinstance(test, WEATTest)
        assert tuple(len(words) for words in test.word_lists) == sizes[name]
        assert all(len(set(words)) == len(words) for words in test.word_lists), name  # no repeats
        assert len(test.names) == 4
    assert WEAT_TESTS["weat6"].targets_x[0] == "John" and WEAT_TESTS["weat6"].targets_y[-1] == "Donna"
    assert WEAT_TESTS["weat7"].attributes_b[-1] == "daughter"
    assert WEAT_TESTS["weat1"].names == ("flowers", "insects", "pleasant", "unpleasant")
