"""Tests of the data catalogue, of fetch (data folder, cache, download) and of the text loaders.

Everything runs offline: test corpora point at ``file://`` URLs of files the tests write, or
at a closed loopback port. The tests on the real corpora need ``TB_DATA_DIR`` (CI sets it).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from transformer_book.data import (
    CORPORA,
    ODYSSEY_CLEAN_SHA256,
    ChecksumMismatchError,
    Corpus,
    DataUnavailableError,
    RemoteFile,
    UnknownCorpusError,
    fetch,
    get_corpus,
    load_odyssey,
    sha256_of,
    strip_gutenberg,
)

CONTENT = b"The quick brown fox jumps over the lazy dog.\n" * 1000
CONTENT_SHA256 = hashlib.sha256(CONTENT).hexdigest()
WRONG_SHA256 = "0" * 64


def make_corpus(url: str, sha256: str = CONTENT_SHA256, name: str = "toy") -> Corpus:
    """A one-file test corpus whose file ``words.txt`` lives at ``url``."""
    return Corpus(
        name=name,
        description="test corpus",
        licence="CC0",
        citation="toy2024",
        attribution="",
        homepage="https://example.org",
        files=(RemoteFile("words.txt", url, sha256, len(CONTENT)),),
    )


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Fresh cache dir, no data dir, and a source file served through a file:// URL."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TB_CACHE_DIR", str(cache))
    monkeypatch.delenv("TB_DATA_DIR", raising=False)
    source = tmp_path / "upstream" / "words.txt"
    source.parent.mkdir()
    source.write_bytes(CONTENT)
    return {"tmp": tmp_path, "cache": cache, "source": source}


def all_files(root: Path) -> list[Path]:
    """The files under ``root``, but for the empty ``.lock`` files that fetch's file lock leaves."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".lock") if root.exists() else []


def closed_port_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/x"


def forbid_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("fetch tried to download")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


# --- download and cache -------------------------------------------------------------------


def test_cache_miss_downloads_into_cache(dirs: dict[str, Path]) -> None:
    path = fetch(make_corpus(dirs["source"].as_uri()))
    assert path == dirs["cache"] / "toy" / "words.txt"
    assert path.read_bytes() == CONTENT
    assert all_files(dirs["cache"]) == [path]  # no leftover .part file


def test_second_fetch_is_a_cache_hit(dirs: dict[str, Path], monkeypatch) -> None:
    corpus = make_corpus(dirs["source"].as_uri())
    first = fetch(corpus)
    dirs["source"].unlink()
    forbid_network(monkeypatch)
    assert fetch(corpus) == first
    assert fetch(corpus, download=False) == first


def test_checksum_mismatch_raises_and_keeps_nothing(dirs: dict[str, Path]) -> None:
    corpus = make_corpus(dirs["source"].as_uri(), sha256=WRONG_SHA256)
    with pytest.raises(ChecksumMismatchError) as info:
        fetch(corpus, "words.txt")
    message = str(info.value)
    assert WRONG_SHA256 in message and CONTENT_SHA256 in message
    assert "toy" in message and dirs["source"].as_uri() in message
    assert all_files(dirs["cache"]) == []


def test_corrupt_cache_is_replaced(dirs: dict[str, Path]) -> None:
    cached = dirs["cache"] / "toy" / "words.txt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"truncated")
    assert fetch(make_corpus(dirs["source"].as_uri())) == cached
    assert cached.read_bytes() == CONTENT


def test_corrupt_cache_is_removed_even_without_download(dirs: dict[str, Path]) -> None:
    cached = dirs["cache"] / "toy" / "words.txt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"truncated")
    with pytest.raises(DataUnavailableError):
        fetch(make_corpus(dirs["source"].as_uri()), download=False)
    assert not cached.exists()


def test_progress_bar_download(dirs: dict[str, Path]) -> None:
    pytest.importorskip("tqdm")
    path = fetch(make_corpus(dirs["source"].as_uri()), progress=True)
    assert sha256_of(path) == CONTENT_SHA256


