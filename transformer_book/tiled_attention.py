r"""Attention that fits in memory: the online softmax and tiled attention (chapter 17).

Attention as chapter 1 writes it, :math:`O = \operatorname{softmax}(QK^\top / \sqrt{d_k})\,V`,
holds the :math:`n \times m` scores and probabilities of every head in memory: at
:math:`n = m = 4096` that is 64 MiB per head in float32, about 21 times the head's queries, keys and values
together. Yet every output row needs only one pass over its scores, if the softmax is computed
*online*.

**The online softmax** (Milakov & Gimelshein 2018). Read a row :math:`x` block by block and keep
two numbers: the largest score so far, :math:`m`, and the sum of :math:`e^{x_j - m}` so far,
:math:`\ell`. A block :math:`x_B` updates them as

.. math::

    m' = \max\bigl(m, \max_{j \in B} x_j\bigr), \qquad
    \ell' = \ell\, e^{m - m'} + \sum_{j \in B} e^{x_j - m'},

so that at the end :math:`\ell = \sum_j e^{x_j - m}`, :math:`\log \sum_j e^{x_j} = m + \log \ell`
and :math:`\operatorname{softmax}(x)_j = e^{x_j - m} / \ell`; every exponent is at most 0, so
nothing overflows (:func:`online_normaliser`, :func:`online_logsumexp`, :func:`online_softmax`).

**Tiled attention** (FlashAttention: Dao et al. 2022; the loop order of FlashAttention-2: Dao 2023).
The same recurrence carries the output: for a block of queries, keep per row the running maximum
:math:`m_i`, the running sum :math:`\ell_i` and the *unnormalised* output
:math:`a_i = \sum_j e^{s_{ij} - m_i} v_j`; a tile of scores :math:`S = Q_I K_J^\top / \sqrt{d_k}`
updates them as

.. math::

    m_i' = \max\bigl(m_i, \max_{j \in J} s_{ij}\bigr), \qquad
    \ell_i' = \ell_i\, e^{m_i - m_i'} + \sum_{j \in J} e^{s_{ij} - m_i'}, \qquad
    a_i' = a_i\, e^{m_i - m_i'} + \sum_{j \in J} e^{s_{ij} - m_i'}\, v_j,

and the output is :math:`o_i = a_i / \ell_i`, divided once at the end
(:func:`tiled_attention_forward`). No more than one ``(block_q, block_k)`` tile of scores exists at
a time. The backward pass (:func:`tiled_attention_backward`) keeps only the output and the
per-row logsumexp :math:`L_i = m_i + \log \ell_i` from the forward pass and recomputes each tile
of probabilities, :math:`P = e^{S - L}`, when it needs it:

.. math::

    D_i = \textstyle\sum_c dO_{ic}\, O_{ic}, \quad dP = dO\, V^\top, \quad
    dS = P \odot (dP - D), \quad dQ = \frac{dS\, K}{\sqrt{d_k}}, \quad
    dK = \frac{dS^\top Q}{\sqrt{d_k}}, \quad dV = P^\top dO.

:class:`TiledAttentionFunction` joins the two for autograd, and :func:`tiled_attention` is what a
model calls. :func:`peak_memory_bytes` measures what a computation allocates at its peak (on the
CPU from the PyTorch profiler's allocation events, on CUDA from the caching allocator's
statistics), and :func:`memory_by_length` compares :func:`materialised_attention` with tiled
attention as the length grows.

Masks follow the book's convention: boolean, broadcastable to ``(B, h, n, m)``, ``True`` = the key
is excluded (``F.scaled_dot_product_attention`` takes the opposite: pass it ``~mask``). A query
row with no visible key gets a zero output and zero gradients, never NaN (``torch.softmax`` of a
row of :math:`-\infty` is NaN, and so was ``F.scaled_dot_product_attention``'s output there in
older PyTorch releases; PyTorch 2.13's CPU kernels give zeros, as the book does).

References: Milakov & Gimelshein 2018, *Online normalizer calculation for softmax*; Dao, Fu,
Ermon, Rudra & Ré 2022, *FlashAttention: Fast and Memory-Efficient Exact Attention with
IO-Awareness*; Dao 2023, *FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning*; Rabe & Staats 2021, *Self-attention Does Not Need O(n^2) Memory*.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable

from transformer_book import checks

__all__ = [
    "online_normaliser",
    "online_logsumexp",
    "online_softmax",
    "tiled_attention",
    "tiled_attention_forward",
    "tiled_attention_backward",
    "TiledAttentionFunction",
    "materialised_attention",
    "peak_memory_bytes",
    "MemoryRow",
    "memory_by_length",
]


# --------------------------------------------------------------------------- the online softmax


def _shift(row_max: torch.Tensor) -> torch.Tensor:
    """The running maximum as a shift for the exponentials: 0 where nothing has been seen yet
    (max :math:`-\\infty`), so that :math:`e^{-\\infty - 0} = 0` instead of :math:`e^{-\\infty + \\infty}` = NaN."""
    return torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)


def _check_online(where: str, x: object, block: object) -> None:
    """A floating tensor with at least one axis, neither NaN nor :math:`+\\infty`, and a positive int ``block``."""
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.dim() == 0:
        what = f"dtype {x.dtype}, shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{where}: x must be a floating-point tensor with at least one axis, got {what}")
    checks.positive_int(where, block=block)
    if torch.isnan(x).any() or torch.isposinf(x).any():
        raise ValueError(f"{where}: x holds NaN or +inf, whose softmax is undefined")


def online_normaliser(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The running maximum and normaliser of the online softmax, in one pass over blocks of
    ``block`` columns of the last axis (Milakov & Gimelshein 2018).

    .. math::

        m \leftarrow \max(m_{\text{old}}, \max_{j \in B} x_j), \qquad
        \ell \leftarrow \ell\, e^{m_{\text{old}} - m} + \sum_{j \in B} e^{x_j - m}

    starting from :math:`m = -\infty`, :math:`\ell = 0`.

    Args:
        x: ``(..., m)`` floating tensor; :math:`-\infty` entries (masked) are allowed.
        block: the number of columns read at a time, a positive int.

    Returns:
        ``(row_max, row_sum)``, each of shape ``(...)``: :math:`\max_j x_j` and
        :math:`\sum_j e^{x_j - \max x}`. A row of only :math:`-\infty` gives ``(-inf, 0)``.

    Raises:
        ValueError: ``x`` is not a floating tensor with an axis, holds NaN or :math:`+\infty`,
            or ``block`` is not a positive int.
    """
    _check_online("online_normaliser", x, block)
    row_max = x.new_full(x.shape[:-1], float("-inf"))  # m: the largest entry so far
    row_sum = x.new_zeros(x.shape[:-1])  # l: sum of exp(x_j - m) so far
    for start in range(0, x.shape[-1], block):
        x_block = x[..., start : start + block]
        new_max = torch.maximum(row_max, x_block.amax(dim=-1))
        shift = _shift(new_max)
        row_sum = row_sum * torch.exp(row_max - shift) + torch.exp(x_block - shift[..., None]).sum(dim=-1)
        row_max = new_max
    return row_max, row_sum


