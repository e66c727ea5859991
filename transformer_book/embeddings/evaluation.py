"""Intrinsic evaluation of static word vectors: word similarity and word analogies (chapter 10).

The benchmark files are the copies that ship inside the gensim wheel (``gensim.test.utils.datapath``),
so the evaluation works offline: WordSim-353 (Finkelstein et al. 2002), SimLex-999 (Hill et al. 2015)
and the Google analogy set (Mikolov et al. 2013). gensim is needed only by the two loaders.

Words are matched exactly (the loaders lower-case the benchmarks, so lower-case vocabularies
match). When a word occurs twice in ``words``, its first row is used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy import stats

__all__ = [
    "SIMILARITY_DATASETS",
    "SimilarityResult",
    "AnalogyResult",
    "load_word_similarity",
    "load_analogies",
    "word_similarity",
    "analogy_accuracy",
]

SIMILARITY_DATASETS: dict[str, str] = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}
"""The word-similarity benchmarks :func:`load_word_similarity` knows, name -> file in gensim's test data."""

_ANALOGY_FILE = "questions-words.txt"
_COSMUL_EPSILON = 1e-3  # Levy & Goldberg (2014), footnote to equation (4)
_CHUNK_ELEMENTS = 1 << 22  # scores analogy_accuracy holds at once: 4M float32 = 16 MiB per array


# --------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------


def _gensim_data(filename: str) -> Path:
    """Path of one of the benchmark files in gensim's test data."""
    try:
        from gensim.test.utils import datapath
    except ImportError as error:
        raise ImportError(
            f"the word-vector benchmarks ({filename}) are read from the data files that ship with "
            "gensim, which is not installed: pip install gensim"
        ) from error
    return Path(datapath(filename))


def load_word_similarity(name: str) -> list[tuple[str, str, float]]:
    """A word-similarity benchmark as ``(word1, word2, human score)`` triples, in file order.

    ``"wordsim353"`` has 353 pairs scored 0 to 10 for relatedness; ``"simlex999"`` has 999
    pairs scored 0 to 10 for similarity proper (*car*/*petrol* are related, not similar).
    Words are lower-cased.

    Raises:
        ValueError: for a name not in :data:`SIMILARITY_DATASETS`, or a malformed line.
        ImportError: gensim, which ships the files, is not installed.
    """
    if name not in SIMILARITY_DATASETS:
        raise ValueError(f"load_word_similarity: unknown data set {name!r}; known: {sorted(SIMILARITY_DATASETS)}")
    path = _gensim_data(SIMILARITY_DATASETS[name])
    pairs = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(f"load_word_similarity: {path}:{line_no}: expected 3 tab-separated fields")
        pairs.append((fields[0].strip().lower(), fields[1].strip().lower(), float(fields[2])))
    return pairs


def load_analogies() -> dict[str, list[tuple[str, str, str, str]]]:
    """The Google analogy set: section name -> questions ``(a, b, c, d)``, read *a : b :: c : d*.

    19,544 questions in 14 sections, in file order: five semantic ones (``capital-common-countries``,
    ``capital-world``, ``currency``, ``city-in-state``, ``family``) and nine syntactic ones whose
    names start with ``gram``. Words are lower-cased.

    Raises:
        ValueError: a malformed line.
        ImportError: gensim, which ships the file, is not installed.
    """
    path = _gensim_data(_ANALOGY_FILE)
    sections: dict[str, list[tuple[str, str, str, str]]] = {}
    current: list[tuple[str, str, str, str]] | None = None
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        if line.startswith(":"):
            current = sections.setdefault(line[1:].strip(), [])
            continue
        fields = line.lower().split()
        if current is None or len(fields) != 4:
            raise ValueError(f"load_analogies: {path}:{line_no}: expected four words after a ': section' line")
        current.append((fields[0], fields[1], fields[2], fields[3]))
    return sections


# --------------------------------------------------------------------------------------
# Shared checks
# --------------------------------------------------------------------------------------


