r"""Byte-level byte-pair encoding as GPT-2 uses it (chapter 16, "Tokenization from bytes").

A subword vocabulary learned over *characters* (chapter 7's SentencePiece, chapter 13's
WordPiece) still needs an unknown token for a character it never saw: a Greek name in an
English corpus, an emoji. GPT-2 (Radford et al., 2019) learns its merges over *bytes* instead:
every text is its UTF-8 bytes, every byte is one of 256 base symbols, so every text can be
written and no unknown token exists. Three steps, each as in GPT-2:

1. *bytes as characters*: :func:`bytes_to_unicode` maps the 256 byte values one to one onto
   printable characters (a space is ``Ġ``, a newline ``Ċ``), so that a token is a readable
   string and the merges can be stored as text;
2. *pre-tokenise*: :data:`PRETOKENIZE_PATTERN` cuts the text into words, numbers, runs of
   punctuation and of white space, a word keeping the one space before it (``" world"``), and
   English contractions (``'s``, ``'ll``) apart; merges never cross these pieces;
3. *BPE over the bytes of the pieces* (Sennrich et al., 2016): count adjacent pairs of symbols
   over the pre-tokens, weighted by how often each pre-token occurs, merge the most frequent
   pair into a new symbol, and repeat

   .. math::

       (a^*, b^*) = \operatorname*{arg\,max}_{(a, b)} \operatorname{count}(a\,b), \qquad
       \mathcal{V} \leftarrow \mathcal{V} \cup \{a^* b^*\},

   until the vocabulary has ``vocab_size`` entries or no pair occurs ``min_frequency`` times.

To encode, a pre-token starts as its byte symbols and the learned merges are applied by *rank*
(the order they were learned): the adjacent pair of lowest rank is merged first, the leftmost
one on a tie, until no adjacent pair is a merge. Decoding joins the bytes of the tokens and
reads them as UTF-8.

:class:`ByteLevelBPE` is written from these definitions in plain Python and gives the same
merges, ids and encodings as Hugging Face ``tokenizers``' byte-level BPE trained with the same
settings (the tests check it). GPT-2's split pattern needs Unicode classes (``\p{L}``,
``\p{N}``), so the module uses the ``regex`` package.

References: Sennrich, Haddow and Birch 2016, *Neural Machine Translation of Rare Words with
Subword Units*; Radford et al. 2019, *Language Models are Unsupervised Multitask Learners*
(GPT-2).
"""

from __future__ import annotations

import heapq
import itertools
import json
import numbers
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from transformer_book import checks
from transformer_book.atomic import read_back_text, write_atomically

try:
    import regex
except ImportError as err:  # pragma: no cover - a dependency of the package
    raise ImportError("transformer_book.bytebpe needs the regex package (for \\p{L}): pip install regex") from err

__all__ = [
    "ByteLevelBPE",
    "bytes_to_unicode",
    "pretokenize",
    "PRETOKENIZE_PATTERN",
    "PRETOKENIZERS",
    "merge_pair",
    "learn_merges",
]

