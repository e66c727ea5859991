r"""Batches that a training loop can address by step: length-bucketed sentence pairs for an
encoder-decoder (chapter 7, :class:`BucketedBatches`) and random windows of one token stream
for a language model (chapter 9, :class:`RandomWindows`). The batch type and the padding are
the contracts' (:class:`~transformer_book.data.Seq2SeqBatch`,
:func:`~transformer_book.data.pad_sequences`).

For a source sentence :math:`x_1 \dots x_m` and a target :math:`y_1 \dots y_n` (token ids,
without specials) one example becomes three rows:

.. code-block:: text

    src     x_1 ... x_m  EOS              the encoder's input
    tgt_in  SOS  y_1 ... y_n              the decoder's input: the target shifted right
    tgt_out y_1 ... y_n  EOS              what the decoder must predict at each position

so the decoder's output at position :math:`t` sees :math:`\mathrm{SOS}, y_1 \dots y_{t-1}` and
is trained to predict :math:`y_t`, and finally EOS. Rows are padded with PAD to the longest
in the batch; the masks and the loss ignore PAD.

Sorting sentences by length before cutting batches keeps padding low; shuffling within
pools of similar sentences and then shuffling the batches keeps the order random.
:class:`BucketedBatches` does this for one epoch at a time, as a pure function of the seed
and the epoch, so that ``batches(step)`` is the same batch on every run: what
:func:`transformer_book.training.fit` needs to resume a run exactly.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from transformer_book import checks
from transformer_book.contracts import BatchTokenizer, Seq2SeqBatch, pad_sequences
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID

__all__ = ["Seq2SeqBatch", "pad_sequences", "collate_pairs", "encode_pairs", "BucketedBatches", "RandomWindows"]


def collate_pairs(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    pad_id: int = PAD_ID,
    sos_id: int = SOS_ID,
    eos_id: int = EOS_ID,
) -> Seq2SeqBatch:
    """Turn ``(source ids, target ids)`` pairs, without specials, into a :class:`Seq2SeqBatch`.

    ``src`` = source + EOS; ``tgt_out`` = target + EOS; ``tgt_in`` = SOS + target (the right
    shift of ``tgt_out``); each padded with ``pad_id``.

    Raises:
        ValueError: no pairs, an empty side, or a side that already holds a special id.
    """
    if len(pairs) == 0:
        raise ValueError("collate_pairs: no pairs")
    specials = {pad_id, sos_id, eos_id}
    for index, (source, target) in enumerate(pairs):
        for side, ids in (("source", source), ("target", target)):
            if len(ids) == 0:
                raise ValueError(f"collate_pairs: the {side} of pair {index} is empty")
            if specials.intersection(ids):
                raise ValueError(
                    f"collate_pairs: the {side} of pair {index} already holds a special id "
                    f"({sorted(specials.intersection(ids))}); pass ids without PAD, SOS or EOS"
                )
    src = pad_sequences([list(s) + [eos_id] for s, _ in pairs], pad_id)
    tgt_in = pad_sequences([[sos_id] + list(t) for _, t in pairs], pad_id)
    tgt_out = pad_sequences([list(t) + [eos_id] for _, t in pairs], pad_id)
    return Seq2SeqBatch(src, tgt_in, tgt_out)


def encode_pairs(
    pairs: Sequence[tuple[str, str]],
    source_tokenizer: BatchTokenizer,
    target_tokenizer: BatchTokenizer | None = None,
    *,
    max_len: int | None = None,
) -> list[tuple[list[int], list[int]]]:
    """Token ids of ``(source, target)`` text pairs, ready for :func:`collate_pairs`.

    ``target_tokenizer`` defaults to ``source_tokenizer`` (one joint vocabulary). The policy
    for long sentences is to *drop* them from the data, never to cut them: a pair whose
    source or target needs more than ``max_len`` positions with its EOS (or SOS) is left out
    with a warning that counts them. A model cannot learn from a truncated target, and a
    truncated source teaches it to leave words untranslated. Pairs with a side that encodes
    to no tokens at all are dropped with a warning as well.

    Raises:
        ValueError: ``max_len`` is not a positive int.
    """
    if max_len is not None:
        checks.integer("encode_pairs", "max_len", max_len, minimum=2)
    target_tokenizer = target_tokenizer or source_tokenizer
    sources = source_tokenizer.encode_batch([s for s, _ in pairs])
    targets = target_tokenizer.encode_batch([t for _, t in pairs])
    kept, too_long, empty = [], 0, 0
    for source, target in zip(sources, targets):
        if not source or not target:
            empty += 1
        elif max_len is not None and max(len(source), len(target)) + 1 > max_len:
            too_long += 1
        else:
            kept.append((source, target))
    if too_long:
        warnings.warn(
            f"encode_pairs: dropped {too_long} of {len(pairs)} pairs longer than max_len={max_len} "
            "tokens (EOS included)",
            stacklevel=2,
        )
    if empty:
        warnings.warn(f"encode_pairs: dropped {empty} of {len(pairs)} pairs with a side of no tokens", stacklevel=2)
    return kept


class BucketedBatches:
    """Length-bucketed, shuffled batches of sentence pairs, addressable by training step.

    Epoch ``e`` is made from a generator seeded with ``(seed, e)``: the pairs are shuffled,
    cut into pools of ``pool_size`` pairs, each pool is sorted by length and packed greedily
    into batches whose padded size ``(number of pairs) x (longest row)`` stays within
    ``max_tokens``, and the batches of the epoch are shuffled. ``batches(step)`` returns the
    batch of global step ``step`` (epochs follow each other), a pure function of the step.
    With ``shuffle=False`` (for evaluation) one fixed epoch sorts all pairs by length.

    Args:
        examples: ``(source ids, target ids)`` pairs without specials (see :func:`encode_pairs`).
        max_tokens: the most padded positions per batch, on the longer side (EOS/SOS included).
        max_sentences: optionally, the most pairs per batch.
        seed: seeds the shuffling.
        shuffle: shuffle (training) or not (evaluation).
        bucket: sort by length within pools (the default); ``False`` packs the shuffled pairs
            as they come, the padding-heavy baseline that bucketing improves on.
        pool_size: pairs sorted together; larger pools pad less, smaller are more random.

    Raises:
        ValueError: no examples, non-positive sizes, or a pair longer than ``max_tokens``.
    """

    def __init__(
        self,
        examples: Sequence[tuple[Sequence[int], Sequence[int]]],
        max_tokens: int,
        *,
        max_sentences: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        bucket: bool = True,
        pool_size: int = 4096,
        pad_id: int = PAD_ID,
        sos_id: int = SOS_ID,
        eos_id: int = EOS_ID,
    ) -> None:
        if len(examples) == 0:
            raise ValueError("BucketedBatches: no examples")
        checks.positive_int("BucketedBatches", max_tokens=max_tokens, pool_size=pool_size)
        if max_sentences is not None:
            checks.positive_int("BucketedBatches", max_sentences=max_sentences)
        self.examples = examples
        self.lengths = np.array([max(len(s), len(t)) + 1 for s, t in examples])
        longest = int(self.lengths.max())
        if longest > max_tokens:
            raise ValueError(
                f"BucketedBatches: max_tokens={max_tokens} is smaller than the longest pair "
                f"({longest} positions with EOS); raise max_tokens or drop long pairs"
            )
        self.max_tokens, self.max_sentences, self.seed = max_tokens, max_sentences, seed
        self.shuffle, self.bucket, self.pool_size = shuffle, bucket, pool_size
        self._specials = dict(pad_id=pad_id, sos_id=sos_id, eos_id=eos_id)
        self._epochs: dict[int, list[np.ndarray]] = {}
        self._starts = [0]  # _starts[e] = global step of epoch e's first batch
        self._lock = threading.RLock()  # the two caches above are shared by threads (fit's prefetching)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def _pack(self, order: np.ndarray) -> list[np.ndarray]:
        batches, current, longest = [], [], 0
        for index in order:
            length = max(longest, int(self.lengths[index]))
            full = (len(current) + 1) * length > self.max_tokens or (
                self.max_sentences is not None and len(current) == self.max_sentences
            )
            if current and full:
                batches.append(np.array(current))
                current, length = [], int(self.lengths[index])
            current.append(index)
            longest = length
        batches.append(np.array(current))
        return batches

    def epoch(self, epoch: int) -> list[np.ndarray]:
        """The batches of ``epoch`` (0-based) as arrays of example indices, in training order."""
        checks.non_negative_int("BucketedBatches.epoch", epoch=epoch)
        return self._epoch(epoch)

    def _epoch(self, epoch: int) -> list[np.ndarray]:
        """:meth:`epoch` of an ``epoch`` the caller has checked (or computed)."""
        with self._lock:
            return self._cached_epoch(epoch if self.shuffle else 0)

    def _cached_epoch(self, epoch: int) -> list[np.ndarray]:
        if epoch not in self._epochs:
            if len(self._epochs) > 4:  # keep a few recent epochs
                self._epochs.pop(min(self._epochs))
            if self.shuffle:
                rng = np.random.default_rng([self.seed, epoch])
                order = rng.permutation(len(self.examples))
                if self.bucket:
                    pools = [order[i : i + self.pool_size] for i in range(0, len(order), self.pool_size)]
                    batches = [
                        b for pool in pools for b in self._pack(pool[np.argsort(self.lengths[pool], kind="stable")])
                    ]
                else:
                    batches = self._pack(order)
                batches = [batches[i] for i in rng.permutation(len(batches))]
            else:
                order = np.argsort(self.lengths, kind="stable") if self.bucket else np.arange(len(self.examples))
                batches = self._pack(order)
            self._epochs[epoch] = batches
        return self._epochs[epoch]

    def __len__(self) -> int:
        """Batches in epoch 0 (other epochs differ by a few batches at most)."""
        return len(self._epoch(0))

    def locate(self, step: int) -> tuple[int, int]:
        """``(epoch, batch index within it)`` of global step ``step``."""
        checks.non_negative_int("BucketedBatches", step=step)
        return self._locate(step)

    def _locate(self, step: int) -> tuple[int, int]:
        """:meth:`locate` of a ``step`` the caller has checked."""
        if not self.shuffle:
            return 0, step % len(self)
        with self._lock:
            while self._starts[-1] <= step:
                self._starts.append(self._starts[-1] + len(self._epoch(len(self._starts) - 1)))
            epoch = int(np.searchsorted(self._starts, step, side="right")) - 1
            return epoch, step - self._starts[epoch]

    def batch(self, indices: Sequence[int]) -> Seq2SeqBatch:
        """Collate the examples at ``indices``."""
        return collate_pairs([self.examples[int(i)] for i in indices], **self._specials)

    def __call__(self, step: int) -> Seq2SeqBatch:
        """The batch of global training step ``step``."""
        checks.non_negative_int("BucketedBatches", step=step)
        epoch, index = self._locate(step)
        return self.batch(self._epoch(epoch)[index])

    def __iter__(self) -> Iterator[Seq2SeqBatch]:
        """The batches of one epoch (epoch 0, or the sorted epoch with ``shuffle=False``)."""
        return (self.batch(indices) for indices in self._epoch(0))

    def padding_share(self, epoch: int = 0) -> float:
        """The share of padded positions (on the longer side) in ``epoch``'s batches."""
        batches = self.epoch(epoch)
        padded = sum(len(b) * int(self.lengths[b].max()) for b in batches)
        return 1.0 - float(self.lengths.sum()) / padded


