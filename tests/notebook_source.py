"""What the tests read from a notebook's code cells, as Python a parser accepts."""

from __future__ import annotations


def without_magics(source: str) -> str:
    """``source`` with each IPython magic or shell escape (``%pip ...``, ``!ls``) turned into
    ``pass  # %pip ...``: the line stays visible as a comment, and a ``pass`` keeps the block it
    sits in (``if ...: %pip install ...``) valid Python."""
    lines = []
    for line in source.split("\n"):
        stripped = line.lstrip()
        lines.append(
            line[: len(line) - len(stripped)] + "pass  # " + stripped if stripped.startswith(("%", "!")) else line
        )
    return "\n".join(lines)
