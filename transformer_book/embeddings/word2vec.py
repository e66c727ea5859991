"""word2vec: skip-gram and CBOW with negative sampling, trained in large batches (chapter 11).

Each word ``w`` has two vectors: an input vector :math:`v_w` (a row of ``w_in``) used when
``w`` is the word we predict from, and an output vector :math:`u_w` (a row of ``w_out``)
used when ``w`` is predicted (Mikolov et al., 2013). Negative sampling replaces the softmax
over the vocabulary by ``k`` binary decisions against words drawn from the noise
distribution :math:`P_n(w) \\propto \\#(w)^{3/4}`.

The trainer computes the gradients of :func:`sgns_loss` by hand (they are short) and applies
them with plain SGD and word2vec's linearly decaying learning rate, a whole batch of pairs at a
time; the unit tests check those gradients against autograd. :func:`softmax_loss` is the full
softmax formulation, for contrast on a small vocabulary.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.std import tqdm

from transformer_book import checks
from transformer_book.embeddings.contexts import (
    EncodedCorpus,
    FlatWindows,
    flat_cbow_windows,
    keep_probabilities,
    skipgram_pairs,
)

__all__ = [
    "AliasSampler",
    "Word2VecConfig",
    "Word2VecResult",
    "noise_distribution",
    "sgns_loss",
    "sgns_gradients",
    "softmax_loss",
    "train_word2vec",
]

ARCHITECTURES = ("skipgram", "cbow")


def noise_distribution(counts: np.ndarray, power: float = 0.75) -> np.ndarray:
    """:math:`P_n(w) = \\#(w)^{\\alpha} / \\sum_{w'} \\#(w')^{\\alpha}` with ``alpha = power``;
    returns ``(|V|,)`` float64 probabilities."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0 or np.any(counts <= 0):
        raise ValueError(
            f"noise_distribution: counts must be a non-empty 1-D array of positive counts, got shape {counts.shape}"
        )
    checks.probability("noise_distribution", "power", power, one=True)
    weights = counts**power
    return weights / weights.sum()


