r"""Learning-rate schedules: the factor ``f(s)`` by which each optimizer step ``s`` scales the
base learning rate, as ``torch.optim.lr_scheduler.LambdaLR`` objects (chapter 7).

* :func:`warmup_inverse_sqrt`: linear warm-up, then :math:`s^{-1/2}` decay (the 2017 Transformer);
* :func:`warmup_cosine`: linear warm-up, then a half cosine down to a floor (GPT, BERT);
* :func:`warmup_constant`: linear warm-up, then the base rate.

``training.TrainConfig.schedule`` names one of them (``SCHEDULES``).
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from transformer_book import checks

__all__ = ["SCHEDULES", "warmup_inverse_sqrt", "warmup_cosine", "warmup_constant", "make_schedule"]

SCHEDULES = ("inverse_sqrt", "cosine", "constant")
"""The names of the schedules that :func:`make_schedule` builds."""


def warmup_inverse_sqrt(optimizer: torch.optim.Optimizer, warmup_steps: int, d_model: int | None = None) -> LambdaLR:
    r"""Linear warm-up, then inverse-square-root decay (the 2017 Transformer schedule).

    The paper sets :math:`\text{lrate} = d_{model}^{-0.5}\cdot\min(s^{-0.5},\ s\cdot w^{-1.5})`
    at optimizer step :math:`s` (1-based) with :math:`w` warm-up steps: linear growth to a peak
    :math:`(d_{model}\, w)^{-0.5}` at :math:`s = w`, then decay as :math:`s^{-0.5}`. Here the
    optimizer's base lr is multiplied by

    .. math:: f(s) = \min(s^{-0.5},\ s\cdot w^{-1.5})\cdot w^{0.5}

    so the peak equals the base lr exactly at ``s == warmup_steps`` (easier to tune). With
    ``d_model`` given the factor is the paper's formula itself, :math:`d_{model}^{-0.5}\min(\ldots)`,
    and a base lr of 1.0 reproduces the paper.

    Raises:
        ValueError: if ``warmup_steps`` or ``d_model`` is not a positive int.
    """
    checks.positive_int("warmup_inverse_sqrt", warmup_steps=warmup_steps)
    if d_model is not None:
        checks.positive_int("warmup_inverse_sqrt", d_model=d_model)
    scale = d_model**-0.5 if d_model is not None else warmup_steps**0.5

    def factor(step: int) -> float:  # step = optimizer steps already taken
        s = step + 1
        return scale * min(s**-0.5, s * warmup_steps**-1.5)

    return LambdaLR(optimizer, factor)


def warmup_cosine(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, min_ratio: float = 0.0
) -> LambdaLR:
    r"""Linear warm-up to the base lr, then a half cosine down to ``min_ratio`` times it.

    With 1-based step :math:`s`, :math:`f(s) = s / w` for :math:`s \le w`, then
    :math:`f(s) = r + (1-r)\,\tfrac12\bigl(1 + \cos(\pi\,\tfrac{s-w}{T-w})\bigr)`, held at
    :math:`r` after :math:`T` = ``total_steps``. So :math:`f(w) = 1` and :math:`f(T) = r`.

    Raises:
        ValueError: unless ``0 <= warmup_steps < total_steps`` and ``0 <= min_ratio <= 1``.
    """
    checks.non_negative_int("warmup_cosine", warmup_steps=warmup_steps)
    checks.positive_int("warmup_cosine", total_steps=total_steps)
    if warmup_steps >= total_steps:
        raise ValueError(f"warmup_cosine: warmup_steps={warmup_steps} must be below total_steps={total_steps}")
    checks.probability("warmup_cosine", "min_ratio", min_ratio, one=True)

    def factor(step: int) -> float:
        s = step + 1
        if s <= warmup_steps:
            return s / warmup_steps
        progress = min(1.0, (s - warmup_steps) / (total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def warmup_constant(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """Linear warm-up over ``warmup_steps`` (none if 0), then the base lr.

    Raises:
        ValueError: if ``warmup_steps`` is not a non-negative int.
    """
    checks.non_negative_int("warmup_constant", warmup_steps=warmup_steps)
    return LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0)


def make_schedule(
    name: str, optimizer: torch.optim.Optimizer, *, warmup_steps: int, total_steps: int, min_ratio: float = 0.0
) -> LambdaLR:
    """The schedule ``name`` (one of ``SCHEDULES``) on ``optimizer``; ``total_steps`` and
    ``min_ratio`` matter to ``"cosine"`` only."""
    checks.choice("make_schedule", "name", name, SCHEDULES)
    if name == "inverse_sqrt":
        return warmup_inverse_sqrt(optimizer, warmup_steps)
    if name == "cosine":
        return warmup_cosine(optimizer, warmup_steps, total_steps, min_ratio)
    return warmup_constant(optimizer, warmup_steps)
