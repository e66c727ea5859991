"""The package's own code, shown in a chapter: :func:`show_source` returns a listing that a notebook
renders as a highlighted block captioned with the object's qualified name and file, so that a
chapter shows the code that computes its equations rather than a copy of it.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["show_source", "SourceListing"]


@dataclass(frozen=True)
class SourceListing:
    """The source of a package object, shown as a highlighted block in a notebook."""

    qualname: str
    path: str
    first_line: int
    source: str

    @property
    def last_line(self) -> int:
        return self.first_line + self.source.count("\n") - (1 if self.source.endswith("\n") else 0)

    def _caption(self) -> str:
        # No line numbers: they shift with every edit above the object, and the stored
        # notebook outputs would go stale although the code shown did not change.
        return f"{self.qualname}  ({self.path})"

    def _repr_markdown_(self) -> str:
        return f"`{self._caption()}`\n\n```python\n{self.source.rstrip()}\n```\n"

    def __str__(self) -> str:
        return f"# {self._caption()}\n{self.source.rstrip()}\n"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def show_source(obj: Any) -> SourceListing:
    """Return the source of a function, class or module of the package for display.

    In a notebook the returned object renders as a syntax-highlighted block captioned with its
    qualified name and its file (no line numbers, which would change with every edit above the
    object), so a chapter shows the package's own code rather than a copy.

    Raises:
        ValueError: if the object's source cannot be found (a builtin, say).
    """
    obj = inspect.unwrap(obj)  # a decorated function (say @torch.no_grad()): show the function itself
    try:
        lines, first = inspect.getsourcelines(obj)
        file = inspect.getsourcefile(obj)
    except (OSError, TypeError) as err:
        raise ValueError(f"show_source: no source available for {obj!r} ({err})") from None
    if file is None:
        raise ValueError(f"show_source: no source file for {obj!r}")
    module = inspect.getmodule(obj)
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
    qualname = f"{module.__name__}.{name}" if module and module is not obj else name
    path = _display_path(Path(file))
    return SourceListing(qualname, path, max(first, 1), textwrap.dedent("".join(lines)))


def _display_path(file: Path) -> str:
    """The file's path from the package's parent folder (``transformer_book/...``)."""
    package_root = Path(__file__).resolve().parent.parent
    try:
        return file.resolve().relative_to(package_root).as_posix()
    except ValueError:
        return file.name
