"""Shared fixtures of the unit tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is fastest, and avoids oversubscribing the CPU when
    pytest-xdist runs one worker per core (and makes float sums independent of the core count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fetched(tmp_path, monkeypatch):
    """A data file written by the test instead of the real corpus: ``fetch`` (and so
    ``fetch_text``) returns ``tmp_path / "file.txt"``, whatever is asked for. Gives
    ``(path, calls)``, ``calls`` listing ``(corpus, file, download)`` per fetch."""
    from transformer_book.data import download

    path = tmp_path / "file.txt"
    calls = []

    def fake_fetch(corpus, file=None, *, download=True):
        calls.append((corpus, file, download))
        return path

    monkeypatch.setattr(download, "fetch", fake_fetch)
    return path, calls