class RandomWindows:
    """Batches of random windows of one long token stream, for a language model, addressable by step.

    Step ``s`` draws ``batch_size`` start positions ``i`` uniformly from a generator seeded
    with ``(seed, s)`` and returns ``(x, y)``, each ``(batch_size, context)``, with
    ``x = ids[i : i + context]`` and ``y = ids[i + 1 : i + context + 1]``: position ``t`` of ``x``
    is trained to predict ``y[t]``, the next token. A pure function of the step, as
    :func:`transformer_book.training.fit` needs to resume exactly.

    Raises:
        ValueError: ``ids`` not a 1-D integer tensor longer than ``context``, or non-positive sizes.
    """

    def __init__(self, ids: torch.Tensor, context: int, batch_size: int, *, seed: int = 0) -> None:
        if (
            not isinstance(ids, torch.Tensor)
            or ids.dim() != 1
            or ids.dtype.is_floating_point
            or ids.dtype == torch.bool
        ):
            raise ValueError("RandomWindows: ids must be a 1-D integer tensor")
        checks.positive_int("RandomWindows", context=context, batch_size=batch_size)
        if ids.numel() <= context:
            raise ValueError(
                f"RandomWindows: {ids.numel()} tokens are too few for windows of context {context} plus a target"
            )
        self.ids, self.context, self.batch_size, self.seed = ids.long(), context, batch_size, seed

    def __call__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        checks.non_negative_int("RandomWindows", step=step)
        rng = np.random.default_rng([self.seed, step])
        starts = torch.from_numpy(rng.integers(0, self.ids.numel() - self.context, self.batch_size))
        offsets = torch.arange(self.context)
        x = self.ids[starts[:, None] + offsets]
        return x, self.ids[starts[:, None] + offsets + 1]
