"""What the benchmarks share: the wall time of a call, and side-by-side timing in interleaved rounds.

Every benchmark of this folder times its contenders the same way: an untimed warm-up, then
``repeats`` rounds in which every contender is measured once, the order rotating each round (so
that no contender always runs first, or always right after the same other one), each measurement
a block of consecutive calls lasting at least ``min_block_s``. The reported figures are the median
over rounds and the best (minimum) round; on a busy machine the minimum is the steadier estimate
of the undisturbed cost. On CUDA the GPU's queue is drained (``torch.cuda.synchronize()``) before
a clock is read, so that the kernels a block queued are counted in it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from transformer_book.attention import device_kernels


def add_round_arguments(
    parser: argparse.ArgumentParser,
    *,
    repeats: int,
    warmup: int,
    min_block_s: float,
    warmup_help: str = "untimed calls per contender first",
) -> None:
    """The command-line options of :func:`interleaved`'s rounds: ``--repeats``, ``--warmup``,
    ``--min-block-s``, and ``--threads`` (``torch.set_num_threads``), with this script's defaults."""
    parser.add_argument("--repeats", type=int, default=repeats, help="interleaved measurements per contender")
    parser.add_argument("--warmup", type=int, default=warmup, help=warmup_help)
    parser.add_argument("--min-block-s", type=float, default=min_block_s, help="shortest measurement, in seconds")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")


def check_round_arguments(parser: argparse.ArgumentParser, repeats: int, threads: int | None) -> None:
    """Stop with the parser's usage message on a round count or thread count below 1."""
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    if threads is not None and threads < 1:
        parser.error("--threads must be at least 1")


def training_pass(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Sequence[Any],
    loss_of: Callable[[torch.nn.Module, Any], torch.Tensor],
    autocast: Callable[[], AbstractContextManager] = nullcontext,
) -> Callable[[], None]:
    """A contender for :func:`interleaved`: one training step (``loss_of(model, batch)`` under
    ``autocast``, backward, optimizer step) on each batch in turn."""

    def run() -> None:
        for batch in batches:
            with autocast():
                loss = loss_of(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds that ``fn()`` takes, ``torch.cuda.synchronize()`` before and after on CUDA so that
    the kernels it queued are counted."""
    return time_block(fn, 1, device)


def time_block(fn: Callable[[], Any], calls: int, device: torch.device) -> float:
    """Seconds per call over ``calls`` consecutive calls of ``fn``, synchronised on CUDA."""
    if calls < 1:
        raise ValueError(f"time_block: calls must be at least 1, got {calls}")
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / calls


def event_median(fn: Callable[[], Any], device: torch.device, repeats: int = 20, warmup: int = 3) -> float:
    """Median seconds of one call of ``fn`` on a GPU, timed by CUDA events around each call after
    ``warmup`` untimed calls: the device's own time, without the host's clock or launch gaps."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def rotated(names: list[str], round_: int) -> list[str]:
    """The order of round ``round_``: ``names`` rotated left by ``round_`` places (for two
    contenders: alternating)."""
    k = round_ % len(names)
    return names[k:] + names[:k]


@dataclass
class Interleaved:
    """Samples of :func:`interleaved`: seconds per call, one per round, for every contender."""

    samples: dict[str, list[float]]
    calls_per_block: int

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def best(self, name: str) -> float:
        return min(self.samples[name])

    def worst(self, name: str) -> float:
        return max(self.samples[name])


def interleaved(
    contenders: dict[str, Callable[[], Any]],
    device: torch.device,
    repeats: int,
    *,
    warmup: int = 1,
    min_block_s: float = 0.0,
) -> Interleaved:
    """Time every contender in ``repeats`` interleaved rounds, the order rotating each round.

    First ``warmup`` untimed calls of each contender (allocator, kernels, thread pools, optimizer
    state). With ``min_block_s > 0``, one timed call of each then calibrates the block: enough
    consecutive calls that a block of the fastest contender lasts at least ``min_block_s``, the
    same number for all. With ``min_block_s <= 0`` a block is one call and nothing is calibrated.
    """
    if repeats < 1:
        raise ValueError(f"interleaved: repeats must be at least 1, got {repeats}")
    if not contenders:
        raise ValueError("interleaved: no contenders")
    with device_kernels(device):  # the kernel choices training.fit makes on this device
        return _interleaved(contenders, device, repeats, warmup, min_block_s)


def _interleaved(
    contenders: dict[str, Callable[[], Any]], device: torch.device, repeats: int, warmup: int, min_block_s: float
) -> Interleaved:
    names = list(contenders)
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    calls = 1
    if min_block_s > 0:
        single = min(time_block(fn, 1, device) for fn in contenders.values())
        calls = max(1, math.ceil(min_block_s / max(single, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in rotated(names, r):
            samples[name].append(time_block(contenders[name], calls, device))
    return Interleaved(samples, calls)
