"""Fetching catalogue files: a user data folder first, then the cache, then the network.

Every file is checked against its pinned sha256 before it is returned. Downloads go to a
temporary file beside the target and are renamed into place only once the checksum matches,
so the cache never holds a partial or wrong file.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import urllib.request
import warnings
from pathlib import Path
from typing import IO, Any

from filelock import FileLock, Timeout

from transformer_book.atomic import atomic_writer, remove_stale
from transformer_book.data.registry import Corpus, RemoteFile, get_corpus

DATA_DIR_ENV = "TB_DATA_DIR"
CACHE_DIR_ENV = "TB_CACHE_DIR"
_CHUNK_BYTES = 1 << 20
_TIMEOUT_SECONDS = 60
_LOCK_TIMEOUT_SECONDS = 30 * 60  # how long a fetch waits for another process's download of the same file


class DataError(RuntimeError):
    """Base class of the errors raised while getting a data file."""


class ChecksumMismatchError(DataError):
    """A downloaded file's sha256 differs from the pinned one."""


class DataUnavailableError(DataError):
    """The file is neither in the data folder nor in the cache, and cannot be downloaded."""


def data_dir() -> Path | None:
    """The user's read-only data folder from ``$TB_DATA_DIR``, or ``None`` when unset or empty."""
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """The download cache, ``$TB_CACHE_DIR`` or ``~/.cache/transformer_book`` (not created here).

    Raises:
        DataError: ``$TB_CACHE_DIR`` names something that is not a folder (a file, say).
    """
    value = os.environ.get(CACHE_DIR_ENV)
    path = Path(value).expanduser() if value else Path.home() / ".cache" / "transformer_book"
    if path.exists() and not path.is_dir():
        raise DataError(
            f"the cache {path} (from {CACHE_DIR_ENV if value else 'the default'}) exists but is not a "
            f"folder; point {CACHE_DIR_ENV} at a folder"
        )
    return path


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of the file at ``path``, read in chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(corpus: str | Corpus, file: str | None = None, *, download: bool = True, progress: bool = False) -> Path:
    """Return the local path of a verified copy of one file of ``corpus``.

    Looks in ``$TB_DATA_DIR/<corpus>/<file>`` (used in place, never written to), then in
    ``<cache_dir()>/<corpus>/<file>``, and otherwise downloads the pinned URL into the cache.
    A cached file with the wrong sha256 is deleted; a data-folder file with the wrong sha256 is
    left alone and skipped with a warning. The cache's check and download hold a file lock
    (``<file>.lock`` beside it), so processes that fetch the same file at once download it once;
    a download lands under its final name only once complete and verified.

    Args:
        corpus: a registered corpus name or a :class:`Corpus`.
        file: the local file name; may be omitted when the corpus has exactly one file.
        download: if False, never touch the network.
        progress: show a tqdm progress bar while downloading (if tqdm is installed).

    Raises:
        UnknownCorpusError, UnknownFileError: unknown corpus or file name (both are KeyErrors).
        ValueError: ``file`` omitted for a corpus with several files.
        DataUnavailableError: no verified copy is present and it could not be downloaded.
        ChecksumMismatchError: the downloaded bytes do not have the pinned sha256.
    """
    entry = get_corpus(corpus) if isinstance(corpus, str) else corpus
    remote = _select_file(entry, file)

    user_dir = data_dir()
    if user_dir is not None:
        candidate = user_dir / entry.name / remote.name
        if candidate.is_file():
            actual = sha256_of(candidate)
            if actual == remote.sha256:
                return candidate
            warnings.warn(
                f"ignoring {candidate}: sha256 {actual} differs from the expected "
                f"{remote.sha256}; using the cache or a download instead",
                stacklevel=2,
            )

    target = cache_dir() / entry.name / remote.name
    if target.exists() and not target.is_file():
        raise DataError(
            f"{target} is in the way: something that is not a file stands where the cached "
            f"{entry.name}/{remote.name} belongs; remove it"
        )
    # A verified copy needs no lock: files land under their final name only complete (a rename),
    # so a read-only cache that holds them is usable.
    if target.is_file() and sha256_of(target) == remote.sha256:
        return target
    if not download and not target.is_file():
        raise DataUnavailableError(_unavailable_message(entry, remote, "downloading is disabled (download=False)"))
    lock = FileLock(str(target) + ".lock", timeout=_LOCK_TIMEOUT_SECONDS)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise DataUnavailableError(
            _unavailable_message(
                entry,
                remote,
                f"another process has held {lock.lock_file} for {_LOCK_TIMEOUT_SECONDS // 60} minutes; "
                "if none is downloading this file, delete the lock file",
            )
        ) from None
    except OSError as err:
        raise DataUnavailableError(
            _unavailable_message(
                entry,
                remote,
                f"the cache folder {target.parent} is not writable ({err.strerror}); point "
                f"{CACHE_DIR_ENV} at a writable folder",
            )
        ) from None
    # One process at a time checks, deletes or downloads this file: a second fetch of the same
    # file waits above, then finds the first one's verified copy instead of downloading again.
    try:
        if target.is_file():
            if sha256_of(target) == remote.sha256:
                return target
            target.unlink()  # stale or corrupt cache entry
        if not download:
            raise DataUnavailableError(_unavailable_message(entry, remote, "downloading is disabled (download=False)"))
        remove_stale(target, suffix=".part")  # left by a killed download (we hold the lock)
        _download(entry, remote, target, progress)
    finally:
        lock.release()
    return target