# --- data dir -----------------------------------------------------------------------------


def test_data_dir_is_preferred_and_not_copied(dirs: dict[str, Path], monkeypatch) -> None:
    data = dirs["tmp"] / "data"
    (data / "toy").mkdir(parents=True)
    (data / "toy" / "words.txt").write_bytes(CONTENT)
    monkeypatch.setenv("TB_DATA_DIR", str(data))
    forbid_network(monkeypatch)
    path = fetch(make_corpus(dirs["source"].as_uri()))
    assert path == data / "toy" / "words.txt"
    assert all_files(dirs["cache"]) == []
    assert all_files(data) == [path]


def test_data_dir_with_wrong_checksum_is_ignored(dirs: dict[str, Path], monkeypatch) -> None:
    user_file = dirs["tmp"] / "data" / "toy" / "words.txt"
    user_file.parent.mkdir(parents=True)
    user_file.write_bytes(b"edited by the user")
    monkeypatch.setenv("TB_DATA_DIR", str(dirs["tmp"] / "data"))
    with pytest.warns(UserWarning) as record:
        path = fetch(make_corpus(dirs["source"].as_uri()))
    message = str(record[0].message)
    assert str(user_file) in message and CONTENT_SHA256 in message
    assert hashlib.sha256(b"edited by the user").hexdigest() in message
    assert path == dirs["cache"] / "toy" / "words.txt" and path.read_bytes() == CONTENT
    assert user_file.read_bytes() == b"edited by the user"  # the user's file is untouched


# --- failures -----------------------------------------------------------------------------


def test_offline_raises_data_unavailable(dirs: dict[str, Path]) -> None:
    url = closed_port_url()
    with pytest.raises(DataUnavailableError) as info:
        fetch(make_corpus(url))
    message = str(info.value)
    for part in ("toy", "words.txt", url, CONTENT_SHA256, "TB_DATA_DIR"):
        assert part in message
    assert info.value.__cause__ is not None
    assert all_files(dirs["cache"]) == []


def test_download_false_with_nothing_present(dirs: dict[str, Path]) -> None:
    with pytest.raises(DataUnavailableError, match="TB_DATA_DIR"):
        fetch(make_corpus(dirs["source"].as_uri()), download=False)
    assert all_files(dirs["cache"]) == []


class FailingResponse(io.BytesIO):
    """A response that yields one chunk, checks a .part file exists, then raises ``error``."""

    def __init__(self, error: BaseException, part_dir: Path) -> None:
        super().__init__(CONTENT)
        self.error, self.part_dir, self.calls = error, part_dir, 0

    def read(self, size: int | None = -1) -> bytes:
        self.calls += 1
        if self.calls == 1:
            return super().read(100)
        assert [p.name for p in self.part_dir.glob(".words.txt.*.part")]  # temp beside target
        raise self.error


@pytest.mark.parametrize(
    "error, expected", [(ConnectionResetError("reset"), DataUnavailableError), (KeyboardInterrupt(), KeyboardInterrupt)]
)
def test_interrupted_download_leaves_nothing(dirs, monkeypatch, error, expected) -> None:
    response = FailingResponse(error, dirs["cache"] / "toy")
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: response)
    with pytest.raises(expected):
        fetch(make_corpus("https://example.invalid/words.txt"))
    assert response.calls == 2
    assert all_files(dirs["cache"]) == []


# --- catalogue ----------------------------------------------------------------------------


def test_unknown_corpus_lists_known_names() -> None:
    with pytest.raises(UnknownCorpusError) as info:
        get_corpus("shakespeare")
    assert isinstance(info.value, KeyError)
    for name in ("shakespeare", "tinyshakespeare", "odyssey", "wikitext2"):
        assert name in str(info.value)
    with pytest.raises(KeyError, match="tinyshakespeare"):
        fetch("no_such_corpus")


