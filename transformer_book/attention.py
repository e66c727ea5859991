"""Scaled dot-product attention (chapter 1).

.. math::

    \\operatorname{Attention}(Q, K, V) = \\operatorname{softmax}\\!\\left(
        \\frac{Q K^\\top}{\\sqrt{d_k}} \\right) V

with ``Q`` of shape ``(..., n, d_k)``, ``K`` of shape ``(..., m, d_k)`` and ``V`` of shape
``(..., m, d_v)``. Masks follow the book's convention (``True`` = key excluded), see
:mod:`transformer_book.masks`.
"""

from __future__ import annotations

import math

import torch

__all__ = ["softmax", "scaled_dot_product_attention"]


def softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Numerically stable (masked) softmax along ``dim``.

    Implements :math:`\\operatorname{softmax}(x)_j = e^{x_j - c} / \\sum_l e^{x_l - c}`
    with :math:`c = \\max_l x_l`, which equals the textbook formula for any ``c`` but never
    overflows, since every exponent is at most 0.

    Entries where ``mask`` is ``True`` get weight exactly 0. A slice in which every entry
    is masked gets all-zero weights (not NaN, and with finite gradients).

    Args:
        scores: floating-point tensor of any shape.
        mask: optional boolean tensor broadcastable to ``scores``; ``True`` excludes.
        dim: the axis to normalise over.

    Returns:
        Tensor of the shape of ``scores`` (after broadcasting with ``mask``), non-negative,
        summing to 1 along ``dim`` except in fully masked slices, where it is 0.

    Raises:
        ValueError: for a non-floating ``scores`` or a non-boolean or non-broadcastable ``mask``.
    """
    if not isinstance(scores, torch.Tensor) or not scores.dtype.is_floating_point:
        what = scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"softmax: scores must be a floating-point tensor, got {what}")
    if mask is not None:
        _check_mask(mask, scores.shape, "softmax")
        scores = scores.masked_fill(mask, float("-inf"))
    shift = scores.amax(dim=dim, keepdim=True)
    # A fully masked slice has max -inf; shifting by 0 there keeps exp(-inf) = 0, not NaN.
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift)).detach()
    exp = torch.exp(scores - shift)
    total = exp.sum(dim=dim, keepdim=True)
    return exp / total.clamp_min(torch.finfo(exp.dtype).tiny)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, returning the output and the attention weights.

    .. math::

        A = \\operatorname{softmax}\\!\\left(\\frac{Q K^\\top}{\\sqrt{d_k}}\\right), \\qquad
        \\text{output} = A V, \\qquad \\text{output}_i = \\sum_j A_{ij} v_j

    Args:
        query: ``(..., n, d_k)``.
        key: ``(..., m, d_k)``.
        value: ``(..., m, d_v)``.
        mask: optional boolean tensor broadcastable to ``(..., n, m)``; ``True`` means
            key ``j`` is excluded for query ``i``. (``F.scaled_dot_product_attention``
            uses the opposite boolean convention: pass it ``~mask``.)
        scale: the factor multiplying the scores; default :math:`1/\\sqrt{d_k}`.

    Returns:
        ``(output, weights)`` with ``output`` of shape ``(..., n, d_v)`` and ``weights``
        of shape ``(..., n, m)``. A query whose keys are all masked gets zero weights and
        a zero output.

    Raises:
        ValueError: if the inputs are not floating tensors of one dtype and device, if
            their shapes disagree (the message names the shapes), or if ``mask`` is not
            boolean or does not broadcast to ``(..., n, m)``.
    """
    _check_qkv(query, key, value)
    d_k = query.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k) if d_k > 0 else 1.0
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale  # (..., n, m)
    weights = softmax(scores, mask=mask, dim=-1)
    return torch.matmul(weights, value), weights


def _check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    names = ("query", "key", "value")
    tensors = (query, key, value)
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"attention: {name} must have at least 2 dimensions (..., length, features), "
                f"got shape {tuple(t.shape)}"
            )
        if not t.dtype.is_floating_point:
            raise ValueError(f"attention: {name} must be floating point, got dtype {t.dtype}")
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(names, tensors))
    if len({t.dtype for t in tensors}) > 1:
        dtypes = ", ".join(f"{n} {t.dtype}" for n, t in zip(names, tensors))
        raise ValueError(f"attention: query, key and value must share one dtype, got {dtypes}")
    if len({t.device for t in tensors}) > 1:
        raise ValueError("attention: query, key and value must be on one device")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"attention: query and key must have the same feature size d_k, got {shapes}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"attention: key and value must have the same length m, got {shapes}"
        )
    try:
        torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(f"attention: batch dimensions do not broadcast, got {shapes}") from None


def _check_mask(mask: torch.Tensor, scores_shape: torch.Size, where: str) -> None:
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{where}: mask must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{where}: mask must be boolean (True = key excluded), got dtype {mask.dtype}; "
            "for a 0/1 'keep' mask pass `keep == 0`"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"{where}: mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"shape {tuple(scores_shape)} (..., n, m)"
        )
