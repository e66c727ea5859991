"""Where and how a chapter runs: device, seeds, profile, environment summary.

Nothing here runs at import time: no seeding, no warning filters, no thread settings.
Each function changes global state only when called, and says so.

Environment variables:

* ``TB_PROFILE``: ``full`` (default; what the committed book outputs show) or ``quick``
  (what CI runs: every notebook well under a minute on two CPU cores).
* ``TB_DEVICE``: force a device (``cpu``, ``cuda``, ``cuda:1``, ``mps``).
"""

from __future__ import annotations

import os
import platform
import random
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from transformer_book import checks

__all__ = [
    "PROFILES",
    "profile",
    "by_profile",
    "select_device",
    "seed_everything",
    "device_description",
    "machine_description",
    "environment_summary",
]

PROFILES = ("full", "quick")
"""The run profiles that ``TB_PROFILE`` may name, the default first (see :func:`profile`)."""
T = TypeVar("T")


def profile() -> str:
    """The run profile named by ``TB_PROFILE``: ``"full"`` (default) or ``"quick"``.

    Raises:
        ValueError: if ``TB_PROFILE`` holds anything else.
    """
    name = os.environ.get("TB_PROFILE", "full").strip().lower() or "full"
    if name not in PROFILES:
        raise ValueError(f"TB_PROFILE must be one of {PROFILES}, got {name!r}")
    return name


def by_profile(*, full: T, quick: T) -> T:
    """Pick a size by profile: ``by_profile(full=100_000, quick=5_000)``."""
    return full if profile() == "full" else quick


def select_device(preference: str | None = None) -> torch.device:
    """Choose the device to compute on.

    Order: ``preference`` if given, else ``TB_DEVICE`` if set, else CUDA, then Apple's MPS,
    then the CPU.

    Raises:
        ValueError: if a requested device is unknown or not available here.
    """
    requested = preference or os.environ.get("TB_DEVICE")
    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as err:
            raise ValueError(f"unknown device {requested!r}: {err}") from None
        available = {
            "cpu": True,
            "cuda": torch.cuda.is_available(),
            "mps": _mps_available(),
        }.get(device.type, False)
        if not available:
            raise ValueError(f"device {requested!r} was requested but is not available here")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {requested!r} was requested but only {torch.cuda.device_count()} CUDA devices exist"
            )
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def seed_everything(seed: int, *, deterministic: bool = True, threads: int | None = None) -> None:
    """Seed Python, NumPy and PyTorch (all devices) so a run can be repeated.

    Changes global state on purpose: the three random generators and, when
    ``deterministic``, ``torch.use_deterministic_algorithms(True, warn_only=True)`` and the
    cuBLAS workspace setting that CUDA needs for it. ``threads`` fixes PyTorch's intra-op
    thread count, since sums over many elements differ in their last bits between thread
    counts.

    Raises:
        ValueError: for a seed that is not a non-negative int, or threads < 1.
    """
    checks.non_negative_int("seed_everything", seed=seed)
    if threads is not None:
        checks.positive_int("seed_everything", threads=threads)
        torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


def device_description(device: torch.device) -> str:
    """The device in words: ``cpu``, ``mps`` or ``cuda (<GPU name>)``."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda ({torch.cuda.get_device_name(index)})"
    return device.type


def machine_description(device: torch.device) -> str:
    """The hardware in words, for benchmark tables: the GPU's name, or the CPU's model name
    (from ``/proc/cpuinfo`` where there is one) with the operating system and architecture."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} ({platform.system()} {platform.machine()})"


def environment_summary(device: torch.device | None = None) -> str:
    """A few lines saying what a chapter runs on: versions, device, profile, threads, and whether
    the corpora come from a local copy (``$TB_DATA_DIR``, whose path is not printed) or were
    downloaded.

    Meant to be printed at the top of every chapter, so that stored outputs say where they
    came from.
    """
    from transformer_book import __version__

    device = device or select_device()
    rows = [
        ("transformer_book", __version__),
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        ("numpy", np.__version__),
        ("device", device_description(device)),
        ("profile", profile()),
        ("torch threads", str(torch.get_num_threads())),
        # not the directory itself: a path says nothing to a reader and names the machine it ran on
        (
            "data",
            "a local copy, from $TB_DATA_DIR"
            if os.environ.get("TB_DATA_DIR")
            else "downloaded from the pinned addresses into the cache",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}} : {v}" for k, v in rows)
