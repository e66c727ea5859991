r"""Training: a resumable fit loop (chapter 7). The losses it minimises live in
:mod:`~transformer_book.objectives`, the learning-rate schedules in
:mod:`~transformer_book.schedules`, the checkpoint files in :mod:`~transformer_book.checkpoints`
(import them from there).

:func:`fit` is deliberately small: AdamW, one schedule, gradient clipping, validation, a
progress bar, and atomic checkpoints from which a run resumes to the *same* losses as a run
that was never interrupted. For that the training data must be addressable by step: the
caller passes ``train_batches(step) -> batch``, a pure function of the step (seed a generator
with the step, or index a fixed list of batches), so that resuming at step ``s`` re-creates
the data position without replaying an iterator.
"""

from __future__ import annotations

import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

# The text progress bar everywhere: it renders in terminals, Jupyter and Colab alike, and
# unlike tqdm.auto needs no ipywidgets (whose absence tqdm.auto reports with a warning).
from tqdm.std import tqdm

from transformer_book import checks
from transformer_book.attention import ATTENTION_KERNELS, device_kernels
from transformer_book.checkpoints import (
    check_model_matches,
    read_checkpoint,
    require_keys,
    write_checkpoint,
    writer_lock,
)
from transformer_book.flops import mfu, peak_flops
from transformer_book.runtime import seed_everything
from transformer_book.schedules import SCHEDULES, make_schedule

__all__ = [
    "TrainConfig",
    "History",
    "fit",
    "CHECKPOINT_VERSION",
    "init_distributed",
    "shard_batch",
    "to_device",
    "seconds_per_step",
    "steps_in_budget",
    "summary_line",
    "mixed_precision",
    "compiles",
    "COMPILE_MIN_STEPS",
]

CHECKPOINT_VERSION = 1
"""Format version written into every checkpoint; :func:`fit` refuses other versions."""
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_MIN_STEPS = 1_000
"""The shortest run that ``TrainConfig(compile=None)`` compiles on CUDA: compiling a step takes tens
of seconds, which a run of a few hundred short steps (a fine-tune, a scaling-law grid point) never
earns back."""


def mixed_precision(device: torch.device | str, enabled: bool = True) -> torch.dtype | None:
    """The autocast dtype of a training step on ``device``: ``None`` off CUDA (or when not
    ``enabled``); ``torch.bfloat16`` on a GPU that computes it natively (compute capability 8.0 or
    above: A100, H100, RTX 30 series and later); ``torch.float16``, with a gradient scaler, on older
    ones (Colab's free T4 is 7.5). Not ``torch.cuda.is_bf16_supported()``, which counts emulation:
    on a T4 it says yes, and bfloat16 then runs emulated and the fused attention kernels refuse it."""
    device = torch.device(device)
    if not enabled or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16


def _precision(device: torch.device, amp: bool) -> tuple[Callable[[], Any], torch.amp.GradScaler | None]:
    """``(autocast, scaler)`` of a training step on ``device``: a factory of the autocast context
    of :func:`mixed_precision` (a null context off CUDA), and a gradient scaler for float16."""
    dtype = mixed_precision(device, amp)
    autocast = (lambda: torch.autocast("cuda", dtype=dtype)) if dtype is not None else nullcontext
    return autocast, torch.amp.GradScaler("cuda") if dtype == torch.float16 else None


def compiles(config: TrainConfig, device: torch.device | str) -> bool:
    """Whether :func:`fit` compiles the step of ``config`` on ``device``: ``config.compile`` when
    set, else on CUDA for runs of at least :data:`COMPILE_MIN_STEPS` steps."""
    if config.compile is not None:
        return config.compile
    return torch.device(device).type == "cuda" and config.steps >= COMPILE_MIN_STEPS


