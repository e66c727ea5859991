"""Text loaders built on :func:`~transformer_book.data.download.fetch`."""

from __future__ import annotations

import re

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
    body = [line.rstrip() for line in lines[start + 1:end]]
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