def online_logsumexp(x: torch.Tensor, block: int) -> torch.Tensor:
    r""":math:`\log \sum_j e^{x_j}` over the last axis, as :math:`m + \log \ell` from
    :func:`online_normaliser`: ``(..., m) -> (...)``, equal to ``torch.logsumexp(x, -1)``
    (:math:`-\infty` for a row of only :math:`-\infty`).

    Raises:
        ValueError: as :func:`online_normaliser`.
    """
    row_max, row_sum = online_normaliser(x, block)
    return row_max + torch.log(row_sum)


def online_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    r"""Softmax over the last axis from one pass of :func:`online_normaliser` over blocks of
    ``block`` columns, then the probabilities :math:`e^{x_j - m} / \ell`.

    Equal to ``torch.softmax(x, dim=-1)``, except that a row of only :math:`-\infty` (fully
    masked) gives zeros where ``torch.softmax`` gives NaN.

    Args:
        x: ``(..., m)`` floating tensor.
        block: the number of columns read at a time, a positive int.

    Returns:
        ``(..., m)``, non-negative, each row summing to 1 (or 0 when fully masked).

    Raises:
        ValueError: as :func:`online_normaliser`.
    """
    row_max, row_sum = online_normaliser(x, block)  # one pass over the blocks
    return torch.exp(x - _shift(row_max)[..., None]) / row_sum.clamp_min(torch.finfo(x.dtype).tiny)[..., None]


