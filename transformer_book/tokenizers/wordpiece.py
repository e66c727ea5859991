r"""BERT's WordPiece vocabulary (chapter 13), through Hugging Face ``tokenizers``.

BERT splits text in three steps, each as in ``bert-base-uncased``:

1. *normalise*: clean control characters, put spaces around CJK characters, strip accents
   and lower-case (``"Héllo"`` becomes ``"hello"``);
2. *pre-tokenise*: split at white space and cut every punctuation character out as a word
   of its own (``"state-of-the-art"`` becomes ``state - of - the - art``);
3. *WordPiece*: write each word as the longest vocabulary entry that starts it, then the
   longest that continues it, and so on; a piece that continues a word carries the prefix
   ``##`` (with the 8,000-piece WikiText-2 vocabulary, ``"lobster"`` is ``lob ##ster``). A word
   that cannot be written with the vocabulary (a character never seen in training) becomes
   one ``[UNK]``.

The vocabulary is learned as Hugging Face's ``WordPieceTrainer`` learns it: byte-pair
merges (chapter 7) over the word counts, where a symbol that continues a word is a different
symbol (``##s``) from the same character starting one (``s``):

.. math::

    (a^*, b^*) = \operatorname*{arg\,max}_{(a, b)} \operatorname{count}(a\,b)

until the vocabulary has ``vocab_size`` entries or no pair occurs ``min_frequency`` times.
The special tokens come first, at fixed ids: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2,
``[SEP]`` 3, ``[MASK]`` 4. In raw text they are matched before normalisation, so the
literal string ``"[UNK]"`` encodes to ``UNK_ID`` (and ``"[MASK]"`` to ``MASK_ID``).
"""

from __future__ import annotations

import numbers
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from transformer_book import checks
from transformer_book.atomic import read_back_text, write_atomically

if TYPE_CHECKING:  # tokenizers is imported lazily
    from tokenizers import Tokenizer as HFTokenizer

__all__ = [
    "WordPieceTokenizer",
    "SPECIAL_TOKENS",
    "PAD_ID",
    "UNK_ID",
    "CLS_ID",
    "SEP_ID",
    "MASK_ID",
]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The special tokens, at ids 0 to 4."""
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4

_PREFIX = "##"
_SPECIAL_PATTERN = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))
# Private-use code points that stand for the characters while the merges are learned: one
# plane for a character that starts a word, another for one that continues it.
_START_PLANE, _CONTINUE_PLANE, _PLANE_SIZE = 0xF0000, 0x100000, 0xFFFE


def _tokenizers() -> ModuleType:
    try:
        import tokenizers
    except ImportError as err:  # pragma: no cover - a dependency of the package
        raise ImportError("WordPieceTokenizer needs the tokenizers package: pip install tokenizers") from err
    return tokenizers


def _pipeline(vocab: dict[str, int]) -> HFTokenizer:
    """The uncased BERT tokenizer around a WordPiece vocabulary, specials registered."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(
        tk.models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix=_PREFIX, max_input_chars_per_word=100)
    )
    tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tk.decoders.WordPiece(prefix=_PREFIX)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def _word_counts(texts: Iterable[str]) -> Counter[str]:
    """How often each word occurs after BERT's normalisation and pre-tokenisation.

    Special tokens in the text are cut out first (as the tokenizer does when it encodes).
    After the normaliser, the only white space left is what both Python's ``str.split`` and
    the pre-tokenizer split at, so counting the space-separated chunks first and
    pre-tokenising each distinct chunk once gives the same counts as pre-tokenising every line.
    """
    tk = _tokenizers()
    normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    chunks: Counter[str] = Counter()
    n_texts = 0
    for index, text in enumerate(texts):
        checks.text(f"WordPieceTokenizer.train: text {index}", text)
        n_texts += 1
        for part in _SPECIAL_PATTERN.split(text):
            if part.strip():
                chunks.update(normalizer.normalize_str(part).split())
    words: Counter[str] = Counter()
    for chunk, count in chunks.items():
        for word, _ in pre_tokenizer.pre_tokenize_str(chunk):
            words[word] += count
    return words


