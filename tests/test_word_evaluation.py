"""Tests of the word-similarity and word-analogy evaluation of static word vectors (chapter 10).

Expected values come from plain loops written here, from the benchmark files read directly,
or from gensim's own ``KeyedVectors`` evaluation, never from the code under test.
"""

from __future__ import annotations

import math
import sys

import gensim.test.utils as gensim_utils  # gensim is a dependency of the package: never skipped
import numpy as np
import pytest
from gensim.models import KeyedVectors

from transformer_book.embeddings.evaluation import (
    SIMILARITY_DATASETS,
    AnalogyResult,
    SimilarityResult,
    analogy_accuracy,
    load_analogies,
    load_word_similarity,
    word_similarity,
)

# --------------------------------------------------------------------------------------
# Helpers: independent reference computations
# --------------------------------------------------------------------------------------


def _ranks(values):
    """1-based ranks, ties sharing the mean of the ranks they span (plain loops)."""
    values = list(values)
    ranks = [0.0] * len(values)
    for i, v in enumerate(values):
        below = sum(1 for u in values if u < v)
        equal = sum(1 for u in values if u == v)
        ranks[i] = below + (equal + 1) / 2
    return ranks


def _spearman(x, y):
    """Pearson correlation of the ranks."""
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def _cos(u, v):
    return float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v)))


def _keyed_vectors(words, vectors):
    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(list(words), np.asarray(vectors, dtype=np.float32))
    return kv


def _loop_answer(vectors, words, question, method, n_candidates):
    """The best candidate by a plain loop over the first ``n_candidates`` words, in float64."""
    position = {w: i for i, w in enumerate(words)}
    a, b, c = (vectors[position[w]] for w in question[:3])
    best, best_score = None, -math.inf
    for k in range(n_candidates):
        if words[k] in question[:3]:
            continue
        x = vectors[k]
        if method == "add":
            score = _cos(x, b) - _cos(x, a) + _cos(x, c)
        else:
            score = ((_cos(x, b) + 1) / 2) * ((_cos(x, c) + 1) / 2) / ((_cos(x, a) + 1) / 2 + 1e-3)
        if score > best_score:
            best, best_score = words[k], score
    return best


# --------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------


def _data_lines(filename):
    with open(gensim_utils.datapath(filename), encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


@pytest.mark.parametrize(
    "name, size, first",
    [
        ("wordsim353", 353, ("love", "sex", 6.77)),
        ("simlex999", 999, ("old", "new", 1.58)),
    ],
)
def test_load_word_similarity_sizes_and_content(name, size, first):
    pairs = load_word_similarity(name)
    assert len(pairs) == size
    assert pairs[0] == first
    raw = [line.split("\t") for line in _data_lines(SIMILARITY_DATASETS[name]) if line and not line.startswith("#")]
    assert pairs == [(a.lower(), b.lower(), float(s)) for a, b, s in raw]
    for a, b, score in pairs:
        assert a == a.lower() and b == b.lower() and isinstance(score, float)
        assert 0.0 <= score <= 10.0


def test_load_word_similarity_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="simlex999.*wordsim353"):
        load_word_similarity("men3000")


def test_load_analogies_sections_and_sizes():
    sections = load_analogies()
    lines = _data_lines("questions-words.txt")
    headers = [line[1:].strip() for line in lines if line.startswith(":")]
    assert len(headers) == 14 and list(sections) == headers
    assert sum(len(q) for q in sections.values()) == 19544 == sum(1 for line in lines if not line.startswith(":"))
    assert sections["capital-common-countries"][0] == ("athens", "greece", "baghdad", "iraq")
    assert sections["gram9-plural-verbs"][-1] == ("write", "writes", "work", "works")
    assert sum(name.startswith("gram") for name in sections) == 9
    assert all(len(q) == 4 and all(w == w.lower() for w in q) for qs in sections.values() for q in qs)