# --------------------------------------------------------------------------- argument checks


def _check_tiled(
    where: str,
    q: object,
    k: object,
    v: object,
    mask: object = None,
    causal: object = False,
    block_q: object = 1,
    block_k: object = 1,
    scale: object = None,
) -> None:
    """``q`` (B, h, n, d_k), ``k`` (B, h, m, d_k), ``v`` (B, h, m, d_v) floating, of one dtype and
    device, with m, d_k >= 1; a boolean mask broadcastable to (B, h, n, m); a bool ``causal``;
    positive int blocks; a finite real (or None) ``scale``."""
    names, tensors = ("q", "k", "v"), (q, k, v)
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{where}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{where}: {name} must have 4 axes (B, h, length, features), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{where}: {name} must be floating point, got dtype {t.dtype}")
    shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(names, tensors))
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError(f"{where}: q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if len({t.device for t in tensors}) > 1:
        raise ValueError(f"{where}: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if not q.shape[:2] == k.shape[:2] == v.shape[:2]:
        raise ValueError(f"{where}: q, k and v must agree on (B, h), got {shapes}")
    if q.shape[-1] != k.shape[-1] or q.shape[-1] == 0:
        raise ValueError(f"{where}: q and k must have the same feature size d_k >= 1, got {shapes}")
    if k.shape[-2] != v.shape[-2] or k.shape[-2] == 0:
        raise ValueError(f"{where}: k and v must have the same length m >= 1, got {shapes}")
    if mask is not None:
        scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            what = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(
                f"{where}: mask must be a boolean tensor (True = key excluded), got {what}; "
                "for a 0/1 'keep' mask pass `keep == 0`"
            )
        try:
            fits = torch.broadcast_shapes(mask.shape, scores) == scores
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"{where}: mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
                f"shape {scores} (B, h, n, m)"
            )
        if mask.device != q.device:
            raise ValueError(f"{where}: mask is on {mask.device}, q on {q.device}")
    checks.boolean(where, causal=causal)
    checks.positive_int(where, block_q=block_q, block_k=block_k)
    if scale is not None:
        checks.finite_real(where, "scale", scale)


def _check_backward(
    where: str,
    dout: object,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: object,
    lse: object,
    *options: object,
) -> None:
    """The forward's arguments (:func:`_check_tiled`: mask, causal, block_q, block_k, scale), and
    ``dout``, ``out`` (B, h, n, d_v) and ``lse`` (B, h, n)."""
    _check_tiled(where, q, k, v, *options)
    expected = {"dout": (*q.shape[:3], v.shape[-1]), "out": (*q.shape[:3], v.shape[-1]), "lse": tuple(q.shape[:3])}
    for name, t in zip(expected, (dout, out, lse)):
        dtype = _accumulator_dtype(q) if name == "lse" else q.dtype  # the forward's lse is float32 or wider
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != expected[name] or t.dtype != dtype:
            what = f"shape {tuple(t.shape)}, dtype {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{where}: {name} must have shape {expected[name]} and dtype {dtype}, got {what}")