def test_unknown_file_lists_files() -> None:
    with pytest.raises(KeyError, match=r"valid\.txt") as info:
        CORPORA["wikitext2"].file("validation.txt")
    assert "validation.txt" in str(info.value) and "train.txt" in str(info.value)
    with pytest.raises(KeyError, match="dev.tsv"):
        fetch("sst2", "train_full.tsv")


def test_file_required_for_multi_file_corpus() -> None:
    with pytest.raises(ValueError, match="train.txt, valid.txt, test.txt"):
        fetch("wikitext2")


def test_catalogue_entries_are_pinned() -> None:
    expected = {"tinyshakespeare", "odyssey", "tatoeba_deu_eng", "multi30k", "wikitext2", "sst2"}
    assert set(CORPORA) == expected
    assert len(CORPORA["multi30k"].files) == 6
    pinned = re.compile(r"https://raw\.githubusercontent\.com/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+")
    for name, corpus in CORPORA.items():
        assert corpus.name == name and get_corpus(name) is corpus
        assert corpus.licence and corpus.citation and corpus.files
        assert len(set(corpus.file_names)) == len(corpus.files)
        for remote in corpus.files:
            assert pinned.fullmatch(remote.url), remote.url
            assert re.fullmatch(r"[0-9a-f]{64}", remote.sha256)
            assert remote.size and remote.size > 0
    assert CORPORA["sst2"].file("train.tsv").url.endswith("/glue_data/SST-2/train_full.tsv")
    assert "tatoeba.org" in CORPORA["tatoeba_deu_eng"].attribution


def test_import_touches_no_file_system(tmp_path: Path) -> None:
    cache = tmp_path / "never_created"
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise AssertionError('network used at import')\n"
        "socket.socket.connect = refuse\n"
        "import transformer_book.data\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TB_CACHE_DIR": str(cache), "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=root)
    assert not cache.exists()


# --- Gutenberg text -----------------------------------------------------------------------


def test_strip_gutenberg_synthetic() -> None:
    raw = (
        "\ufeffThe Project Gutenberg eBook of Test\r\n\r\nheader text\r\n"
        "*** START OF THE PROJECT GUTENBERG EBOOK TEST ***\r\n\r\n\r\n"
        "BOOK I  \r\n\r\nSing, O Muse.\t\r\n\r\n"
        "        *** END OF THE PROJECT GUTENBERG EBOOK TEST ***\r\nlicence\r\n"
    )
    assert strip_gutenberg(raw) == "BOOK I\n\nSing, O Muse.\n"


def test_strip_gutenberg_requires_markers() -> None:
    with pytest.raises(ValueError):
        strip_gutenberg("no markers here\n")
    with pytest.raises(ValueError):
        strip_gutenberg("*** START OF THE PROJECT GUTENBERG EBOOK X ***\ntext without an end\n")


# --- real data (needs TB_DATA_DIR) --------------------------------------------------------


def real_data_dir(required: str) -> Path:
    value = os.environ.get("TB_DATA_DIR")
    if not value:
        pytest.skip("TB_DATA_DIR is not set; it must point at the shared real-data folder")
    if not (Path(value) / required).is_file():
        pytest.skip(f"TB_DATA_DIR={value} holds no {required}")
    return Path(value)


def test_load_odyssey_matches_clean_copy(tmp_path: Path, monkeypatch) -> None:
    real_data_dir("odyssey/odyssey_pg1727.txt")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    forbid_network(monkeypatch)
    text = load_odyssey()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == ODYSSEY_CLEAN_SHA256
    assert text.startswith("[Illustration]") and "Gutenberg" not in text


