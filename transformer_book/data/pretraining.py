r"""BERT's pretraining data (Devlin et al., 2019) from WikiText-2 (chapter 13).

BERT learns from two tasks at once. *Next-sentence prediction* (NSP): the input is a pair of
segments laid out as

.. code-block:: text

    tokens    [CLS]  a_1 ... a_p  [SEP]  b_1 ... b_q  [SEP]
    segments    0     0  ...  0     0     1  ...  1     1

and the model tells whether B really follows A in the text (half of the pairs) or is a
sentence from another document (the other half). *Masked-language modelling* (MLM): 15% of
the tokens are selected; a selected token is replaced by ``[MASK]`` 80% of the time, by a
random token 10% of the time and left as it is 10% of the time, and the model must predict
the original token at the selected positions only:

.. math::

    \mathcal{L}_{\mathrm{MLM}} = -\frac{1}{|S|} \sum_{t \in S} \log P(x_t \mid \tilde{x}),
    \qquad S = \{t : \text{position } t \text{ selected}\}

The random and unchanged 20% keep the model from learning that only ``[MASK]`` positions
matter: it cannot tell which of the visible tokens it will be asked about.

The pipeline: :func:`wikitext2_documents` (articles as lists of sentences),
:func:`make_sentence_pairs` (the NSP pairs), :func:`encode_sentence_pairs` (ids and segments,
truncated to ``max_len``), and :class:`PretrainingBatches`, which pads and masks a batch for
any training step (:func:`mask_tokens`). Pairs of single sentences are the simple form; Devlin
et al. packed several consecutive sentences into each segment to fill the model's length, which
:func:`pack_documents` does, with next-sentence pairs or (RoBERTa's choice) as plain text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from transformer_book import checks
from transformer_book.contracts import IGNORE_INDEX, PretrainingBatch, Tokenizer
from transformer_book.data.wikitext import read_split
from transformer_book.tokenizers.wordpiece import CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS

__all__ = [
    "IGNORE_INDEX",
    "check_max_len",
    "wikitext2_documents",
    "SentencePair",
    "make_sentence_pairs",
    "encode_pair",
    "EncodedPairs",
    "encode_sentence_pairs",
    "pack_documents",
    "maskable_positions",
    "mask_tokens",
    "PretrainingBatch",
    "PretrainingBatches",
]

_SENTENCE_ENDS = frozenset({".", "?", "!"})
_MARKER = re.compile(r" ?@([-,.])@ ?")


_INTS = (int, np.integer)
"""The integer types these functions take (NumPy's too: counts and ids often come from arrays)."""


def _is_int(value: object) -> bool:
    return isinstance(value, _INTS) and not isinstance(value, (bool, np.bool_))


# ----------------------------------------------------------------------------- documents


def _detokenise(tokens: list[str]) -> str:
    text = " ".join("[UNK]" if token == "<unk>" else token for token in tokens)
    return _MARKER.sub(r"\1", text)


def _split_sentences(tokens: list[str]) -> list[list[str]]:
    sentences, current = [], []
    for token in tokens:
        current.append(token)
        if token in _SENTENCE_ENDS:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


def _documents_from_text(text: str) -> list[list[str]]:
    lines = [line.split() for line in text.split("\n")]
    documents: list[list[str]] = []
    current: list[str] = []
    for index, tokens in enumerate(lines):
        if not tokens:
            continue
        if len(tokens) >= 3 and tokens[0] == "=" and tokens[-1] == "=":
            if tokens[1] == "=" or tokens[-2] == "=":
                continue  # "= = Section = =" and deeper: dropped
            blank_before = index == 0 or not lines[index - 1]
            blank_after = index + 1 == len(lines) or not lines[index + 1]
            if blank_before and blank_after:  # "= Title =": a new article
                documents.append(current)
                current = []
                continue
            # otherwise a line of a table's legend that looks like a title ("= Goals ; A ="): text
        current.extend(_detokenise(sentence) for sentence in _split_sentences(tokens))
    documents.append(current)
    return [document for document in documents if len(document) >= 2]


def wikitext2_documents(split: str = "train", *, download: bool = True) -> list[list[str]]:
    """WikiText-2 as documents (Wikipedia articles), each a list of sentences.

    Read from the split's file (the one :func:`~transformer_book.data.load_wikitext2` reads,
    case kept), line by line:

    * a line ``= Title =`` (one ``=`` on each side) with a blank line before and after it
      starts a new document; the title itself is not a sentence. The blank lines matter:
      29 lines of table legends in train (``= Goals ; A =``, ``= Played , W =``) and 2 in
      test have the same form inside a block of text; taken as titles they would cut
      articles in two. With the blank lines the splits have exactly the 600, 60 and 60
      articles of Merity et al. (2016); the legend lines stay text;
    * headings ``= = Section = =`` (and deeper) are dropped;
    * every other line is a paragraph, cut into sentences after each token ``.``, ``?`` or
      ``!`` (the token stays with its sentence; what follows the last one is a sentence too).
      Abbreviations are safe: WikiText writes ``H.`` or ``St.`` as one token, and decimals as
      ``2 @.@ 5``. A sentence never runs across paragraphs.

    A sentence is its tokens joined by single spaces (``"It is , he said ."``: WikiText's
    spacing, which BERT's pre-tokenizer splits at anyway), except that the markers ``@-@``,
    ``@,@`` and ``@.@`` become ``-``, ``,`` and ``.`` glued to their neighbours:
    ``1 @,@ 000`` gives ``1,000`` and ``state @-@ of`` gives ``state-of``. WikiText's
    ``<unk>`` (a word outside its 33,278-word vocabulary) becomes ``[UNK]``: the WordPiece
    tokenizer keeps that string whole as its unknown token (id 1), so the model sees "a rare
    word stood here", never the made-up word ``<``, ``un``, ``##k``, ``>``. Documents with
    fewer than 2 sentences give no sentence pair and are dropped.

    Measured on the pinned files:

    ======  =========  =========
    split   documents  sentences
    ======  =========  =========
    train   600        77,423
    valid   60         8,133
    test    60         9,410
    ======  =========  =========

    (:func:`make_sentence_pairs` makes 76,823, 8,073 and 9,350 pairs of them.)

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"``.
        download: as for :func:`~transformer_book.data.fetch`.

    Raises:
        ValueError: an unknown split.
        DataError: a file that is not UTF-8 text.
    """
    return _documents_from_text(read_split("wikitext2_documents", split, download))


# ----------------------------------------------------------------------------- sentence pairs


class SentencePair(NamedTuple):
    """Two sentences for next-sentence prediction; ``is_next`` when ``b`` follows ``a`` in its document."""

    a: str
    b: str
    is_next: bool


def _check_documents(documents: Sequence[Sequence[str]], next_prob: float, seed: int) -> None:
    """At least two documents, each a non-empty list of str sentences; ``next_prob`` in [0, 1]; a non-negative seed."""
    if isinstance(documents, str) or len(documents) < 2:
        raise ValueError(
            f"make_sentence_pairs: documents must be a list of at least 2 documents (lists of "
            f"sentences), got {len(documents) if not isinstance(documents, str) else 'a str'}"
        )
    checks.probability("make_sentence_pairs", "next_prob", next_prob, one=True)
    checks.integer("make_sentence_pairs", "seed", seed, minimum=0, kinds=_INTS)
    for index, document in enumerate(documents):
        if isinstance(document, str) or len(document) == 0:
            raise ValueError(
                f"make_sentence_pairs: document {index} must be a non-empty list of sentences, got {document!r:.60}"
            )
        for sentence in document:
            if not isinstance(sentence, str):
                raise ValueError(
                    f"make_sentence_pairs: document {index} holds a {type(sentence).__name__}, expected str sentences"
                )


def make_sentence_pairs(
    documents: Sequence[Sequence[str]], *, seed: int = 0, next_prob: float = 0.5
) -> list[SentencePair]:
    """One NSP pair for every sentence that has a next sentence in its document.

    Sentence :math:`a = d_i` of document :math:`d` is paired, with probability ``next_prob``,
    with :math:`d_{i+1}` (``is_next=True``); otherwise with a sentence drawn uniformly from
    all the sentences of the *other* documents (``is_next=False``), so that a random B is
    never a neighbour of A by chance. A document of :math:`k` sentences gives :math:`k - 1`
    pairs. The draws come from ``numpy.random.default_rng(seed)``: the same seed gives the
    same pairs.

    Raises:
        ValueError: fewer than 2 documents, an empty document or a non-string sentence,
            ``next_prob`` outside ``[0, 1]``, a non-int ``seed``.
    """
    _check_documents(documents, next_prob, seed)
    sentences = [sentence for document in documents for sentence in document]
    lengths = np.array([len(document) for document in documents])
    starts = np.concatenate([[0], np.cumsum(lengths)])
    doc_of = np.repeat(np.arange(len(documents)), lengths)
    source = np.flatnonzero(np.arange(len(sentences)) + 1 < starts[doc_of + 1])  # sentences with a next one
    doc = doc_of[source]
    rng = np.random.default_rng(seed)
    is_next = rng.random(len(source)) < next_prob
    other = rng.integers(0, len(sentences) - lengths[doc])  # an index among the other documents' sentences
    other = other + lengths[doc] * (other >= starts[doc])  # ... skipping the document's own block
    partner = np.where(is_next, source + 1, other)
    return [SentencePair(sentences[a], sentences[b], bool(n)) for a, b, n in zip(source, partner, is_next)]


# ----------------------------------------------------------------------------- encoding


def check_max_len(max_len: object, where: str) -> None:
    """Refuse a ``max_len`` that cannot hold a pair: at least 5 ids, ``[CLS] a [SEP] b [SEP]``
    with one token each (the fine-tuning examples share the rule)."""
    if not _is_int(max_len) or max_len < 5:
        raise ValueError(
            f"{where}: max_len must be an int >= 5 ([CLS] a [SEP] b [SEP] with one token each), got {max_len!r}"
        )


def _truncated(len_a: int, len_b: int, max_len: int, where: str) -> tuple[int, int]:
    """How many tokens of a and b are kept: BERT's ``truncate_seq_pair``, one token at a time
    from the longer sentence (from b when they are equally long) until 3 specials fit too."""
    if len_a == 0 or len_b == 0:
        raise ValueError(f"{where}: sentence {'a' if len_a == 0 else 'b'} encodes to no tokens")
    while len_a + len_b + 3 > max_len:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def encode_pair(tokenizer: Tokenizer, a: str, b: str, max_len: int) -> tuple[list[int], list[int]]:
    """Ids and segment ids of ``[CLS] a [SEP] b [SEP]``, at most ``max_len`` of them.

    Segment 0 covers ``[CLS]``, ``a`` and its ``[SEP]``; segment 1 covers ``b`` and the final
    ``[SEP]``. A pair that is too long loses tokens one at a time from the end of the
    longer sentence (of ``b`` when they are equally long) until it fits: BERT's
    ``truncate_seq_pair``, which keeps both sentences as long as it can.

    Args:
        tokenizer: anything with ``encode(text) -> list[int]`` that adds no special token,
            with BERT's special ids (a :class:`~transformer_book.tokenizers.wordpiece.WordPieceTokenizer`).

    Raises:
        ValueError: ``max_len`` below 5, or a sentence that encodes to no tokens.
    """
    check_max_len(max_len, "encode_pair")
    a_ids, b_ids = list(tokenizer.encode(a)), list(tokenizer.encode(b))
    len_a, len_b = _truncated(len(a_ids), len(b_ids), max_len, "encode_pair")
    cls, sep, _ = special_ids(tokenizer)
    return [cls, *a_ids[:len_a], sep, *b_ids[:len_b], sep], [0] * (len_a + 2) + [1] * (len_b + 1)


def special_ids(tokenizer: Tokenizer) -> tuple[int, int, int]:
    """The ``([CLS], [SEP], [MASK])`` ids of ``tokenizer``: its ``cls_id``, ``sep_id`` and
    ``mask_id`` (a pretrained vocabulary's, 101, 102 and 103 in ``bert-base-uncased``), or the
    book's own 2, 3 and 4 for a tokenizer that does not say."""
    return (
        getattr(tokenizer, "cls_id", CLS_ID),
        getattr(tokenizer, "sep_id", SEP_ID),
        getattr(tokenizer, "mask_id", MASK_ID),
    )


@dataclass(frozen=True, eq=False)
class EncodedPairs:
    """Encoded sentence pairs, stored flat (one int32 array for all of them).

    Pair ``i`` is ``ids[offsets[i]:offsets[i + 1]]``, laid out ``[CLS] a [SEP] b [SEP]``;
    its first ``first_lengths[i]`` positions (``[CLS] a [SEP]``) are segment 0, the rest
    segment 1; ``is_next[i]`` is its NSP label. A sequence of one segment, ``[CLS] a [SEP]``
    (text for masked-language modelling alone, :func:`pack_documents` with ``nsp=False``), has
    ``first_lengths[i]`` equal to its length. Build it with :func:`encode_sentence_pairs`,
    or :meth:`from_examples` from ``(ids, segments, is_next)`` triples.
    """

    ids: np.ndarray
    offsets: np.ndarray
    first_lengths: np.ndarray
    is_next: np.ndarray

    def __post_init__(self) -> None:
        for name in ("ids", "offsets", "first_lengths", "is_next"):
            value = np.asarray(getattr(self, name))
            kind = "b" if name == "is_next" else "iu"
            if value.ndim != 1 or (value.size and value.dtype.kind not in kind):
                raise ValueError(
                    f"EncodedPairs: {name} must be a 1-D {'bool' if kind == 'b' else 'integer'} array, "
                    f"got shape {value.shape}, dtype {value.dtype}"
                )
            object.__setattr__(self, name, value)
        n = len(self.is_next)
        if len(self.offsets) != n + 1 or len(self.first_lengths) != n or int(self.offsets[-1]) != len(self.ids):
            raise ValueError(
                f"EncodedPairs: inconsistent arrays: {n} labels, {len(self.offsets)} offsets, "
                f"{len(self.first_lengths)} first lengths, {len(self.ids)} ids"
            )
        single = self.first_lengths == self.lengths  # [CLS] a [SEP]: one segment, no B
        if n and (np.any(self.first_lengths < 3) or np.any((self.first_lengths > self.lengths - 2) & ~single)):
            raise ValueError(
                "EncodedPairs: every pair needs [CLS] a [SEP] b [SEP] with non-empty a and b "
                "(or [CLS] a [SEP], a single segment)"
            )
        if n:
            starts, ends = self.offsets[:-1], self.offsets[1:]
            bad = (
                (self.ids[starts] != CLS_ID)
                | (self.ids[starts + self.first_lengths - 1] != SEP_ID)
                | (self.ids[ends - 1] != SEP_ID)
            )
            if bad.any():
                raise ValueError(
                    f"EncodedPairs: pair {int(np.flatnonzero(bad)[0])} is not laid out as "
                    f"[CLS] a [SEP] b [SEP] (ids {CLS_ID} and {SEP_ID})"
                )

    @classmethod
    def from_examples(cls, examples: Sequence[tuple[Sequence[int], Sequence[int], bool]]) -> EncodedPairs:
        """Pack ``(ids, segments, is_next)`` triples, the ids and segments as :func:`encode_pair` gives them.

        Raises:
            ValueError: ids and segments of different lengths, or segments that are not
                zeros followed by ones.
        """
        ids, offsets, firsts, labels = [], [0], [], []
        for index, (tokens, segments, is_next) in enumerate(examples):
            segments = list(segments)
            n_first = segments.count(0)
            if len(tokens) != len(segments) or segments != [0] * n_first + [1] * (len(segments) - n_first):
                raise ValueError(
                    f"EncodedPairs.from_examples: example {index} needs as many segments as ids, "
                    f"zeros then ones; got {len(tokens)} ids and segments {segments}"
                )
            ids.extend(tokens)
            offsets.append(len(ids))
            firsts.append(n_first)
            labels.append(bool(is_next))
        return cls(
            np.asarray(ids, dtype=np.int32),
            np.asarray(offsets, dtype=np.int64),
            np.asarray(firsts, dtype=np.int64),
            np.asarray(labels, dtype=bool),
        )

    def __len__(self) -> int:
        return len(self.is_next)

    @property
    def lengths(self) -> np.ndarray:
        """``(N,)`` the number of positions of every pair, specials included."""
        return np.diff(self.offsets)

    def __getitem__(self, index: int) -> tuple[list[int], list[int], bool]:
        """``(ids, segments, is_next)`` of pair ``index`` (negative counts from the end)."""
        if not _is_int(index):
            raise TypeError(f"EncodedPairs: index must be an int, got {type(index).__name__}")
        if not -len(self) <= index < len(self):
            raise IndexError(f"EncodedPairs: index {index} is outside the {len(self)} pairs")
        index = int(index) % len(self)
        ids = self.ids[self.offsets[index] : self.offsets[index + 1]].tolist()
        n_first = int(self.first_lengths[index])
        return ids, [0] * n_first + [1] * (len(ids) - n_first), bool(self.is_next[index])

    def __iter__(self) -> Iterator[tuple[list[int], list[int], bool]]:
        return (self[i] for i in range(len(self)))


def encode_sentence_pairs(
    tokenizer: Tokenizer, pairs: Sequence[SentencePair], max_len: int, *, chunk_size: int = 8192
) -> EncodedPairs:
    """:func:`encode_pair` for every pair, packed into :class:`EncodedPairs` for :class:`PretrainingBatches`.

    Every distinct sentence is encoded once (most are both an A and a B), with the
    tokenizer's ``encode_batch`` when it has one, ``chunk_size`` sentences at a time.

    Raises:
        ValueError: ``max_len`` below 5, or a sentence that encodes to no tokens (the message
            gives the pair's index).
    """
    check_max_len(max_len, "encode_sentence_pairs")
    position: dict[str, int] = {}
    for pair in pairs:
        position.setdefault(pair[0], len(position))
        position.setdefault(pair[1], len(position))
    texts = list(position)
    encoded: list[np.ndarray] = []
    for start in range(0, len(texts), chunk_size):
        chunk = texts[start : start + chunk_size]
        ids = (
            tokenizer.encode_batch(chunk)
            if hasattr(tokenizer, "encode_batch")
            else [tokenizer.encode(text) for text in chunk]
        )
        encoded.extend(np.asarray(x, dtype=np.int32) for x in ids)
    cls, sep = np.array([CLS_ID], dtype=np.int32), np.array([SEP_ID], dtype=np.int32)
    pieces, lengths, firsts = [], [], []
    for index, (a, b, _) in enumerate(pairs):
        a_ids, b_ids = encoded[position[a]], encoded[position[b]]
        len_a, len_b = _truncated(len(a_ids), len(b_ids), max_len, f"encode_sentence_pairs: pair {index}")
        pieces += [cls, a_ids[:len_a], sep, b_ids[:len_b], sep]
        lengths.append(len_a + len_b + 3)
        firsts.append(len_a + 2)
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    return EncodedPairs(
        flat, offsets, np.asarray(firsts, dtype=np.int64), np.asarray([bool(pair[2]) for pair in pairs], dtype=bool)
    )


def _chunks(sentences: Sequence[np.ndarray], size: int) -> list[list[np.ndarray]]:
    """Whole sentences gathered in order into chunks of at most ``size`` pieces; a sentence
    longer than ``size`` is cut into pieces of ``size`` (and a shorter rest)."""
    chunks: list[list[np.ndarray]] = []
    current: list[np.ndarray] = []
    length = 0
    for sentence in sentences:
        parts = [sentence[i : i + size] for i in range(0, len(sentence), size)]
        for part in parts:
            if length + len(part) > size:
                chunks.append(current)
                current, length = [], 0
            current.append(part)
            length += len(part)
    if current:
        chunks.append(current)
    return chunks


def pack_documents(
    tokenizer: Tokenizer,
    documents: Sequence[Sequence[str]],
    max_len: int,
    *,
    nsp: bool = True,
    seed: int = 0,
    next_prob: float = 0.5,
) -> EncodedPairs:
    r"""Documents cut into sequences that fill ``max_len`` pieces: BERT's own data, or RoBERTa's.

    Each document's sentences are encoded (``tokenizer.encode_batch``) and gathered in order into
    *chunks* of whole sentences with at most ``max_len - 3`` pieces (``max_len - 2`` without
    NSP); a sentence longer than that is cut. No chunk runs across documents.

    * ``nsp=False``, RoBERTa's "doc-sentences" (Liu et al., 2019): every chunk is one segment,
      ``[CLS] chunk [SEP]``, for masked-language modelling alone.
    * ``nsp=True``, Devlin et al.'s data: a chunk of :math:`k \ge 2` sentences is cut at a
      sentence boundary drawn uniformly from :math:`1, \dots, k-1`; the part before is A. With
      probability ``next_prob`` the part after is B (``is_next``); otherwise B is a run of
      sentences of another document (drawn uniformly), from a random sentence on, as long as
      the chunk allows (cut at its end if need be), and the unused rest of the chunk starts the
      next chunk, so none of the document's own text is lost. A chunk of one sentence is cut
      in the middle instead of at a sentence boundary.

    Segments of several sentences are what Devlin et al. trained on (pairs of single sentences,
    :func:`make_sentence_pairs`, were worse in RoBERTa's measurements); full sequences also
    waste no computation on padding. The draws come from ``numpy.random.default_rng(seed)``.

    Raises:
        ValueError: fewer than 2 documents (with NSP), ``max_len`` below 5, ``next_prob``
            outside ``[0, 1]``, a non-int ``seed``, or no sentence that encodes to any piece.
    """
    check_max_len(max_len, "pack_documents")
    checks.boolean("pack_documents", nsp=nsp)
    checks.probability("pack_documents", "next_prob", next_prob, one=True)
    checks.integer("pack_documents", "seed", seed, minimum=0, kinds=_INTS)
    if isinstance(documents, str) or len(documents) < (2 if nsp else 1):
        raise ValueError(
            f"pack_documents: documents must be a list of at least {2 if nsp else 1} documents (lists of sentences)"
        )
    texts = [sentence for document in documents for sentence in document]
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("pack_documents: every sentence must be a str")
    encoded = (
        tokenizer.encode_batch(texts) if hasattr(tokenizer, "encode_batch") else [tokenizer.encode(t) for t in texts]
    )
    docs, start = [], 0
    for document in documents:
        ids = [np.asarray(x, dtype=np.int32) for x in encoded[start : start + len(document)]]
        start += len(document)
        ids = [x for x in ids if len(x)]
        if ids:
            docs.append(ids)
    if not docs:
        raise ValueError("pack_documents: no sentence encodes to any piece")
    examples: list[tuple[np.ndarray, np.ndarray | None, bool]] = []
    if not nsp:
        examples = [
            (np.concatenate(chunk), None, True) for document in docs for chunk in _chunks(document, max_len - 2)
        ]
    else:
        if len(docs) < 2:
            raise ValueError("pack_documents: next-sentence prediction needs at least 2 documents with text")
        rng = np.random.default_rng(seed)
        size = max_len - 3
        for index, document in enumerate(docs):
            pending = [part for chunk in _chunks(document, size) for part in chunk]  # sentences, none > size
            while pending:
                chunk, length = [], 0
                while pending and length + len(pending[0]) <= size:
                    length += len(pending[0])
                    chunk.append(pending.pop(0))
                if len(chunk) == 1:  # one sentence: cut in the middle
                    sentence = chunk[0]
                    half = max(1, len(sentence) // 2)
                    a, rest = sentence[:half], [sentence[half:]] if len(sentence) > 1 else []
                else:
                    cut = int(rng.integers(1, len(chunk)))
                    a, rest = np.concatenate(chunk[:cut]), chunk[cut:]
                is_next = bool(rng.random() < next_prob) and bool(rest)
                if is_next:
                    examples.append((a, np.concatenate(rest), True))
                    continue
                other = int(rng.integers(len(docs) - 1))
                other += other >= index  # never this document
                room = size - len(a)  # >= 1: a never fills the chunk
                b, i = [], int(rng.integers(len(docs[other])))
                while i < len(docs[other]) and sum(len(x) for x in b) < room:
                    b.append(docs[other][i])
                    i += 1
                examples.append((a, np.concatenate(b)[:room], False))
                pending = rest + pending  # the unused rest comes back
    ids, offsets, firsts, labels = [], [0], [], []
    cls, sep = np.array([CLS_ID], dtype=np.int32), np.array([SEP_ID], dtype=np.int32)
    for a, b, is_next in examples:
        if b is None:
            a = a[: max_len - 2]
            ids += [cls, a, sep]
            firsts.append(len(a) + 2)
            offsets.append(offsets[-1] + len(a) + 2)
        else:
            len_a, len_b = _truncated(len(a), len(b), max_len, "pack_documents")
            ids += [cls, a[:len_a], sep, b[:len_b], sep]
            firsts.append(len_a + 2)
            offsets.append(offsets[-1] + len_a + len_b + 3)
        labels.append(is_next)
    return EncodedPairs(
        np.concatenate(ids),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(firsts, dtype=np.int64),
        np.asarray(labels, dtype=bool),
    )


# ----------------------------------------------------------------------------- masking


def maskable_positions(tokens: torch.Tensor, special_ids: Sequence[int]) -> torch.Tensor:
    """``(B, n)`` bool, ``True`` where ``tokens`` holds none of ``special_ids`` (padding included)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(
            f"maskable_positions: tokens must be an integer tensor, got "
            f"{tokens.dtype if isinstance(tokens, torch.Tensor) else type(tokens).__name__}"
        )
    special = torch.as_tensor(list(special_ids), dtype=tokens.dtype, device=tokens.device)
    return ~torch.isin(tokens, special)


def _check_masking(
    where: str,
    *,
    mask_id: int,
    vocab_size: int,
    first_normal_id: int,
    select_prob: float,
    mask_prob: float,
    random_prob: float,
) -> None:
    checks.integer(where, "vocab_size", vocab_size, minimum=1, kinds=_INTS)
    checks.integer(where, "mask_id", mask_id, minimum=0, below=vocab_size, kinds=_INTS)
    checks.integer(where, "first_normal_id", first_normal_id, minimum=0, below=vocab_size, kinds=_INTS)
    checks.probability(where, "select_prob", select_prob, zero=False, one=True)  # 0: nothing to predict
    checks.probability(where, "mask_prob", mask_prob, one=True)
    checks.probability(where, "random_prob", random_prob, one=True)
    if mask_prob + random_prob > 1.0 + 1e-9:
        raise ValueError(f"{where}: mask_prob + random_prob must be at most 1, got {mask_prob} + {random_prob}")


def _check_mask_tokens(
    tokens: torch.Tensor,
    maskable: torch.Tensor,
    generator: torch.Generator,
    mask_id: int,
    vocab_size: int,
    first_normal_id: int,
    select_prob: float,
    mask_prob: float,
    random_prob: float,
) -> None:
    """The arguments of :func:`mask_tokens`: ``(B, n)`` int64 tokens in the vocabulary, a bool
    ``maskable`` of their shape, a generator on their device, and valid masking rates."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
        what = (
            f"shape {tuple(tokens.shape)}, dtype {tokens.dtype}"
            if isinstance(tokens, torch.Tensor)
            else type(tokens).__name__
        )
        raise ValueError(f"mask_tokens: tokens must be a (B, n) int64 tensor, got {what}")
    if not isinstance(maskable, torch.Tensor) or maskable.dtype != torch.bool or maskable.shape != tokens.shape:
        what = (
            f"shape {tuple(maskable.shape)}, dtype {maskable.dtype}"
            if isinstance(maskable, torch.Tensor)
            else type(maskable).__name__
        )
        raise ValueError(
            f"mask_tokens: maskable must be a bool tensor of the tokens' shape {tuple(tokens.shape)}, got {what}"
        )
    _check_masking(
        "mask_tokens",
        mask_id=mask_id,
        vocab_size=vocab_size,
        first_normal_id=first_normal_id,
        select_prob=select_prob,
        mask_prob=mask_prob,
        random_prob=random_prob,
    )
    if not isinstance(generator, torch.Generator) or generator.device != tokens.device:
        where = generator.device if isinstance(generator, torch.Generator) else type(generator).__name__
        raise ValueError(
            f"mask_tokens: generator must be a torch.Generator on the tokens' device {tokens.device}, got {where}"
        )
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"mask_tokens: tokens hold ids in [{int(tokens.min())}, {int(tokens.max())}], outside [0, {vocab_size})"
        )


def mask_tokens(
    tokens: torch.Tensor,
    *,
    maskable: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    first_normal_id: int,
    generator: torch.Generator,
    select_prob: float = 0.15,
    mask_prob: float = 0.8,
    random_prob: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption: ``(inputs, targets)``, both ``(B, n)`` int64.

    Every position where ``maskable`` is ``True`` is *selected* independently with
    probability ``select_prob``. A selected position becomes ``mask_id`` with probability
    ``mask_prob``, an id drawn uniformly from ``[first_normal_id, vocab_size)`` with
    probability ``random_prob`` (so never a special token; it may draw the original id), and
    keeps its token otherwise. ``targets`` holds the original id at the selected positions
    and :data:`IGNORE_INDEX` everywhere else; ``inputs`` equals ``tokens`` wherever nothing
    was selected. (Devlin et al. selected exactly ``round(0.15 n)`` positions per sequence;
    independent selection, as in Hugging Face's data collator, gives 15% on average and may
    select none in a short sequence.) The draws come from ``generator`` only, on ``tokens``'
    device: the same generator state gives the same corruption.

    Args:
        tokens: ``(B, n)`` int64 ids in ``[0, vocab_size)``.
        maskable: ``(B, n)`` bool; pass ``False`` at special tokens and padding
            (:func:`maskable_positions`).

    Raises:
        ValueError: wrong types, shapes or dtypes, ids outside ``[0, vocab_size)``,
            ``select_prob`` outside ``(0, 1]``, ``mask_prob`` or ``random_prob`` outside
            ``[0, 1]`` or summing to more than 1, ``first_normal_id`` outside
            ``[0, vocab_size)``, a generator on another device.
    """
    _check_mask_tokens(
        tokens, maskable, generator, mask_id, vocab_size, first_normal_id, select_prob, mask_prob, random_prob
    )
    device = tokens.device
    selected = maskable & (torch.rand(tokens.shape, generator=generator, device=device) < select_prob)
    kind = torch.rand(tokens.shape, generator=generator, device=device)
    replacement = torch.randint(first_normal_id, vocab_size, tokens.shape, generator=generator, device=device)
    to_mask = selected & (kind < mask_prob)
    to_random = selected & (kind >= mask_prob) & (kind < mask_prob + random_prob)
    inputs = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(to_random, replacement, inputs)
    targets = torch.where(selected, tokens, torch.full_like(tokens, IGNORE_INDEX))
    return inputs, targets


# ----------------------------------------------------------------------------- batches


class PretrainingBatches:
    """Padded, masked batches of encoded sentence pairs, addressable by training step.

    Epoch ``e`` visits the pairs in an order drawn from ``(seed, e)`` (or in their own
    order with ``shuffle=False``), ``batch_size`` at a time (the last batch of an epoch may
    be smaller); ``batches(step)`` is the batch of global step ``step``. Each batch is padded
    with PAD to its own longest pair, and masked by :func:`mask_tokens` with a
    ``torch.Generator`` seeded from ``(seed, step)``: a pure function of the step, so
    :func:`transformer_book.training.fit` resumes exactly. The masking is *dynamic*: a pair
    gets a new masking at every visit (as in RoBERTa, Liu et al., 2019). BERT's original code
    masked the data once, statically, duplicating it 10 times with different masks, so that
    over 40 epochs each masking was seen 4 times. With ``shuffle=False`` (validation) the
    order and the masking of batch ``i`` depend on ``(seed, i)`` only, so every pass
    (``iter(batches)``, or steps ``i``, ``i + len(batches)``, ...) sees exactly the same
    batches.

    Args:
        pairs: from :func:`encode_sentence_pairs`.
        batch_size: pairs per batch.
        vocab_size: the tokenizer's size; random replacements are drawn from
            ``[first_normal_id, vocab_size)``.
        seed: seeds the order and the masking.
        shuffle: shuffle each epoch (training) or not (validation).
        select_prob, mask_prob, random_prob: as for :func:`mask_tokens`.
        special_ids: ids never selected; by default all five specials, ``[UNK]`` included (as
            Hugging Face's collator does: predicting "a rare word" teaches nothing).
            ``pad_id`` is always added.
        first_normal_id: the first id that is not special.

    Raises:
        ValueError: no pairs, a non-positive ``batch_size``, ids outside ``[0, vocab_size)``,
            or bad masking settings (checked as :func:`mask_tokens` does).
    """

    def __init__(
        self,
        pairs: EncodedPairs,
        batch_size: int,
        *,
        vocab_size: int,
        seed: int = 0,
        shuffle: bool = True,
        select_prob: float = 0.15,
        mask_prob: float = 0.8,
        random_prob: float = 0.1,
        special_ids: Sequence[int] = tuple(range(len(SPECIAL_TOKENS))),
        first_normal_id: int = len(SPECIAL_TOKENS),
        mask_id: int = MASK_ID,
        pad_id: int = PAD_ID,
    ) -> None:
        if not isinstance(pairs, EncodedPairs):
            raise ValueError(
                f"PretrainingBatches: pairs must be EncodedPairs (see encode_sentence_pairs), "
                f"got {type(pairs).__name__}"
            )
        if len(pairs) == 0:
            raise ValueError("PretrainingBatches: no pairs")
        checks.integer("PretrainingBatches", "batch_size", batch_size, minimum=1, kinds=_INTS)
        checks.integer("PretrainingBatches", "vocab_size", vocab_size, minimum=1, kinds=_INTS)
        checks.integer("PretrainingBatches", "seed", seed, minimum=0, kinds=_INTS)
        if int(pairs.ids.min()) < 0 or int(pairs.ids.max()) >= vocab_size:
            raise ValueError(
                f"PretrainingBatches: the pairs hold ids in [{int(pairs.ids.min())}, "
                f"{int(pairs.ids.max())}], outside [0, {vocab_size}): another tokenizer's ids?"
            )
        self.pairs, self.batch_size, self.seed, self.shuffle = pairs, int(batch_size), int(seed), shuffle
        self.vocab_size, self.pad_id = int(vocab_size), pad_id
        self._masking = dict(
            mask_id=mask_id,
            vocab_size=self.vocab_size,
            first_normal_id=first_normal_id,
            select_prob=select_prob,
            mask_prob=mask_prob,
            random_prob=random_prob,
        )
        _check_masking("PretrainingBatches", **self._masking)
        if isinstance(special_ids, (str, bytes)) or not all(_is_int(i) for i in special_ids):
            raise ValueError(f"PretrainingBatches: special_ids must be a sequence of ints, got {special_ids!r}")
        self.special_ids = tuple(sorted({int(i) for i in special_ids} | {int(pad_id)}))  # padding: never
        self._order_cache: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return math.ceil(len(self.pairs) / self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        """The pair indices of ``epoch`` (0-based) in visiting order."""
        checks.integer("PretrainingBatches.order", "epoch", epoch, minimum=0, kinds=_INTS)
        return self._order(epoch)

    def _order(self, epoch: int) -> np.ndarray:
        """:meth:`order` of an ``epoch`` the caller has checked."""
        if not self.shuffle:
            return np.arange(len(self.pairs))
        if self._order_cache is None or self._order_cache[0] != epoch:
            rng = np.random.default_rng([self.seed, 0, epoch])
            self._order_cache = (epoch, rng.permutation(len(self.pairs)))
        return self._order_cache[1]

    def collate(self, indices: Sequence[int], generator: torch.Generator) -> PretrainingBatch:
        """Pad and mask the pairs at ``indices``, drawing the masking from ``generator``."""
        pairs = self.pairs
        lengths = pairs.lengths[np.asarray(indices)]
        tokens = np.full((len(indices), int(lengths.max())), self.pad_id, dtype=np.int64)
        segments = np.zeros_like(tokens)
        for row, index in enumerate(indices):
            start, end = int(pairs.offsets[index]), int(pairs.offsets[index + 1])
            tokens[row, : end - start] = pairs.ids[start:end]
            segments[row, int(pairs.first_lengths[index]) : end - start] = 1
        tokens = torch.from_numpy(tokens)
        inputs, targets = mask_tokens(
            tokens, maskable=maskable_positions(tokens, self.special_ids), generator=generator, **self._masking
        )
        is_next = torch.from_numpy(pairs.is_next[np.asarray(indices)].astype(np.int64))
        return PretrainingBatch(inputs, torch.from_numpy(segments), targets, is_next)

    def __call__(self, step: int) -> PretrainingBatch:
        """The batch of global training step ``step``."""
        checks.integer("PretrainingBatches", "step", step, minimum=0, kinds=_INTS)
        epoch, index = divmod(int(step), len(self))
        key = int(step) if self.shuffle else index
        seed = np.random.SeedSequence([self.seed, 1, key]).generate_state(1, dtype=np.uint64)[0]
        generator = torch.Generator().manual_seed(int(seed))
        rows = self._order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]
        return self.collate(rows, generator)

    def __iter__(self) -> Iterator[PretrainingBatch]:
        """The batches of one epoch (epoch 0; with ``shuffle=False`` the fixed validation pass)."""
        return (self(step) for step in range(len(self)))

    def __repr__(self) -> str:
        return (
            f"PretrainingBatches({len(self.pairs)} pairs, batch_size={self.batch_size}, {len(self)} batches "
            f"per epoch, shuffle={self.shuffle})"
        )