# --------------------------------------------------------------------------- tiled attention


def _accumulator_dtype(q: torch.Tensor) -> torch.dtype:
    """The dtype of the running sums: float32 for half precision, ``q``'s own otherwise."""
    return torch.promote_types(q.dtype, torch.float32)


def _scores(
    q: torch.Tensor, k: torch.Tensor, rows: slice, cols: slice, scale: float, wide: torch.dtype
) -> torch.Tensor:
    r"""One tile of scores :math:`Q_I K_J^\top \cdot \text{scale}`, ``(B, h, rows, cols)``, computed in ``wide``."""
    return q[:, :, rows].to(wide) @ k[:, :, cols].to(wide).transpose(-2, -1) * scale


def _exclude(
    s: torch.Tensor, mask: torch.Tensor | None, causal: bool, rows: slice, cols: slice, offset: int
) -> torch.Tensor:
    """The score tile ``s`` (B, h, rows, cols) with its excluded keys at :math:`-\\infty`: those of
    ``mask`` (B, h, n, m), and, when ``causal``, every key ``j > i + offset`` of query ``i``."""
    excluded = None if mask is None else mask[:, :, rows, cols]
    if causal:
        i = torch.arange(rows.start, rows.stop, device=s.device)
        j = torch.arange(cols.start, cols.stop, device=s.device)
        future = j[None, :] > i[:, None] + offset  # (rows, cols)
        excluded = future if excluded is None else excluded | future
    return s if excluded is None else s.masked_fill(excluded, float("-inf"))