def _check_vectors(caller: str, vectors: np.ndarray, words: Sequence[str]) -> np.ndarray:
    """``vectors`` as a float64 array after the checks every evaluation shares."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise ValueError(f"{caller}: vectors must be a 2-D (|V|, d) array, got shape {vectors.shape}")
    if not np.issubdtype(vectors.dtype, np.number) or np.iscomplexobj(vectors):
        raise ValueError(f"{caller}: vectors must hold real numbers, got dtype {vectors.dtype}")
    if len(words) != vectors.shape[0]:
        raise ValueError(f"{caller}: words has {len(words)} entries but vectors has {vectors.shape[0]} rows")
    if vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise ValueError(f"{caller}: vectors is empty, shape {vectors.shape}")
    vectors = vectors.astype(np.float64, copy=False)
    if not np.isfinite(vectors).all():
        raise ValueError(f"{caller}: vectors contains NaN or infinite values")
    zero = np.flatnonzero(~vectors.any(axis=1))
    if zero.size:
        raise ValueError(f"{caller}: vectors has {zero.size} zero row(s) (first: {words[zero[0]]!r}); "
                         "the cosine is undefined for them")
    return vectors


def _first_index(words: Sequence[str]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, word in enumerate(words):
        index.setdefault(word, i)
    return index


# --------------------------------------------------------------------------------------
# Word similarity
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimilarityResult:
    """Outcome of :func:`word_similarity`.

    Attributes:
        spearman: Spearman's rank correlation between the cosines and the human scores of the
            pairs used (NaN when either list is constant).
        n_pairs: pairs used, both words in the vocabulary.
        n_oov: pairs skipped because a word is missing.
        oov_share: ``n_oov / (n_pairs + n_oov)``, a fraction (not a percentage).
    """

    spearman: float
    n_pairs: int
    n_oov: int
    oov_share: float


def word_similarity(
    vectors: np.ndarray, words: Sequence[str], pairs: Sequence[tuple[str, str, float]]
) -> SimilarityResult:
    """Spearman correlation between cosine similarity and human judgement.

    .. math::

        \\rho = \\operatorname{Spearman}\\bigl(
            (\\cos(x_{a_k}, x_{b_k}))_k,\\; (s_k)_k \\bigr), \\qquad
        \\cos(x, y) = \\frac{x \\cdot y}{\\lVert x \\rVert\\, \\lVert y \\rVert}

    over the pairs :math:`(a_k, b_k, s_k)` whose two words are in ``words``, i.e. Pearson's
    correlation of the ranks, ties given their average rank (:func:`scipy.stats.spearmanr`).
    The other pairs are skipped and counted in ``n_oov``; they never enter the score.

    Args:
        vectors: ``(|V|, d)`` array; row ``i`` is the vector of ``words[i]``.
        words: the ``|V|`` words.
        pairs: ``(word1, word2, human score)`` triples, as from :func:`load_word_similarity`.

    Returns:
        A :class:`SimilarityResult`.

    Raises:
        ValueError: ``vectors`` not 2-D, of another length than ``words``, with a zero row or a
            non-finite value; or fewer than 2 pairs with both words in the vocabulary.
    """
    vectors = _check_vectors("word_similarity", vectors, words)
    index = _first_index(words)
    left, right, human = [], [], []
    n_oov = 0
    for pair in pairs:
        if len(pair) != 3:
            raise ValueError(f"word_similarity: pairs must be (word1, word2, score) triples, got {pair!r}")
        a, b, score = pair
        if a in index and b in index:
            left.append(index[a])
            right.append(index[b])
            human.append(float(score))
        else:
            n_oov += 1
    if len(human) < 2:
        raise ValueError(f"word_similarity: only {len(human)} of {len(human) + n_oov} pairs have both words in "
                         f"the vocabulary ({n_oov} pairs missing a word); need at least 2")
    human_scores = np.asarray(human)
    if not np.isfinite(human_scores).all():
        raise ValueError("word_similarity: pairs contains a NaN or infinite human score")
    x, y = vectors[left], vectors[right]
    cosine = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    if np.ptp(cosine) == 0 or np.ptp(human_scores) == 0:
        rho = math.nan  # the rank correlation of a constant list is undefined
    else:
        rho = float(stats.spearmanr(cosine, human_scores).statistic)
    return SimilarityResult(spearman=rho, n_pairs=len(human), n_oov=n_oov, oov_share=n_oov / (len(human) + n_oov))


# --------------------------------------------------------------------------------------
# Analogies
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalogyResult:
    """Outcome of :func:`analogy_accuracy`.

    Attributes:
        accuracy: ``n_correct / n_answered``, a fraction.
        n_correct: questions whose best candidate is ``d``.
        n_answered: questions with all four words among the candidates.
        n_oov: questions skipped because a word is not among the candidates.
        by_section: accuracy per section when the questions came as a dict (NaN for a section
            none of whose questions could be answered); empty otherwise.
        semantic: accuracy over the sections whose name does not start with ``"gram"`` (the
            Google set's semantic half); ``None`` without sections, NaN when none was answered.
        syntactic: the same over the sections whose name starts with ``"gram"``.
        predictions: the predicted word of every question in order (sections in order when a
            dict was given), ``None`` for a skipped question.
    """

    accuracy: float
    n_correct: int
    n_answered: int
    n_oov: int
    by_section: dict[str, float] = field(default_factory=dict)
    semantic: float | None = None
    syntactic: float | None = None
    predictions: tuple[str | None, ...] = ()


def _ratio(correct: int, answered: int) -> float:
    return correct / answered if answered else math.nan


def _check_analogy_args(vectors: np.ndarray, words: Sequence[str], method: str, restrict_vocab: int | None) -> np.ndarray:
    """The arguments of :func:`analogy_accuracy` checked; ``vectors`` as a float array."""
    if method not in ("add", "mul"):
        raise ValueError(f"analogy_accuracy: method must be 'add' (3CosAdd) or 'mul' (3CosMul), got {method!r}")
    if restrict_vocab is not None and (
        isinstance(restrict_vocab, bool) or not isinstance(restrict_vocab, int) or restrict_vocab < 1
    ):
        raise ValueError(f"analogy_accuracy: restrict_vocab must be None or an int >= 1, got {restrict_vocab!r}")
    return _check_vectors("analogy_accuracy", vectors, words)


def _question_ids(questions: Sequence[Sequence[str]], index: dict[str, int]) -> np.ndarray:
    """``(Q, 4)`` int64 ids of the questions' words, -1 for a word outside ``index``; refuses a
    question that is not four words, and a list of which none can be answered."""
    ids = np.full((len(questions), 4), -1, dtype=np.int64)
    for k, question in enumerate(questions):
        if len(question) != 4:
            raise ValueError(f"analogy_accuracy: a question must be four words (a, b, c, d), got {question!r}")
        ids[k] = [index.get(word, -1) for word in question]
    if not (ids >= 0).all(axis=1).any():
        raise ValueError(f"analogy_accuracy: none of the {len(questions)} questions has all four words among the "
                         f"{len(index)} candidate words")
    return ids


def analogy_accuracy(
    vectors: np.ndarray,
    words: Sequence[str],
    questions: Sequence[tuple[str, str, str, str]] | Mapping[str, Sequence[tuple[str, str, str, str]]],
    method: str = "add",
    restrict_vocab: int | None = None,
) -> AnalogyResult:
    """Accuracy on analogy questions *a : b :: c : d* (*man : king :: woman : queen*).

    The answer is the candidate :math:`d' \\notin \\{a, b, c\\}` of highest score, and the
    question counts as correct when it is ``d``. With :math:`\\cos` the cosine similarity,
    ``method="add"`` is 3CosAdd (Mikolov et al. 2013), the nearest word to
    :math:`x_b - x_a + x_c` after normalising the three,

    .. math::

        \\operatorname*{arg\\,max}_{d'}\\; \\cos(d', b) - \\cos(d', a) + \\cos(d', c),

    and ``method="mul"`` is 3CosMul (Levy & Goldberg 2014, equation 4), with the cosines
    mapped to :math:`[0, 1]` by :math:`\\cos' = (\\cos + 1) / 2` and :math:`\\varepsilon = 10^{-3}`,

    .. math::

        \\operatorname*{arg\\,max}_{d'}\\; \\frac{\\cos'(d', b)\\, \\cos'(d', c)}{\\cos'(d', a) + \\varepsilon}.

    The candidates are the first ``restrict_vocab`` words (``words`` is taken to be sorted
    by decreasing frequency) or all of them. A question with any of its four words outside
    the candidates is skipped and counted in ``n_oov``. The scores are computed in float32,
    a chunk of questions at a time: 3CosAdd as one matrix product with the normalised
    :math:`\\hat x_b - \\hat x_a + \\hat x_c`, 3CosMul from the cosines of the chunk's distinct
    words with every candidate.

    Args:
        vectors: ``(|V|, d)`` array; row ``i`` is the vector of ``words[i]``.
        words: the ``|V|`` words, most frequent first.
        questions: ``(a, b, c, d)`` tuples, or a dict section name -> such tuples as from
            :func:`load_analogies` (then ``by_section``, ``semantic`` and ``syntactic`` are filled).
        method: ``"add"`` (3CosAdd) or ``"mul"`` (3CosMul).
        restrict_vocab: number of leading words that are candidates; ``None`` for all.

    Returns:
        An :class:`AnalogyResult`.

    Raises:
        ValueError: an unknown ``method``, a ``restrict_vocab`` below 1, a question that is not
            four words, no question answerable, or bad ``vectors`` as in :func:`word_similarity`.
    """
    vectors = _check_analogy_args(vectors, words, method, restrict_vocab)
    n_candidates = len(words) if restrict_vocab is None else min(restrict_vocab, len(words))
    index = _first_index(words[:n_candidates])

    sections = list(questions.items()) if isinstance(questions, Mapping) else [("", questions)]
    flat = [question for _, group in sections for question in group]
    ids = _question_ids(flat, index)  # (Q, 4), -1 for a word outside the candidates
    answered = (ids >= 0).all(axis=1)

    predicted = np.full(len(flat), -1, dtype=np.int64)
    predicted[answered] = _solve(vectors[:n_candidates], ids[answered, :3], method)
    correct = answered & (predicted == ids[:, 3])

    by_section: dict[str, float] = {}
    groups = {"semantic": [0, 0], "syntactic": [0, 0]}
    start = 0
    for name, group in sections:
        stop = start + len(group)
        n_correct, n_answered = int(correct[start:stop].sum()), int(answered[start:stop].sum())
        by_section[name] = _ratio(n_correct, n_answered)
        tally = groups["syntactic" if name.startswith("gram") else "semantic"]
        tally[0] += n_correct
        tally[1] += n_answered
        start = stop
    dict_given = isinstance(questions, Mapping)
    return AnalogyResult(
        accuracy=_ratio(int(correct.sum()), int(answered.sum())),
        n_correct=int(correct.sum()),
        n_answered=int(answered.sum()),
        n_oov=int((~answered).sum()),
        by_section=by_section if dict_given else {},
        semantic=_ratio(*groups["semantic"]) if dict_given else None,
        syntactic=_ratio(*groups["syntactic"]) if dict_given else None,
        predictions=tuple(words[p] if p >= 0 else None for p in predicted),
    )


def _solve(vectors: np.ndarray, abc: np.ndarray, method: str) -> np.ndarray:
    """Index of the best candidate row of ``vectors`` ``(n, d)`` for each ``(a, b, c)`` row of ``abc``."""
    unit = torch.from_numpy((vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32))
    abc = torch.from_numpy(abc)
    chunk = max(1, _CHUNK_ELEMENTS // unit.shape[0])
    answers = []
    with torch.no_grad():
        for start in range(0, abc.shape[0], chunk):
            block = abc[start:start + chunk]
            a, b, c = block.unbind(dim=1)
            if method == "add":
                # cos(d', b) - cos(d', a) + cos(d', c) = unit(d') . (unit(b) - unit(a) + unit(c))
                score = (unit[b] - unit[a] + unit[c]) @ unit.T
            else:
                # the cosines of the chunk's distinct words (few in a real test set), mapped to
                # [0, 1], then gathered row by row for a, b and c
                distinct, position = torch.unique(block, return_inverse=True)
                mapped = (unit[distinct] @ unit.T).add_(1.0).mul_(0.5)
                pa, pb, pc = position.unbind(dim=1)
                score = mapped.index_select(0, pb).mul_(mapped.index_select(0, pc))
                score.div_(mapped.index_select(0, pa).add_(_COSMUL_EPSILON))
            score.scatter_(1, block, -math.inf)  # d' must differ from a, b and c
            answers.append(score.argmax(dim=1))
    return torch.cat(answers).numpy()
