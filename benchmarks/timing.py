"""What the benchmarks share: the wall time of one call, with the GPU's queue drained on both sides."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds that ``fn()`` takes, ``torch.cuda.synchronize()`` before and after on CUDA so that
    the kernels it queued are counted."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start