@pytest.mark.parametrize("load", [lambda: load_word_similarity("wordsim353"), load_analogies])
def test_loaders_without_gensim_say_how_to_install_it(monkeypatch, load):
    monkeypatch.setitem(sys.modules, "gensim.test.utils", None)  # makes the import fail
    with pytest.raises(ImportError, match="pip install gensim"):
        load()


# --------------------------------------------------------------------------------------
# word_similarity
# --------------------------------------------------------------------------------------


def _similarity_setup(seed=0, n_words=30, d=8):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(n_words)]
    vectors = rng.normal(size=(n_words, d))
    pairs = []
    for _ in range(40):
        i, j = rng.choice(n_words, size=2, replace=False)
        pairs.append((words[i], words[j], float(rng.integers(0, 8))))  # integer scores: plenty of ties
    return words, vectors, pairs


def test_word_similarity_matches_hand_ranks():
    words, vectors, pairs = _similarity_setup()
    result = word_similarity(vectors, words, pairs)
    assert isinstance(result, SimilarityResult)
    index = {w: i for i, w in enumerate(words)}
    cosines = [_cos(vectors[index[a]], vectors[index[b]]) for a, b, _ in pairs]
    assert result.spearman == pytest.approx(_spearman(cosines, [s for *_, s in pairs]), abs=1e-12)
    assert (result.n_pairs, result.n_oov, result.oov_share) == (40, 0, 0.0)


def test_word_similarity_skips_and_counts_oov_pairs_without_changing_the_score():
    words, vectors, pairs = _similarity_setup(seed=1)
    oov = [("w1", "unseen", 5.0), ("nowhere", "w2", 1.0), ("nothing", "nobody", 3.0)]
    mixed = pairs[:10] + oov[:2] + pairs[10:] + oov[2:]
    result = word_similarity(vectors, words, mixed)
    assert (result.n_pairs, result.n_oov) == (40, 3)
    assert result.oov_share == pytest.approx(3 / 43)
    assert result.spearman == word_similarity(vectors, words, pairs).spearman


def test_word_similarity_equals_gensim_evaluate_word_pairs(tmp_path):
    words, vectors, pairs = _similarity_setup(seed=2)
    pairs = pairs + [("w3", "unknown", 4.0), ("absent", "w4", 2.0)]
    path = tmp_path / "pairs.tsv"
    path.write_text("# word1\tword2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs), encoding="utf-8")
    _, (gensim_rho, _), gensim_oov_percent = _keyed_vectors(words, vectors).evaluate_word_pairs(str(path))
    result = word_similarity(vectors, words, pairs)
    assert result.spearman == pytest.approx(gensim_rho, abs=1e-6)  # gensim's cosines are float32
    assert 100 * result.oov_share == pytest.approx(gensim_oov_percent)  # gensim reports a percentage


def test_word_similarity_on_a_real_benchmark_with_planted_agreement():
    """Vectors built so that cosine similarity rises with the human score: rho close to 1."""
    pairs = load_word_similarity("wordsim353")
    words = sorted({w for a, b, _ in pairs for w in (a, b)} - {"tiger"})  # 'tiger' made OOV
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(words), 4))
    result = word_similarity(vectors, words, pairs)
    expected_oov = sum("tiger" in (a, b) for a, b, _ in pairs)
    assert result.n_oov == expected_oov > 0 and result.n_pairs == 353 - expected_oov
    assert abs(result.spearman) < 0.2  # random vectors know nothing


def test_word_similarity_needs_two_pairs():
    words, vectors, _ = _similarity_setup()
    with pytest.raises(ValueError, match="only 1 of 3 pairs.*2 pairs missing"):
        word_similarity(vectors, words, [("w0", "w1", 1.0), ("w0", "zzz", 2.0), ("yyy", "w1", 3.0)])