def tiled_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The forward pass of tiled attention (FlashAttention-2's loop order, Dao 2023): for each
    block of queries, one pass over the blocks of keys with the online softmax.

    Per query row :math:`i` it keeps the running maximum :math:`m_i`, the running sum
    :math:`\ell_i` and the unnormalised output :math:`a_i`; a score tile :math:`S = Q_I K_J^\top
    \cdot \text{scale}` rescales them by :math:`e^{m_i - m_i'}` when the maximum grows and adds
    the tile's terms:

    .. math::

        \ell_i' = \ell_i e^{m_i - m_i'} + \textstyle\sum_{j \in J} e^{s_{ij} - m_i'}, \qquad
        a_i' = a_i e^{m_i - m_i'} + \textstyle\sum_{j \in J} e^{s_{ij} - m_i'} v_j, \qquad
        o_i = a_i / \ell_i.

    Args:
        q: ``(B, h, n, d_k)``; k: ``(B, h, m, d_k)``; v: ``(B, h, m, d_v)``.
        mask: optional boolean, broadcastable to ``(B, h, n, m)``, ``True`` = key excluded.
        causal: also exclude later keys: query ``i`` sees keys ``j <= i + m - n``, aligned at the
            end as in chapter 9's KV cache (``j <= i`` when ``n == m``, as ``is_causal=True`` of
            ``F.scaled_dot_product_attention``); tiles wholly above that diagonal are skipped.
        block_q, block_k: the tile's size, positive ints (need not divide ``n`` or ``m``).
        scale: the scores' factor, default :math:`1/\sqrt{d_k}`.

    Half-precision inputs are multiplied and summed in float32, tile by tile (a score of a
    float16 tile can pass float16's largest number, 65,504, before it is scaled); the output is
    returned in the inputs' dtype.

    Returns:
        ``(out, lse)``: the output ``(B, h, n, d_v)`` in ``q``'s dtype and each row's logsumexp of
        its scores :math:`L_i = m_i + \log \ell_i`, ``(B, h, n)``, in float32 or wider, which is
        all the backward pass needs. A row with no visible key gets a zero output and
        :math:`L_i = +\infty` (so that the backward pass's :math:`e^{s - L}` is 0 there).

    Raises:
        ValueError: shapes, dtypes or devices that disagree, a mask that is not boolean or does
            not broadcast, blocks that are not positive ints.
    """
    _check_tiled("tiled_attention_forward", q, k, v, mask, causal, block_q, block_k, scale)
    (B, h, n, d_k), m = q.shape, k.shape[-2]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    mask = None if mask is None else mask.expand(B, h, n, m)  # a view: nothing is copied
    wide = _accumulator_dtype(q)  # float32 for half precision, as FlashAttention keeps its sums
    out, lse = q.new_empty(B, h, n, v.shape[-1]), q.new_empty(B, h, n, dtype=wide)
    for i0 in range(0, n, block_q):  # a block of queries ...
        rows = slice(i0, min(i0 + block_q, n))
        row_max = q.new_full((B, h, rows.stop - i0), float("-inf"), dtype=wide)  # m_i: the largest score so far
        row_sum = q.new_zeros(B, h, rows.stop - i0, dtype=wide)  # l_i: the sum of exp(s_ij - m_i) so far
        acc = q.new_zeros(B, h, rows.stop - i0, v.shape[-1], dtype=wide)  # a_i: the sum of exp(s_ij - m_i) v_j so far
        for j0 in range(0, m, block_k):  # ... meets each block of keys
            cols = slice(j0, min(j0 + block_k, m))
            if causal and cols.start > rows.stop - 1 + m - n:  # the rest lies above the diagonal
                break
            s = _scores(q, k, rows, cols, scale, wide)  # (B, h, block_q, block_k)
            s = _exclude(s, mask, causal, rows, cols, m - n)
            new_max = torch.maximum(row_max, s.amax(dim=-1))
            shift = _shift(new_max)
            p = torch.exp(s - shift[..., None])
            rescale = torch.exp(row_max - shift)  # exp(m_old - m_new) <= 1
            row_sum = row_sum * rescale + p.sum(dim=-1)
            acc = acc * rescale[..., None] + p @ v[:, :, cols].to(wide)
            row_max = new_max
        out[:, :, rows] = acc / row_sum.clamp_min(torch.finfo(wide).tiny)[..., None]  # divided once
        lse[:, :, rows] = torch.where(row_sum > 0, row_max + torch.log(row_sum), float("inf"))
    return out, lse


def tiled_attention_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The backward pass of tiled attention (FlashAttention-2's, Dao 2023): each tile of
    probabilities is recomputed from the saved logsumexp, :math:`P = e^{S - L}`, and

    .. math::

        D_i = \textstyle\sum_c dO_{ic} O_{ic}, \quad dP = dO\, V^\top, \quad
        dS = P \odot (dP - D), \quad dQ \mathrel{+}= dS\, K \cdot \text{scale}, \quad
        dK \mathrel{+}= dS^\top Q \cdot \text{scale}, \quad dV \mathrel{+}= P^\top dO,

    tile by tile: an outer loop over blocks of keys and values, an inner one over blocks of
    queries. (:math:`D_i = \sum_j P_{ij} dP_{ij}`, the softmax's correction, costs one dot
    product per row, since :math:`O = PV`.)

    Args:
        dout: the gradient of the loss with respect to the output, ``(B, h, n, d_v)``.
        q, k, v, mask, causal, block_q, block_k, scale: as for :func:`tiled_attention_forward`.
        out, lse: what :func:`tiled_attention_forward` returned.

    Returns:
        ``(dq, dk, dv)`` of the shapes of ``q``, ``k`` and ``v``.

    Raises:
        ValueError: as :func:`tiled_attention_forward`, or ``dout``, ``out``, ``lse`` of the wrong shape or dtype.
    """
    _check_backward("tiled_attention_backward", dout, q, k, v, out, lse, mask, causal, block_q, block_k, scale)
    (B, h, n, d_k), m = q.shape, k.shape[-2]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    mask = None if mask is None else mask.expand(B, h, n, m)
    wide = _accumulator_dtype(q)
    D = (dout.to(wide) * out.to(wide)).sum(dim=-1)  # (B, h, n)
    dq, dk, dv = (torch.zeros_like(t, dtype=wide) for t in (q, k, v))
    for j0 in range(0, m, block_k):  # a block of keys and values ...
        cols = slice(j0, min(j0 + block_k, m))
        for i0 in range(0, n, block_q):  # ... meets each block of queries
            rows = slice(i0, min(i0 + block_q, n))
            if causal and cols.start > rows.stop - 1 + m - n:  # above the diagonal: P = 0
                continue
            s = _scores(q, k, rows, cols, scale, wide)  # the forward's tile, recomputed
            s = _exclude(s, mask, causal, rows, cols, m - n)
            p = torch.exp(s - lse[:, :, rows, None])  # (B, h, block_q, block_k)
            do, q_i, k_j, v_j = (
                dout[:, :, rows].to(wide),
                q[:, :, rows].to(wide),
                k[:, :, cols].to(wide),
                v[:, :, cols].to(wide),
            )
            dv[:, :, cols] += p.transpose(-2, -1) @ do
            ds = p * (do @ v_j.transpose(-2, -1) - D[:, :, rows, None])  # dS = P (dP - D), dP = dO V^T
            dq[:, :, rows] += ds @ k_j * scale
            dk[:, :, cols] += ds.transpose(-2, -1) @ q_i * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class TiledAttentionFunction(torch.autograd.Function):
    """Tiled attention for autograd: the forward pass saves ``q``, ``k``, ``v`` (the inputs, no
    copy), the output and the per-row logsumexp, :math:`O(n)` numbers beyond the inputs and
    output instead of the :math:`n \\times m` probabilities, and the backward pass recomputes the
    probabilities tile by tile (:func:`tiled_attention_backward`). Differentiable once.

    ``TiledAttentionFunction.apply(q, k, v, mask, causal, block_q, block_k, scale)``; most callers
    want :func:`tiled_attention`.
    """

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
        block_q: int,
        block_k: int,
        scale: float | None,
    ) -> torch.Tensor:
        options = dict(causal=causal, block_q=block_q, block_k=block_k, scale=scale)
        out, lse = tiled_attention_forward(q, k, v, mask=mask, **options)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.options = options
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v, out, lse, mask = ctx.saved_tensors
        dq, dk, dv = tiled_attention_backward(dout.contiguous(), q, k, v, out, lse, mask=mask, **ctx.options)
        return dq, dk, dv, None, None, None, None, None


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
) -> torch.Tensor:
    r"""Exact attention :math:`\operatorname{softmax}(QK^\top \cdot \text{scale})\,V` computed tile
    by tile, never holding more than one ``(block_q, block_k)`` tile of scores per batch element
    and head, forward or backward (FlashAttention, Dao et al. 2022; Dao 2023).

    Gradients come from :class:`TiledAttentionFunction` (the backward pass recomputes the
    tiles). Half-precision inputs are computed in float32 and the output returned in their dtype.

    Args:
        q: ``(B, h, n, d_k)``; k: ``(B, h, m, d_k)``; v: ``(B, h, m, d_v)``.
        mask: optional boolean, broadcastable to ``(B, h, n, m)``, ``True`` = key excluded (a
            padding mask ``(B, 1, 1, m)``, say). ``F.scaled_dot_product_attention`` takes
            ``~mask``.
        causal: query ``i`` sees keys ``j <= i + m - n`` only (``j <= i`` when ``n == m``; with
            ``n < m`` the queries are the last ``n`` positions, as with a KV cache).
        block_q, block_k: the tile's size, positive ints.
        scale: the scores' factor, default :math:`1/\sqrt{d_k}`.

    Returns:
        ``(B, h, n, d_v)``, in ``q``'s dtype; a query row with no visible key gets zeros (and
        zero gradients), never NaN.

    Raises:
        ValueError: shapes, dtypes or devices that disagree, a non-floating input, a mask that
            is not boolean or does not broadcast, blocks that are not positive ints, a
            non-finite scale.
    """
    _check_tiled("tiled_attention", q, k, v, mask, causal, block_q, block_k, scale)
    wide = torch.promote_types(q.dtype, torch.float32)  # half precision: computed in float32
    out = TiledAttentionFunction.apply(q.to(wide), k.to(wide), v.to(wide), mask, causal, block_q, block_k, scale)
    return out.to(q.dtype)