@dataclass
class TrainConfig:
    """Settings of :func:`fit`.

    ``schedule`` is ``"inverse_sqrt"`` (:func:`~transformer_book.schedules.warmup_inverse_sqrt`), ``"cosine"``
    (:func:`~transformer_book.schedules.warmup_cosine` over ``steps``, down to ``min_lr_ratio`` times ``lr``) or
    ``"constant"`` (warm-up, then flat).
    ``amp`` turns on mixed precision only on CUDA (:func:`mixed_precision`: bfloat16 on a GPU that
    computes it natively, else float16 with a gradient scaler); on the CPU it is ignored. Validation runs every ``eval_every`` steps
    and after the last; a checkpoint is written every ``checkpoint_every`` steps and after the
    last when ``checkpoint_path`` is set. ``smoothing`` is not used by :func:`fit` itself; it
    is there for the caller's ``loss_fn`` to read, so that one config describes the run.

    ``time_budget_s`` stops training once this many seconds of training (forward, backward
    and optimizer steps; validation and checkpoints not counted) have passed, or at ``steps``,
    whichever comes first: how to compare models at equal training time. The number of steps
    then depends on the machine's speed, so a run with a budget is repeatable only as far as
    the machine's timing is. A compiled run's first step, which compiles the graph, does not
    count against the budget (its seconds are in :class:`History`'s ``compile_s``).

    ``compile`` runs the training step (the model's forward and the loss; the backward follows)
    through ``torch.compile``: ``None`` (default) compiles on CUDA only, and only for runs of at
    least :data:`COMPILE_MIN_STEPS` steps, where fusing the many small kernels of LayerNorm, GELU,
    dropout and the residual sums pays for the tens of seconds compiling takes (a part that cannot
    be compiled falls back to running uncompiled, with a warning);
    ``False`` never compiles (the first step then starts at once, and errors show the book's
    own Python frames); ``True`` compiles on any device. Validation always runs uncompiled.
    ``compile_mode`` is passed to ``torch.compile``: ``"default"``, ``"reduce-overhead"`` (CUDA
    graphs: the step's kernels replayed with one launch, for small models whose time goes to
    launching kernels), ``"max-autotune"`` or ``"max-autotune-no-cudagraphs"``.
    ``attention_kernel`` (one of :data:`transformer_book.attention.ATTENTION_KERNELS`, e.g.
    ``"cudnn"`` on an H100) is the fused attention kernel the training step tries first
    (:func:`transformer_book.attention.device_kernels`); ``None`` leaves PyTorch's choice.
    ``flops_per_token`` (e.g. :func:`transformer_book.flops.gpt_flops_per_token`) makes
    :func:`fit` report model FLOPs utilisation against the device's datasheet peak
    (:func:`transformer_book.flops.peak_flops`), when that peak is known.

    ``deterministic`` runs the steps with ``torch.use_deterministic_algorithms`` on (slower on
    CUDA, where some kernels then take a deterministic path); ``False``, the default, runs them
    with it off whatever the caller set (say :func:`~transformer_book.runtime.seed_everything`
    for a chapter's derivations), as the book's measured runs did, and restores the caller's
    setting afterwards. On the CPU the steps compute the same numbers either way.
    """

    steps: int = 1000
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    warmup_steps: int = 100
    schedule: str = "inverse_sqrt"
    smoothing: float = 0.1
    clip_norm: float | None = 1.0
    eval_every: int = 200
    log_every: int = 10
    amp: bool = True
    seed: int = 0
    checkpoint_path: str | None = None
    checkpoint_every: int = 500
    time_budget_s: float | None = None
    min_lr_ratio: float = 0.0
    compile: bool | None = None
    compile_mode: str = "default"
    flops_per_token: float | None = None
    attention_kernel: str | None = None
    deterministic: bool = False

    def __post_init__(self) -> None:
        checks.positive_int(
            "TrainConfig",
            steps=self.steps,
            eval_every=self.eval_every,
            log_every=self.log_every,
            checkpoint_every=self.checkpoint_every,
        )
        checks.non_negative_int("TrainConfig", warmup_steps=self.warmup_steps, seed=self.seed)
        checks.finite_real("TrainConfig", "lr", self.lr, above=0)
        checks.finite_real("TrainConfig", "weight_decay", self.weight_decay, at_least=0)
        checks.probability("TrainConfig", "smoothing", self.smoothing)
        checks.probability("TrainConfig", "min_lr_ratio", self.min_lr_ratio, one=True)
        self.betas = tuple(self.betas)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"TrainConfig: betas must be two numbers in [0, 1), got {self.betas}")
        checks.choice("TrainConfig", "schedule", self.schedule, SCHEDULES)
        if self.schedule == "inverse_sqrt" and self.warmup_steps < 1:
            raise ValueError("TrainConfig: schedule 'inverse_sqrt' needs warmup_steps >= 1")
        if self.schedule == "cosine" and self.warmup_steps >= self.steps:
            raise ValueError(
                f"TrainConfig: warmup_steps={self.warmup_steps} must be below steps={self.steps} for 'cosine'"
            )
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"TrainConfig: time_budget_s must be positive or None, got {self.time_budget_s}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"TrainConfig: clip_norm must be positive or None, got {self.clip_norm}")
        if self.compile not in (None, True, False):
            raise ValueError(f"TrainConfig: compile must be None, True or False, got {self.compile!r}")
        checks.boolean("TrainConfig", amp=self.amp, deterministic=self.deterministic)
        checks.choice("TrainConfig", "compile_mode", self.compile_mode, COMPILE_MODES)
        if self.attention_kernel is not None and self.attention_kernel not in ATTENTION_KERNELS:
            raise ValueError(
                f"TrainConfig: attention_kernel must be None or one of {ATTENTION_KERNELS}, "
                f"got {self.attention_kernel!r}"
            )
        if self.flops_per_token is not None and not self.flops_per_token > 0:
            raise ValueError(f"TrainConfig: flops_per_token must be positive or None, got {self.flops_per_token}")