PRETOKENIZE_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""The pattern that splits text into pre-tokens in GPT-2 (Radford et al., 2019), which matches
contractions, then a letter run, a digit run or a run of other non-space characters, each with
at most one space before it, then white space
(a run of white space before a word leaves its last space to the word: ``\\s+(?!\\S)``)."""

_SPLIT = regex.compile(PRETOKENIZE_PATTERN)
_DIGIT = regex.compile(r"(\p{N})")

PRETOKENIZERS = ("gpt2", "smollm")
"""How :class:`ByteLevelBPE` cuts text before the merges: ``"gpt2"``, :data:`PRETOKENIZE_PATTERN`
alone; ``"smollm"`` (SmolLM and SmolLM2, llama.cpp's pre-tokenizer of that name), every digit
first cut out on its own, then the same pattern over the rest, so that a number is one token per
digit (``"2024"`` is ``2 0 2 4``)."""
_CACHE_SIZE = 200_000  # pre-token encodings kept by each tokenizer before the cache is emptied
_SHORT_WORD = 64  # longer pre-tokens are merged with a heap (ByteLevelBPE._merge_long), not by rescanning


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters.

    The 188 bytes that are printable Latin-1 characters, ``'!'..'~'``, ``'¡'..'¬'`` and
    ``'®'..'ÿ'``, stand for themselves; the other 68 (the controls, the space, DEL, the
    no-break space and the soft hyphen) become ``chr(256 + i)`` in increasing byte order, so
    byte 0 is ``'Ā'``, the space (byte 32) ``'Ġ'`` and the newline (byte 10) ``'Ċ'``.

    Returns:
        ``{byte: character}`` for the bytes 0 to 255, a bijection onto 256 printable characters.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    table = {byte: chr(byte) for byte in printable} | {byte: chr(256 + i) for i, byte in enumerate(others)}
    return dict(sorted(table.items()))


_BYTE_TO_SYMBOL = bytes_to_unicode()
_SYMBOL_TO_BYTE = {symbol: byte for byte, symbol in _BYTE_TO_SYMBOL.items()}
_LATIN1_TO_SYMBOL = str.maketrans({chr(byte): symbol for byte, symbol in _BYTE_TO_SYMBOL.items()})
_SYMBOL_TO_LATIN1 = str.maketrans({symbol: chr(byte) for byte, symbol in _BYTE_TO_SYMBOL.items()})
# The initial alphabet in the order tokenizers numbers it: by code point, not by byte value.
_ALPHABET = tuple(sorted(_BYTE_TO_SYMBOL.values()))


def _symbols(piece: str) -> str:
    """``piece``'s UTF-8 bytes written as :func:`bytes_to_unicode` symbols (``" é"`` -> ``"ĠÃ©"``)."""
    return piece.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_SYMBOL)


def pretokenize(text: str) -> list[str]:
    """The pre-tokens of ``text`` as byte symbols, as GPT-2 and ``tokenizers`` cut them.

    The pieces matched by :data:`PRETOKENIZE_PATTERN`, each written as :func:`bytes_to_unicode`
    symbols of its UTF-8 bytes: ``pretokenize("Hello  world!")`` is
    ``["Hello", "Ġ", "Ġworld", "!"]``. Equal to ``tokenizers.pre_tokenizers.ByteLevel(
    add_prefix_space=False, use_regex=True).pre_tokenize_str(text)`` without the offsets (the
    tests check every code point assigned in Python's Unicode database), with one caveat:
    ``\\p{L}`` and ``\\p{N}`` follow each library's Unicode tables. The ``regex`` 2026.11 used
    here knows the letters and digits first assigned in Unicode 17.0 (September 2025), the
    Oniguruma inside ``tokenizers`` 0.23 stops at Unicode 16.0, so those 17,480 code points are
    letters or digits here and punctuation there.

    Raises:
        ValueError: ``text`` is not a str, or holds a lone surrogate.
    """
    return [_symbols(piece) for piece in _SPLIT.findall(checks.text("pretokenize", text))]


def merge_pair(word: list[int], pair: tuple[int, int], new_id: int) -> list[tuple[tuple[int, int], int]]:
    """Merge every occurrence of ``pair`` in ``word`` into ``new_id``, in place, left to right.

    Occurrences do not overlap: ``a a a`` with the pair ``(a, a)`` becomes ``aa a``. Returns how
    the counts of the word's *other* pairs change: for each merged occurrence, the pair with the
    symbol before it and the pair with the symbol after it lose one (``-1``) and their
    replacements with ``new_id`` gain one (``+1``). This is the step that keeps training
    incremental: only the words holding ``pair`` are visited, and only their pair counts change.

    Args:
        word: the word as symbol ids, ``(len,)``; changed in place.
        pair: the ids ``(left, right)`` to merge.
        new_id: the id of the merged symbol.

    Raises:
        ValueError: ``word`` not a list, ``pair`` not two ints, ``new_id`` not an int.
    """
    _check_merge(word, pair, new_id)
    changes = []
    i = 0
    while i < len(word) - 1:
        if (word[i], word[i + 1]) == pair:
            if i > 0:  # the pair with the symbol before
                changes += [((word[i - 1], pair[0]), -1), ((word[i - 1], new_id), +1)]
            if i + 2 < len(word):  # the pair with the symbol after
                changes += [((pair[1], word[i + 2]), -1), ((new_id, word[i + 2]), +1)]
            word[i : i + 2] = [new_id]
        i += 1
    return changes