def materialised_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None
) -> torch.Tensor:
    r"""Attention as chapter 1 writes it, :math:`\operatorname{softmax}(QK^\top \cdot
    \text{scale})\,V`, holding the ``(B, h, n, m)`` scores and probabilities in memory: the
    baseline that :func:`memory_by_length` compares tiled attention with.

    Args:
        q: ``(B, h, n, d_k)``; k: ``(B, h, m, d_k)``; v: ``(B, h, m, d_v)``.
        scale: the scores' factor, default :math:`1/\sqrt{d_k}`.

    Returns:
        ``(B, h, n, d_v)``.

    Raises:
        ValueError: as :func:`tiled_attention`.
    """
    _check_tiled("materialised_attention", q, k, v, scale=scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B, h, n, m): n * m numbers per head
    return torch.softmax(scores, dim=-1) @ v


# --------------------------------------------------------------------------- peak memory


def _device_of(args: Iterable[object]) -> torch.device:
    """The device of the first tensor among ``args`` (the CPU when there is none)."""
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def _cpu_peak(fn: Callable[..., object], args: tuple[object, ...]) -> int:
    """Replay the profiler's allocation events ("[memory]", one per allocation (+bytes) and free
    (-bytes), on the CPU) in the order they happened; the peak is the running sum's maximum."""
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # read when the profiler starts: keep its log lines quiet
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*args)
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    ]
    events.sort(key=lambda e: e.start_ns())  # a stable sort: events of one instant keep their order
    running = peak = 0
    for event in events:
        running += event.nbytes()
        peak = max(peak, running)
    return peak