def test_word_similarity_uses_the_first_row_of_a_repeated_word():
    words = ["a", "b", "c", "a"]
    vectors = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.0]])
    result = word_similarity(vectors, words, [("a", "b", 2.0), ("a", "c", 1.0), ("b", "c", 0.0)])
    cosines = [_cos(vectors[0], vectors[1]), _cos(vectors[0], vectors[2]), _cos(vectors[1], vectors[2])]
    assert result.spearman == pytest.approx(_spearman(cosines, [2.0, 1.0, 0.0]))
    assert result.spearman != pytest.approx(-1.0)  # what the last row of "a" would give


@pytest.mark.parametrize(
    "vectors, words, match",
    [
        (np.ones(3), ["a", "b", "c"], "vectors must be a 2-D"),
        (np.ones((3, 2, 2)), ["a", "b", "c"], "vectors must be a 2-D"),
        (np.ones((3, 2)), ["a", "b"], "words has 2 entries but vectors has 3 rows"),
        (np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]), ["a", "b", "c"], "zero row.*'b'"),
        (np.array([[1.0, 0.0], [np.nan, 1.0], [1.0, 1.0]]), ["a", "b", "c"], "vectors contains NaN"),
        (np.array([[1.0, 0.0], [np.inf, 1.0], [1.0, 1.0]]), ["a", "b", "c"], "vectors contains NaN or infinite"),
    ],
)
def test_bad_vectors_raise(vectors, words, match):
    pairs = [("a", "b", 1.0), ("a", "c", 2.0), ("b", "c", 3.0)]
    with pytest.raises(ValueError, match=match):
        word_similarity(vectors, words, pairs)
    with pytest.raises(ValueError, match=match):
        analogy_accuracy(vectors, words, [("a", "b", "c", "a")])


# --------------------------------------------------------------------------------------
# analogy_accuracy
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted():
    """Two relations planted as noisy offsets (country -> capital, adjective -> adverb) among
    distractors, so that some analogies are solved and some are not."""
    rng = np.random.default_rng(0)
    d, n = 16, 8
    words, vectors = [], []
    for left, right in (("country", "capital"), ("adj", "adv")):
        offset = rng.normal(size=d)
        for k in range(n):
            x = rng.normal(size=d)
            words += [f"{left}{k}", f"{right}{k}"]
            vectors += [x, x + offset + 0.6 * rng.normal(size=d)]
    words += [f"noise{k}" for k in range(40)]
    vectors += list(rng.normal(size=(40, d)))
    order = rng.permutation(len(words))
    words = [words[i] for i in order]
    vectors = np.array(vectors)[order]
    sections = {
        "capital-planted": [
            (f"country{a}", f"capital{a}", f"country{c}", f"capital{c}") for a in range(n) for c in range(n) if a != c
        ],
        "gram1-planted": [(f"adj{a}", f"adv{a}", f"adj{c}", f"adv{c}") for a in range(n) for c in range(n) if a != c],
        "mixed": [
            ("country0", "capital0", "atlantis", "capital1"),
            ("adj0", "adv0", "adj1", "nowhere"),
            ("noise0", "noise1", "noise2", "noise3"),
            ("noise4", "noise5", "noise6", "noise7"),
        ],
    }
    return words, vectors, sections


def _write_questions(path, sections):
    path.write_text(
        "".join(f": {name}\n" + "".join(" ".join(q) + "\n" for q in qs) for name, qs in sections.items()),
        encoding="utf-8",
    )


