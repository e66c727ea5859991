"""Writing a file so that readers see the old contents or the new, never a half-written file.

Every file the package writes that a later run reads back (checkpoints and saved models,
tokenizers, downloaded corpora, the results records, the compute study) goes through
:func:`atomic_writer` (or :func:`write_atomically`, for bytes or text in hand): the bytes go to
a temporary file beside the target, which is flushed to disk and then renamed over the target
(``os.replace`` is atomic within one file system). A crash or an exception mid-write leaves
the previous file untouched and removes the temporary one; a disk that fills up mid-write
raises an ``OSError`` that names the file. :func:`read_back_text` is the reading half for text
files: a file that is not UTF-8, or that its parser refuses, is named in a ``ValueError``.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_writer", "write_atomically", "read_back_text", "remove_stale", "default_mode"]


def default_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` less the process's umask. (``mkstemp``
    creates its files ``0o600``, private, which a saved model or corpus has no reason to be.)"""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_writer(
    path: str | os.PathLike[str], *, suffix: str = ".tmp", mode: int | None = None
) -> Iterator[IO[bytes]]:
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
    except OSError as err:
        Path(temporary).unlink(missing_ok=True)
        message = f"could not write {target} ({err.strerror or err}); the previous file, if there was one, is unchanged"
        raise (OSError(err.errno, message) if err.errno is not None else OSError(message)) from err
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_atomically(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through :func:`atomic_writer`: readers see the
    old file or the new one, and a failed write leaves the old one. Returns the path."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"write_atomically: data must be bytes or str, got {type(data).__name__}")
    with atomic_writer(path, mode=mode) as file:
        file.write(payload)
    return Path(path)


def read_back_text(path: str | os.PathLike[str], parse: Callable[[str], Any], *, where: str) -> Any:
    """``parse`` of the UTF-8 text of a file the package wrote; errors begin with ``where`` and
    name the file (a ``ValueError`` of ``parse`` that does not name it gets the path put in front).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not UTF-8 text (a damaged file, or another kind of file), or
            ``parse`` refuses it.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{where}: {path} is not UTF-8 text (byte {err.start} of it): a damaged file, or not one this package wrote"
        ) from None
    try:
        return parse(text)
    except ValueError as err:
        message = str(err)
        raise ValueError(message if str(path) in message else f"{where}: {path}: {message}") from None


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