def _check_peak(fn: object, device: object) -> None:
    if not callable(fn):
        raise ValueError(f"peak_memory_bytes: fn must be callable, got {type(fn).__name__}")
    if device is not None and torch.device(device).type not in ("cpu", "cuda"):
        raise ValueError(f"peak_memory_bytes: measures the CPU and CUDA only, got device {device}")


def peak_memory_bytes(fn: Callable[..., object], *args: object, device: torch.device | str | None = None) -> int:
    """The most memory ``fn(*args)`` holds at any one time beyond what was allocated before it
    started, in bytes (its result included while it exists; ``fn``'s result is then dropped).

    On CUDA, from the caching allocator's statistics (``torch.cuda.reset_peak_memory_stats`` and
    ``max_memory_allocated``, less what was allocated before). On the CPU, from the PyTorch
    profiler (``torch.profiler.profile(profile_memory=True)``), which records every allocation
    and free of a tensor's memory with its size; replayed in order, their running sum's maximum is
    the peak. Both count tensors' memory as PyTorch requested it (the CPU allocator rounds
    nothing; the CUDA one rounds up to blocks of 512 bytes), not the interpreter's own objects,
    and are deterministic for a deterministic ``fn``. (On the CPU the profiler records every
    thread's allocations: what another Python thread allocates meanwhile is counted too.)

    Args:
        fn: the computation, e.g. ``lambda: attention(q, k, v)``.
        *args: passed to ``fn``.
        device: ``"cpu"`` or ``"cuda"``; default the device of the first tensor among ``args``,
            else the CPU.

    Returns:
        The peak extra bytes, an int >= 0.

    Raises:
        ValueError: ``fn`` is not callable, or the device is neither the CPU nor CUDA.
    """
    _check_peak(fn, device)
    device = torch.device(device) if device is not None else _device_of(args)
    if device.type == "cpu":
        return _cpu_peak(fn, args)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn(*args)
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - before)


