"""Data integrity under faults, against a real HTTP server on 127.0.0.1 that each test starts and
stops: interrupted downloads, wrong bytes, a corrupted cache, and two processes fetching the same
file at once (the cache's file lock lets one download while the other waits, then reads it)."""

from __future__ import annotations

import hashlib
import http.server
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from transformer_book.data import ChecksumMismatchError, Corpus, DataUnavailableError, RemoteFile, fetch

CONTENT = bytes(range(256)) * 4096  # 1 MiB, every byte value
SHA256 = hashlib.sha256(CONTENT).hexdigest()


class Server:
    """A loopback HTTP server for one file, ``/words.bin``; ``mode`` says how it misbehaves."""

    def __init__(self, mode: str = "ok", delay: float = 0.0) -> None:
        self.mode, self.delay, self.requests = mode, delay, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the library's name
                outer.requests += 1
                body = CONTENT if outer.mode != "wrong" else CONTENT[::-1]
                self.send_response(200)
                self.send_header("Content-Length", str(len(CONTENT)))
                self.end_headers()
                sent = body if outer.mode != "truncate" else body[: len(body) // 2]
                for start in range(0, len(sent), 1 << 16):
                    self.wfile.write(sent[start : start + (1 << 16)])
                    time.sleep(outer.delay)
                if outer.mode == "truncate":
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/words.bin"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def corpus(url: str) -> Corpus:
    return Corpus(
        name="toybin",
        description="test corpus",
        licence="CC0",
        citation="toy2024",
        attribution="",
        homepage="https://example.org",
        files=(RemoteFile("words.bin", url, SHA256, len(CONTENT)),),
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TB_DATA_DIR", raising=False)
    return tmp_path / "cache"


def files_in(root: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix != ".lock")
        if root.exists()
        else []
    )


def test_a_download_is_verified_and_cached(cache):
    with Server() as server:
        path = fetch(corpus(server.url))
        assert path.read_bytes() == CONTENT and server.requests == 1
        assert fetch(corpus(server.url)) == path and server.requests == 1  # the second is a cache hit


def test_an_interrupted_download_leaves_nothing_that_passes_as_complete(cache):
    with Server("truncate") as server:
        with pytest.raises(DataUnavailableError, match="words.bin"):
            fetch(corpus(server.url))
    assert files_in(cache) == []
    with Server() as server:  # the next try starts afresh
        assert fetch(corpus(server.url)).read_bytes() == CONTENT


def test_wrong_bytes_are_refused_and_not_kept(cache):
    with Server("wrong") as server:
        with pytest.raises(ChecksumMismatchError, match=SHA256):
            fetch(corpus(server.url))
    assert files_in(cache) == []


def test_a_cached_file_that_no_longer_matches_is_replaced(cache):
    with Server() as server:
        path = fetch(corpus(server.url))
        path.write_bytes(CONTENT[:-1] + b"x")  # bit rot, or a hand edit
        assert fetch(corpus(server.url)).read_bytes() == CONTENT
        assert server.requests == 2


def _fetch_in_a_process(url: str, cache_dir: str, queue: multiprocessing.Queue) -> None:
    import os

    os.environ["TB_CACHE_DIR"] = cache_dir
    os.environ.pop("TB_DATA_DIR", None)
    try:
        path = fetch(corpus(url))
        queue.put(("ok", str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
    except Exception as err:  # reported to the parent
        queue.put(("error", repr(err), ""))


def test_two_processes_fetching_at_once_download_once_and_both_get_the_file(cache):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with Server(delay=0.02) as server:  # about 0.3 s per download
        workers = [context.Process(target=_fetch_in_a_process, args=(server.url, str(cache), queue)) for _ in range(2)]
        for w in workers:
            w.start()
        results = [queue.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(timeout=60)
    assert [r[0] for r in results] == ["ok", "ok"], results
    assert {r[1] for r in results} == {str(cache / "toybin" / "words.bin")}
    assert {r[2] for r in results} == {SHA256}
    assert server.requests == 1  # the second waited, then read the cache
    assert files_in(cache) == ["toybin/words.bin"]
