"""Window contexts: (word, context) pairs, subsampling of frequent words, and the training
examples of skip-gram and CBOW (chapters 10 and 11).

A corpus is a list of sentences (here WikiText-2's paragraphs). Word ids come from a
:class:`~transformer_book.tokenizers.text.Vocab` built with a minimum count; as in word2vec, words outside
the vocabulary are removed before windows are taken, so a window reaches over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from transformer_book import checks
from transformer_book.tokenizers.text import Vocab

__all__ = [
    "EncodedCorpus",
    "FlatWindows",
    "cbow_windows",
    "encode_corpus",
    "flat_cbow_windows",
    "keep_probabilities",
    "skipgram_pairs",
    "window_pairs",
]


def window_pairs(tokens: Sequence[str], window: int) -> list[tuple[str, str]]:
    """Every (word, context) pair of a sentence: each position ``t`` with each position
    ``t + delta``, ``0 < |delta| <= L``, in the order a reader meets them.

    .. math:: \\mathcal{D} = \\{(x_t, x_{t+\\delta}) : 1 \\le t \\le N,\\ 0 < |\\delta| \\le L,\\ 1 \\le t + \\delta \\le N\\}

    >>> window_pairs("the quick brown fox".split(), 2)[:5]
    [('the', 'quick'), ('the', 'brown'), ('quick', 'the'), ('quick', 'brown'), ('quick', 'fox')]
    """
    checks.positive_int("window_pairs", window=window)
    return [
        (tokens[t], tokens[s])
        for t in range(len(tokens))
        for s in range(max(0, t - window), min(len(tokens), t + window + 1))
        if s != t
    ]


def keep_probabilities(counts: np.ndarray, threshold: float) -> np.ndarray:
    """The probability of keeping each occurrence of a word when frequent words are subsampled.

    With :math:`f(w)` the word's share of the corpus and ``t`` the threshold, word2vec's released
    code (and gensim) keep an occurrence with probability

    .. math:: P_{\\mathrm{keep}}(w) = \\min\\Bigl(1,\\ \\sqrt{t / f(w)} + t / f(w)\\Bigr),

    a gentler form of the paper's :math:`\\min(1, \\sqrt{t / f(w)})` (Mikolov et al., 2013b).
    Words rarer than about ``t`` are always kept. ``threshold = 0`` keeps everything.

    Args:
        counts: ``(|V|,)`` positive counts.
        threshold: ``t >= 0`` (word2vec's default is ``1e-3``).

    Returns:
        ``(|V|,)`` float64 probabilities in ``(0, 1]``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0 or np.any(counts <= 0):
        raise ValueError(
            f"keep_probabilities: counts must be a non-empty 1-D array of positive counts, got shape {counts.shape}"
        )
    if not threshold >= 0:
        raise ValueError(f"keep_probabilities: threshold must be >= 0, got {threshold}")
    if threshold == 0:
        return np.ones_like(counts)
    ratio = threshold / (counts / counts.sum())
    return np.minimum(1.0, np.sqrt(ratio) + ratio)


@dataclass(frozen=True)
class EncodedCorpus:
    """A corpus as word ids, with out-of-vocabulary words removed.

    Attributes:
        ids: ``(N,)`` int64 ids of the kept words, sentence after sentence.
        sentence_ids: ``(N,)`` int64 index of the sentence each word comes from.
        n_tokens: number of tokens before out-of-vocabulary words were removed (the
            denominator of words per second, as every trainer reads the whole corpus).
    """

    ids: np.ndarray
    sentence_ids: np.ndarray
    n_tokens: int

    def __len__(self) -> int:
        return len(self.ids)


def encode_corpus(sentences: Sequence[Sequence[str]], vocab: Vocab) -> EncodedCorpus:
    """Map each sentence's tokens to ids, dropping the tokens that ``vocab`` does not hold.

    Raises:
        ValueError: for an empty corpus, or one with no word in the vocabulary.
    """
    if len(sentences) == 0:
        raise ValueError("encode_corpus: the corpus is empty")
    stoi = vocab.stoi
    ids: list[int] = []
    sentence_ids: list[int] = []
    n_tokens = 0
    for index, sentence in enumerate(sentences):
        if isinstance(sentence, str):
            raise ValueError(f"encode_corpus: sentence {index} is a str; give a list of tokens")
        n_tokens += len(sentence)
        kept = [stoi[w] for w in sentence if w in stoi]
        ids += kept
        sentence_ids += [index] * len(kept)
    if not ids:
        raise ValueError(
            f"encode_corpus: none of the corpus's {n_tokens} tokens is in the vocabulary of {len(vocab)} words"
        )
    return EncodedCorpus(np.asarray(ids, dtype=np.int64), np.asarray(sentence_ids, dtype=np.int64), n_tokens)


def _epoch_positions(
    corpus: EncodedCorpus,
    window: int,
    rng: np.random.Generator | torch.Generator,
    keep: np.ndarray | None,
    reduced: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Subsample the corpus and draw each position's window size ``b`` in ``1..L``: ``(ids,
    sentence, b)`` as tensors, drawn by NumPy (on the CPU) or by a torch generator on its device."""
    if isinstance(rng, torch.Generator):
        device = rng.device
        ids = torch.as_tensor(corpus.ids, device=device)
        sentence = torch.as_tensor(corpus.sentence_ids, device=device)
        if keep is not None:
            draws = torch.rand(len(ids), generator=rng, device=device, dtype=torch.float64)
            kept = draws < torch.as_tensor(keep, device=device)[ids]
            ids, sentence = ids[kept], sentence[kept]
        b = (
            torch.randint(1, window + 1, (len(ids),), generator=rng, device=device)
            if reduced
            else torch.full((len(ids),), window, device=device)
        )
        return ids, sentence, b
    ids, sentence = corpus.ids, corpus.sentence_ids
    if keep is not None:
        kept = rng.random(len(ids)) < keep[ids]
        ids, sentence = ids[kept], sentence[kept]
    # word2vec's reduced window: b uniform in 1..L, so a context at distance d is used with
    # probability (L - d + 1) / L
    b = rng.integers(1, window + 1, size=len(ids)) if reduced else np.full(len(ids), window)
    return torch.from_numpy(ids), torch.from_numpy(sentence), torch.from_numpy(b)


def _as_given(t: torch.Tensor, rng: np.random.Generator | torch.Generator) -> np.ndarray | torch.Tensor:
    """NumPy arrays for a NumPy generator, tensors (on the generator's device) for a torch one."""
    return t if isinstance(rng, torch.Generator) else t.numpy()


def skipgram_pairs(
    corpus: EncodedCorpus,
    window: int,
    rng: np.random.Generator | torch.Generator,
    *,
    keep: np.ndarray | None = None,
    reduced: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """One epoch of skip-gram training pairs ``(centre, context)``, in corpus order.

    Each kept position ``t`` draws a window ``b_t`` (uniform in ``1..L`` when ``reduced``, else
    ``L``) and pairs its word with every word at distance ``1..b_t`` in the same sentence.
    Subsampled words are removed first, so windows reach over them, as in word2vec.

    Args:
        corpus: the encoded corpus.
        window: ``L``.
        rng: random generator for subsampling and window sizes: NumPy's, or a ``torch.Generator``
            to draw and build the pairs on its device (a GPU's: no copy of an epoch's pairs).
        keep: ``(|V|,)`` keep probabilities (:func:`keep_probabilities`), or None to keep all.
        reduced: draw the window size per position (word2vec) or always use ``L``.

    Returns:
        ``centres, contexts``: two ``(P,)`` int64 arrays (tensors with a torch generator).
    """
    checks.positive_int("skipgram_pairs", window=window)
    ids, sentence, b = _epoch_positions(corpus, window, rng, keep, reduced)
    centres, contexts = [], []
    for delta in range(1, window + 1):
        same = sentence[:-delta] == sentence[delta:]
        right = same & (b[:-delta] >= delta)  # t's context at t + delta
        left = same & (b[delta:] >= delta)  # (t + delta)'s context at t
        centres += [ids[:-delta][right], ids[delta:][left]]
        contexts += [ids[delta:][right], ids[:-delta][left]]
    return _as_given(torch.cat(centres), rng), _as_given(torch.cat(contexts), rng)


def cbow_windows(
    corpus: EncodedCorpus,
    window: int,
    rng: np.random.Generator | torch.Generator,
    *,
    keep: np.ndarray | None = None,
    reduced: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """One epoch of CBOW examples: each kept position's word and the words of its window.

    Windows are drawn as in :func:`skipgram_pairs` (with NumPy's generator or a torch one).
    Positions whose window holds no other word (one-word sentences) are left out.

    Returns:
        ``centres`` ``(P,)`` int64 and ``contexts`` ``(P, 2L)`` int64, padded with ``-1``.
    """
    checks.positive_int("cbow_windows", window=window)
    ids, sentence, b = _epoch_positions(corpus, window, rng, keep, reduced)
    n = len(ids)
    contexts = torch.full((n, 2 * window), -1, dtype=torch.int64, device=ids.device)
    for delta in range(1, window + 1):
        same = sentence[:-delta] == sentence[delta:]
        right = torch.zeros(n, dtype=torch.bool, device=ids.device)
        right[:-delta] = same & (b[:-delta] >= delta)
        left = torch.zeros(n, dtype=torch.bool, device=ids.device)
        left[delta:] = same & (b[delta:] >= delta)
        contexts[right, window + delta - 1] = ids[delta:][right[:-delta]]
        contexts[left, window - delta] = ids[:-delta][left[delta:]]
    has_context = (contexts >= 0).any(dim=1)
    return _as_given(ids[has_context], rng), _as_given(contexts[has_context], rng)


@dataclass(frozen=True)
class FlatWindows:
    """One epoch of CBOW examples with each window's words stored back to back, without padding.

    Window ``i`` predicts ``centres[i]`` from ``ids[starts[i]:starts[i + 1]]``, and ``window[j]``
    is the window that holds ``ids[j]``. The words of a window are those :func:`cbow_windows`
    puts in its row, in the same order; the padding that row carries (about 40% of the slots
    with word2vec's reduced windows) is not stored, so no step of training spends time on it.

    Attributes:
        centres: ``(P,)`` int64.
        ids: ``(T,)`` int64, window after window.
        window: ``(T,)`` int64.
        starts: ``(P + 1,)`` int64, on the same device as the rest.
        starts_host: the same as a NumPy array, so that a batch's bounds are read without
            waiting for a GPU.
    """

    centres: torch.Tensor
    ids: torch.Tensor
    window: torch.Tensor
    starts: torch.Tensor
    starts_host: np.ndarray

    def __len__(self) -> int:
        return len(self.centres)

    def to(self, device: torch.device | str) -> FlatWindows:
        """The same windows with their tensors on ``device``."""
        return FlatWindows(
            self.centres.to(device),
            self.ids.to(device),
            self.window.to(device),
            self.starts.to(device),
            self.starts_host,
        )

    def batch(self, begin: int, end: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Windows ``begin:end``: their centres ``(B,)``, their words ``(T_b,)``, each window's
        offset into those words ``(B,)`` (``F.embedding_bag``'s ``offsets``) and each word's
        window counted from ``begin`` ``(T_b,)``."""
        lo, hi = int(self.starts_host[begin]), int(self.starts_host[end])
        return self.centres[begin:end], self.ids[lo:hi], self.starts[begin:end] - lo, self.window[lo:hi] - begin


def flat_cbow_windows(
    corpus: EncodedCorpus,
    window: int,
    rng: np.random.Generator | torch.Generator,
    *,
    keep: np.ndarray | None = None,
    reduced: bool = True,
    shuffle: bool = False,
) -> FlatWindows:
    """The examples of :func:`cbow_windows` (the same draws from ``rng``, the same windows) as
    :class:`FlatWindows`, shuffled when ``shuffle`` (by ``rng.permutation``, or ``torch.randperm``
    for a torch generator, drawn after the windows).

    A window's words are contiguous in the subsampled corpus: position ``t`` with window size
    ``b_t`` reads the ``l_t = min(b_t, t - s_t)`` words before it and the
    ``r_t = min(b_t, e_t - t)`` after it, with ``s_t`` and ``e_t`` the first and last positions
    of its sentence. So the ``j``-th word of the window is at position ``t - l_t + j`` for
    ``j < l_t`` and one further on after that, and the whole epoch is gathered in one step.
    Tensors are on the CPU for a NumPy generator and on the generator's device otherwise.
    """
    checks.positive_int("flat_cbow_windows", window=window)
    ids, sentence, b = _epoch_positions(corpus, window, rng, keep, reduced)
    device = ids.device
    n = len(ids)
    position = torch.arange(n, device=device)
    _, run = torch.unique_consecutive(sentence, return_counts=True)
    run_end = run.cumsum(0)
    first = (run_end - run).repeat_interleave(run)  # s_t
    last = (run_end - 1).repeat_interleave(run)  # e_t
    left = torch.minimum(b, position - first)
    right = torch.minimum(b, last - position)
    centre = (left + right).nonzero().squeeze(1)  # positions with at least one context word
    if shuffle:
        if isinstance(rng, torch.Generator):
            order = torch.randperm(len(centre), generator=rng, device=device)
        else:
            order = torch.as_tensor(rng.permutation(len(centre)))
        centre = centre[order]
    left, right = left.index_select(0, centre), right.index_select(0, centre)
    starts = torch.nn.functional.pad((left + right).cumsum(0), (1, 0))
    total = int(starts[-1])
    # Positions of the flat words, by their increments: +1 from word to word in a window, +2
    # across the centre, and a jump from the last word of one window to the first of the next.
    first = torch.where(left > 0, centre - left, centre + 1)
    last = torch.where(right > 0, centre + right, centre - 1)
    step = torch.ones(total, dtype=torch.int64, device=device)
    step[starts[:-1]] = first - torch.nn.functional.pad(last[:-1], (1, 0))
    both = (left > 0) & (right > 0)
    step[(starts[:-1] + left)[both]] += 1
    window_of = torch.zeros(total, dtype=torch.int64, device=device)
    window_of[starts[1:-1]] = 1
    return FlatWindows(
        ids.index_select(0, centre),
        ids.index_select(0, step.cumsum_(0)),
        window_of.cumsum_(0),
        starts,
        starts.cpu().numpy(),
    )