def learn_merges(
    word_counts: Mapping[str, int], vocab_size: int, *, min_frequency: int = 2, special_tokens: Sequence[str] = ()
) -> list[tuple[str, str]]:
    r"""The BPE merges learned from pre-token counts, most frequent pair first.

    The vocabulary starts as the special tokens and the 256 byte symbols, ordered as in
    :class:`ByteLevelBPE`, and grows by one merged string per merge. The loop keeps

    * ``pair_counts[(a, b)]``, the count of the pair over all words,
      :math:`\sum_w n_w\,\#_w(a\,b)`, with :math:`n_w` the count of word :math:`w`;
    * ``where[(a, b)]``, the words in which the pair appeared since it was last queued;
    * a heap of ``(-count, pair, order, words)``: the most frequent pair on top, the smallest
      ids ``(a, b)`` first on a tie. An entry whose count has changed since it was queued is
      queued again with the current count when it comes to the top ("lazy" deletion);

    so that a merge visits only the words that hold the pair (:func:`merge_pair`), not the
    whole corpus. Training stops at ``vocab_size`` entries, at an empty heap, or when the best
    pair occurs fewer than ``max(min_frequency, 1)`` times.

    Args:
        word_counts: ``{pre-token: count}``, each pre-token a non-empty str of byte symbols (from
            :func:`pretokenize`), each count a positive int.
        vocab_size: the most entries of the vocabulary, at least ``256 + len(special_tokens)``.
        min_frequency: the least count of a pair to be merged.
        special_tokens: the tokens before the byte symbols (they only take ids here).

    Returns:
        ``[(left, right), ...]`` in the order learned.

    Raises:
        ValueError: a bad ``word_counts`` entry, or one of the errors of :meth:`ByteLevelBPE.train`.
    """
    tokens = _check_learning("learn_merges", word_counts, vocab_size, min_frequency, special_tokens)
    ids = {token: i for i, token in enumerate(tokens)}
    words = [[ids[symbol] for symbol in word] for word in word_counts]
    counts = list(word_counts.values())
    pair_counts: Counter[tuple[int, int]] = Counter()
    where: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
    for w, (word, n) in enumerate(zip(words, counts)):
        for pair in zip(word, word[1:]):
            pair_counts[pair] += n
            where[pair].add(w)
    heap: list = []
    order = itertools.count()  # entries equal in count and pair leave the heap first in, first out
    merges = []
    while True:
        for pair, holders in where.items():  # queue the pairs whose words changed
            if pair_counts[pair] > 0:
                heapq.heappush(heap, (-pair_counts[pair], pair, next(order), holders))
        where.clear()
        if len(ids) >= vocab_size or not heap:
            return merges
        count, pair, _, holders = heapq.heappop(heap)
        if -count != pair_counts[pair]:  # counted before the last merges changed it: queue it again
            heapq.heappush(heap, (-pair_counts[pair], pair, next(order), holders))
            continue
        if -count < max(min_frequency, 1):
            return merges
        merged = tokens[pair[0]] + tokens[pair[1]]
        if merged not in ids:  # if two merges ever spelled the same string, it would keep its first id
            ids[merged] = len(tokens)
            tokens.append(merged)
        merges.append((tokens[pair[0]], tokens[pair[1]]))
        for w in holders:
            for changed, delta in merge_pair(words[w], pair, ids[merged]):
                pair_counts[changed] += delta * counts[w]
                if delta > 0:
                    where[changed].add(w)


