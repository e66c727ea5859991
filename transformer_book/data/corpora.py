"""Text loaders built on :func:`~transformer_book.data.fetch`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from transformer_book import checks
from transformer_book.data.download import fetch

ODYSSEY_CLEAN_SHA256 = "cce6dd911ea4334257f8beab271bd3a008e721d4db49606d8bb3ab96b14f1e7c"
"""sha256 of ``load_odyssey().encode("utf-8")``."""

_START_MARKER = re.compile(r"\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG EBOOK", re.IGNORECASE)
_END_MARKER = re.compile(r"\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG EBOOK", re.IGNORECASE)


def strip_gutenberg(text: str) -> str:
    """Remove a Project Gutenberg header and licence footer and normalise the layout.

    Keeps only the lines strictly between the ``*** START OF THE PROJECT GUTENBERG EBOOK ...``
    and ``*** END OF THE PROJECT GUTENBERG EBOOK ...`` marker lines, drops a leading BOM,
    turns CRLF into LF, strips trailing whitespace from every line and trims leading and
    trailing blank lines. The result ends with a single newline (or is empty).

    Raises:
        ValueError: the start marker, or an end marker after it, is missing.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    start = _find_marker(lines, _START_MARKER, 0)
    end = _find_marker(lines, _END_MARKER, start + 1)
    body = [line.rstrip() for line in lines[start + 1 : end]]
    while body and not body[0]:
        body.pop(0)
    while body and not body[-1]:
        body.pop()
    return "\n".join(body) + "\n" if body else ""


def _find_marker(lines: list[str], marker: re.Pattern[str], first: int) -> int:
    """Index of the first line at or after ``first`` that starts with ``marker``."""
    for index in range(first, len(lines)):
        if marker.match(lines[index].strip()):
            return index
    raise ValueError(f"no Project Gutenberg marker line matching {marker.pattern!r} found")


def load_odyssey(*, download: bool = True) -> str:
    """Homer's Odyssey (Butler's translation) as clean UTF-8 text, without Gutenberg boilerplate.

    Fetches ``odyssey/odyssey_pg1727.txt`` (see :func:`fetch`) and applies
    :func:`strip_gutenberg`; the result's UTF-8 sha256 is :data:`ODYSSEY_CLEAN_SHA256`.

    Raises:
        DataUnavailableError, ChecksumMismatchError: as :func:`fetch`.
    """
    path = fetch("odyssey", "odyssey_pg1727.txt", download=download)
    return strip_gutenberg(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class CharCorpus:
    """A text as character ids: the vocabulary is the sorted set of its characters, and the ids
    are split in order, the first ``train_share`` for training and the rest for validation.

    Attributes:
        text: the whole text.
        chars: the vocabulary, ``chars[i]`` the character of id ``i``.
        ids: ``(N,)`` int64, the whole text.
        train_ids: ``(N_train,)`` int64, the first part.
        val_ids: ``(N - N_train,)`` int64, the rest.
    """

    text: str
    chars: list[str]
    ids: torch.Tensor
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    stoi: dict[str, int] = field(repr=False)
    """character -> id"""

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """``(len(text),)`` int64 ids; a character outside the vocabulary raises a ValueError."""
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(f"CharCorpus.encode: characters {unknown[:5]} are not in the vocabulary")
        return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """The characters of ``ids`` (a 1-D tensor or list)."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return "".join(self.chars[int(i)] for i in values)


def char_corpus(text: str, train_share: float = 0.9) -> CharCorpus:
    """``text`` as a :class:`CharCorpus`, the first ``train_share`` of it for training.

    Raises:
        ValueError: an empty text, or ``train_share`` outside (0, 1).
    """
    if not isinstance(text, str) or not text:
        raise ValueError("char_corpus: text must be a non-empty str")
    checks.probability("char_corpus", "train_share", train_share, zero=False)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    split = int(train_share * len(ids))
    return CharCorpus(text, chars, ids, ids[:split], ids[split:], stoi)


def load_tiny_shakespeare(*, download: bool = True) -> CharCorpus:
    """Tiny Shakespeare (Karpathy's char-rnn corpus, 1,115,394 characters, 65 distinct) as a
    :class:`CharCorpus` split 90/10 in order, the corpus of chapters 2 to 5 and 9.

    Raises:
        DataUnavailableError, ChecksumMismatchError: as :func:`fetch`.
    """
    return char_corpus(fetch("tinyshakespeare", "input.txt", download=download).read_text(encoding="utf-8"))