@pytest.mark.parametrize("restrict_vocab", [None, 50])
def test_3cosadd_equals_gensim_evaluate_word_analogies(planted, tmp_path, restrict_vocab):
    words, vectors, sections = planted
    path = tmp_path / "questions.txt"
    _write_questions(path, sections)
    kv = _keyed_vectors(words, vectors)
    score, gensim_sections = kv.evaluate_word_analogies(str(path), restrict_vocab=restrict_vocab or len(words))

    result = analogy_accuracy(vectors, words, sections, method="add", restrict_vocab=restrict_vocab)
    assert isinstance(result, AnalogyResult)
    assert result.accuracy == pytest.approx(score)
    flat = [q for qs in sections.values() for q in qs]
    ours_correct = {tuple(w.upper() for w in q) for q, p in zip(flat, result.predictions) if p == q[3]}
    gensim_total = gensim_sections[-1]
    assert ours_correct == set(gensim_total["correct"])
    assert result.n_correct == len(gensim_total["correct"])
    assert result.n_answered == len(gensim_total["correct"]) + len(gensim_total["incorrect"])
    assert result.n_oov == len(flat) - result.n_answered
    for section in gensim_sections[:-1]:
        n = len(section["correct"]) + len(section["incorrect"])
        expected = len(section["correct"]) / n if n else math.nan
        assert result.by_section[section["section"]] == pytest.approx(expected, nan_ok=True)
    assert 0 < result.n_correct < result.n_answered  # the planted relations make a non-trivial test


def test_3cosadd_answers_equal_gensim_most_similar_and_a_loop(planted):
    words, vectors, sections = planted
    kv = _keyed_vectors(words, vectors)
    questions = sections["capital-planted"] + sections["gram1-planted"] + sections["mixed"][2:]
    result = analogy_accuracy(vectors, words, questions, method="add")
    for q, predicted in zip(questions, result.predictions):
        ((gensim_answer, _),) = kv.most_similar(positive=[q[1], q[2]], negative=[q[0]], topn=1)
        assert predicted == gensim_answer == _loop_answer(vectors, words, q, "add", len(words))
    assert result.n_answered == len(questions) and result.n_oov == 0
    assert result.n_correct == sum(p == q[3] for q, p in zip(questions, result.predictions))
    assert result.by_section == {} and result.semantic is None and result.syntactic is None


@pytest.mark.filterwarnings("ignore:Call to deprecated `init_sims`:DeprecationWarning")  # inside gensim
def test_3cosmul_equals_the_formula_and_gensim_most_similar_cosmul(planted):
    words, vectors, sections = planted
    kv = _keyed_vectors(words, vectors)
    questions = sections["capital-planted"] + sections["gram1-planted"] + sections["mixed"][2:]
    result = analogy_accuracy(vectors, words, questions, method="mul")
    assert result.predictions == tuple(_loop_answer(vectors, words, q, "mul", len(words)) for q in questions)
    # gensim's epsilon is 1e-6 (Levy & Goldberg's 1e-3 here): the answers agree unless the
    # two best candidates are within a fraction of a percent of each other
    compared = 0
    for q, predicted in zip(questions, result.predictions):
        scores = kv.most_similar_cosmul(positive=[q[1], q[2]], negative=[q[0]], topn=None)
        scores[[kv.get_index(w) for w in q[:3]]] = -np.inf
        first, second = np.sort(scores)[-2:][::-1]
        if first - second > 0.01 * first:
            assert predicted == words[int(np.argmax(scores))]
            compared += 1
    assert compared > 0.8 * len(questions)
    assert result.accuracy == pytest.approx(
        sum(p == q[3] for q, p in zip(questions, result.predictions)) / len(questions)
    )


def test_3cosmul_differs_from_3cosadd_somewhere(planted):
    words, vectors, sections = planted
    add = analogy_accuracy(vectors, words, sections, method="add")
    mul = analogy_accuracy(vectors, words, sections, method="mul")
    assert add.predictions != mul.predictions


def test_restrict_vocab_limits_candidates_and_counts_oov(planted):
    words, vectors, sections = planted
    k = 40
    flat = [q for qs in sections.values() for q in qs]
    result = analogy_accuracy(vectors, words, flat, restrict_vocab=k)
    allowed = set(words[:k])
    inside = [all(w in allowed for w in q) for q in flat]
    assert result.n_answered == sum(inside) and result.n_oov == len(flat) - sum(inside)
    for q, ok, predicted in zip(flat, inside, result.predictions):
        if ok:
            assert predicted == _loop_answer(vectors, words, q, "add", k)
        else:
            assert predicted is None
    assert (
        analogy_accuracy(vectors, words, flat, restrict_vocab=10**6).predictions
        == analogy_accuracy(vectors, words, flat).predictions
    )


