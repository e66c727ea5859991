"""Writing a file so that readers see the old contents or the new, never a half-written file.

Every file the package writes that a later run reads back (checkpoints and saved models,
downloaded corpora, the results records) goes through :func:`atomic_writer`: the bytes go to
a temporary file beside the target, which is flushed to disk and then renamed over the target
(``os.replace`` is atomic within one file system). A crash or an exception mid-write leaves
the previous file untouched and removes the temporary one.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["atomic_writer", "remove_stale", "default_mode"]


def default_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` less the process's umask. (``mkstemp``
    creates its files ``0o600``, private, which a saved model or corpus has no reason to be.)"""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_writer(path: str | os.PathLike[str], *, suffix: str = ".tmp", mode: int | None = None) -> Iterator[IO[bytes]]:
    """Open a temporary binary file beside ``path``; on leaving the block without an exception,
    flush it to disk, give it ``mode`` (:func:`default_mode` when None) and rename it onto
    ``path``. On an exception the temporary file is removed and ``path`` is left as it was.

    The temporary file is named ``.<name>.<random><suffix>`` in ``path``'s folder (created if
    missing), so that :func:`remove_stale` can find what a killed process left.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    try:
        with os.fdopen(handle, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, default_mode() if mode is None else mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def remove_stale(path: str | os.PathLike[str], *, suffix: str = ".tmp", older_than: float = 0.0) -> None:
    """Remove the temporary files that :func:`atomic_writer` left beside ``path`` when its
    process was killed mid-write, those last modified more than ``older_than`` seconds ago (a
    younger one may belong to a writer still at work)."""
    target = Path(path)
    for stale in target.parent.glob(f".{target.name}.*{suffix}"):
        try:
            if time.time() - stale.stat().st_mtime > older_than:
                stale.unlink(missing_ok=True)
        except FileNotFoundError:  # removed by another process meanwhile
            pass