class WordPieceTokenizer:
    """BERT's uncased WordPiece tokenizer.

    Build one with :meth:`train` (from text), :meth:`load` or :meth:`from_str` (from the JSON
    that :meth:`save` and :meth:`to_str` write, or the ``tokenizer.json`` of a pretrained BERT
    such as ``bert-base-uncased``). ``encode`` gives ids without any special
    token added (the caller lays out ``[CLS] a [SEP] b [SEP]``), ``tokens`` the pieces,
    ``decode`` the text back.

    The special ids are attributes: ``pad_id``, ``unk_id``, ``cls_id``, ``sep_id`` and
    ``mask_id``. A vocabulary the book trains puts them at 0 to 4 (the module's constants);
    ``bert-base-uncased``'s has ``[PAD]`` 0, ``[UNK]`` 100, ``[CLS]`` 101, ``[SEP]`` 102 and
    ``[MASK]`` 103. Padding must be id 0 (the batches pad with 0).
    """

    def __init__(self, tokenizer: HFTokenizer) -> None:
        tk = _tokenizers()
        if not isinstance(tokenizer, tk.Tokenizer):
            raise ValueError(f"WordPieceTokenizer: expected a tokenizers.Tokenizer, got {type(tokenizer).__name__}")
        if not isinstance(tokenizer.model, tk.models.WordPiece):
            raise ValueError(f"WordPieceTokenizer: the model must be WordPiece, got {type(tokenizer.model).__name__}")
        ids = tuple(tokenizer.token_to_id(token) for token in SPECIAL_TOKENS)
        if None in ids or ids[0] != PAD_ID:
            raise ValueError(
                f"WordPieceTokenizer: the special tokens {SPECIAL_TOKENS} have ids {ids}; all five must "
                f"be in the vocabulary, and [PAD] must be id {PAD_ID}"
            )
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids
        # A pretrained tokenizer.json may ask to cut or pad every text to a fixed length (all-MiniLM-L6-v2's
        # cuts at 128 pieces and pads to 128): encode returns the text's pieces, all of them, and nothing more.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, *, min_frequency: int = 2) -> WordPieceTokenizer:
        """Learn a WordPiece vocabulary of at most ``vocab_size`` entries (specials included).

        The vocabulary holds the 5 special tokens, every character of the normalised text
        (as a word start and, where it occurs inside a word, as a ``##`` continuation), and
        then the merged pieces in the order they were learned, until ``vocab_size`` is reached
        or no pair of symbols occurs ``min_frequency`` times (then it is smaller: ``len``
        tells). The result is the same on every run and machine. Hugging Face's own
        ``WordPieceTrainer`` is not: it numbers the ``##`` symbols in the iteration order of a
        hash map seeded at random in each process, and merges tied in count are then taken in
        a different order, so two runs on the same WikiText-2 text differ in their last
        merges and in the ids, whatever ``RAYON_NUM_THREADS`` or ``TOKENIZERS_PARALLELISM``
        say. So this method counts the words itself, writes every character as a private-use
        code point numbered in sorted order (one block for word starts, one for
        continuations), and lets the library's byte-pair trainer, whose ties are broken by
        those numbers, learn the merges: the same algorithm, with every choice fixed.

        Raises:
            ValueError: a non-string text, no words in the texts, ``vocab_size`` not an int
                or too small for the specials and the characters of the text (the message
                says how many are needed), ``min_frequency`` not a positive int.
        """
        checks.integer("WordPieceTokenizer.train", "vocab_size", vocab_size, minimum=len(SPECIAL_TOKENS) + 1)
        checks.positive_int("WordPieceTokenizer.train", min_frequency=min_frequency)
        if isinstance(texts, str):
            raise ValueError("WordPieceTokenizer.train: texts must be an iterable of str, got one str")
        counts = _word_counts(texts)
        if not counts:
            raise ValueError("WordPieceTokenizer.train: the texts hold no words to learn from")
        starts = sorted({word[0] for word in counts})
        continuations = sorted({c for word in counts for c in word[1:]})
        if max(len(starts), len(continuations)) > _PLANE_SIZE:  # pragma: no cover - 65,534 distinct characters
            raise ValueError("WordPieceTokenizer.train: the text has more than 65,534 distinct characters")
        needed = len(SPECIAL_TOKENS) + len(starts) + len(continuations)
        if vocab_size < needed:
            raise ValueError(
                f"WordPieceTokenizer.train: vocab_size={vocab_size} is too small: the 5 special tokens "
                f"and the {needed - len(SPECIAL_TOKENS)} characters of the text (word starts and ## "
                f"continuations) need {needed}"
            )
        code = {c: chr(_START_PLANE + i) for i, c in enumerate(starts)}
        code_inside = {c: chr(_CONTINUE_PLANE + i) for i, c in enumerate(continuations)}
        back = {v: k for k, v in code.items()} | {v: _PREFIX + k for k, v in code_inside.items()}

        tk = _tokenizers()
        bpe = tk.Tokenizer(tk.models.BPE())
        bpe.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS), show_progress=False
        )
        coded = ((code[w[0]] + "".join(code_inside[c] for c in w[1:]), n) for w, n in sorted(counts.items()))
        bpe.train_from_iterator((" ".join([word] * n) for word, n in coded), trainer)

        pieces = [bpe.id_to_token(i) for i in range(bpe.get_vocab_size())]
        if tuple(pieces[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:  # pragma: no cover - the trainer puts them first
            raise ValueError(f"WordPieceTokenizer.train: the trainer put the specials at {pieces[:5]}")
        # a merged piece keeps its first symbol's kind: '##' + characters if it continues a word
        vocab = list(SPECIAL_TOKENS) + [
            back[p[0]] + "".join(back[c].removeprefix(_PREFIX) for c in p[1:]) for p in pieces[len(SPECIAL_TOKENS) :]
        ]
        if len(set(vocab)) != len(vocab):  # pragma: no cover - a bug, never a silent wrong vocabulary
            raise ValueError("WordPieceTokenizer.train: the learned vocabulary has duplicate pieces")
        tokenizer = cls(_pipeline({piece: i for i, piece in enumerate(vocab)}))
        assert [tokenizer.token_to_id(t) for t in SPECIAL_TOKENS] == [PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID]
        return tokenizer

    # ------------------------------------------------------------------ saving and loading

    def to_str(self) -> str:
        """The tokenizer as Hugging Face's JSON (store it in a checkpoint to rebuild it)."""
        return self._tokenizer.to_str()

    @classmethod
    def from_str(cls, text: str) -> WordPieceTokenizer:
        """Rebuild a tokenizer from :meth:`to_str`'s JSON.

        Raises:
            ValueError: not a str, not a tokenizer's JSON, not a WordPiece model, or the
                special tokens at other ids.
        """
        checks.text("WordPieceTokenizer.from_str", text)
        try:
            tokenizer = _tokenizers().Tokenizer.from_str(text)
        except Exception as err:  # the library raises a bare Exception on bad JSON
            raise ValueError(f"WordPieceTokenizer.from_str: not a tokenizer's JSON ({err})") from None
        return cls(tokenizer)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the JSON of :meth:`to_str` to ``path`` (creating its folder)."""
        write_atomically(path, self.to_str())  # a failed write leaves the previous file whole

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> WordPieceTokenizer:
        """Read a tokenizer written by :meth:`save`."""
        return read_back_text(path, cls.from_str, where="WordPieceTokenizer.load")

    # ------------------------------------------------------------------ the vocabulary

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size()

    @property
    def vocab_size(self) -> int:
        return len(self)

    def vocab(self) -> dict[str, int]:
        """Every piece with its id (``##`` pieces continue a word)."""
        return self._tokenizer.get_vocab()

    def token_to_id(self, token: str) -> int | None:
        """The id of one piece (``"##s"`` for a continuation), or ``None`` if it is not in the vocabulary."""
        return self._tokenizer.token_to_id(checks.text("WordPieceTokenizer.token_to_id", token))

    def id_to_token(self, ids: Iterable[int]) -> list[str]:
        """The piece of every id (specials as ``[PAD]``, ``[UNK]``, ...).

        Raises:
            ValueError: an id outside ``[0, vocab_size)``.
        """
        return [self._tokenizer.id_to_token(i) for i in self._check_ids(ids, "id_to_token")]

    # ------------------------------------------------------------------ encoding and decoding

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s pieces; no special token is added (``[UNK]`` in the text stays one)."""
        return self._tokenizer.encode(checks.text("WordPieceTokenizer.encode", text), add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (in parallel, faster than a loop)."""
        if isinstance(texts, str):
            raise ValueError("WordPieceTokenizer.encode_batch: expected a sequence of str, got one str")
        texts = list(texts)
        for index, text in enumerate(texts):
            checks.text(f"WordPieceTokenizer.encode_batch: text {index}", text)
        return [e.ids for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text``, ``##`` marking those that continue a word (``["ody", "##sse", "##us"]``)."""
        return self._tokenizer.encode(checks.text("WordPieceTokenizer.tokens", text), add_special_tokens=False).tokens

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Text from ids: pieces glued at ``##``, words separated by one space.

        The text is the normalised one (lower-case, no accents), and it keeps the
        pre-tokenizer's cuts, except that ``.``, ``,``, ``?`` and ``!`` are attached to the
        word before them: ``"It's 1,000 km."`` comes back as ``"it ' s 1, 000 km."``. So
        ``decode(encode(x)) == x`` holds for lower-case text without accents whose only
        punctuation is ``. , ? !`` after a word. ``[PAD]`` is always dropped; the other
        specials are written (``[MASK]``, ``[UNK]``, ...) unless ``skip_special``. Accepts a
        list or a 1-D tensor.

        Raises:
            ValueError: an id outside ``[0, vocab_size)``, or a nested sequence.
        """
        values = [i for i in self._check_ids(ids, "decode") if i != self.pad_id]
        return self._tokenizer.decode(values, skip_special_tokens=skip_special)

    def unknown_rate(self, texts: Sequence[str]) -> float:
        """The share of pieces of ``texts`` that are ``[UNK]``.

        A word with a character never seen in training is one ``[UNK]``; a literal
        ``"[UNK]"`` in the text (WikiText's ``<unk>``, see
        :func:`transformer_book.data.pretraining.wikitext2_documents`) counts too.
        """
        encoded = self.encode_batch(texts)
        total = sum(len(ids) for ids in encoded)
        return sum(ids.count(self.unk_id) for ids in encoded) / total if total else 0.0

    def _check_ids(self, ids: Iterable[int], where: str) -> list[int]:
        return checks.token_ids(f"WordPieceTokenizer.{where}", ids, len(self), kinds=numbers.Integral)

    def __repr__(self) -> str:
        return f"WordPieceTokenizer({len(self)} pieces, uncased)"
