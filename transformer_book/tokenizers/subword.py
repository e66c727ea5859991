r"""Subword tokenisation with byte-pair encoding (chapter 7), through SentencePiece.

A word-level vocabulary either grows without bound or maps rare words to
:math:`\langle\mathrm{unk}\rangle`. Byte-pair encoding (BPE) starts from characters and
repeatedly merges the most frequent adjacent pair of symbols in the training text into a new
symbol, until the vocabulary has the requested size:

.. math::

    (a^*, b^*) = \operatorname*{arg\,max}_{(a, b)} \operatorname{count}(a\,b), \qquad
    \mathcal{V} \leftarrow \mathcal{V} \cup \{a^* b^*\}

Frequent words end up as one token, rare ones as a few pieces (``▁Flasche`` but ``▁Bü sche``),
and every word made of characters seen in training can be written, so
:math:`\langle\mathrm{unk}\rangle` is left only for characters never seen.

:class:`SubwordTokenizer` wraps a SentencePiece BPE model (Kudo and Richardson, 2018) with the
book's fixed special ids: PAD 0, SOS 1, EOS 2, UNK 3. SentencePiece marks a word's start with
``▁`` instead of splitting on spaces first, so decoding gives back the detokenised sentence,
which is what BLEU must be computed on.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType

from transformer_book import checks
from transformer_book.atomic import write_atomically

__all__ = ["SubwordTokenizer", "SPECIAL_TOKENS", "PAD_ID", "SOS_ID", "EOS_ID", "UNK_ID"]

SPECIAL_TOKENS = ("<pad>", "<sos>", "<eos>", "<unk>")
"""The special tokens, at ids 0 to 3."""
PAD_ID, SOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def _sentencepiece() -> ModuleType:
    try:
        import sentencepiece
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ImportError("SubwordTokenizer needs the sentencepiece package: pip install sentencepiece") from err
    return sentencepiece


def _training_lines(sentences: Iterable[str], vocab_size: int, model_type: str) -> list[str]:
    """The arguments of :meth:`SubwordTokenizer.train` checked, and its non-empty sentences stripped."""
    checks.integer("SubwordTokenizer.train", "vocab_size", vocab_size, minimum=len(SPECIAL_TOKENS) + 1)
    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"SubwordTokenizer.train: model_type must be 'bpe' or 'unigram', got {model_type!r}")
    lines = [
        checks.text(f"SubwordTokenizer.train: sentence {index}", sentence).strip()
        for index, sentence in enumerate(sentences)
    ]
    if not any(lines):
        raise ValueError("SubwordTokenizer.train: no non-empty sentences to learn from")
    return [line for line in lines if line]


class SubwordTokenizer:
    """A BPE subword tokeniser with the special ids PAD 0, SOS 1, EOS 2, UNK 3.

    Build one with :meth:`train` (from sentences) or :meth:`load` (from a saved model).
    ``encode`` gives ids (``add_eos=True`` appends EOS), ``pieces`` the subword strings,
    ``decode`` the detokenised text.
    """

    def __init__(self, model_proto: bytes) -> None:
        if not isinstance(model_proto, (bytes, bytearray)) or not model_proto:
            raise ValueError("SubwordTokenizer: model_proto must be the non-empty bytes of a SentencePiece model")
        spm = _sentencepiece()
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except (RuntimeError, OSError) as err:
            raise ValueError(f"SubwordTokenizer: not a valid SentencePiece model ({err})") from None
        ids = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
        if ids != (PAD_ID, SOS_ID, EOS_ID, UNK_ID):
            raise ValueError(
                f"SubwordTokenizer: the model's special ids (pad, sos, eos, unk) are {ids}, "
                f"expected {(PAD_ID, SOS_ID, EOS_ID, UNK_ID)}"
            )

    @classmethod
    def train(cls, sentences: Iterable[str], vocab_size: int = 8000, *, model_type: str = "bpe") -> SubwordTokenizer:
        """Learn a subword vocabulary of ``vocab_size`` tokens (specials included) from ``sentences``.

        Every character of the training text is kept (``character_coverage=1.0``); training
        runs on one thread, which makes the learned model the same on every run and machine
        (with several threads SentencePiece's BPE can merge ties in another order).

        Raises:
            ValueError: no non-empty sentence, a non-string sentence, ``vocab_size`` below 5
                or too large for the text (the message says the largest possible size), or an
                unknown ``model_type`` (``"bpe"`` or ``"unigram"``).
        """
        lines = _training_lines(sentences, vocab_size, model_type)  # the non-empty sentences, stripped
        spm = _sentencepiece()
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=1.0,
                num_threads=1,
                minloglevel=2,
                pad_id=PAD_ID,
                bos_id=SOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                pad_piece="<pad>",
                bos_piece="<sos>",
                eos_piece="<eos>",
                unk_piece="<unk>",
                unk_surface="<unk>",
                hard_vocab_limit=True,
            )
        except RuntimeError as err:
            message = str(err)
            if "Vocabulary size too high" in message:
                limit = message.rsplit("<=", 1)[-1].strip(" .")
                raise ValueError(
                    f"SubwordTokenizer.train: vocab_size={vocab_size} is too large for {len(lines):,} "
                    f"sentences; the largest possible here is {limit}"
                ) from None
            raise ValueError(f"SubwordTokenizer.train: SentencePiece failed: {message}") from None
        return cls(model.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SubwordTokenizer:
        """Read a model written by :meth:`save`."""
        try:
            return cls(Path(path).read_bytes())
        except ValueError as err:
            raise ValueError(f"SubwordTokenizer.load: {path}: {err}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model's bytes to ``path`` (creating its folder)."""
        write_atomically(path, self._proto)  # a failed write leaves the previous file whole

    def to_bytes(self) -> bytes:
        """The serialised SentencePiece model (store it in a checkpoint to rebuild the tokeniser)."""
        return self._proto

    def __len__(self) -> int:
        return self._sp.get_piece_size()

    @property
    def vocab_size(self) -> int:
        return len(self)

    pad_id, sos_id, eos_id, unk_id = PAD_ID, SOS_ID, EOS_ID, UNK_ID

    def encode(self, text: str, *, add_eos: bool = False) -> list[int]:
        """Token ids of one sentence, with EOS appended when ``add_eos``.

        Characters never seen in training become UNK (see :meth:`unknown_rate`).
        """
        ids = self._sp.encode(checks.text("SubwordTokenizer.encode", text))
        return ids + [EOS_ID] if add_eos else ids

    def encode_batch(self, texts: Sequence[str], *, add_eos: bool = False) -> list[list[int]]:
        """:meth:`encode` for many sentences at once (faster than a loop)."""
        if isinstance(texts, str):
            raise ValueError("SubwordTokenizer.encode_batch: expected a sequence of str, got one str")
        for index, text in enumerate(texts):
            checks.text(f"SubwordTokenizer.encode_batch: sentence {index}", text)
        encoded = self._sp.encode(list(texts))
        return [ids + [EOS_ID] for ids in encoded] if add_eos else encoded

    def pieces(self, text: str) -> list[str]:
        """The subword strings of one sentence (``▁`` marks the start of a word)."""
        return self._sp.encode(checks.text("SubwordTokenizer.pieces", text), out_type=str)

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        """The subword string of every id (specials as ``<pad>``, ``<sos>``, ``<eos>``, ``<unk>``)."""
        return [self._sp.id_to_piece(i) for i in self._check_ids(ids, "id_to_piece")]

    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text of a sequence of ids.

        Stops at the first EOS; PAD and SOS are dropped; UNK is written ``<unk>``. Accepts a
        list or a 1-D tensor of ids, such as one row of a decoder's output.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        kept = []
        for i in self._check_ids(ids, "decode"):
            if i == EOS_ID:
                break
            if i not in (PAD_ID, SOS_ID):
                kept.append(i)
        return self._sp.decode(kept)

    def unknown_rate(self, texts: Sequence[str]) -> float:
        """The share of tokens of ``texts`` that are UNK (characters not seen in training)."""
        encoded = self.encode_batch(texts)
        total = sum(len(ids) for ids in encoded)
        return sum(ids.count(UNK_ID) for ids in encoded) / total if total else 0.0

    def _check_ids(self, ids: Iterable[int], where: str) -> list[int]:
        return checks.token_ids(f"SubwordTokenizer.{where}", ids, len(self), kinds=int)

    def __repr__(self) -> str:
        return f"SubwordTokenizer({len(self)} tokens)"