def test_semantic_syntactic_split_and_sections(planted):
    words, vectors, sections = planted
    result = analogy_accuracy(vectors, words, sections)
    flat = [(name, q) for name, qs in sections.items() for q in qs]
    tally = {"semantic": [0, 0], "syntactic": [0, 0]}
    per_section = {name: [0, 0] for name in sections}
    for (name, q), predicted in zip(flat, result.predictions):
        if predicted is None:
            continue
        group = "syntactic" if name.startswith("gram") else "semantic"
        for counts in (tally[group], per_section[name]):
            counts[0] += predicted == q[3]
            counts[1] += 1
    assert result.semantic == pytest.approx(tally["semantic"][0] / tally["semantic"][1])
    assert result.syntactic == pytest.approx(tally["syntactic"][0] / tally["syntactic"][1])
    assert result.by_section == pytest.approx({name: c / n for name, (c, n) in per_section.items()})
    assert result.n_oov == 2  # 'atlantis' and 'nowhere'
    assert list(result.by_section) == list(sections)


def test_a_section_without_answerable_questions_is_nan(planted):
    words, vectors, sections = planted
    result = analogy_accuracy(vectors, words, {"gram-x": sections["gram1-planted"], "lost": [("a", "b", "c", "d")]})
    assert math.isnan(result.by_section["lost"])
    assert math.isnan(result.semantic)  # the only semantic section had nothing answerable
    assert result.syntactic == result.accuracy == result.by_section["gram-x"]


def test_google_set_counts_equal_gensim(tmp_path):
    """The real Google set over a small random vocabulary: counts and accuracy as gensim's."""
    sections = load_analogies()
    vocabulary = sorted({w for qs in sections.values() for q in qs for w in q})
    rng = np.random.default_rng(1)
    words = [vocabulary[i] for i in rng.permutation(len(vocabulary))] + [f"filler{i}" for i in range(100)]
    vectors = rng.normal(size=(len(words), 12))
    restrict = 450  # leaves a few hundred answerable questions, the rest out of vocabulary
    result = analogy_accuracy(vectors, words, sections, restrict_vocab=restrict)
    score, gensim_sections = _keyed_vectors(words, vectors).evaluate_word_analogies(
        gensim_utils.datapath("questions-words.txt"), restrict_vocab=restrict
    )
    total = gensim_sections[-1]
    assert result.n_answered == len(total["correct"]) + len(total["incorrect"]) > 100
    assert result.n_answered + result.n_oov == 19544
    assert result.n_correct == len(total["correct"])
    assert result.accuracy == pytest.approx(score)


def test_unknown_method_lists_both():
    with pytest.raises(ValueError, match="'add'.*'mul'"):
        analogy_accuracy(np.eye(4), list("abcd"), [("a", "b", "c", "d")], method="cos")


@pytest.mark.parametrize("restrict_vocab", [0, -3, 2.5, True])
def test_bad_restrict_vocab_raises(restrict_vocab):
    with pytest.raises(ValueError, match="restrict_vocab"):
        analogy_accuracy(np.eye(4), list("abcd"), [("a", "b", "c", "d")], restrict_vocab=restrict_vocab)


def test_no_answerable_question_raises():
    with pytest.raises(ValueError, match="none of the 2 questions"):
        analogy_accuracy(np.eye(4), list("abcd"), [("a", "b", "c", "x"), ("y", "b", "c", "d")])


def test_malformed_question_raises():
    with pytest.raises(ValueError, match="four words"):
        analogy_accuracy(np.eye(4), list("abcd"), [("a", "b", "c")])
