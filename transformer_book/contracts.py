"""The contracts that data and models agree on, on a floor below both (neither imports the other).

* ``IGNORE_INDEX``, the target id that a loss skips;
* ``FINETUNING_KINDS``, the kinds of targets a fine-tuning task has;
* ``pad_sequences``, how id sequences become one padded tensor;
* the batch types that the data modules build and the models' losses read
  (:class:`Seq2SeqBatch`, :class:`PretrainingBatch`, :class:`FineTuningBatch`, :class:`InContextBatch`);
* the interfaces that decoding and checkpoints dispatch on, as :class:`typing.Protocol` s:
  a :class:`Tokenizer`, an :class:`EncoderDecoder` and a :class:`LanguageModel`, and
  :func:`conforms`, the check of an object against one of them.

The data modules re-export what they build (``data.Seq2SeqBatch`` and the rest keep working).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from transformer_book.tokenizers.subword import PAD_ID
from transformer_book.tokenizers.wordpiece import PAD_ID as WORDPIECE_PAD_ID

__all__ = [
    "IGNORE_INDEX",
    "FINETUNING_KINDS",
    "pad_sequences",
    "Seq2SeqBatch",
    "PretrainingBatch",
    "FineTuningBatch",
    "InContextBatch",
    "Tokenizer",
    "BatchTokenizer",
    "EncoderDecoder",
    "LanguageModel",
    "CachedLanguageModel",
    "conforms",
]

IGNORE_INDEX = -100
"""The target id that every loss of the package skips (PyTorch's ``cross_entropy`` default):
positions that are not predicted, such as unselected MLM positions, padding, or a tagger's
continuation pieces."""


class Seq2SeqBatch(NamedTuple):
    """One batch of sentence pairs as padded id tensors.

    ``src`` ``(B, m)``, ``tgt_in`` ``(B, n)``, ``tgt_out`` ``(B, n)``, all int64, PAD-padded;
    ``tgt_in`` is ``tgt_out`` shifted right with SOS in front.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    @property
    def n_tokens(self) -> int:
        """The number of target tokens the loss counts (non-PAD positions of ``tgt_out``)."""
        return int((self.tgt_out != PAD_ID).sum())


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    """Stack id sequences into a ``(B, L)`` int64 tensor, padding on the right with ``pad_id``.

    Raises:
        ValueError: no sequences, an empty one, or one holding a value that is not an integer
            id (a float such as 1.7 would be truncated to 1).
    """
    if len(sequences) == 0:
        raise ValueError("pad_sequences: no sequences")
    lengths = [len(s) for s in sequences]
    if min(lengths) == 0:
        raise ValueError(f"pad_sequences: sequence {lengths.index(0)} is empty")
    out = torch.full((len(sequences), max(lengths)), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        values = torch.as_tensor(sequence)
        if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise ValueError(f"pad_sequences: sequence {row} must hold integer ids, got {values.dtype}")
        out[row, : len(sequence)] = values
    return out


class PretrainingBatch(NamedTuple):
    """One batch for BERT's pretraining loss.

    ``tokens`` ``(B, n)`` int64: the corrupted inputs, PAD-padded on the right; ``segments``
    ``(B, n)`` int64: 0 for ``[CLS] a [SEP]`` and for padding, 1 for ``b [SEP]``; ``targets``
    ``(B, n)`` int64: the original id at the selected positions, ``IGNORE_INDEX``
    elsewhere (padding included); ``is_next`` ``(B,)`` int64: 1 when B follows A.
    """

    tokens: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor
    is_next: torch.Tensor

    @property
    def n_predictions(self) -> int:
        """The number of selected positions (those the MLM loss averages over)."""
        return int((self.targets != IGNORE_INDEX).sum())

    @property
    def padding(self) -> torch.Tensor:
        """``(B, n)`` bool, ``True`` at padding (masking never writes PAD, so this is ``tokens == [PAD]``)."""
        return self.tokens == WORDPIECE_PAD_ID


FINETUNING_KINDS = ("class", "tags", "span")
"""The kinds of targets a fine-tuning task has, one per head of
:mod:`transformer_book.models.finetuning`. A class per sentence (or pair), a tag per token, or
an answer span."""


class FineTuningBatch(NamedTuple):
    """One batch for a fine-tuning head of :mod:`transformer_book.models.finetuning`, padded on
    the right with ``[PAD]``.

    ``tokens`` and ``segments`` ``(B, n)`` int64 as BERT reads them. ``targets``, by ``kind``
    (one of :data:`~transformer_book.contracts.FINETUNING_KINDS`): ``"class"``, ``(B,)`` class
    ids for a sentence or pair classifier; ``"tags"``, ``(B, n)`` tag ids for a tagger,
    ``IGNORE_INDEX`` where no tag is scored (specials, padding, pieces that continue a word);
    ``"span"``, ``(B, 2)`` start and end positions (end inclusive) for a span extractor.
    ``allowed`` ``(B, n)`` bool: where a span may start or end (the passage's pieces); all
    ``False`` for the other tasks. A ``kind`` of ``None`` (a batch made by hand) states none:
    a head then checks the targets' shape alone.
    """

    tokens: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor
    allowed: torch.Tensor
    kind: str | None = None


class InContextBatch(NamedTuple):
    """A language model's batch: inputs ``x`` ``(B, 2P)`` and next-token targets ``y`` ``(B, 2P)``,
    with ``IGNORE_INDEX`` wherever the next token is an
    item (random, so nothing to learn); ``y[:, 2k + 1]`` is the label after ``k`` demonstrations."""

    x: torch.Tensor
    y: torch.Tensor


@runtime_checkable
class Tokenizer(Protocol):
    """What the package needs of a tokenizer: text to ids and back, and the vocabulary's size.
    :class:`~transformer_book.tokenizers.subword.SubwordTokenizer` and
    :class:`~transformer_book.tokenizers.wordpiece.WordPieceTokenizer` are two."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def __len__(self) -> int: ...


class BatchTokenizer(Tokenizer, Protocol):
    """A :class:`Tokenizer` that also encodes many texts at once, as the data pipelines call it
    (all three of the package's tokenizers are)."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...


@runtime_checkable
class EncoderDecoder(Protocol):
    """A sequence-to-sequence model as decoding drives it (the Transformer of chapter 6, the RNNs
    of chapter 7):

    * ``encode(src (B, m)) -> (memory, src_mask)``;
    * ``decode(tgt_in (B, n), memory, src_mask) -> states (B, n, d)``;
    * ``decode_step(new_tokens (B, k), memory, src_mask, cache) -> (states (B, k, d), cache)``;
    * ``output(states) -> logits (..., V)``.

    An encoder alone (BERT has ``encode``) is not one: the check asks for all four.
    """

    def encode(self, src: torch.Tensor) -> tuple[Any, Any]: ...

    def decode(self, tgt_in: torch.Tensor, memory: Any, src_mask: Any) -> torch.Tensor: ...

    def decode_step(self, tokens: torch.Tensor, memory: Any, src_mask: Any, cache: Any) -> tuple[torch.Tensor, Any]: ...

    def output(self, states: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class LanguageModel(Protocol):
    """A decoder-only language model (chapter 9's GPT): ``model(ids (B, n)) -> logits (B, n, V)``.
    (An encoder-decoder is callable too: decoding asks :class:`EncoderDecoder` first.)"""

    def __call__(self, ids: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class CachedLanguageModel(LanguageModel, Protocol):
    """A :class:`LanguageModel` that also generates with a key/value cache:
    ``decode_step(new_ids (B, k), cache) -> (logits (B, k, V), cache)``."""

    def decode_step(self, ids: torch.Tensor, cache: Any) -> tuple[torch.Tensor, Any]: ...


def conforms(obj: object, protocol: type) -> bool:
    """Whether ``obj`` has every method of ``protocol`` (one of this module's interfaces), each
    looked up as a call would find it.

    Use this, not ``isinstance(obj, protocol)``: from Python 3.12 ``isinstance`` looks a
    protocol's members up statically, in the classes' and the instance's dictionaries only, and
    so misses a method that is a submodule of a :class:`torch.nn.Module` (the Transformer's
    ``output`` is an ``nn.Linear``, held in the module's ``_modules``).

    Raises:
        TypeError: ``protocol`` is not a :class:`typing.Protocol` class.
    """
    if not isinstance(protocol, type) or not getattr(protocol, "_is_protocol", False):
        raise TypeError(f"conforms: protocol must be a typing.Protocol class, got {protocol!r}")
    return all(callable(getattr(obj, name, None)) for name in _protocol_methods(protocol))


def _protocol_methods(protocol: type) -> set[str]:
    # The names a protocol and its protocol bases define: their methods, and __call__ / __len__.
    names: set[str] = set()
    for base in protocol.__mro__:
        if base is Protocol or not getattr(base, "_is_protocol", False):
            continue
        names |= {name for name in vars(base) if not name.startswith("_") or name in ("__call__", "__len__")}
    return names
