"""Tests of co-occurrence counts, PPMI, SVD word vectors and cosine similarity (chapter 10).

Expected values come from plain loops or dense NumPy formulas written here, independently
of the package's sparse implementations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from transformer_book.embeddings import (
    cooccurrence_matrix,
    cosine_similarity_matrix,
    nearest_neighbours,
    pmi,
    ppmi,
    svd_embeddings,
    truncated_svd,
)

SENTENCE = "the quick brown fox jumps over the lazy dog".split()


def _ids(words):
    index = {w: i for i, w in enumerate(sorted(set(words)))}
    return np.array([index[w] for w in words], dtype=np.int64), index


# --------------------------------------------------------------------------------------
# cooccurrence_matrix
# --------------------------------------------------------------------------------------


def test_cooccurrence_by_hand_window_2():
    ids, index = _ids(SENTENCE)
    V, L = len(index), 2
    expected = np.zeros((V, V))
    for t in range(len(ids)):
        for s in range(len(ids)):
            if s != t and abs(s - t) <= L:
                expected[ids[t], ids[s]] += 1

    counts = cooccurrence_matrix(ids, V, window=L)
    assert sp.issparse(counts) and counts.format == "csr"
    assert counts.shape == (V, V) and counts.dtype == np.float64
    np.testing.assert_array_equal(counts.toarray(), expected)

    # a few entries read off the sentence directly
    c = counts.toarray()
    the = index["the"]
    assert c[the, index["quick"]] == 1
    assert c[the, index["brown"]] == 1  # distance 2
    assert c[the, index["fox"]] == 0  # distance 3
    assert c[the, index["the"]] == 0  # the two "the" are 6 apart
    assert c[the].sum() == 6  # 2 right of the first "the", 2 + 2 around the second
    assert c[index["fox"]].sum() == 4


def test_cooccurrence_is_symmetric():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 7, size=200)
    counts = cooccurrence_matrix(ids, 7, window=3).toarray()
    np.testing.assert_array_equal(counts, counts.T)
    # every position has min(L, left) + min(L, right) neighbours: total = 2 * sum_d (N - d)
    assert counts.sum() == 2 * sum(200 - d for d in range(1, 4))


def test_cooccurrence_gaps_separate_but_are_not_counted():
    ids = np.array([0, -1, 1])
    assert cooccurrence_matrix(ids, 2, window=1).nnz == 0  # 0 and 1 are not adjacent
    c2 = cooccurrence_matrix(ids, 2, window=2).toarray()
    np.testing.assert_array_equal(c2, [[0, 1], [1, 0]])  # the gap keeps its place
    ends = cooccurrence_matrix(np.array([-1, 0, 1, -1]), 2, window=3).toarray()
    np.testing.assert_array_equal(ends, [[0, 1], [1, 0]])


@pytest.mark.parametrize("window", [0, -1, 1.5, True])
def test_cooccurrence_rejects_bad_window(window):
    with pytest.raises(ValueError, match="window"):
        cooccurrence_matrix(np.array([0, 1]), 2, window=window)


@pytest.mark.parametrize("ids", [np.array([0, 1, 3]), np.array([0, -2, 1])])
def test_cooccurrence_rejects_ids_out_of_range(ids):
    with pytest.raises(ValueError, match=r"\[-1, 3\)"):
        cooccurrence_matrix(ids, 3, window=1)


@pytest.mark.parametrize("ids", [np.array([0.0, 1.0]), np.array([[0, 1], [1, 0]])])
def test_cooccurrence_rejects_float_or_2d_ids(ids):
    with pytest.raises(ValueError, match="1-D integer"):
        cooccurrence_matrix(ids, 2, window=1)


# --------------------------------------------------------------------------------------
# ppmi
# --------------------------------------------------------------------------------------


def _dense_ppmi(counts, alpha, shift):
    """PPMI = max(log(P(w,c) / (P(w) P_alpha(c))) - log k, 0), 0 where the count is 0."""
    counts = np.asarray(counts, dtype=float)
    D = counts.sum()
    p_wc = counts / D
    p_w = counts.sum(axis=1) / D
    c_alpha = counts.sum(axis=0) ** alpha
    p_c = c_alpha / c_alpha.sum()
    out = np.zeros_like(counts)
    for w in range(counts.shape[0]):
        for c in range(counts.shape[1]):
            if counts[w, c] > 0:
                pmi = math.log(p_wc[w, c] / (p_w[w] * p_c[c]))
                out[w, c] = max(pmi - math.log(shift), 0.0)
    return out


def _random_counts(seed=0, shape=(6, 5)):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, size=shape).astype(float)
    counts[rng.random(shape) < 0.3] = 0  # plenty of unseen pairs
    return counts


@pytest.mark.parametrize("alpha, shift", [(1.0, 1.0), (0.75, 1.0), (0.75, 5.0), (1.0, 5.0)])
def test_ppmi_matches_dense_formula(alpha, shift):
    counts = _random_counts()
    result = ppmi(sp.csr_matrix(counts), alpha=alpha, shift=shift)
    assert sp.issparse(result) and result.shape == counts.shape and result.dtype == np.float64
    expected = _dense_ppmi(counts, alpha, shift)
    np.testing.assert_allclose(result.toarray(), expected, rtol=1e-12, atol=1e-12)
    assert (result.data > 0).all()  # no stored zeros or negatives
    assert result.nnz == np.count_nonzero(expected)


def test_ppmi_hand_example():
    """Two words, two contexts, alpha = 1: PMI(0, 0) = log((3/6) / ((4/6)(3/6))) = log(1.5)."""
    counts = np.array([[3.0, 1.0], [0.0, 2.0]])
    result = ppmi(sp.csr_matrix(counts), alpha=1.0).toarray()
    assert result[0, 0] == pytest.approx(math.log(1.5))
    assert result[0, 1] == 0  # log((1/6) / ((4/6)(3/6))) < 0
    assert result[1, 0] == 0  # never seen
    assert result[1, 1] == pytest.approx(math.log(2))


def test_ppmi_shift_and_alpha_matter():
    counts = sp.csr_matrix(_random_counts(seed=1))
    plain = ppmi(counts, alpha=1.0).toarray()
    assert not np.allclose(plain, ppmi(counts, alpha=0.75).toarray())
    assert (ppmi(counts, alpha=1.0, shift=5.0).toarray() <= plain).all()


@pytest.mark.parametrize(
    "kwargs, match", [({"alpha": 0.0}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"shift": 0.5}, "shift")]
)
def test_ppmi_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ppmi(sp.csr_matrix(_random_counts()), **kwargs)


def test_ppmi_rejects_negative_counts():
    counts = _random_counts()
    counts[0, 0] = -1
    with pytest.raises(ValueError, match="non-negative"):
        ppmi(sp.csr_matrix(counts))


def test_ppmi_rejects_all_zero_matrix():
    with pytest.raises(ValueError, match="no non-zero"):
        ppmi(sp.csr_matrix((4, 3)))


# --------------------------------------------------------------------------------------
# svd_embeddings
# --------------------------------------------------------------------------------------


def _matrix(seed=0, shape=(9, 7)):
    return np.random.default_rng(seed).standard_normal(shape)


def _align_signs(a, b):
    """Flip the columns of a to agree in sign with those of b."""
    return a * np.sign(np.sum(a * b, axis=0))


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_svd_embeddings_match_numpy_up_to_sign(p):
    m, k = _matrix(), 3
    u, s, _ = np.linalg.svd(m)
    expected = u[:, :k] * s[:k] ** p
    vectors = svd_embeddings(m, k, p=p)
    assert vectors.shape == (9, k) and vectors.dtype == np.float64
    np.testing.assert_allclose(_align_signs(vectors, expected), expected, rtol=1e-8, atol=1e-10)


def test_svd_embeddings_sparse_and_dense_agree():
    m = _matrix(seed=1)
    m[np.abs(m) < 0.5] = 0
    np.testing.assert_allclose(svd_embeddings(sp.csr_matrix(m), 2), svd_embeddings(m, 2), rtol=1e-8, atol=1e-10)


def test_svd_embeddings_deterministic_and_sign_convention():
    m = _matrix(seed=2)
    first = svd_embeddings(m, 4)
    np.testing.assert_array_equal(first, svd_embeddings(m, 4))
    for col in range(4):
        assert first[np.argmax(np.abs(first[:, col])), col] > 0


def test_svd_embeddings_eckart_young():
    """||M - U_k S_k V_k^T||_F^2 equals the sum of the squared discarded singular values."""
    m, k = _matrix(seed=3), 3
    u, s, vt = np.linalg.svd(m)
    us = svd_embeddings(m, k, p=1.0)  # U_k S_k, columns signed by the package
    signs = np.sign(np.sum(us * u[:, :k], axis=0))
    v_k = vt[:k].T * signs  # V_k with the same column signs
    reconstruction = us @ v_k.T
    error = np.sum((m - reconstruction) ** 2)
    assert error == pytest.approx(np.sum(s[k:] ** 2), rel=1e-9)
    # same answer from the projection onto U_k, which needs no V at all
    u_k = svd_embeddings(m, k, p=0.0)
    assert np.sum((m - u_k @ u_k.T @ m) ** 2) == pytest.approx(np.sum(s[k:] ** 2), rel=1e-9)


@pytest.mark.parametrize("k", [0, -1, 7, 8, 2.0, True])
def test_svd_embeddings_rejects_k_out_of_range(k):
    with pytest.raises(ValueError, match=r"k must be an int in \[1, 7\)"):
        svd_embeddings(_matrix(), k)


def test_svd_embeddings_rejects_non_2d():
    with pytest.raises(ValueError, match="2-D"):
        svd_embeddings(np.ones(5), 1)


# --------------------------------------------------------------------------------------
# cosine similarity and nearest neighbours
# --------------------------------------------------------------------------------------

VECTORS = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0], [-3.0, 0.0]])
WORDS = ["east", "northeast", "north", "west"]


def test_cosine_similarity_matrix_by_hand():
    s = cosine_similarity_matrix(VECTORS)
    r = 1 / math.sqrt(2)
    expected = np.array(
        [
            [1, r, 0, -1],
            [r, 1, r, -r],
            [0, r, 1, 0],
            [-1, -r, 0, 1],
        ]
    )
    np.testing.assert_allclose(s, expected, atol=1e-15)
    np.testing.assert_allclose(np.diag(s), np.ones(4), atol=1e-15)
    np.testing.assert_array_equal(s, s.T)


def test_cosine_similarity_matrix_random_rows():
    x = np.random.default_rng(4).standard_normal((5, 3))
    s = cosine_similarity_matrix(x)
    for i in range(5):
        for j in range(5):
            hand = float(x[i] @ x[j]) / math.sqrt(float(x[i] @ x[i]) * float(x[j] @ x[j]))
            assert s[i, j] == pytest.approx(hand, abs=1e-12)


def test_cosine_similarity_zero_vector_raises():
    with pytest.raises(ValueError, match="zero vector"):
        cosine_similarity_matrix(np.array([[1.0, 2.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="2-D"):
        cosine_similarity_matrix(np.ones(3))


def test_nearest_neighbours_ordering_exclude_and_k():
    result = nearest_neighbours(np.array([2.0, 0.0]), VECTORS, WORDS, k=4)
    assert [w for w, _ in result] == ["east", "northeast", "north", "west"]
    np.testing.assert_allclose([s for _, s in result], [1, 1 / math.sqrt(2), 0, -1], atol=1e-15)
    assert all(isinstance(s, float) for _, s in result)

    assert [w for w, _ in nearest_neighbours(np.array([2.0, 0.0]), VECTORS, WORDS, k=2)] == ["east", "northeast"]
    excluded = nearest_neighbours(np.array([2.0, 0.0]), VECTORS, WORDS, k=2, exclude=["east"])
    assert [w for w, _ in excluded] == ["northeast", "north"]
    # k larger than what is left returns everything left
    assert len(nearest_neighbours(np.array([0.0, 1.0]), VECTORS, WORDS, k=10, exclude=["west"])) == 3


def test_nearest_neighbours_errors():
    with pytest.raises(ValueError, match="3 words for 4 vectors"):
        nearest_neighbours(np.array([1.0, 0.0]), VECTORS, WORDS[:3])
    with pytest.raises(ValueError, match="zero vector"):
        nearest_neighbours(np.array([0.0, 0.0]), VECTORS, WORDS)


# --------------------------------------------------------------------------------------
# pmi and truncated_svd
# --------------------------------------------------------------------------------------


def test_pmi_by_hand_and_its_positive_part():
    counts = np.array([[0.0, 2.0, 1.0], [2.0, 0.0, 3.0], [1.0, 3.0, 0.0]])
    D, row, col = counts.sum(), counts.sum(axis=1), counts.sum(axis=0)
    expected_01 = math.log(2.0 * D / (row[0] * col[1]))
    values = pmi(counts)
    assert values[0, 1] == pytest.approx(expected_01)
    assert np.isneginf(values[0, 0]) and np.isneginf(values[2, 2])
    smoothed = col**0.5 / (col**0.5).sum()
    assert pmi(sp.csr_matrix(counts), alpha=0.5)[1, 2] == pytest.approx(
        math.log((3.0 / D) / ((row[1] / D) * smoothed[2]))
    )
    np.testing.assert_allclose(
        ppmi(sp.csr_matrix(counts), alpha=1.0).toarray(), np.maximum(np.where(np.isneginf(values), 0.0, values), 0.0)
    )
    with pytest.raises(ValueError, match="non-negative"):
        pmi(-counts)
    with pytest.raises(ValueError, match="too large"):
        pmi(sp.csr_matrix((20_000, 20_000)))


def test_truncated_svd_matches_numpy_and_is_deterministic():
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((30, 20))
    u, s = truncated_svd(sp.csr_matrix(matrix), k=4)
    u_np, s_np, _ = np.linalg.svd(matrix, full_matrices=False)
    np.testing.assert_allclose(s, s_np[:4])
    # the same subspace, column by column up to sign
    np.testing.assert_allclose(np.abs(u.T @ u_np[:, :4]), np.eye(4), atol=1e-8)
    u2, s2 = truncated_svd(matrix, k=4)
    np.testing.assert_array_equal(u, u2)
    np.testing.assert_allclose(svd_embeddings(matrix, k=4, p=0.5), u * np.sqrt(s))
    with pytest.raises(ValueError, match="truncated_svd: k"):
        truncated_svd(matrix, k=20)
