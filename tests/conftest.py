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