def test_registry_matches_sha256sums(tmp_path: Path, monkeypatch) -> None:
    root = real_data_dir("SHA256SUMS")
    sums = {}
    for line in (root / "SHA256SUMS").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        sums[path.removeprefix("./")] = digest
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    forbid_network(monkeypatch)
    for corpus in CORPORA.values():
        for remote in corpus.files:
            key = f"{corpus.name}/{remote.name}"
            assert remote.sha256 == sums[key], key
            assert remote.size == (root / key).stat().st_size, key
            assert fetch(corpus, remote.name, download=False) == root / key


# --- a cache that is read-only, misplaced, locked or littered (issue 22) -------------------


def test_a_read_only_cache_holding_a_verified_file_is_used(dirs: dict[str, Path], monkeypatch) -> None:
    """A shared, read-only cache (root cannot be denied by chmod, so the lock refuses instead)."""
    from transformer_book.data import download

    corpus = make_corpus(dirs["source"].as_uri())
    cached = fetch(corpus)

    class ReadOnlyLock:
        def __init__(self, path: str, timeout: float) -> None:
            self.lock_file = path

        def acquire(self) -> None:
            raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(download, "FileLock", ReadOnlyLock)
    assert fetch(corpus) == cached  # no lock needed to read a verified file
    cached.unlink()
    with pytest.raises(
        DataUnavailableError, match=r"cache folder .*toy is not writable \(Permission denied\).*TB_CACHE_DIR"
    ):
        fetch(corpus)


def test_a_cache_dir_that_is_a_file_is_named(dirs: dict[str, Path], monkeypatch) -> None:
    from transformer_book.data.download import DataError

    not_a_folder = dirs["tmp"] / "cache-file"
    not_a_folder.write_text("x")
    monkeypatch.setenv("TB_CACHE_DIR", str(not_a_folder))
    with pytest.raises(DataError, match=r"cache-file .*TB_CACHE_DIR.* is not a folder"):
        fetch(make_corpus(dirs["source"].as_uri()))


@pytest.mark.parametrize("name", ["../outside", "a/b", "..", "", " toy"])
def test_a_corpus_or_file_name_that_leads_out_of_the_cache_is_refused(dirs: dict[str, Path], name: str) -> None:
    with pytest.raises(ValueError, match=r"Corpus: name must be a plain file name"):
        make_corpus(dirs["source"].as_uri(), name=name)
    with pytest.raises(ValueError, match=r"RemoteFile: name must be a plain file name"):
        RemoteFile(name, dirs["source"].as_uri(), CONTENT_SHA256, len(CONTENT))
    assert not (dirs["tmp"] / "outside").exists()


def test_a_lock_held_too_long_raises_data_unavailable_naming_the_lock(dirs: dict[str, Path], monkeypatch) -> None:
    from filelock import FileLock

    from transformer_book.data import download

    monkeypatch.setattr(download, "_LOCK_TIMEOUT_SECONDS", 0.2)
    target = dirs["cache"] / "toy" / "words.txt"
    target.parent.mkdir(parents=True)
    with FileLock(str(target) + ".lock"):
        with pytest.raises(DataUnavailableError, match=r"another process has held .*words\.txt\.lock"):
            fetch(make_corpus(dirs["source"].as_uri()))


def test_a_killed_download_leaves_no_part_file_for_ever_and_files_follow_the_umask(dirs: dict[str, Path]) -> None:
    folder = dirs["cache"] / "toy"
    folder.mkdir(parents=True)
    stale = folder / ".words.txt.k1ll3d.part"
    stale.write_bytes(CONTENT[:100])
    old = os.umask(0o022)
    try:
        path = fetch(make_corpus(dirs["source"].as_uri()))
    finally:
        os.umask(old)
    assert not stale.exists() and all_files(dirs["cache"]) == [path]
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_folder_where_the_cached_file_belongs_is_named(dirs: dict[str, Path]) -> None:
    from transformer_book.data.download import DataError

    (dirs["cache"] / "toy" / "words.txt").mkdir(parents=True)
    with pytest.raises(DataError, match=r"words\.txt is in the way.*remove it"):
        fetch(make_corpus(dirs["source"].as_uri()))