def _grouped(v: torch.Tensor, u_neg: torch.Tensor) -> torch.Tensor:
    """``v`` ``(B, d)`` as ``(G, B / G, d)``: the pairs that share each group of negatives."""
    groups = u_neg.shape[0]
    if v.shape[0] % groups:
        raise ValueError(f"sgns: {v.shape[0]} pairs cannot share {groups} groups of negatives evenly")
    return v.view(groups, v.shape[0] // groups, v.shape[1])


def sgns_loss(v: torch.Tensor, u_pos: torch.Tensor, u_neg: torch.Tensor) -> torch.Tensor:
    """Skip-gram negative-sampling loss, summed over a batch of ``B`` pairs.

    .. math:: \\ell(w, c) = -\\log \\sigma(u_c^\\top v_w) - \\sum_{i=1}^{k} \\log \\sigma(-u_{n_i}^\\top v_w),
        \\qquad n_i \\sim P_n

    Args:
        v: ``(B, d)`` input vectors :math:`v_w` (for CBOW, the mean of the context's input vectors).
        u_pos: ``(B, d)`` output vectors of the observed words :math:`u_c`.
        u_neg: ``(G, k, d)`` output vectors of the negative samples: ``G = B`` gives each pair
            its own ``k`` negatives (word2vec); a smaller ``G`` dividing ``B`` lets each run of
            ``B / G`` consecutive pairs share theirs.

    Returns:
        The scalar sum of :math:`\\ell` over the batch.
    """
    positive = (v * u_pos).sum(-1)
    negative = torch.bmm(_grouped(v, u_neg), u_neg.transpose(1, 2))  # (G, B / G, k)
    return -(F.logsigmoid(positive).sum() + F.logsigmoid(-negative).sum())


def sgns_gradients(
    v: torch.Tensor, u_pos: torch.Tensor, u_neg: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of :func:`sgns_loss` by hand, and the loss of each pair.

    With :math:`s^{+} = \\sigma(u_c^\\top v_w)` and :math:`s_i = \\sigma(u_{n_i}^\\top v_w)`:

    .. math::

        \\frac{\\partial \\ell}{\\partial v_w} = (s^{+} - 1)\\, u_c + \\sum_i s_i\\, u_{n_i}, \\qquad
        \\frac{\\partial \\ell}{\\partial u_c} = (s^{+} - 1)\\, v_w, \\qquad
        \\frac{\\partial \\ell}{\\partial u_{n_i}} = s_i\\, v_w

    (a shared negative collects :math:`s_i v_w` from every pair of its group). Shapes as in
    :func:`sgns_loss`; returns ``grad_v (B, d)``, ``grad_u_pos (B, d)``, ``grad_u_neg (G, k, d)``
    and the loss of each pair ``(B,)``.
    """
    grouped = _grouped(v, u_neg)  # (G, m, d)
    score_pos = (v * u_pos).sum(-1)  # (B,)
    score_neg = torch.bmm(grouped, u_neg.transpose(1, 2))  # (G, m, k)
    g_pos = torch.sigmoid(score_pos) - 1.0
    g_neg = torch.sigmoid(score_neg)
    grad_v = torch.bmm(g_neg, u_neg).view_as(v).addcmul_(g_pos.unsqueeze(1), u_pos)
    grad_u_pos = g_pos.unsqueeze(1) * v
    grad_u_neg = torch.bmm(g_neg.transpose(1, 2), grouped)  # (G, k, d)
    loss = -(F.logsigmoid(score_pos) + F.logsigmoid(-score_neg).sum(2).view(-1))
    return grad_v, grad_u_pos, grad_u_neg, loss


def _check_int64(where: str, targets: torch.Tensor) -> None:
    if targets.dtype != torch.int64:
        raise ValueError(f"{where}: targets must be int64 ids, got {targets.dtype}")


def softmax_loss(v: torch.Tensor, w_out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Full-softmax skip-gram (or CBOW) loss, summed over a batch: the cost that negative
    sampling avoids, :math:`O(|V| d)` per pair instead of :math:`O(k d)`.

    .. math:: \\ell(w, c) = -\\log \\frac{\\exp(u_c^\\top v_w)}{\\sum_{w' \\in V} \\exp(u_{w'}^\\top v_w)}

    Args:
        v: ``(B, d)`` input vectors.
        w_out: ``(|V|, d)`` all output vectors.
        targets: ``(B,)`` int64 ids of the observed words.
    """
    _check_int64("softmax_loss", targets)
    return F.cross_entropy(v @ w_out.T, targets, reduction="sum")


@dataclass(frozen=True)
class Word2VecConfig:
    """Hyper-parameters of :func:`train_word2vec`; the defaults are word2vec's and gensim's,
    except for the batching (``batch_size``, ``row_step_cap``, ``shared_negatives``).

    Attributes:
        architecture: ``"skipgram"`` (predict each context word from the centre word) or
            ``"cbow"`` (predict the centre word from the mean of its context).
        dim: ``d``, the vector size.
        window: ``L``, the largest distance of a context word.
        negatives: ``k``, negative samples per predicted word.
        epochs: passes over the corpus.
        lr: initial learning rate; None means word2vec's default (0.025 skip-gram, 0.05 CBOW).
        min_lr_ratio: the rate decays linearly to ``lr * min_lr_ratio`` over training.
        sample: subsampling threshold ``t`` (:func:`~transformer_book.embeddings.contexts.keep_probabilities`); 0 turns it off.
        noise_power: the exponent of the noise distribution.
        reduced_window: draw each position's window from ``1..L`` (word2vec) or always use ``L``.
        batch_size: pairs (skip-gram) or windows (CBOW) per update.
        shared_negatives: how many consecutive (shuffled) examples share one draw of ``k``
            negatives. 1 is word2vec (each example draws its own); the default 16 cuts the
            gathering and scattering of negative vectors, the largest cost, sixteenfold, with
            the same expected gradient (chapter 11 measures the quality against gensim).
        row_step_cap: a word that occurs ``m`` times in one batch on one side receives the
            sum of its ``m`` updates scaled by ``min(1, cap / m)``: never more than ``cap``
            ordinary SGD steps at once. Rare words are unaffected; it keeps large batches as
            stable as word2vec's one-pair-at-a-time updates.
        seed: seeds initialisation, subsampling, windows, shuffling and negative samples.
    """

    architecture: str = "skipgram"
    dim: int = 100
    window: int = 5
    negatives: int = 5
    epochs: int = 5
    lr: float | None = None
    min_lr_ratio: float = 1e-4
    sample: float = 1e-3
    noise_power: float = 0.75
    reduced_window: bool = True
    batch_size: int = 8192
    shared_negatives: int = 16
    row_step_cap: float = 32.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check_config(self)

    @property
    def initial_lr(self) -> float:
        if self.lr is not None:
            return self.lr
        return 0.025 if self.architecture == "skipgram" else 0.05


def _check_config(config: Word2VecConfig) -> None:
    """Every field of a :class:`Word2VecConfig` in its range."""
    if config.architecture not in ARCHITECTURES:
        raise ValueError(
            f"Word2VecConfig: unknown architecture {config.architecture!r}; known: {', '.join(ARCHITECTURES)}"
        )
    checks.positive_int(
        "Word2VecConfig",
        **{
            name: getattr(config, name)
            for name in ("dim", "window", "negatives", "epochs", "batch_size", "shared_negatives")
        },
    )
    if config.lr is not None:
        checks.finite_real("Word2VecConfig", "lr", config.lr, above=0)
    checks.probability("Word2VecConfig", "min_lr_ratio", config.min_lr_ratio, zero=False, one=True)
    if not config.sample >= 0:
        raise ValueError(f"Word2VecConfig: sample must be >= 0, got {config.sample!r}")
    checks.probability("Word2VecConfig", "noise_power", config.noise_power, one=True)
    if not config.row_step_cap >= 1:
        raise ValueError(f"Word2VecConfig: row_step_cap must be >= 1, got {config.row_step_cap!r}")


@dataclass
class Word2VecResult:
    """Trained vectors and what training measured.

    Attributes:
        w_in: ``(|V|, d)`` float32 input vectors, the word vectors one uses.
        w_out: ``(|V|, d)`` float32 output vectors.
        losses: mean loss per predicted word in each epoch.
        seconds: training time, from the first pair generated to the last update.
        words_per_second: corpus tokens (before subsampling and out-of-vocabulary removal)
            times epochs, divided by ``seconds``: the figure gensim reports.
        examples: pairs (skip-gram) or windows (CBOW) trained on, over all epochs.
    """

    w_in: np.ndarray
    w_out: np.ndarray
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    words_per_second: float = 0.0
    examples: int = 0


def _step_scale(rows: torch.Tensor, vocab_size: int, cap: float, *more_rows: torch.Tensor) -> torch.Tensor:
    """``(|V|,)`` factors ``min(1, cap / m_w)``, with ``m_w`` the occurrences of word ``w`` in
    ``rows`` (and ``more_rows``): a word's summed update is at most ``cap`` ordinary steps."""
    if rows.device.type == "cpu":  # one counting pass
        occurrences = torch.bincount(torch.cat([rows, *more_rows]) if more_rows else rows, minlength=vocab_size)
        return (cap / occurrences.clamp(min=1).float()).clamp(max=1.0)
    # On a GPU counted by index_add_ rather than bincount, which waits for the device to learn
    # the largest id; whole numbers below 2**24 add exactly in float32, in any order.
    occurrences = torch.zeros(vocab_size, device=rows.device)
    for some in (rows, *more_rows):
        occurrences.index_add_(0, some, torch.ones(len(some), device=rows.device))
    return (cap / occurrences.clamp(min=1)).clamp(max=1.0)


def _summed_context_gradients(
    rows: torch.Tensor, window: torch.Tensor, grad_h: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """CBOW's update of the input vectors, summed per word: for each distinct word ``w`` of
    ``rows``,

    .. math:: \\Delta_w = \\min\\Bigl(1, \\frac{\\text{cap}}{m_w}\\Bigr) \\sum_{j:\\, \\text{rows}_j = w}
        \\frac{\\partial \\ell}{\\partial h_{\\text{window}_j}}

    with ``m_w`` the occurrences of ``w``: every context word receives the gradient of its
    window's mean ``h`` (word2vec), capped as in :func:`_step_scale`.

    Computed as one sparse product ``A @ grad_h`` with ``A[w, i]`` the count of ``w`` in window
    ``i``, instead of copying ``grad_h`` out to every context slot (``T`` rows of ``d``) and
    scattering it back: on a CPU the copy costs more than the arithmetic.

    Args:
        rows: ``(T,)`` int64 word ids of the batch's context slots.
        window: ``(T,)`` int64 the window (row of ``grad_h``) of each slot.
        grad_h: ``(B, d)`` the gradient of each window's mean.
        cap: ``row_step_cap``.

    Returns:
        The distinct words ``(U,)`` and their updates ``(U, d)``.
    """
    batch = grad_h.shape[0]
    key = rows * batch + window  # (word, window) as one number, sorted word by word
    if len(rows) and int(rows.max()) < (2**31 - 1) // batch:  # int32 sorts about twice as fast
        key = key.int()
    pairs, multiplicity = torch.unique(key, sorted=True, return_counts=True)
    pairs = pairs.long()
    word = torch.div(pairs, batch, rounding_mode="floor")
    words, entries = torch.unique_consecutive(word, return_counts=True)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": said once per process
        warnings.simplefilter("ignore", UserWarning)
        counts = torch.sparse_csr_tensor(
            F.pad(entries.cumsum(0), (1, 0)),
            pairs - word * batch,
            multiplicity.to(grad_h.dtype),
            size=(len(words), batch),
            check_invariants=False,
        )
    return words, (counts @ grad_h).mul_(_step_scale(rows, 0, cap)[words].unsqueeze(1))


def _copied_context_gradients(
    rows: torch.Tensor, window: torch.Tensor, grad_h: torch.Tensor, vocab_size: int, cap: float
) -> torch.Tensor:
    """The same update as :func:`_summed_context_gradients`, one row ``(T, d)`` per context
    slot, for ``index_add_`` to sum: the way for a GPU, where the sort and the sparse product
    would wait for the device."""
    scale = _step_scale(rows, vocab_size, cap)
    return grad_h.index_select(0, window).mul_(scale[rows].unsqueeze(1))


class AliasSampler:
    """Draws ids from a fixed discrete distribution in O(1) each (Walker's alias method).

    Each of the ``|V|`` slots holds a word with probability ``prob[i]`` and its alias otherwise;
    a draw picks a slot uniformly, then the word or its alias. The table is built exactly
    (Vose, 1991), so the draws follow ``p`` up to floating-point rounding.
    """

    def __init__(self, p: np.ndarray, device: torch.device | str = "cpu") -> None:
        p = np.asarray(p, dtype=np.float64)
        if p.ndim != 1 or p.size == 0 or np.any(p < 0) or not np.isclose(p.sum(), 1.0):
            raise ValueError("AliasSampler: p must be a non-empty 1-D probability vector")
        n = len(p)
        scaled = p * n
        prob = np.ones(n)
        alias = np.arange(n)
        small = [i for i in range(n) if scaled[i] < 1.0]
        large = [i for i in range(n) if scaled[i] >= 1.0]
        while small and large:
            s, g = small.pop(), large.pop()
            prob[s], alias[s] = scaled[s], g
            scaled[g] -= 1.0 - scaled[s]
            (small if scaled[g] < 1.0 else large).append(g)
        self.prob = torch.as_tensor(prob, dtype=torch.float32, device=device)
        self.alias = torch.as_tensor(alias, dtype=torch.int64, device=device)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``(n,)`` int64 ids."""
        device = self.prob.device
        slot = torch.randint(len(self.prob), (n,), generator=generator, device=device)
        coin = torch.rand(n, generator=generator, device=device)
        return torch.where(coin < self.prob[slot], slot, self.alias[slot])


def _epoch_examples(
    corpus: EncodedCorpus,
    config: Word2VecConfig,
    keep: np.ndarray | None,
    rng: np.random.Generator,
    generator: torch.Generator,
    on_device: bool,
) -> tuple[torch.Tensor, torch.Tensor] | FlatWindows:
    """One epoch's examples, shuffled, on ``generator``'s device: skip-gram's ``(centres,
    contexts)`` pairs, or CBOW's :class:`~transformer_book.embeddings.contexts.FlatWindows`.
    Drawn there with ``generator`` when ``on_device`` (no copy of the epoch's examples), else
    drawn by NumPy's ``rng`` on the CPU and copied over once (one copy per epoch, not one per
    batch)."""
    source = generator if on_device else rng
    device = generator.device
    if config.architecture == "cbow":
        windows = flat_cbow_windows(
            corpus, config.window, source, keep=keep, reduced=config.reduced_window, shuffle=True
        )
        examples = len(windows)
    else:
        centres, contexts = skipgram_pairs(corpus, config.window, source, keep=keep, reduced=config.reduced_window)
        examples = len(centres)
    if examples == 0:
        raise ValueError("train_word2vec: the corpus yields no training example (are all sentences one word long?)")
    if config.architecture == "cbow":
        return windows.to(device)
    if on_device:
        order = torch.randperm(len(centres), generator=generator, device=device)
    else:
        order = torch.as_tensor(rng.permutation(len(centres))).to(device)
    return torch.as_tensor(centres).to(device)[order], torch.as_tensor(contexts).to(device)[order]


def train_word2vec(
    corpus: EncodedCorpus,
    counts: np.ndarray,
    config: Word2VecConfig | None = None,
    *,
    device: torch.device | str | None = None,
    progress: bool = True,
) -> Word2VecResult:
    """Train word2vec with negative sampling on an encoded corpus.

    Every epoch draws its training examples afresh (subsampling, window sizes), shuffles them,
    and goes through them ``batch_size`` at a time: gather the vectors, compute the gradients of
    :func:`sgns_loss` (:func:`sgns_gradients`), and add ``-lr`` times them back with
    ``index_add_`` (updates to a word that occurs several times in a batch are summed, capped by
    ``row_step_cap``). Negative samples are drawn per predicted word from
    :func:`noise_distribution` with an :class:`AliasSampler`. Input vectors start uniform in
    :math:`[-0.5/d, 0.5/d)` and output vectors at zero, as in word2vec.

    CBOW predicts the centre word from :math:`h = \\frac{1}{|C|}\\sum_{c \\in C} v_c`; as in
    word2vec, the gradient with respect to ``h`` is added to every context word's vector.

    Args:
        corpus: ids from :func:`~transformer_book.embeddings.contexts.encode_corpus`.
        counts: ``(|V|,)`` the vocabulary's counts (``Vocab.counts``).
        config: hyper-parameters; ``Word2VecConfig()`` when None.
        device: where to train (CPU, CUDA); the CPU by default.
        progress: show a tqdm bar with the running loss.

    Raises:
        ValueError: a vocabulary smaller than ``negatives + 1``, ids outside ``[0, |V|)``,
            or a corpus that yields no training example.
        RuntimeError: a non-finite loss, naming the epoch and step.
    """
    config = config or Word2VecConfig()
    counts = np.asarray(counts)
    vocab_size = len(counts)
    if vocab_size < config.negatives + 1:
        raise ValueError(
            f"train_word2vec: a vocabulary of {vocab_size} words is too small for "
            f"{config.negatives} negative samples (need at least negatives + 1 words)"
        )
    if len(corpus.ids) and (corpus.ids.min() < 0 or corpus.ids.max() >= vocab_size):
        raise ValueError(
            f"train_word2vec: corpus ids must lie in [0, {vocab_size}), got [{corpus.ids.min()}, {corpus.ids.max()}]"
        )
    device = torch.device(device or "cpu")
    rng = np.random.default_rng(config.seed)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    keep = keep_probabilities(counts, config.sample) if config.sample > 0 else None
    noise = AliasSampler(noise_distribution(counts, config.noise_power), device=device)

    d, k, cap, share = config.dim, config.negatives, config.row_step_cap, config.shared_negatives
    init = (rng.random((vocab_size, d), dtype=np.float32) - 0.5) / d
    w_in = torch.as_tensor(init).to(device)
    w_out = torch.zeros(vocab_size, d, device=device)

    # The number of examples is known only epoch by epoch; the learning rate decays over an
    # estimate made from the first epoch, as word2vec decays over words read.
    lr0, lr_min = config.initial_lr, config.initial_lr * config.min_lr_ratio
    result = Word2VecResult(w_in=np.empty(0), w_out=np.empty(0))
    # Tiny sigmoid gradients would slow the CPU down as denormal floats; flushed to zero while
    # training, and back to PyTorch's default after.
    torch.set_flush_denormal(True)
    start = time.perf_counter()
    bar = None
    try:
        planned = None
        done = 0
        # On a GPU each epoch's examples are drawn and built there (torch's generator); on the CPU
        # by NumPy, as the chapters' stored results were made.
        on_device = device.type == "cuda"
        for epoch in range(config.epochs):
            drawn = _epoch_examples(corpus, config, keep, rng, generator, on_device)
            if config.architecture == "skipgram":
                centres, contexts = drawn
                examples = len(centres)
            else:
                windows = drawn
                examples = len(windows)
            if planned is None:
                planned = examples * config.epochs
                bar = tqdm(
                    total=planned,
                    disable=not progress,
                    desc=config.architecture,
                    unit="ex",
                    unit_scale=True,
                    dynamic_ncols=True,
                )
            # The loss is summed where it is computed (float32 per batch, added in float64) and read
            # every step on the CPU, every 50 steps on a GPU, whose work then runs ahead unhindered.
            loss_sum, n_predicted = torch.zeros((), dtype=torch.float64, device=device), 0
            checked = 0.0
            last_step = -(-examples // config.batch_size) - 1
            for step, begin in enumerate(range(0, examples, config.batch_size)):
                lr = max(lr_min, lr0 * (1.0 - done / planned))
                end = min(begin + config.batch_size, examples)
                n = end - begin
                if config.architecture == "skipgram":
                    inputs, target = centres[begin:end], contexts[begin:end]  # v_w of the centre predicts u_c
                    v = w_in.index_select(0, inputs)
                else:  # the mean of the context's input vectors predicts the centre
                    target, inputs, offsets, window = windows.batch(begin, end)
                    v = F.embedding_bag(inputs, w_in, offsets, mode="mean")
                u_pos = w_out.index_select(0, target)
                groups = -(-n // share)
                if groups * share != n:  # the last batch: pad with zero vectors, which add no gradient
                    v = torch.cat([v, v.new_zeros(groups * share - n, d)])
                    u_pos = torch.cat([u_pos, u_pos.new_zeros(groups * share - n, d)])
                negative = noise.sample(groups * k, generator)
                u_neg = w_out.index_select(0, negative).view(groups, k, d)
                grad_v, grad_pos, grad_neg, loss = sgns_gradients(v, u_pos, u_neg)
                grad_v, grad_pos, loss = grad_v[:n], grad_pos[:n], loss[:n]
                loss_sum += loss.sum().double()
                n_predicted += n
                if device.type != "cuda" or step % 50 == 0 or step == last_step:
                    checked = loss_sum.item()
                    if not math.isfinite(checked):
                        raise RuntimeError(
                            f"train_word2vec: the loss became {checked} at epoch {epoch + 1}, by step "
                            f"{step + 1}; lower lr or row_step_cap"
                        )
                scale = _step_scale(target, vocab_size, cap, negative)
                w_out.index_add_(0, target, grad_pos.mul_(scale[target].unsqueeze(1)), alpha=-lr)
                grad_neg = grad_neg.view(-1, d)
                w_out.index_add_(0, negative, grad_neg.mul_(scale[negative].unsqueeze(1)), alpha=-lr)
                if config.architecture == "skipgram":
                    scale = _step_scale(inputs, vocab_size, cap)
                    w_in.index_add_(0, inputs, grad_v.mul_(scale[inputs].unsqueeze(1)), alpha=-lr)
                elif device.type == "cpu":  # every context word gets the gradient of h, summed per word
                    words, update = _summed_context_gradients(inputs, window, grad_v, cap)
                    w_in.index_add_(0, words, update, alpha=-lr)
                else:  # on a GPU copied out to every context slot, with no wait for the device
                    w_in.index_add_(
                        0, inputs, _copied_context_gradients(inputs, window, grad_v, vocab_size, cap), alpha=-lr
                    )
                done += n
                bar.update(n)
                if step % 50 == 0:
                    bar.set_postfix(loss=f"{checked / n_predicted:.3f}", lr=f"{lr:.4f}", refresh=False)
            result.losses.append(checked / n_predicted)
            result.examples += n_predicted
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if bar is not None:  # its total was estimated from the first epoch: end it at what was trained on
            bar.total = done
            bar.refresh()
    finally:
        torch.set_flush_denormal(False)
        if bar is not None:
            bar.close()
    result.seconds = time.perf_counter() - start
    result.words_per_second = corpus.n_tokens * config.epochs / result.seconds
    result.w_in = w_in.cpu().numpy()
    result.w_out = w_out.cpu().numpy()
    return result