class ByteLevelBPE:
    """GPT-2's byte-level BPE tokenizer: no unknown token, any script.

    Build one with :meth:`train` (from text), or from its merges: ``ByteLevelBPE(merges,
    special_tokens)``, :meth:`from_json`, :meth:`load`. A pretrained vocabulary (SmolLM2's, read
    from its GGUF file) gives its tokens in id order too, ``ByteLevelBPE(merges, special_tokens,
    tokens=tokens, pretokenizer="smollm")``: then the ids are the given ones, every merge must
    spell a given token, and a byte the vocabulary lacks cannot be encoded (a ValueError).

    Attributes:
        merges: ``[(left, right), ...]``, the learned merges in the order they were learned (the
            rank of a merge is its index), as byte-symbol strings (``("Ġ", "t")``).
        vocab: ``{token: id}``: the special tokens first (ids ``0 .. S-1``), then the 256 byte
            symbols ordered by code point (``'!'`` is id ``S``, byte 0's ``'Ā'`` id ``S + 188``),
            then each merged string in the order it was learned.
        special_tokens: the special tokens, in id order.

    The ids are those of Hugging Face ``tokenizers``' ``BpeTrainer`` with
    ``initial_alphabet=pre_tokenizers.ByteLevel.alphabet()`` and the ``ByteLevel`` pre-tokenizer,
    as found by training both and comparing (the rule is what the tests check):

    * the initial alphabet is numbered in the order of its characters' code points, not of the
      byte values;
    * among pairs of equal count, the pair of smallest ids ``(left, right)``, compared
      left first, is merged first;
    * ``vocab_size`` counts vocabulary entries, not merges: if two merges ever spelled the same
      string (``"ab" + "c"`` and ``"a" + "bc"``), or a merge spelled a special token, the
      string would keep its first id and the vocabulary would have fewer than
      ``S + 256 + len(merges)`` entries, as in ``tokenizers`` (training on real text has not
      produced such a case; merges given by hand can, and encode as in ``tokenizers``).

    Two deliberate differences from a ``tokenizers.Tokenizer``: :meth:`decode` writes a special
    token as itself (``tokenizers`` drops it by default, and with ``skip_special_tokens=False``
    reads a special made of non-ASCII byte symbols, such as ``"<é>"``, as bytes); and a special
    token may not be a single byte symbol, which would take that symbol's id.
    """

    def __init__(
        self,
        merges: Iterable[tuple[str, str]],
        special_tokens: Sequence[str] = (),
        *,
        tokens: Sequence[str] | None = None,
        pretokenizer: str = "gpt2",
    ) -> None:
        self.special_tokens = _check_special_tokens("ByteLevelBPE", special_tokens)
        if pretokenizer not in PRETOKENIZERS:
            raise ValueError(f"ByteLevelBPE: pretokenizer must be one of {PRETOKENIZERS}, got {pretokenizer!r}")
        self.pretokenizer = pretokenizer
        given = tokens is not None
        self.vocab: dict[str, int] = (
            _given_vocabulary(tokens, self.special_tokens)
            if given
            else {token: i for i, token in enumerate([*self.special_tokens, *_ALPHABET])}
        )
        self.merges: list[tuple[str, str]] = []
        self._ranks: dict[tuple[int, int], int] = {}
        self._merged_ids: list[int] = []
        for rank, merge in enumerate(merges):
            if (
                not isinstance(merge, (tuple, list))
                or len(merge) != 2
                or not all(isinstance(part, str) and part in self.vocab for part in merge)
            ):
                raise ValueError(
                    f"ByteLevelBPE: merge {rank} must be a pair of tokens already in the vocabulary "
                    f"(byte symbols or earlier merges), got {merge!r}"
                )
            left, right = merge
            if (self.vocab[left], self.vocab[right]) in self._ranks:  # it could never apply a second time
                raise ValueError(
                    f"ByteLevelBPE: merge {rank} {merge!r} repeats merge "
                    f"{self._ranks[self.vocab[left], self.vocab[right]]}"
                )
            if given and left + right not in self.vocab:
                raise ValueError(
                    f"ByteLevelBPE: merge {rank} {merge!r} makes {left + right!r}, which the given tokens do not hold"
                )
            self.vocab.setdefault(left + right, len(self.vocab))
            self.merges.append((left, right))
            self._ranks[self.vocab[left], self.vocab[right]] = rank
            self._merged_ids.append(self.vocab[left + right])
        self._tokens = list(self.vocab)
        self._given = given
        specials = set(self.special_tokens)
        self._bytes = [
            token.encode("utf-8")
            if token in specials  # a special is written as itself
            else token.translate(_SYMBOL_TO_LATIN1).encode("latin-1")
            for token in self._tokens
        ]
        by_length = sorted(self.special_tokens, key=len, reverse=True)  # the longest special wins a tie
        self._special_split = (
            regex.compile("(" + "|".join(regex.escape(t) for t in by_length) + ")") if by_length else None
        )
        self._cache: dict[str, tuple[int, ...]] = {}

    # ------------------------------------------------------------------ training

    @classmethod
    def train(
        cls, texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2, special_tokens: Sequence[str] = ()
    ) -> ByteLevelBPE:
        """Learn a byte-level BPE vocabulary of at most ``vocab_size`` entries (specials included).

        The texts are pre-tokenised (:func:`pretokenize`) and the pre-tokens counted; merges are
        then learned incrementally (:func:`merge_pair`, with a pair -> words index and a heap),
        until the vocabulary has ``vocab_size`` entries or no pair occurs ``min_frequency``
        times (then it is smaller: ``len`` tells). Special tokens in the texts are not treated
        specially while training (as in ``tokenizers``); they get the first ids. The result
        depends only on the texts and settings: the same on every run and machine.

        Args:
            texts: the training texts (any iterable of str, read once).
            vocab_size: the most entries of the vocabulary, at least ``256 + len(special_tokens)``.
            min_frequency: the least count of a pair to be merged (0 and 1 are the same).
            special_tokens: tokens that get the first ids and are never split when encoding.

        Raises:
            ValueError: ``vocab_size`` below ``256 + len(special_tokens)`` (the message names the
                minimum), ``min_frequency`` not a non-negative int, a text that is not a str
                (or ``texts`` one str), no text at all or only empty texts, a special token that
                is empty, repeated, not a str or one byte symbol.
        """
        word_counts = _check_training("ByteLevelBPE.train", texts, vocab_size, min_frequency, special_tokens)
        merges = learn_merges(word_counts, vocab_size, min_frequency=min_frequency, special_tokens=special_tokens)
        return cls(merges, special_tokens)

    # ------------------------------------------------------------------ encoding and decoding

    def encode_word(self, word: str) -> list[int]:
        """The ids of one pre-token (a string of byte symbols, from :func:`pretokenize`).

        Starts from the ids of its bytes and merges, again and again, the adjacent pair of
        lowest rank (the merge learned first), the leftmost one on a tie, until no adjacent pair
        is a merge: the order in which GPT-2's ``bpe`` and ``tokenizers``' BPE model apply them.

        Raises:
            ValueError: ``word`` is not a non-empty str of byte symbols.
        """
        ids = self._check_word(word)
        while len(ids) > 1:
            rank, i = min((self._ranks.get(pair, len(self._ranks)), i) for i, pair in enumerate(zip(ids, ids[1:])))
            if rank == len(self._ranks):  # no adjacent pair is a merge
                break
            ids[i : i + 2] = [self._merged_ids[rank]]
        return ids

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``: each special token in it one id, the rest pre-tokenised and
        each pre-token encoded with :meth:`encode_word` (cached). Never an unknown token.

        Raises:
            ValueError: ``text`` is not a str, or holds a lone surrogate.
        """
        parts = self._split_special(checks.text("ByteLevelBPE.encode", text))
        ids: list[int] = []
        for k, part in enumerate(parts):
            if k % 2:  # a special token
                ids.append(self.vocab[part])
            else:
                for word in self._pretokens(part):
                    ids += self._encode_cached(_symbols(word))
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """:meth:`encode` of each text.

        Raises:
            ValueError: ``texts`` is one str, or one of them is not a str.
        """
        texts = _check_texts("ByteLevelBPE.encode_batch", texts)
        return [self.encode(text) for text in texts]

    def tokens(self, text: str) -> list[str]:
        """The token strings of ``text``, for display (``"Ġworld"``: ``Ġ`` is the space byte)."""
        return [self._tokens[i] for i in self.encode(text)]

    def id_to_token(self, ids: Iterable[int]) -> list[str]:
        """The token string of each id.

        Raises:
            ValueError: an id outside ``[0, len(self))``.
        """
        return [self._tokens[i] for i in self._check_ids(ids, "id_to_token")]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``: the bytes of the tokens joined and read as UTF-8.

        A special token is written as itself. Any id sequence decodes: bytes that are not valid
        UTF-8 (a sequence cut inside a character, say) become U+FFFD, one per maximal invalid
        subpart (Python's ``errors="replace"``, the same as Rust's ``from_utf8_lossy`` in
        ``tokenizers``' ``ByteLevel`` decoder). So ``decode(encode(text)) == text`` for every
        text. Accepts a list or a 1-D tensor.

        Raises:
            ValueError: an id outside ``[0, len(self))``, or a nested sequence.
        """
        return b"".join(self._bytes[i] for i in self._check_ids(ids, "decode")).decode("utf-8", errors="replace")

    def __len__(self) -> int:
        """The number of vocabulary entries (special tokens included)."""
        return len(self.vocab)

    # ------------------------------------------------------------------ saving and loading

    def to_json(self) -> str:
        """The tokenizer as JSON: its special tokens and merges (the vocabulary follows from them),
        its pre-tokenizer, and the tokens when they were given (a pretrained vocabulary)."""
        data = {
            "type": "ByteLevelBPE",
            "special_tokens": list(self.special_tokens),
            "merges": [list(merge) for merge in self.merges],
            "pretokenizer": self.pretokenizer,
        }
        if self._given:
            data["tokens"] = self._tokens
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> ByteLevelBPE:
        """Rebuild a tokenizer from :meth:`to_json`'s JSON.

        Raises:
            ValueError: not JSON written by :meth:`to_json`.
        """
        data = _parse_json("ByteLevelBPE.from_json", text)
        return cls(
            data["merges"],
            data["special_tokens"],
            tokens=data.get("tokens"),
            pretokenizer=data.get("pretokenizer", "gpt2"),
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_json` to ``path`` (UTF-8)."""
        write_atomically(path, self.to_json())  # a failed write leaves the previous file whole (creating its folder)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ByteLevelBPE:
        """A tokenizer saved by :meth:`save`."""
        return read_back_text(path, cls.from_json, where="ByteLevelBPE.load")

    def __repr__(self) -> str:
        return f"ByteLevelBPE({len(self)} tokens, {len(self.merges)} merges, special_tokens={self.special_tokens})"

    # ------------------------------------------------------------------ internals

    def _pretokens(self, text: str) -> list[str]:
        """The pre-tokens of a text without special tokens, as :data:`PRETOKENIZERS` says."""
        if self.pretokenizer == "gpt2":
            return _SPLIT.findall(text)
        return [
            piece
            for k, chunk in enumerate(_DIGIT.split(text))
            if chunk
            for piece in ([chunk] if k % 2 else _SPLIT.findall(chunk))
        ]

    def _split_special(self, text: str) -> list[str]:
        """``[text, special, text, special, ..., text]``: the special tokens at odd indices."""
        return self._special_split.split(text) if self._special_split is not None else [text]

    def _encode_cached(self, word: str) -> tuple[int, ...]:
        ids = self._cache.get(word)
        if ids is None:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            encoded = self.encode_word(word) if len(word) <= _SHORT_WORD else self._merge_long(self._check_word(word))
            ids = self._cache[word] = tuple(encoded)
        return ids

    def _merge_long(self, ids: list[int]) -> list[int]:
        r""":meth:`encode_word`'s merges for a long pre-token, in :math:`O(n \log n)` instead of
        :math:`O(n^2)`: the symbols form a linked list, and a heap holds every adjacent pair that is
        a merge as ``(rank, position)``, so the lowest rank, leftmost on a tie, comes first (a
        merged symbol keeps its left position, so positions keep the text's order). An entry whose
        pair has changed since it was pushed is skipped when it comes up."""
        ranks, merged = self._ranks, self._merged_ids
        symbol, after = ids[:], [*range(1, len(ids)), -1]
        before, alive = [-1, *range(len(ids) - 1)], [True] * len(ids)
        heap = [(ranks[pair], i) for i, pair in enumerate(zip(ids, ids[1:])) if pair in ranks]
        heapq.heapify(heap)
        while heap:
            rank, i = heapq.heappop(heap)
            j = after[i]
            if not alive[i] or j < 0 or ranks.get((symbol[i], symbol[j])) != rank:
                continue  # a pair that has changed since
            symbol[i], alive[j] = merged[rank], False  # the pair becomes one symbol at i
            k = after[j]
            after[i] = k
            if k >= 0:
                before[k] = i
                if (symbol[i], symbol[k]) in ranks:
                    heapq.heappush(heap, (ranks[symbol[i], symbol[k]], i))
            h = before[i]
            if h >= 0 and (symbol[h], symbol[i]) in ranks:
                heapq.heappush(heap, (ranks[symbol[h], symbol[i]], h))
        return [s for s, keep in zip(symbol, alive) if keep]

    def _check_word(self, word: str) -> list[int]:
        """The ids of ``word``'s byte symbols, or a ValueError (a pretrained vocabulary may lack a
        few bytes that its training text never held: SmolLM2's has no id for byte 0x04)."""
        try:
            return [self.vocab[symbol] for symbol in _check_byte_word("ByteLevelBPE.encode_word", word)]
        except KeyError as err:
            byte = _SYMBOL_TO_BYTE[err.args[0]]
            raise ValueError(
                f"ByteLevelBPE: this vocabulary has no token for the byte 0x{byte:02x} (in "
                f"{word.translate(_SYMBOL_TO_LATIN1).encode('latin-1').decode('utf-8', 'replace')!r}); "
                "the text cannot be encoded"
            ) from None

    def _check_ids(self, ids: Iterable[int], where: str) -> list[int]:
        return checks.token_ids(f"ByteLevelBPE.{where}", ids, len(self), kinds=numbers.Integral)


def _given_vocabulary(tokens: Sequence[str], special_tokens: Sequence[str]) -> dict[str, int]:
    """``{token: id}`` of a pretrained vocabulary listed in id order, checked: distinct strings, the
    special tokens among them, every other token made of byte symbols."""
    if isinstance(tokens, str) or not isinstance(tokens, Sequence) or not tokens:
        raise ValueError("ByteLevelBPE: tokens must be a non-empty sequence of str (the vocabulary in id order)")
    vocab = {}
    specials = set(special_tokens)
    for i, token in enumerate(tokens):
        if not isinstance(token, str) or not token or token in vocab:
            raise ValueError(f"ByteLevelBPE: token {i} must be a non-empty str seen once, got {token!r}")
        if token not in specials and any(symbol not in _SYMBOL_TO_BYTE for symbol in token):
            raise ValueError(f"ByteLevelBPE: token {i} {token!r} is neither a special token nor made of byte symbols")
        vocab[token] = i
    missing = [t for t in special_tokens if t not in vocab]
    if missing:
        raise ValueError(f"ByteLevelBPE: the special tokens {missing} are not among the given tokens")
    return vocab


def _check_special_tokens(where: str, special_tokens: Sequence[str]) -> tuple[str, ...]:
    """``special_tokens`` as a tuple, or a ValueError: each a non-empty str, not repeated, and
    not one byte symbol (it would take that symbol's place)."""
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Sequence):
        raise ValueError(f"{where}: special_tokens must be a sequence of str, got {special_tokens!r}")
    for token in special_tokens:
        if not isinstance(token, str) or not token:
            raise ValueError(f"{where}: a special token must be a non-empty str, got {token!r}")
        checks.text(f"{where}: special token", token)
        if token in _SYMBOL_TO_BYTE:
            raise ValueError(f"{where}: the special token {token!r} is one of the 256 byte symbols")
    repeated = sorted(token for token, n in Counter(special_tokens).items() if n > 1)
    if repeated:
        raise ValueError(f"{where}: special tokens must be distinct, {repeated} occur more than once")
    return tuple(special_tokens)


def _check_texts(where: str, texts: Iterable[str]) -> Iterable[str]:
    """``texts`` unless it is one str (iterate it lazily; each text is checked when read)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise ValueError(f"{where}: texts must be an iterable of str, got {type(texts).__name__}")
    return (checks.text(f"{where}: text {index}", text) for index, text in enumerate(texts))


def _check_byte_word(where: str, word: str) -> str:
    """``word`` if it is a non-empty str of byte symbols (a pre-token), else a ValueError."""
    if not isinstance(word, str) or not word or any(symbol not in _SYMBOL_TO_BYTE for symbol in word):
        raise ValueError(
            f"{where}: expected a non-empty str of byte symbols (a pre-token from pretokenize), got {word!r}"
        )
    return word


def _check_merge(word: list[int], pair: tuple[int, int], new_id: int) -> None:
    """A ValueError unless ``word`` is a list, ``pair`` a pair of ints and ``new_id`` an int."""
    if not (
        type(word) is list
        and type(pair) is tuple
        and len(pair) == 2
        and isinstance(pair[0], int)
        and isinstance(pair[1], int)
        and isinstance(new_id, int)
    ):
        raise ValueError(
            f"merge_pair: expected a list of ids, a pair (tuple) of ids and an id, got "
            f"{type(word).__name__}, {pair!r}, {new_id!r}"
        )


def _check_sizes(where: str, vocab_size: int, min_frequency: int, special_tokens: Sequence[str]) -> tuple[str, ...]:
    """The special tokens, checked with ``vocab_size`` and ``min_frequency``, or a ValueError."""
    special_tokens = _check_special_tokens(where, special_tokens)
    minimum = 256 + len(special_tokens)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(
            f"{where}: vocab_size must be an int of at least 256 + {len(special_tokens)} special "
            f"tokens = {minimum} (the byte symbols and the specials), got {vocab_size!r}"
        )
    checks.integer(where, "min_frequency", min_frequency, minimum=0)
    return special_tokens


def _check_training(
    where: str, texts: Iterable[str], vocab_size: int, min_frequency: int, special_tokens: Sequence[str]
) -> dict[str, int]:
    """The arguments of :meth:`ByteLevelBPE.train` checked, and the pre-token counts of ``texts``
    (pre-token as byte symbols -> count, in order of first occurrence)."""
    _check_sizes(where, vocab_size, min_frequency, special_tokens)
    pieces: Counter[str] = Counter()
    n_texts = 0
    for text in _check_texts(where, texts):
        pieces.update(_SPLIT.findall(text))
        n_texts += 1
    if not pieces:
        raise ValueError(
            f"{where}: no text to learn from (" + (f"all {n_texts} texts are empty)" if n_texts else "texts is empty)")
        )
    return {_symbols(piece): n for piece, n in pieces.items()}


def _check_learning(
    where: str, word_counts: Mapping[str, int], vocab_size: int, min_frequency: int, special_tokens: Sequence[str]
) -> list[str]:
    """The arguments of :func:`learn_merges` checked, and the starting vocabulary (id -> token)."""
    special_tokens = _check_sizes(where, vocab_size, min_frequency, special_tokens)
    if not isinstance(word_counts, Mapping) or not word_counts:
        raise ValueError(f"{where}: word_counts must be a non-empty mapping of pre-token -> count")
    for word, count in word_counts.items():
        if (
            not isinstance(word, str)
            or not word
            or any(symbol not in _SYMBOL_TO_BYTE for symbol in word)
            or isinstance(count, bool)
            or not isinstance(count, int)
            or count < 1
        ):
            raise ValueError(
                f"{where}: each entry of word_counts must be a non-empty str of byte symbols "
                f"and a positive int count, got {word!r}: {count!r}"
            )
    return [*special_tokens, *_ALPHABET]


def _parse_json(where: str, text: str) -> dict:
    """The dict that :meth:`ByteLevelBPE.to_json` wrote, or a ValueError."""
    try:
        data = json.loads(checks.text(where, text))
    except json.JSONDecodeError as err:
        raise ValueError(f"{where}: not JSON ({err})") from None
    except RecursionError:  # e.g. a damaged file of thousands of nested brackets
        raise ValueError(f"{where}: not the JSON of a tokenizer (nested too deeply to read)") from None
    if (
        not isinstance(data, dict)
        or data.get("type") != "ByteLevelBPE"
        or not isinstance(data.get("merges"), list)
        or not isinstance(data.get("special_tokens"), list)
    ):
        raise ValueError(f"{where}: expected the JSON of ByteLevelBPE.to_json (type, special_tokens, merges)")
    return data