class MemoryRow(NamedTuple):
    """One length of :func:`memory_by_length`: the peak extra bytes and the wall time (one
    unprofiled run, in seconds) of materialised and of tiled attention."""

    n: int
    materialised_bytes: int
    tiled_bytes: int
    materialised_seconds: float
    tiled_seconds: float

    @property
    def ratio(self) -> float:
        """The materialised peak memory divided by the tiled one, how many times less tiled attention needs."""
        return self.materialised_bytes / self.tiled_bytes


def _check_lengths(lengths: object, **sizes: object) -> list[int]:
    """``lengths`` as a non-empty list of positive ints; each of ``sizes`` (and the blocks) a positive int."""
    values = list(lengths) if isinstance(lengths, Iterable) else [lengths]
    checks.positive_int("memory_by_length", **sizes)
    for n in values:
        checks.integer("memory_by_length", "each length", n, minimum=1)
    if not values:
        raise ValueError("memory_by_length: lengths is empty")
    return values


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    """The wall time of one call of ``fn`` (waiting for a GPU to finish), in seconds."""
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def memory_by_length(
    lengths: Iterable[int],
    *,
    batch: int = 1,
    n_heads: int = 4,
    d_k: int = 64,
    block: int = 128,
    backward: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> list[MemoryRow]:
    r"""Peak memory (:func:`peak_memory_bytes`) and time of :func:`materialised_attention` and
    :func:`tiled_attention` (tiles ``block`` by ``block``) for self-attention of each length ``n``
    in ``lengths``: random ``q``, ``k``, ``v`` of shape ``(batch, n_heads, n, d_k)``.

    The materialised path holds :math:`O(n^2)` numbers per head (the scores and probabilities,
    and with ``backward`` the probabilities saved for it), the tiled one :math:`O(n\,d_k)`
    (its output, the logsumexp, a few tiles; with ``backward`` the three gradients), so the
    ratio grows about linearly with ``n``. The inputs are allocated before measuring and not
    counted; with ``backward=True`` the computation is the forward pass and
    ``torch.autograd.grad`` with respect to ``q``, ``k`` and ``v`` for a random output gradient.

    Returns:
        One :class:`MemoryRow` per length, in order.

    Raises:
        ValueError: a length, size or block that is not a positive int.
    """
    lengths = _check_lengths(lengths, batch=batch, n_heads=n_heads, d_k=d_k, block=block)
    generator, device = torch.Generator().manual_seed(seed), torch.device(device)
    rows = []
    for n in lengths:
        q, k, v, dout = (
            torch.randn(batch, n_heads, n, d_k, generator=generator, dtype=dtype)
            .to(device)
            .requires_grad_(backward and i < 3)
            for i in range(4)
        )
        paths = _memory_paths(q, k, v, dout, block=block, backward=backward)
        peaks = {name: peak_memory_bytes(f, device=device) for name, f in paths.items()}
        seconds = {name: _timed(f, device) for name, f in paths.items()}
        rows.append(MemoryRow(n, peaks["materialised"], peaks["tiled"], seconds["materialised"], seconds["tiled"]))
    return rows


def _memory_paths(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, *, block: int, backward: bool
) -> dict[str, Callable[[], object]]:
    """The two ways of computing attention that :func:`memory_by_length` measures, as calls without arguments."""

    def materialised() -> torch.Tensor:
        return materialised_attention(q, k, v)

    def tiled() -> torch.Tensor:
        return tiled_attention(q, k, v, block_q=block, block_k=block)

    paths = {"materialised": materialised, "tiled": tiled}
    if backward:
        return {name: (lambda f=f: torch.autograd.grad(f(), (q, k, v), dout)) for name, f in paths.items()}
    return paths
