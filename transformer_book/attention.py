"""Scaled dot-product attention (chapter 1) and multi-head attention (chapter 3).

.. math::

    \\operatorname{Attention}(Q, K, V) = \\operatorname{softmax}\\!\\left(
        \\frac{Q K^\\top}{\\sqrt{d_k}} \\right) V

with ``Q`` of shape ``(..., n, d_k)``, ``K`` of shape ``(..., m, d_k)`` and ``V`` of shape
``(..., m, d_v)``. Masks follow the book's convention (``True`` = key excluded), see
:mod:`transformer_book.masks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "init_projections",
    "KVCache",
    "ATTENTION_KERNELS",
    "prefer_attention_kernel",
    "device_kernels",
    "heads_removed",
]


def softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Numerically stable (masked) softmax along ``dim``.

    Implements :math:`\\operatorname{softmax}(x)_j = e^{x_j - c} / \\sum_l e^{x_l - c}`
    with :math:`c = \\max_l x_l`, which equals the textbook formula for any ``c`` but never
    overflows, since every exponent is at most 0.

    Entries where ``mask`` is ``True`` get weight exactly 0. A slice in which every entry
    is masked gets all-zero weights (not NaN, and with finite gradients). A slice holding
    :math:`+\\infty` gets the limit of the formula: its weight shared equally by the
    :math:`+\\infty` entries. Half-precision scores are normalised in float32 (a float16 sum of
    more than 65,504 ones is infinite) and the weights returned in the scores' dtype.

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
    x = scores.to(torch.promote_types(scores.dtype, torch.float32))  # half precision: sum in float32
    if mask is not None:
        _check_mask(mask, scores.shape, "softmax")
        x = x.masked_fill(mask, float("-inf"))
    shift = x.amax(dim=dim, keepdim=True)
    if torch.isposinf(shift).any():  # the limit: a slice's +inf entries share its weight equally
        limit = torch.zeros_like(x).masked_fill(~torch.isposinf(x), float("-inf"))
        x = torch.where(torch.isposinf(shift), limit, x)
        shift = x.amax(dim=dim, keepdim=True)
    # A fully masked slice has max -inf; shifting by 0 there keeps exp(-inf) = 0, not NaN.
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift)).detach()
    exp = torch.exp(x - shift)
    total = exp.sum(dim=dim, keepdim=True)
    return (exp / total.clamp_min(torch.finfo(exp.dtype).tiny)).to(scores.dtype)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
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
        bias: optional floating tensor broadcastable to ``(..., n, m)``, added to the scaled
            scores before the softmax (a relative-position bias, chapter 4):
            :math:`A = \\operatorname{softmax}(QK^\\top/\\sqrt{d_k} + B)`.

    Returns:
        ``(output, weights)`` with ``output`` of shape ``(..., n, d_v)`` and ``weights``
        of shape ``(..., n, m)``, in ``value``'s dtype. A query whose keys are all masked
        gets zero weights and a zero output. Half-precision inputs have their scores and
        softmax computed in float32: a float16 :math:`QK^\\top` overflows 65,504 before the
        scaling would bring it back.

    Raises:
        ValueError: if the inputs are not floating tensors of one dtype and device, if
            their shapes disagree (the message names the shapes), or if ``mask`` is not
            boolean or does not broadcast to ``(..., n, m)``.
    """
    _check_qkv(query, key, value)
    d_k = query.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k) if d_k > 0 else 1.0
    wide = torch.promote_types(query.dtype, torch.float32)  # half precision: scores in float32
    scores = torch.matmul(query.to(wide), key.to(wide).transpose(-2, -1)) * scale  # (..., n, m)
    if bias is not None:
        _check_bias(bias, scores)
        scores = scores + bias
    weights = softmax(scores, mask=mask, dim=-1).to(value.dtype)
    return torch.matmul(weights, value), weights