@dataclass
class History:
    """What :func:`fit` measured, as ``(step, value)`` pairs; ``step`` counts completed steps.

    ``train_time_s`` holds the cumulative training time in seconds (validation and
    checkpoints excluded) at every logging and validation step, so that curves can be drawn
    against time as well as against steps. ``mfu`` holds the model FLOPs utilisation of each
    logging window (a fraction), when :class:`TrainConfig`'s ``flops_per_token`` is set and the
    device's peak is known. ``compile_s`` holds the seconds of the steps that compiled the graph
    (the first step of a compiled run), which ``train_time_s`` and the time budget leave out.
    """

    train_loss: list[tuple[int, float]] = field(default_factory=list)
    val_loss: list[tuple[int, float]] = field(default_factory=list)
    lr: list[tuple[int, float]] = field(default_factory=list)
    tokens_per_s: list[tuple[int, float]] = field(default_factory=list)
    train_time_s: list[tuple[int, float]] = field(default_factory=list)
    mfu: list[tuple[int, float]] = field(default_factory=list)
    compile_s: list[tuple[int, float]] = field(default_factory=list)

    def time_at(self, step: int) -> float:
        """Training seconds spent up to ``step``, interpolated between recorded points."""
        if not self.train_time_s:
            raise ValueError("History.time_at: no times recorded")
        steps, seconds = zip(*([(0, 0.0)] + self.train_time_s))
        return float(np.interp(step, steps, seconds))

    def to_dict(self) -> dict[str, list[tuple[int, float]]]:
        return {k: [tuple(p) for p in v] for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, list]) -> History:
        return cls(**{k: [(int(s), float(x)) for s, x in data.get(k, [])] for k in cls.__dataclass_fields__})


