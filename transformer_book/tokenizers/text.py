"""Word tokenisation and vocabularies for word-level models (chapters 1, 10, 11)."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from transformer_book import checks

__all__ = ["tokenize_words", "Vocab"]

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})  # typographic forms


@functools.cache
def _word_pattern() -> re.Pattern[str]:
    # A word: a letter (any script; no digit or underscore), then letters and combining marks
    # (accents left uncomposed, the vowel signs of Devanagari and other Indic scripts), with
    # apostrophes allowed inside. Python's re has no \p{M}, so the marks' class is built from the
    # Unicode database once, on first use.
    marks, start = [], None
    for code in range(sys.maxunicode + 2):
        is_mark = code <= sys.maxunicode and unicodedata.category(chr(code)) in ("Mn", "Mc", "Me")
        if is_mark and start is None:
            start = code
        elif not is_mark and start is not None:
            marks.append(f"{re.escape(chr(start))}-{re.escape(chr(code - 1))}")
            start = None
    letter, part = r"[^\W\d_]", rf"(?:[^\W\d_]|[{''.join(marks)}])"
    return re.compile(rf"{letter}{part}*(?:'{part}+)*")


def tokenize_words(text: str) -> list[str]:
    """Lower-case words: runs of letters (any script) and their combining marks, keeping an
    apostrophe inside a word.

    The text is first put in Unicode's composed form (NFC), so ``café`` is one word however its
    accent was typed, and a mark that has no composed form (a Devanagari vowel sign, say) stays
    in its word. Typographic apostrophes (``’``) are read as ``'``, so ``father’s`` is one
    word, ``father's``. Digits, punctuation and apostrophes at a word's edge are dropped.

    >>> tokenize_words("I must go back to my ship, and to my crew.")
    ['i', 'must', 'go', 'back', 'to', 'my', 'ship', 'and', 'to', 'my', 'crew']
    >>> tokenize_words("My father’s ship, 1900.")
    ['my', "father's", 'ship']
    """
    if not isinstance(text, str):
        raise ValueError(f"tokenize_words: text must be a str, got {type(text).__name__}")
    return _word_pattern().findall(unicodedata.normalize("NFC", text).lower().translate(_APOSTROPHES))


class Vocab:
    """A bijection between tokens and ids ``0 .. len-1``, most frequent first.

    Ties in frequency are broken alphabetically, so the ids are reproducible.
    """

    def __init__(self, tokens: Sequence[str], counts: Sequence[int] | None = None) -> None:
        if isinstance(tokens, (str, bytes)):  # a str is a sequence of its characters: almost never meant
            raise ValueError(
                f"Vocab: tokens must be a sequence of str, got one {type(tokens).__name__} "
                "(for its characters pass list(s))"
            )
        bad = [t for t in tokens if not isinstance(t, str)]
        if bad:
            raise ValueError(f"Vocab: tokens must be str, got {bad[0]!r} ({type(bad[0]).__name__})")
        if len(set(tokens)) != len(tokens):
            raise ValueError("Vocab: tokens must be distinct")
        normalised: dict[str, str] = {}
        for token in tokens:  # "café" composed and decomposed look alike and would get two ids
            twin = normalised.setdefault(
                unicodedata.normalize("NFC", token) if isinstance(token, str) else token, token
            )
            if twin != token:
                raise ValueError(
                    f"Vocab: tokens {twin!r} and {token!r} differ only in their Unicode normalisation; "
                    "normalise them first (unicodedata.normalize('NFC', ...), as tokenize_words does)"
                )
        if counts is not None and len(counts) != len(tokens):
            raise ValueError(f"Vocab: {len(counts)} counts for {len(tokens)} tokens")
        self.itos: list[str] = list(tokens)
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.counts = np.asarray(counts if counts is not None else [0] * len(tokens), dtype=np.int64)

    @classmethod
    def build(cls, tokens: Iterable[str], min_count: int = 1) -> Vocab:
        """Keep every token seen at least ``min_count`` times."""
        checks.positive_int("Vocab.build", min_count=min_count)
        if isinstance(tokens, (str, bytes)):  # a str iterates over its characters: almost never meant
            raise ValueError(
                f"Vocab.build: tokens must be an iterable of tokens, got a {type(tokens).__name__} "
                "(split it first, e.g. text.tokenize_words(s); for characters pass list(s))"
            )
        counter = Counter(tokens)
        if not all(isinstance(t, str) for t in counter):
            bad = next(t for t in counter if not isinstance(t, str))
            raise ValueError(f"Vocab.build: tokens must be str, got {type(bad).__name__} {bad!r}")
        kept = sorted((t for t, c in counter.items() if c >= min_count), key=lambda t: (-counter[t], t))
        return cls(kept, [counter[t] for t in kept])

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: object) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        try:
            return self.stoi[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in the vocabulary of {len(self)} words") from None

    def encode(self, tokens: Iterable[str], unknown: int | None = None) -> np.ndarray:
        """Ids of ``tokens`` as an int64 array; out-of-vocabulary tokens map to ``unknown``,
        or raise ``KeyError`` when ``unknown`` is None."""
        if unknown is None:
            return np.fromiter((self[t] for t in tokens), dtype=np.int64)
        return np.fromiter((self.stoi.get(t, unknown) for t in tokens), dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The tokens of ``ids``.

        Raises:
            ValueError: an id outside ``0 .. len - 1`` (a negative id would index from the end).
        """
        out = []
        for i in ids:
            if isinstance(i, bool) or not float(i).is_integer():
                raise ValueError(f"Vocab.decode: ids must be integers, got {i!r}")
            if not 0 <= int(i) < len(self.itos):
                raise ValueError(f"Vocab.decode: id {int(i)} is outside 0 .. {len(self.itos) - 1}")
            out.append(self.itos[int(i)])
        return out

    def __repr__(self) -> str:
        head = ", ".join(self.itos[:5])
        return f"Vocab({len(self)} tokens: {head}{', ...' if len(self) > 5 else ''})"