def _check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    names = ("query", "key", "value")
    tensors = (query, key, value)
    for name, t in zip(names, tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(
                f"attention: {name} must have at least 2 dimensions (..., length, features), got shape {tuple(t.shape)}"
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
        raise ValueError(f"attention: query and key must have the same feature size d_k, got {shapes}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"attention: key and value must have the same length m, got {shapes}")
    if key.shape[-2] == 0:
        raise ValueError(f"attention: no keys (m = 0): every query needs at least one key to attend to, got {shapes}")
    try:
        torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(f"attention: batch dimensions do not broadcast, got {shapes}") from None


def _check_bias(bias: torch.Tensor, scores: torch.Tensor) -> None:
    if not isinstance(bias, torch.Tensor) or not bias.dtype.is_floating_point:
        what = bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"attention: bias must be a floating-point tensor, got {what}")
    try:
        broadcast = torch.broadcast_shapes(bias.shape, scores.shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores.shape:
        raise ValueError(
            f"attention: bias of shape {tuple(bias.shape)} does not broadcast to the scores' "
            f"shape {tuple(scores.shape)} (..., n, m)"
        )


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


def _check_heads(where: str, d_model: int, n_heads: int, dropout: float) -> None:
    """Positive ``d_model`` and ``n_heads``, the first divisible by the second, and a dropout rate in [0, 1)."""
    checks.positive_int(where, d_model=d_model, n_heads=n_heads)
    checks.divisible(where, "d_model", d_model, "n_heads", n_heads)
    checks.probability(where, "dropout", dropout)


def _check_mask_and_bias(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, bias: torch.Tensor | None
) -> None:
    """A mask and a bias (each optional) that fit the scores of ``q`` ``(..., n, d_k)`` against ``k`` ``(..., m, d_k)``."""
    scores_shape = q.shape[:-1] + (k.shape[-2],)
    if mask is not None:
        _check_mask(mask, scores_shape, "MultiHeadAttention")
    if bias is not None:
        _check_bias(bias, torch.empty(scores_shape, device="meta"))


def init_projections(*linears: nn.Linear) -> None:
    """Initialise attention's projections in place as ``nn.MultiheadAttention`` does: each weight
    Glorot-uniform, :math:`U(-a, a)` with :math:`a = \\sqrt{6 / (d_{in} + d_{out})}`, each bias zero."""
    for linear in linears:
        nn.init.xavier_uniform_(linear.weight)
        if linear.bias is not None:
            nn.init.zeros_(linear.bias)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention: ``h`` scaled dot-product attentions side by side.

    .. math::

        \operatorname{head}_i = \operatorname{Attention}(Q W_i^Q, K W_i^K, V W_i^V), \qquad
        \operatorname{MultiHead}(Q, K, V) = [\operatorname{head}_1; \dots; \operatorname{head}_h]\, W^O

    with :math:`W_i^Q, W_i^K, W_i^V \in \mathbb{R}^{d_{\text{model}} \times d_k}`,
    :math:`d_k = d_{\text{model}} / h` and :math:`W^O \in \mathbb{R}^{h d_k \times d_{\text{model}}}`.
    The ``h`` per-head matrices are stored side by side as one ``nn.Linear`` each, ``w_q``,
    ``w_k``, ``w_v`` (head ``i`` owns output features ``i*d_k .. (i+1)*d_k - 1``), and ``w_o``.

    Two paths compute the same thing. With ``need_weights=True`` (the default) the package's
    explicit :func:`scaled_dot_product_attention` runs and the per-head weights are returned;
    with ``need_weights=False`` PyTorch's fused ``F.scaled_dot_product_attention`` runs and the
    weights are ``None``.

    ``causal=True`` also excludes every later key: query ``i`` of ``n`` sees keys ``j <= i + m - n``
    (the causal mask of chapter 2, aligned with the last query when a cache holds earlier keys).
    It equals passing that mask, but on the fused path with no other mask or bias it reaches
    the kernel as ``is_causal=True``, which lets PyTorch pick its flash-attention kernel: no
    ``(n, m)`` mask is built or read.

    Args:
        d_model: model width; must be divisible by ``n_heads``.
        n_heads: number of heads ``h``.
        dropout: dropout probability on the attention weights (training mode only).
        bias: whether the four projections have biases.
        kdim, vdim: feature sizes of ``key`` and ``value`` if not ``d_model`` (cross-attention
            from a memory of another width).

    With a :class:`KVCache` (incremental decoding, chapter 9) the keys and values of earlier
    calls are reused: a non-static cache appends this call's keys and values to the stored
    ones and attends over all of them (``mask`` then covers the ``m`` stored plus new keys);
    a static cache computes them from ``key`` and ``value`` on the first call and ignores
    ``key`` and ``value`` afterwards (cross-attention to a fixed memory).

    With :attr:`pack_projections` on, self-attention (``query``, ``key`` and ``value`` the same
    tensor) computes :math:`[XW^Q; XW^K; XW^V]` as one product with the three weights stacked,
    ``(d_model, 3 d_model)``: the same numbers up to rounding, from a product wide enough to keep
    a GPU's matrix units busy. :func:`device_kernels` turns it on for CUDA (``training.fit`` and
    the benchmarks enter it); the parameters stay ``w_q``, ``w_k``, ``w_v``.

    Shapes:
        ``query`` ``(B, n, d_model)``, ``key`` ``(B, m, kdim)``, ``value`` ``(B, m, vdim)``;
        ``mask`` boolean, True = excluded, one of ``(B, 1, m)``, ``(B, n, m)`` (a head axis is
        added) or ``(B, h, n, m)``, where ``B`` (and ``h``) may be 1 for a mask shared by the
        batch; a 2-D mask is refused, since ``(n, m)`` and a ``(B, m)`` padding mask cannot be
        told apart when ``B == n`` (pass ``causal_mask(n)[None]`` or
        :func:`~transformer_book.masks.padding_mask`'s ``(B, 1, m)``); ``bias`` (optional, added to the scaled scores)
        broadcastable to ``(B, h, n, m)``. Returns ``(output (B, n, d_model), weights
        (B, h, n, m) or None)``.
    """

    pack_projections: ClassVar[bool | None] = None
    """Self-attention computes Q, K and V with one stacked product when this is ``True``, never
    when ``False`` (set on the class, or on one module), and with ``None``, the default, only
    inside :func:`device_kernels` for a CUDA device."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
    ) -> None:
        _check_heads("MultiHeadAttention", d_model, n_heads, dropout)
        super().__init__()
        self.d_model, self.n_heads, self.d_k, self.dropout = d_model, n_heads, d_model // n_heads, dropout
        self.kdim, self.vdim = kdim or d_model, vdim or d_model
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(self.kdim, d_model, bias=bias)
        self.w_v = nn.Linear(self.vdim, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform projections and zero biases (as ``nn.MultiheadAttention``)."""
        init_projections(self.w_q, self.w_k, self.w_v, self.w_o)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_k={self.d_k}, dropout={self.dropout}"

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = True,
        bias: torch.Tensor | None = None,
        cache: KVCache | None = None,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, n, _ = self._check_inputs(query, key, value)
        # (1) every head's projections at once, eq-mha-head: X W_i^Q, X W_i^K, X W_i^V, each (B, h, length, d_k)
        q, k, v = self._project(query, key, value, cache)
        mask, causal = self._attention_mask(mask, causal, batch, n, k.shape[2], fused=not need_weights and bias is None)
        # (2) head_i = Attention(Q_i, K_i, V_i): chapter 1's equation, the head axis one more batch axis
        p = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, bias=bias)
            if p > 0:  # dropout acts on the weights that multiply V; the clean ones are returned
                heads = torch.matmul(F.dropout(weights, p, training=True), v)
        else:  # PyTorch's fused kernel: the same heads, no (B, h, n, m) weights kept
            heads, weights = self._fused_attention(q, k, v, mask, bias, p, causal), None
        # (3) eq-mha-multihead: concatenate the heads, (B, h, n, d_k) -> (B, n, h d_k), and mix them with W^O
        heads = heads.transpose(1, 2).reshape(batch, n, self.d_model)
        return self.w_o(heads), weights

    def _project(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cache: KVCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``Q, K, V`` split into heads, ``(B, h, length, d_k)`` each, with the later paths: one
        stacked product for self-attention under :attr:`pack_projections`, and a :class:`KVCache`
        (chapter 9) that appends this call's keys and values to the earlier ones, or (static) holds
        a fixed memory's, computed on the first call."""

        def heads(x: torch.Tensor) -> torch.Tensor:  # (B, length, d_model) -> (B, h, length, d_k)
            return x.view(x.shape[0], x.shape[1], self.n_heads, self.d_k).transpose(1, 2)

        if cache is not None and cache.static and cache.k is not None:
            return heads(self.w_q(query)), cache.k, cache.v  # cross-attention while decoding: computed once
        if query is key is value and self.pack_projections:  # one wide product (device_kernels)
            q, k, v = (heads(x) for x in self._packed_projection(query).chunk(3, dim=-1))
        else:
            q, k, v = heads(self.w_q(query)), heads(self.w_k(key)), heads(self.w_v(value))
        if cache is not None:  # self-attention while decoding: the earlier positions' too
            k, v = cache.update(k, v)
        return q, k, v

    def _attention_mask(
        self, mask: torch.Tensor | None, causal: bool, batch: int, n: int, m: int, *, fused: bool
    ) -> tuple[torch.Tensor | None, bool]:
        """``(mask with a head axis, or None; whether the kernel is to apply the causal mask itself)``.
        ``causal`` becomes chapter 2's mask of later keys (query ``i`` of ``n`` sees keys
        ``j <= i + m - n``), merged into ``mask``, unless the fused kernel can apply it alone
        (``fused``, no other mask, ``n == m``): then no ``(n, m)`` mask is built."""
        mask = self._head_mask(mask, batch, n, m)
        if not causal or (fused and mask is None and n == m):
            return mask, causal
        future = torch.ones(n, m, dtype=torch.bool, device=self.w_q.weight.device).triu(m - n + 1)
        return (future if mask is None else mask | future), False

    def _packed_projection(self, x: torch.Tensor) -> torch.Tensor:
        """``[x W^Q; x W^K; x W^V]`` ``(B, n, 3 d_model)`` from one product with the stacked weights."""
        linears = (self.w_q, self.w_k, self.w_v)
        weight = torch.cat([linear.weight for linear in linears])
        biases = [linear.bias for linear in linears]
        bias = (
            None
            if all(b is None for b in biases)
            else torch.cat(
                [b if b is not None else linear.weight.new_zeros(self.d_model) for b, linear in zip(biases, linears)]
            )
        )
        return F.linear(x, weight, bias)

    @staticmethod
    def _fused_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        bias: torch.Tensor | None,
        p: float,
        causal: bool = False,
    ) -> torch.Tensor:
        """``F.scaled_dot_product_attention`` in the book's conventions.

        Fully masked rows are computed unmasked, then zeroed, so that no kernel ever sees a
        row of -inf (some return NaN for it) and the result equals the explicit path.
        ``causal`` arrives only with no mask and no bias: the kernel builds the mask itself.
        """
        _check_mask_and_bias(q, k, mask, bias)
        if causal:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)
        dead = mask.all(dim=-1, keepdim=True)  # (..., n, 1): queries with no key at all
        keep = ~(mask & ~dead)
        attn_mask: torch.Tensor = keep
        if bias is not None:
            attn_mask = bias.masked_fill(~keep, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
        return out.masked_fill(dead, 0.0)

    def _check_inputs(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[int, int, int]:
        names = ("query", "key", "value")
        widths = (self.d_model, self.kdim, self.vdim)
        dtype = self.w_q.weight.dtype
        for name, t, width in zip(names, (query, key, value), widths):
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"MultiHeadAttention: {name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() != 3 or t.shape[-1] != width:
                raise ValueError(
                    f"MultiHeadAttention: {name} must have shape (B, length, {width}), got {tuple(t.shape)}"
                )
            # under autocast (say bfloat16 on the CPU) the projections cast their inputs themselves
            if t.dtype != dtype and not (t.dtype.is_floating_point and torch.is_autocast_enabled(t.device.type)):
                raise ValueError(
                    f"MultiHeadAttention: {name} has dtype {t.dtype} but the weights are {dtype}; "
                    f"convert one of them (e.g. module.to({t.dtype}))"
                )
        shapes = f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(f"MultiHeadAttention: batch sizes differ: {shapes}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"MultiHeadAttention: key and value lengths differ: {shapes}")
        if key.shape[1] == 0:
            raise ValueError(f"MultiHeadAttention: no keys (m = 0): every query needs at least one key, got {shapes}")
        return query.shape[0], query.shape[1], key.shape[1]

    def _head_mask(self, mask: torch.Tensor | None, batch: int, n: int, m: int) -> torch.Tensor | None:
        """Give a mask a head axis: (B, h, n, m) stays, (B, 1, m) and (B, n, m) gain one; 2-D is refused."""
        if mask is None:
            return None
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            what = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"MultiHeadAttention: mask must be boolean (True = key excluded), got {what}")
        if mask.dim() == 2:  # (n, m) for every sequence, or (B, m) per sequence? Same shape when B == n.
            raise ValueError(
                f"MultiHeadAttention: a 2-D mask {tuple(mask.shape)} is ambiguous ((n, m) shared by the batch, or "
                "(B, m) one row per sequence, alike when B == n); pass (1, n, m) for a mask shared by the batch "
                "(causal_mask(n)[None]) or (B, 1, m) for a padding mask (masks.padding_mask)"
            )
        if mask.dim() not in (3, 4):
            raise ValueError(
                f"MultiHeadAttention: mask must have shape (B, 1, m), (B, n, m) or (B, h, n, m) (B may be 1), "
                f"got {tuple(mask.shape)}"
            )
        if mask.dim() == 3:  # per batch element: check against (B, n, m), then add the head axis
            _check_mask(mask, torch.Size((batch, n, m)), "MultiHeadAttention")
            return mask.unsqueeze(1)
        _check_mask(mask, torch.Size((batch, self.n_heads, n, m)), "MultiHeadAttention")
        return mask


def _check_continues(cache: KVCache, k: torch.Tensor, v: torch.Tensor) -> None:
    """New keys and values ``(B, h, n, d_k)`` of one length, that continue the cached ones: the same
    batch, heads, head size, dtype and device (a cache of another layer, or of a model of another
    size or precision, is named here rather than failing inside ``torch.cat`` or the attention kernel)."""
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            what = f"shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"KVCache.update: {name} must be a (B, h, n, d_k) tensor, got {what}")
    if k.shape[:3] != v.shape[:3] or k.dtype != v.dtype or k.device != v.device:
        raise ValueError(
            f"KVCache.update: k {tuple(k.shape)} {k.dtype} and v {tuple(v.shape)} {v.dtype} must agree on "
            f"(B, h, n), dtype and device"
        )
    if cache.k is None or cache.static:
        return
    for name, new, old in (("k", k, cache.k), ("v", v, cache.v)):
        if new.shape[:2] != old.shape[:2] or new.shape[3] != old.shape[3]:
            raise ValueError(
                f"KVCache.update: new {name} of shape {tuple(new.shape)} does not continue the cached "
                f"{tuple(old.shape)}: batch, heads and head size must agree (a cache of another layer "
                f"or model?)"
            )
        if new.dtype != old.dtype or new.device != old.device:
            raise ValueError(
                f"KVCache.update: new {name} is {new.dtype} on {new.device}, the cached ones "
                f"{old.dtype} on {old.device}; keep one cache per model and precision"
            )


@dataclass
class KVCache:
    r"""The keys and values one attention layer has computed so far, kept between decoding steps.

    Generating token :math:`t+1` needs the keys and values of positions :math:`0..t`; without a
    cache every step recomputes them for the whole prefix. ``k`` and ``v`` have shape
    ``(B, h, t, d_k)``. A self-attention cache grows by the new positions at every call
    (:meth:`update`); a ``static`` cache (cross-attention) is filled once from the encoder's
    memory and reused unchanged.
    """

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    static: bool = False

    def __len__(self) -> int:
        """The number of positions stored (0 when empty)."""
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new keys and values ``(B, h, n, d_k)`` (after the earlier ones, unless
        static) and return everything stored."""
        _check_continues(self, k, v)
        if self.static or self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def select(self, index: torch.Tensor) -> KVCache:
        """A cache holding the batch rows ``index`` (a beam search reorders its hypotheses)."""
        if self.k is None:
            return KVCache(static=self.static)
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index), self.static)


ATTENTION_KERNELS = ("flash", "efficient", "cudnn", "math")
"""The kernels behind PyTorch's ``F.scaled_dot_product_attention`` that
:func:`prefer_attention_kernel` can put first: FlashAttention, the memory-efficient kernel,
NVIDIA's cuDNN attention, and the plain formula (``math``); in this order otherwise."""


@contextmanager
def prefer_attention_kernel(name: str | None, *, only: bool = False) -> Iterator[None]:
    """Within the ``with`` block, the fused attention (``need_weights=False``) tries kernel
    ``name`` first, then the others in the order of :data:`ATTENTION_KERNELS`; every kernel
    stays allowed, so an input the preferred kernel cannot take runs on the next one. ``None``
    changes nothing. ``only=True`` allows no other kernel: an input that ``name`` cannot take
    raises PyTorch's ``RuntimeError`` (how a benchmark checks which kernel runs).

    PyTorch tries FlashAttention first. On Hopper GPUs (H100, H200) NVIDIA's cuDNN attention
    is often the faster one for training shapes; it is not PyTorch's first choice because
    some releases and shapes of it have had numerical problems, so prefer it only where a
    run has been measured and checked (``TrainConfig.attention_kernel`` does it for
    :func:`transformer_book.training.fit`).

    Raises:
        ValueError: ``name`` is not one of :data:`ATTENTION_KERNELS`.
    """
    if name is None:
        yield
        return
    checks.choice("prefer_attention_kernel", "name", name, ATTENTION_KERNELS)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    order = [backends[name]] + ([] if only else [backend for key, backend in backends.items() if key != name])
    with sdpa_kernel(order, set_priority=True):
        yield


@contextmanager
def device_kernels(device: torch.device | str, *, attention_kernel: str | None = None) -> Iterator[None]:
    """Every kernel choice the package makes for a device, in one place: on CUDA, self-attention
    packs its Q, K and V projections into one product (:attr:`MultiHeadAttention.pack_projections`)
    and ``attention_kernel`` (one of :data:`ATTENTION_KERNELS`, or None for PyTorch's choice) is
    preferred (:func:`prefer_attention_kernel`); on other devices nothing changes. The choices hold
    inside the block and are undone after it. ``training.fit`` runs its steps inside it, and so do
    the benchmarks; a forward pass itself never looks at the device."""
    previous = MultiHeadAttention.pack_projections
    if previous is None:  # not chosen by hand: the device decides
        MultiHeadAttention.pack_projections = torch.device(device).type == "cuda"
    try:
        with prefer_attention_kernel(attention_kernel):
            yield
    finally:
        MultiHeadAttention.pack_projections = previous


def _checked_heads(attention: MultiHeadAttention, heads: Iterable[int]) -> list[int]:
    if not isinstance(attention, MultiHeadAttention):
        raise ValueError(f"heads_removed: expected a MultiHeadAttention, got {type(attention).__name__}")
    heads = list(heads)
    for h in heads:
        checks.integer("heads_removed", "each head", h, minimum=0, below=attention.n_heads)
    return sorted(set(heads))


@contextmanager
def heads_removed(attention: MultiHeadAttention, heads: Iterator[int] | list[int] | tuple[int, ...]) -> Iterator[None]:
    r"""Within the ``with`` block, ``attention`` works without the heads ``heads`` (0-based).

    Multi-head attention is a sum over heads, :math:`\operatorname{MultiHead} = \sum_i
    \operatorname{head}_i W^O_i` (chapter 3), so removing head :math:`i` is setting its block
    :math:`W^O_i` (columns :math:`i d_k .. (i+1) d_k - 1` of ``w_o.weight``) to zero, as Michel et
    al. (2019) did to measure a head's importance. The weights are restored on leaving the block,
    also after an error.

    Raises:
        ValueError: ``attention`` is not a :class:`MultiHeadAttention`, or a head index outside
            ``[0, n_heads)``.
    """
    heads = _checked_heads(attention, heads)  # sorted, each once
    weight, d_k = attention.w_o.weight, attention.d_k
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            for h in heads:
                weight[:, h * d_k : (h + 1) * d_k] = 0.0
        yield
    finally:
        with torch.no_grad():
            weight.copy_(saved)