def to_device(batch: Any, device: torch.device) -> Any:
    """Move every tensor in a (nested) tuple, list or dict to ``device``. CPU tensors bound for
    CUDA are staged in pinned (page-locked) memory first, so that the copy runs asynchronously
    (``non_blocking``) while the GPU works on what was queued before it."""
    if isinstance(batch, torch.Tensor):
        if device.type == "cuda" and batch.device.type == "cpu":
            batch = batch.pin_memory()
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a NamedTuple such as Seq2SeqBatch
        return type(batch)(*(to_device(b, device) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def seconds_per_step(
    model: nn.Module,
    batches: Callable[[int], Any],
    loss_fn: Callable[[nn.Module, Any], tuple[torch.Tensor, int]],
    *,
    device: torch.device | str,
    steps: int = 8,
    warmup: int = 2,
    clip_norm: float | None = None,
    amp: bool = True,
    compile: bool = False,
) -> float:
    """The median wall time of one training step of ``model`` (loss, backward, clipping when
    ``clip_norm`` is given, AdamW), over ``steps`` steps on ``batches(0), batches(1), ...`` after
    ``warmup`` untimed ones. Steps the model: pass a throwaway copy.

    Pass the ``amp`` and ``compile`` of the run to be planned (:class:`TrainConfig`'s, and
    :func:`compiles` for whether it compiles), so that the step timed is the step :func:`fit` will
    take: on CUDA in the autocast of :func:`mixed_precision` (``amp``, on by default as in
    :class:`TrainConfig`), compiled when ``compile`` (the compilation falls in the untimed warm-up
    steps); on the CPU ``amp`` changes nothing. With :func:`steps_in_budget` it answers the
    chapters' question "how many steps fit into this much training time?" before a run with a time
    budget (chapters 9, 12 and 13).
    """
    checks.positive_int("seconds_per_step", steps=steps)
    checks.non_negative_int("seconds_per_step", warmup=warmup)
    device = torch.device(device)
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast, scaler = _precision(device, amp)
    step_module: nn.Module = _LossModule(model, loss_fn)
    if compile:
        if warmup < 1:
            raise ValueError("seconds_per_step: a compiled step needs warmup >= 1 (the first step compiles)")
        step_module = torch.compile(step_module)
    times = []
    for step in range(warmup + steps):
        batch = to_device(batches(step), device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        with autocast():
            loss, _ = step_module(batch)
        optimizer.zero_grad(set_to_none=True)
        (scaler.scale(loss) if scaler is not None else loss).backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def steps_in_budget(budget_s: float, step_s: float, *, share: float = 0.97, minimum: int = 20) -> int:
    """How many steps of ``step_s`` seconds fill ``share`` of ``budget_s`` (at least ``minimum``):
    the step count of a run whose time budget should end it near its schedule's end."""
    checks.finite_real("steps_in_budget", "budget_s", budget_s, above=0)
    checks.finite_real("steps_in_budget", "step_s", step_s, above=0)
    return max(minimum, int(share * budget_s / step_s))


def init_distributed() -> torch.device:
    """Join the process group that ``torchrun`` describes in the environment (``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) and return this process's
    device: ``cuda:<LOCAL_RANK>`` with the NCCL backend when CUDA is there, the CPU with gloo
    otherwise. Call it once at the start of a script run with ``torchrun``; :func:`fit` then
    trains data-parallel. Without ``torchrun``'s environment it does nothing and returns the
    default device (a single process).
    """
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return device


def _world() -> tuple[int, int]:
    """``(rank, world_size)`` of the process group, ``(0, 1)`` without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def shard_batch(batch: Any, rank: int, world_size: int) -> Any:
    """This rank's share of a global batch: every tensor of a (nested) tuple, list, NamedTuple or
    dict cut along its first (batch) axis into ``world_size`` contiguous parts as equal as
    possible (``torch.tensor_split``), part ``rank`` kept. Run on every rank, the parts are
    disjoint and together the whole batch: the data-parallel sampler of a step-addressable
    training set. Non-tensors are passed through.

    Raises:
        ValueError: a tensor with fewer rows than ranks (some rank would get nothing).
    """
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] < world_size:
            raise ValueError(
                f"shard_batch: a tensor of shape {tuple(batch.shape)} cannot be split over "
                f"{world_size} ranks; the global batch needs at least one row per rank"
            )
        return torch.tensor_split(batch, world_size)[rank]
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(shard_batch(b, rank, world_size) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(shard_batch(b, rank, world_size) for b in batch)
    if isinstance(batch, dict):
        return {k: shard_batch(v, rank, world_size) for k, v in batch.items()}
    return batch


class _LossModule(nn.Module):
    """The loss as a module, so that DistributedDataParallel and ``torch.compile`` see the whole
    computation (loss functions call methods other than ``forward``, such as BERT's ``encode``)."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[nn.Module, Any], tuple[torch.Tensor, int]]) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, batch: Any) -> tuple[torch.Tensor, int]:
        return self.loss_fn(self.model, batch)


def _rng_state() -> dict[str, Any]:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _make_optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on biases, LayerNorm gains or other
    vectors), fused into one kernel on CUDA."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = device.type == "cuda" and all(p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, **({"fused": True} if fused else {}))


@torch.no_grad()
def _evaluate(model: nn.Module, loss_fn: Callable, batches: Iterable, device: torch.device, autocast: Any) -> float:
    """Token-weighted mean loss over ``batches`` in eval mode; the mode is restored after."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for batch in batches:
            with autocast():
                loss, n_tokens = loss_fn(model, to_device(batch, device))
            total += loss.detach().item() * int(n_tokens)
            count += int(n_tokens)
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("fit: val_batches() yielded no tokens")
    return total / count


# The settings that decide a run's numbers: a resumed run must share them with the run that
# wrote the checkpoint, or it would silently mix the two (say the saved optimizer's learning
# rate with the new schedule). ``steps`` counts too where the schedule reads it (cosine).
# The others (how often to log, validate and save, the time budget, compilation, kernels)
# change how a run is carried out or reported, not the arithmetic of its steps.
_RESUME_SETTINGS = (
    "lr",
    "weight_decay",
    "betas",
    "warmup_steps",
    "schedule",
    "smoothing",
    "clip_norm",
    "seed",
    "min_lr_ratio",
)


def _check_resumable(saved: dict[str, Any] | None, config: TrainConfig, path: str) -> None:
    """Refuse to resume from a checkpoint whose run was configured differently."""
    if not isinstance(saved, dict):
        raise ValueError(
            f"fit: checkpoint {path} records no TrainConfig, so resuming cannot be checked; "
            "start a new run (resume=False) or use another checkpoint_path"
        )
    names = _RESUME_SETTINGS + (("steps",) if config.schedule == "cosine" else ())
    current = asdict(config)

    def same(a: Any, b: Any) -> bool:
        return list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b

    changed = [
        f"{name} {saved.get(name)!r} -> {current[name]!r}" for name in names if not same(saved.get(name), current[name])
    ]
    if changed:
        raise ValueError(
            f"fit: cannot resume from {path}: it was written by a run with other settings "
            f"({'; '.join(changed)}); resume with the same settings, or start a new run with "
            "another checkpoint_path"
        )


def fit(
    model: nn.Module,
    train_batches: Callable[[int], Any],
    loss_fn: Callable[[nn.Module, Any], tuple[torch.Tensor, int]],
    config: TrainConfig,
    *,
    val_batches: Callable[[], Iterable[Any]] | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    resume: bool = False,
) -> History:
    """Train ``model`` for ``config.steps`` optimizer steps and return what was measured.

    Each step ``s`` (0-based) takes ``batch = train_batches(s)``, moves its tensors to the
    device, computes ``loss, n_tokens = loss_fn(model, batch)`` (``loss`` the mean over
    ``n_tokens`` tokens), back-propagates, clips the gradient norm to ``config.clip_norm``,
    and takes an AdamW step and a schedule step. ``train_batches`` must depend only on ``s``
    (see the module docstring): that is what makes a resumed run repeat an uninterrupted one.
    The gradients of the last step are left in ``.grad`` for inspection. With ``progress`` a
    progress bar runs while training does and is then replaced by one line on standard error
    (:func:`summary_line`): the steps run and why training stopped, the time, the loss.

    On CUDA the step runs in bf16 autocast (``config.amp``), compiled (``config.compile``), with
    fused AdamW, and batch ``s + 1`` is made and copied from pinned memory while the GPU computes
    step ``s`` (so an error in ``train_batches(s + 1)`` surfaces during step ``s``).

    With ``resume=True`` and a file at ``config.checkpoint_path``, model, optimizer, schedule,
    scaler, random generators and history are restored from it and training continues at
    the saved step; with no file there it starts afresh (so one command serves a first run
    and a restart). Otherwise the random generators are seeded with ``config.seed``. A resumed
    run must have the settings that decide the numbers (learning rate, weight decay, betas,
    warm-up, schedule, smoothing, clipping, seed, ``min_lr_ratio``, and ``steps`` for the
    cosine schedule) of the run that wrote the checkpoint; ``steps`` may grow for the other
    schedules, and logging, validation, saving, time budget and compilation may change.

    While it runs with a ``checkpoint_path``, ``fit`` holds a lock file beside it
    (``.<name>.lock``): a second run given the same path, in this process or another, is
    refused at once rather than overwriting the first run's checkpoints. PyTorch's random
    generators belong to the process, so two runs in threads of one process draw from the same
    ones (dropout, say): run them in separate processes for each to repeat exactly.

    Raises:
        FloatingPointError: when a training loss is NaN or infinite (before the bad step is
            applied), naming the step and the loss.
        ValueError: for ``resume`` without a ``checkpoint_path``, or a checkpoint of another
            format version, one whose parameter names or shapes do not match ``model``, or one
            written with other settings (see above).
        RuntimeError: another run is training with the same ``checkpoint_path``.
    """
    if not callable(train_batches):
        raise ValueError("fit: train_batches must be a callable step -> batch")
    if resume and config.checkpoint_path is None:
        raise ValueError("fit: resume=True needs config.checkpoint_path")
    # one lock per run: in a DDP run rank 0 holds it (it alone writes the checkpoints)
    lock = (
        writer_lock(
            config.checkpoint_path,
            busy=f"fit: another run is training with checkpoint_path "
            f"{config.checkpoint_path}, or a save_model is writing it; give each run its own checkpoint_path",
        )
        if config.checkpoint_path is not None and _world()[0] == 0
        else nullcontext()
    )
    with lock:
        return _fit(
            model,
            train_batches,
            loss_fn,
            config,
            val_batches=val_batches,
            device=device,
            progress=progress,
            resume=resume,
        )


def _fit(
    model: nn.Module,
    train_batches: Callable[[int], Any],
    loss_fn: Callable,
    config: TrainConfig,
    *,
    val_batches: Callable[[], Iterable[Any]] | None,
    device: torch.device | str | None,
    progress: bool,
    resume: bool,
) -> History:
    """:func:`fit`'s loop, run while the checkpoint lock is held."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    seed_everything(config.seed, deterministic=False)

    autocast, scaler = _precision(device, config.amp)
    optimizer = _make_optimizer(model, config, device)
    scheduler = make_schedule(
        config.schedule,
        optimizer,
        warmup_steps=config.warmup_steps,
        total_steps=config.steps,
        min_ratio=config.min_lr_ratio,
    )
    history, start = History(), 0

    if resume and os.path.exists(config.checkpoint_path):
        path = config.checkpoint_path
        state = read_checkpoint(path, where="fit")
        if state.get("format_version") != CHECKPOINT_VERSION:
            raise ValueError(
                f"fit: checkpoint {path} has format_version {state.get('format_version')!r}, "
                f"expected {CHECKPOINT_VERSION}"
            )
        require_keys(
            state,
            {"step": int, "model": dict, "optimizer": dict, "scheduler": dict, "history": dict, "rng": dict},
            path,
            "fit",
        )
        check_model_matches(model, state["model"], path, "fit")
        _check_resumable(state.get("config"), config, path)
        try:  # everything but the model first: a failure here leaves the model as it was
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            if scaler is not None and state.get("scaler"):
                scaler.load_state_dict(state["scaler"])
            history, start = History.from_dict(state["history"]), state["step"]
            _set_rng_state(state["rng"])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as err:
            raise ValueError(f"fit: checkpoint {path} is damaged ({type(err).__name__}: {err})") from None
        model.load_state_dict(state["model"])

    def save(step: int) -> None:
        write_checkpoint(
            {
                "format_version": CHECKPOINT_VERSION,
                "step": step,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None,
                "history": history.to_dict(),
                "rng": _rng_state(),
                "config": asdict(config),
            },
            config.checkpoint_path,
        )

    rank, world_size = _world()
    if world_size > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        # Every rank starts from rank 0's weights, then computes its shard of each global batch;
        # DDP averages the gradients, and each shard's loss is weighted by its share of the
        # tokens, so that the update is the single-process update of the whole batch.
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
        ddp = DistributedDataParallel(_LossModule(model, loss_fn), find_unused_parameters=True)
    step_module = ddp if world_size > 1 else _LossModule(model, loss_fn)
    compiled = compiles(config, device)
    if compiled:
        step_module = torch.compile(step_module, mode=config.compile_mode)
    # Compiling by default (compile=None) must not stop a chapter on a GPU it was not tried on: a
    # part of the step that PyTorch cannot compile then runs uncompiled, with PyTorch's warning.
    # compile=True asks for compilation, and its failures are raised.
    tolerant = (
        (lambda: torch._dynamo.config.patch(suppress_errors=True))
        if compiled and config.compile is None
        else nullcontext
    )
    peak = peak_flops(device) if config.flops_per_token is not None else None

    def fetch(step: int) -> Any:
        """Step ``step``'s batch (this rank's share of it), on the device."""
        batch = train_batches(step)
        return to_device(shard_batch(batch, rank, world_size) if world_size > 1 else batch, device)

    model.train()
    # The bar is live while training runs and is cleared when it ends (leave=False): what stays in a
    # notebook's output is the one summary line written below, never a bar stopped part-way.
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not progress or rank != 0,
        desc="train",
        dynamic_ncols=True,
        leave=False,
    )
    began = time.perf_counter()
    caller_deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(config.deterministic, warn_only=True)
    window_tokens, window_seconds, postfix = 0, 0.0, {}
    train_seconds = history.train_time_s[-1][1] if history.train_time_s else 0.0
    upcoming = None
    try:
        for step in range(start, config.steps):
            if config.time_budget_s is not None and train_seconds >= config.time_budget_s:
                break  # resumed from a run whose budget was already spent
            done = step + 1
            step_start = time.perf_counter()
            lr = optimizer.param_groups[0]["lr"]
            batch, upcoming = (upcoming if upcoming is not None else fetch(step)), None
            with autocast(), tolerant(), device_kernels(device, attention_kernel=config.attention_kernel):
                loss, n_tokens = step_module(batch)
            if device.type == "cuda" and done < config.steps:
                upcoming = fetch(done)  # made and sent while the GPU computes this step's forward pass
            if world_size > 1:
                counts = torch.tensor([float(n_tokens), loss.detach().float().item() * float(n_tokens)], device=device)
                dist.all_reduce(counts)  # global tokens, and the global sum of the loss
                value = (counts[1] / counts[0]).item()
                loss = loss * (float(n_tokens) * world_size / counts[0].item())
                n_tokens = int(counts[0].item())
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
            else:
                loss.backward()
            if world_size == 1:  # read once the backward pass is queued, so that a GPU never waits for it
                value = loss.detach().item()
            if not math.isfinite(value):  # before the update: the weights stay those of the last good step
                raise FloatingPointError(f"fit: training loss is {value} at step {step} (0-based); stopping")
            if config.clip_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            seconds = time.perf_counter() - step_start
            compiling = compiled and done == start + 1  # this step compiled the graph: not training time
            if compiling:
                history.compile_s.append((done, seconds))
            else:
                train_seconds += seconds

            history.train_loss.append((done, value))
            history.lr.append((done, lr))
            if not compiling:
                window_tokens += int(n_tokens)
                window_seconds += seconds
            bar.update(1)
            last = done == config.steps or (config.time_budget_s is not None and train_seconds >= config.time_budget_s)
            logged = done % config.log_every == 0 or last
            validated = val_batches is not None and (done % config.eval_every == 0 or last)
            if logged:
                rate = window_tokens / window_seconds if window_seconds > 0 else float("nan")
                history.tokens_per_s.append((done, rate))
                postfix.update(loss=f"{value:.4f}", tok_s=f"{rate:,.0f}")
                if peak is not None and math.isfinite(rate):
                    history.mfu.append((done, mfu(rate / world_size, config.flops_per_token, peak)))
                    postfix["mfu"] = f"{history.mfu[-1][1]:.1%}"
                bar.set_postfix(postfix, refresh=False)
                window_tokens, window_seconds = 0, 0.0
            if logged or validated:
                history.train_time_s.append((done, train_seconds))
            if validated:
                history.val_loss.append((done, _evaluate(model, loss_fn, val_batches(), device, autocast)))
                postfix["val"] = f"{history.val_loss[-1][1]:.4f}"
                bar.set_postfix(postfix, refresh=False)
            if config.checkpoint_path is not None and (done % config.checkpoint_every == 0 or last):
                if rank == 0:  # one writer; the others wait for the file
                    save(done)
                if world_size > 1:
                    dist.barrier()
            if last:
                break
    finally:
        bar.close()
        torch.use_deterministic_algorithms(caller_deterministic[0], warn_only=caller_deterministic[1])
    if progress and rank == 0:
        tqdm.write(summary_line(history, config, start=start, wall_s=time.perf_counter() - began), file=sys.stderr)
    return history


def summary_line(history: History, config: TrainConfig, *, start: int = 0, wall_s: float | None = None) -> str:
    """The one line :func:`fit` leaves behind when its progress bar is cleared.

    It says how many steps ran and why training stopped (the schedule's end, or the time budget
    after ``k`` of the ``config.steps`` steps), the wall time, the mean training loss of the last
    logging window (at most ``config.log_every`` steps), the last throughput and, when there was
    validation, the last validation loss. ``start`` is the step a resumed run began from.
    """
    done = history.train_loss[-1][0] if history.train_loss else start
    ran = done - start
    budget = config.time_budget_s
    stopped = done < config.steps
    if ran == 0:
        return f"train: nothing left to run: the checkpoint's {done:,} steps " + (
            f"already spent the {_seconds(budget)} time budget"
            if stopped and budget is not None
            else "already complete the schedule"
        )
    if stopped and budget is not None:
        head = f"train: {done:,} of {config.steps:,} steps, stopped by the {_seconds(budget)} time budget"
    else:
        head = f"train: {done:,} steps, the schedule's end"
    if start:
        head += f" (resumed at step {start:,})"
    parts = [head]
    if wall_s is not None:
        parts.append(f"{_clock(wall_s)} ({ran / wall_s:,.2f} steps/s)" if wall_s > 0 else _clock(wall_s))
    window = [loss for _, loss in history.train_loss[-min(config.log_every, ran) :]]
    parts.append(f"training loss {sum(window) / len(window):.4f} (mean of the last {len(window):,} steps)")
    if history.tokens_per_s and math.isfinite(history.tokens_per_s[-1][1]):
        parts.append(f"{history.tokens_per_s[-1][1]:,.0f} tokens/s")
    if history.val_loss:
        parts.append(f"validation loss {history.val_loss[-1][1]:.4f}")
    return "; ".join(parts)


def _seconds(seconds: float) -> str:
    """A time budget in words: ``600 s``, ``1,024 s``, ``0.2 s``."""
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:g} s"


def _clock(seconds: float) -> str:
    """``seconds`` as ``m:ss`` (or ``h:mm:ss`` from an hour), as tqdm writes elapsed time."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