def fetch_text(corpus: str, file: str, *, download: bool = True) -> str:
    """:func:`fetch` one file of a corpus and return it decoded as UTF-8.

    Raises:
        DataError: the file is not UTF-8 text (corrupt: the message says to delete it), and
            the errors of :func:`fetch`.
    """
    path = fetch(corpus, file, download=download)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"cannot read {corpus}/{file} ({path}): {err}. The file is corrupt; delete it so that it is fetched again"
        ) from None


def _select_file(corpus: Corpus, file: str | None) -> RemoteFile:
    """The requested file, or the only file when ``file`` is None."""
    if file is not None:
        return corpus.file(file)
    if len(corpus.files) != 1:
        raise ValueError(
            f"corpus {corpus.name!r} has {len(corpus.files)} files; name one of: " + ", ".join(corpus.file_names)
        )
    return corpus.files[0]


def _unavailable_message(corpus: Corpus, remote: RemoteFile, reason: object) -> str:
    return (
        f"cannot get {corpus.name}/{remote.name} from {remote.url} "
        f"(expected sha256 {remote.sha256}): {reason}. To fix this, set {DATA_DIR_ENV} to a "
        f"folder holding {corpus.name}/{remote.name} with that sha256, "
        "or connect to the internet."
    )


def _download(corpus: Corpus, remote: RemoteFile, target: Path, progress: bool) -> None:
    """Download ``remote`` atomically onto ``target``; never leaves a partial file behind."""
    with atomic_writer(target, suffix=".part") as part:
        try:
            actual = _stream_into(remote, part, progress)
        except (OSError, http.client.HTTPException) as err:  # URLError and timeouts too
            raise DataUnavailableError(_unavailable_message(corpus, remote, err)) from err
        received = part.tell()
        if remote.size is not None and received < remote.size:
            raise DataUnavailableError(
                _unavailable_message(
                    corpus, remote, f"the download was interrupted after {received:,} of {remote.size:,} bytes"
                )
            )
        if actual != remote.sha256:
            raise ChecksumMismatchError(
                f"checksum mismatch for {corpus.name}/{remote.name} downloaded from "
                f"{remote.url}: expected sha256 {remote.sha256}, got {actual}. "
                "The download was discarded."
            )


def _stream_into(remote: RemoteFile, out: IO[bytes], progress: bool) -> str:
    """Copy ``remote.url`` into ``out`` chunk by chunk and return the sha256 of the bytes."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(remote.url, timeout=_TIMEOUT_SECONDS) as response:
        bar = _progress_bar(remote) if progress else None
        try:
            while chunk := response.read(_CHUNK_BYTES):
                out.write(chunk)
                digest.update(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
    return digest.hexdigest()


def _progress_bar(remote: RemoteFile) -> Any:
    """A byte-counting tqdm bar, or None when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=remote.size, unit="B", unit_scale=True, desc=remote.name)
