"""Intrinsic evaluation of static word vectors: word similarity and word analogies (chapter 10),
and the Word Embedding Association Test of bias (chapter 11).

The benchmark files are the copies that ship inside the gensim wheel (``gensim.test.utils.datapath``),
so the evaluation works offline: WordSim-353 (Finkelstein et al. 2002), SimLex-999 (Hill et al. 2015)
and the Google analogy set (Mikolov et al. 2013). gensim is needed only by the two loaders. The
WEAT's word lists (Caliskan et al. 2017) are short, and live here as data (:data:`WEAT_TESTS`).

Words are matched exactly (the loaders lower-case the benchmarks, so lower-case vocabularies
match). When a word occurs twice in ``words``, its first row is used.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from transformer_book import checks

__all__ = [
    "SIMILARITY_DATASETS",
    "SimilarityResult",
    "AnalogyResult",
    "load_word_similarity",
    "load_analogies",
    "word_similarity",
    "analogy_accuracy",
    "WEATTest",
    "WEAT_TESTS",
    "WEATResult",
    "weat",
    "weat_from_vectors",
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
        raise ValueError(
            f"{caller}: vectors has {zero.size} zero row(s) (first: {words[zero[0]]!r}); "
            "the cosine is undefined for them"
        )
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
        raise ValueError(
            f"word_similarity: only {len(human)} of {len(human) + n_oov} pairs have both words in "
            f"the vocabulary ({n_oov} pairs missing a word); need at least 2"
        )
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


def _check_analogy_args(
    vectors: np.ndarray, words: Sequence[str], method: str, restrict_vocab: int | None
) -> np.ndarray:
    """The arguments of :func:`analogy_accuracy` checked; ``vectors`` as a float array."""
    if method not in ("add", "mul"):
        raise ValueError(f"analogy_accuracy: method must be 'add' (3CosAdd) or 'mul' (3CosMul), got {method!r}")
    if restrict_vocab is not None:
        checks.positive_int("analogy_accuracy", restrict_vocab=restrict_vocab)
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
        raise ValueError(
            f"analogy_accuracy: none of the {len(questions)} questions has all four words among the "
            f"{len(index)} candidate words"
        )
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
            block = abc[start : start + chunk]
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


# --------------------------------------------------------------------------------------
# Bias: the Word Embedding Association Test
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WEATTest:
    """The four word lists of one Word Embedding Association Test.

    Attributes:
        targets_x, targets_y: the two target lists :math:`X` and :math:`Y` (flowers, insects).
        attributes_a, attributes_b: the two attribute lists :math:`A` and :math:`B` (pleasant,
            unpleasant); a positive effect size means :math:`X` is nearer :math:`A` than
            :math:`Y` is.
        names: what the four lists are, in the order ``(X, Y, A, B)``.
    """

    targets_x: tuple[str, ...]
    targets_y: tuple[str, ...]
    attributes_a: tuple[str, ...]
    attributes_b: tuple[str, ...]
    names: tuple[str, str, str, str]

    @property
    def word_lists(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """``(X, Y, A, B)``, in the order :func:`weat` takes them."""
        return self.targets_x, self.targets_y, self.attributes_a, self.attributes_b


WEAT_TESTS: dict[str, WEATTest] = {
    "weat1": WEATTest(
        targets_x=(
            "aster",
            "clover",
            "hyacinth",
            "marigold",
            "poppy",
            "azalea",
            "crocus",
            "iris",
            "orchid",
            "rose",
            "bluebell",
            "daffodil",
            "lilac",
            "pansy",
            "tulip",
            "buttercup",
            "daisy",
            "lily",
            "peony",
            "violet",
            "carnation",
            "gladiola",
            "magnolia",
            "petunia",
            "zinnia",
        ),
        targets_y=(
            "ant",
            "caterpillar",
            "flea",
            "locust",
            "spider",
            "bedbug",
            "centipede",
            "fly",
            "maggot",
            "tarantula",
            "bee",
            "cockroach",
            "gnat",
            "mosquito",
            "termite",
            "beetle",
            "cricket",
            "hornet",
            "moth",
            "wasp",
            "blackfly",
            "dragonfly",
            "horsefly",
            "roach",
            "weevil",
        ),
        attributes_a=(
            "caress",
            "freedom",
            "health",
            "love",
            "peace",
            "cheer",
            "friend",
            "heaven",
            "loyal",
            "pleasure",
            "diamond",
            "gentle",
            "honest",
            "lucky",
            "rainbow",
            "diploma",
            "gift",
            "honor",
            "miracle",
            "sunrise",
            "family",
            "happy",
            "laughter",
            "paradise",
            "vacation",
        ),
        attributes_b=(
            "abuse",
            "crash",
            "filth",
            "murder",
            "sickness",
            "accident",
            "death",
            "grief",
            "poison",
            "stink",
            "assault",
            "disaster",
            "hatred",
            "pollute",
            "tragedy",
            "divorce",
            "jail",
            "poverty",
            "ugly",
            "cancer",
            "kill",
            "rotten",
            "vomit",
            "agony",
            "prison",
        ),
        names=("flowers", "insects", "pleasant", "unpleasant"),
    ),
    "weat6": WEATTest(
        targets_x=("John", "Paul", "Mike", "Kevin", "Steve", "Greg", "Jeff", "Bill"),
        targets_y=("Amy", "Joan", "Lisa", "Sarah", "Diana", "Kate", "Ann", "Donna"),
        attributes_a=(
            "executive",
            "management",
            "professional",
            "corporation",
            "salary",
            "office",
            "business",
            "career",
        ),
        attributes_b=("home", "parents", "children", "family", "cousins", "marriage", "wedding", "relatives"),
        names=("male names", "female names", "career", "family"),
    ),
    "weat7": WEATTest(
        targets_x=("math", "algebra", "geometry", "calculus", "equations", "computation", "numbers", "addition"),
        targets_y=("poetry", "art", "dance", "literature", "novel", "symphony", "drama", "sculpture"),
        attributes_a=("male", "man", "boy", "brother", "he", "him", "his", "son"),
        attributes_b=("female", "woman", "girl", "sister", "she", "her", "hers", "daughter"),
        names=("math", "arts", "male terms", "female terms"),
    ),
}
"""Three of the ten tests of Caliskan, Bryson and Narayanan, *Semantics derived automatically from
language corpora contain human-like biases*, Science 356 (2017), 183-186: WEAT 1 (flowers and
insects against pleasant and unpleasant words), WEAT 6 (male and female first names against
career and family words) and WEAT 7 (mathematics and arts against male and female terms). The
word lists are the stimuli listed in the paper's supplementary material (which took them from
the Implicit Association Test studies it replicates), in its order and spelling, names
capitalised: transcribed from copies of that list (a transcription of the supplementary text
and the word-level test files released with May et al.'s SEAT code, which agree), not from the
PDF itself. Lower-case them for a lower-cased vocabulary."""

_EXACT_CHUNK = 1 << 16  # partitions :func:`weat_from_vectors` enumerates at once
_SAMPLE_CHUNK = 1 << 13  # partitions it draws at once


@dataclass(frozen=True)
class WEATResult:
    """Outcome of :func:`weat` and :func:`weat_from_vectors`.

    Attributes:
        effect_size: :math:`d`, between :math:`-2` and :math:`2`; positive when :math:`X` is
            nearer :math:`A` (and :math:`Y` nearer :math:`B`) than the other way round. NaN when
            every target word has the same association :math:`s` (the standard deviation is zero).
        p_value: the one-sided permutation p-value of :math:`S`, the share of equal-size
            partitions of :math:`X \\cup Y` whose statistic is at least the observed one.
        statistic: :math:`S(X, Y, A, B)`.
        sizes: ``(|X|, |Y|, |A|, |B|)``, the vectors used (after dropping and trimming).
        missing: the words of the four lists not in the vocabulary, dropped (list order).
        trimmed: target words in the vocabulary left out so that :math:`|X| = |Y|` (the last
            words of the longer list).
        permutations: the partitions the p-value was computed over.
        exact: ``True`` when that was every partition, ``False`` for a random sample of them.
    """

    effect_size: float
    p_value: float
    statistic: float
    sizes: tuple[int, int, int, int]
    missing: tuple[str, ...] = ()
    trimmed: tuple[str, ...] = ()
    permutations: int = 0
    exact: bool = True


def _check_set(caller: str, name: str, vectors: object, width: int | None) -> np.ndarray:
    """One set of :func:`weat_from_vectors` as a float64 ``(n, d)`` array of unit rows."""
    array = np.asarray(vectors.detach().cpu() if isinstance(vectors, torch.Tensor) else vectors)
    if array.ndim != 2:
        raise ValueError(f"{caller}: {name} must be a 2-D (n, d) array of vectors, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise ValueError(f"{caller}: {name} must hold real numbers, got dtype {array.dtype}")
    if array.shape[0] < 2:
        raise ValueError(f"{caller}: {name} has {array.shape[0]} vector(s); the test needs at least 2 per set")
    if width is not None and array.shape[1] != width:
        raise ValueError(f"{caller}: {name} has vectors of width {array.shape[1]}, targets_x of width {width}")
    array = array.astype(np.float64, copy=False)
    if not np.isfinite(array).all():
        raise ValueError(f"{caller}: {name} contains NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if not norms.all():
        raise ValueError(
            f"{caller}: {name} has a zero vector (row {int(np.flatnonzero(norms == 0)[0])}); "
            "the cosine is undefined for it"
        )
    return array / norms


def weat_from_vectors(
    targets_x: np.ndarray | torch.Tensor,
    targets_y: np.ndarray | torch.Tensor,
    attributes_a: np.ndarray | torch.Tensor,
    attributes_b: np.ndarray | torch.Tensor,
    *,
    permutations: int = 100_000,
    seed: int = 0,
) -> WEATResult:
    """The Word Embedding Association Test (Caliskan et al. 2017) on four sets of vectors.

    Each target vector :math:`w` is scored by how much nearer it is, in mean cosine, to the
    attribute set :math:`A` than to :math:`B`,

    .. math::

        s(w, A, B) = \\operatorname{mean}_{a \\in A} \\cos(w, a) - \\operatorname{mean}_{b \\in B} \\cos(w, b),

    and the two target sets are compared by the effect size, a difference of means in units of
    the sample standard deviation (``ddof = 1``) over both sets,

    .. math::

        d = \\frac{\\operatorname{mean}_{x \\in X} s(x, A, B) - \\operatorname{mean}_{y \\in Y} s(y, A, B)}
                 {\\operatorname{std}_{w \\in X \\cup Y} s(w, A, B)},

    which lies strictly between :math:`-2` and :math:`2`: with :math:`n = |X| = |Y|`, at most
    :math:`2 \\sqrt{(2n - 1) / (2n)}` in size, reached when :math:`s` is constant within each set.
    Its significance is that of the statistic

    .. math::

        S(X, Y, A, B) = \\sum_{x \\in X} s(x, A, B) - \\sum_{y \\in Y} s(y, A, B)

    under relabelling: the one-sided p-value is the share of the partitions :math:`(X_i, Y_i)` of
    :math:`X \\cup Y` into two halves of size :math:`n` with :math:`S(X_i, Y_i, A, B) \\ge S(X, Y, A, B)`
    (the paper writes :math:`>`; counting ties, the observed partition included, is the usual
    convention and keeps an exact p-value at least one over the number of partitions; ties are
    judged to a relative :math:`10^{-12}`, against rounding). When there are at most
    ``permutations`` partitions, :math:`\\binom{2n}{n}`, all are enumerated (``exact``); else
    ``permutations`` of them are drawn uniformly with ``numpy.random.default_rng(seed)`` and the
    p-value is :math:`(1 + \\#\\{S_i \\ge S\\}) / (1 + \\text{permutations})`, counting the observed
    partition as one of the draws, so that a sampled p-value is never 0.

    Args:
        targets_x, targets_y: ``(n, d)`` arrays (or tensors) of target vectors, ``n >= 2``.
        attributes_a, attributes_b: ``(n_a, d)`` and ``(n_b, d)`` attribute vectors, at least 2 each.
        permutations: the most partitions to enumerate, and the number to draw when there are more.
        seed: the seed of the draws (unused when exact).

    Returns:
        A :class:`WEATResult` (``missing`` and ``trimmed`` empty).

    Raises:
        ValueError: a set not 2-D, of fewer than 2 vectors, of another width than ``targets_x``,
            holding a zero or non-finite vector; ``targets_x`` and ``targets_y`` of different
            sizes; ``permutations`` not a positive int or ``seed`` not a non-negative int.
    """
    caller = "weat_from_vectors"
    checks.positive_int(caller, permutations=permutations)
    checks.non_negative_int(caller, seed=seed)
    x = _check_set(caller, "targets_x", targets_x, None)
    y, a, b = (
        _check_set(caller, name, v, x.shape[1])
        for name, v in [("targets_y", targets_y), ("attributes_a", attributes_a), ("attributes_b", attributes_b)]
    )
    if len(x) != len(y):
        raise ValueError(
            f"{caller}: targets_x has {len(x)} vectors and targets_y {len(y)}; the permutation test "
            "needs target sets of equal size"
        )
    w = np.concatenate([x, y])  # (2n, d) unit rows
    s = (w @ a.T).mean(axis=1) - (w @ b.T).mean(axis=1)  # s(w, A, B) for each target, (2n,)
    n = len(x)
    statistic = float(s[:n].sum() - s[n:].sum())
    if np.ptp(s) > 0:
        effect = float((s[:n].mean() - s[n:].mean()) / np.std(s, ddof=1))
    else:
        effect = math.nan  # s is the same for every target: d is 0 / 0

    # S_i = 2 * sum_{X_i} s - sum(s): comparing S_i with S is comparing the sums over the X halves
    observed, tolerance = s[:n].sum(), 1e-12 * float(np.abs(s).sum())
    total = math.comb(2 * n, n)
    exact = total <= permutations
    at_least = 0
    if exact:
        halves = itertools.combinations(range(2 * n), n)
        while chunk := list(itertools.islice(halves, _EXACT_CHUNK)):
            at_least += int((s[np.array(chunk)].sum(axis=1) >= observed - tolerance).sum())
        p_value, used = at_least / total, total
    else:
        rng = np.random.default_rng(seed)
        for start in range(0, permutations, _SAMPLE_CHUNK):
            keys = rng.random((min(_SAMPLE_CHUNK, permutations - start), 2 * n))
            chosen = np.argpartition(keys, n - 1, axis=1)[:, :n]  # a uniform random half per row
            at_least += int((s[chosen].sum(axis=1) >= observed - tolerance).sum())
        p_value, used = (1 + at_least) / (1 + permutations), permutations
    return WEATResult(
        effect_size=effect,
        p_value=float(p_value),
        statistic=statistic,
        sizes=(n, n, len(a), len(b)),
        permutations=used,
        exact=exact,
    )


def weat(
    vectors: np.ndarray,
    words: Sequence[str],
    targets_x: Sequence[str],
    targets_y: Sequence[str],
    attributes_a: Sequence[str],
    attributes_b: Sequence[str],
    *,
    permutations: int = 100_000,
    seed: int = 0,
) -> WEATResult:
    """The Word Embedding Association Test (Caliskan et al. 2017) on four lists of words.

    Looks the words up in ``words`` (exactly: lower-case the lists for a lower-cased vocabulary),
    drops those that are missing, reporting them in ``missing``, and, when the two target lists
    are then of different sizes, keeps the first :math:`\\min(|X|, |Y|)` words of each in list
    order, reporting the others in ``trimmed``. The test itself is :func:`weat_from_vectors`,
    whose equations and p-value this returns.

    Args:
        vectors: ``(|V|, d)`` array; row ``i`` is the vector of ``words[i]``.
        words: the ``|V|`` words.
        targets_x, targets_y, attributes_a, attributes_b: the four word lists, e.g. the fields
            of one of :data:`WEAT_TESTS`.
        permutations, seed: as in :func:`weat_from_vectors`.

    Returns:
        A :class:`WEATResult`.

    Raises:
        ValueError: a list given as a single str; fewer than 2 words of a list in the vocabulary
            (the message names the list and its missing words); bad ``vectors`` as in
            :func:`word_similarity`; or bad ``permutations`` or ``seed``.
    """
    vectors = _check_vectors("weat", vectors, words)
    index = _first_index(words)
    rows, missing = {}, []
    for name, listed in [
        ("targets_x", targets_x),
        ("targets_y", targets_y),
        ("attributes_a", attributes_a),
        ("attributes_b", attributes_b),
    ]:
        if isinstance(listed, str):
            raise ValueError(f"weat: {name} must be a list of words, got the single str {listed!r}")
        absent = [word for word in listed if word not in index]
        rows[name] = [index[word] for word in listed if word in index]
        missing += absent
        if len(rows[name]) < 2:
            raise ValueError(
                f"weat: only {len(rows[name])} of the {len(listed)} words of {name} are in the "
                f"vocabulary (missing: {', '.join(absent[:10])}{', ...' if len(absent) > 10 else ''}); "
                "the test needs at least 2 per list"
            )
    n = min(len(rows["targets_x"]), len(rows["targets_y"]))
    trimmed = [words[i] for name in ("targets_x", "targets_y") for i in rows[name][n:]]
    result = weat_from_vectors(
        vectors[rows["targets_x"][:n]],
        vectors[rows["targets_y"][:n]],
        vectors[rows["attributes_a"]],
        vectors[rows["attributes_b"]],
        permutations=permutations,
        seed=seed,
    )
    return replace(result, missing=tuple(missing), trimmed=tuple(trimmed))
