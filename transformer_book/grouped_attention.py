r"""Grouped-query attention (chapters 17 and 18): fewer key/value heads than query heads.

Multi-head attention (chapter 3) gives each of its :math:`h` heads its own queries, keys and
values. While a decoder generates, the keys and values of every earlier position are kept in a
cache (chapter 9), and that cache, not the arithmetic, limits how long and how many sequences
fit on a device. Grouped-query attention (GQA; Ainslie et al. 2023) keeps :math:`h` query heads
but only :math:`g` key/value heads, :math:`g` dividing :math:`h`: the query heads fall into
:math:`g` groups of :math:`h/g` consecutive heads, and every head of group :math:`j` attends with
the one key/value head :math:`j`,

.. math::

    \operatorname{head}_i = \operatorname{Attention}\bigl(Q W_i^Q,\; K W^K_{\lfloor i g / h \rfloor},\;
        V W^V_{\lfloor i g / h \rfloor}\bigr), \qquad
    \operatorname{GQA}(X) = [\operatorname{head}_1; \dots; \operatorname{head}_h]\, W^O .

:math:`g = h` is multi-head attention; :math:`g = 1` is multi-query attention (MQA; Shazeer
2019), one key/value head shared by all query heads. The cache shrinks by the factor
:math:`h/g`: :func:`kv_cache_bytes` counts it.

Positions enter through rotary embeddings (Su et al. 2021; chapter 4's
:class:`~transformer_book.positional.RotaryEmbedding`): queries and keys are rotated by the
angle of their absolute position, so that their dot product depends on the offset only. With a
cache the new tokens' positions start at the cache's length.

References: Shazeer 2019, *Fast Transformer Decoding: One Write-Head is All You Need*; Ainslie
et al. 2023, *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
Checkpoints*; Su et al. 2021, *RoFormer*.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.attention import KVCache, init_projections, scaled_dot_product_attention
from transformer_book.positional import RotaryEmbedding

__all__ = ["GroupedQueryAttention", "repeat_kv_heads", "kv_cache_bytes"]


_HAS_GQA = torch.__version__ >= "2.5"
"""Whether ``F.scaled_dot_product_attention`` takes ``enable_gqa`` (PyTorch 2.5 on)."""


def repeat_kv_heads(kv: torch.Tensor, group: int) -> torch.Tensor:
    r"""Repeat each key/value head ``group`` times, so that query head :math:`i` finds its shared
    head :math:`\lfloor i / \text{group} \rfloor` at index :math:`i`: ``(B, g, m, d_k)`` ->
    ``(B, g * group, m, d_k)``, head :math:`j` copied to :math:`j \cdot \text{group}, \dots,
    (j + 1) \cdot \text{group} - 1`.

    Raises:
        ValueError: ``kv`` is not a 4-D tensor, or ``group`` is not a positive int.
    """
    _check_repeat(kv, group)
    return kv.repeat_interleave(group, dim=1)


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, d_k: int, length: int, batch: int = 1, dtype: torch.dtype = torch.float32
) -> int:
    r"""The bytes a key/value cache occupies after ``length`` positions.

    .. math::

        \text{bytes} = 2 \cdot L \cdot B \cdot g \cdot t \cdot d_k \cdot \text{(bytes per element)}

    (keys and values, each ``(B, g, t, d_k)`` in each of the :math:`L` layers). Multi-head
    attention has :math:`g = h`; grouped-query attention divides the cache by :math:`h / g`,
    multi-query attention (:math:`g = 1`) by :math:`h`.

    Raises:
        ValueError: a count that is not a positive int (``length``: a non-negative one), or a
            ``dtype`` that is not a ``torch.dtype``.
    """
    _check_cache_size(n_layers, n_kv_heads, d_k, length, batch, dtype)
    return 2 * n_layers * batch * n_kv_heads * length * d_k * torch.empty(0, dtype=dtype).element_size()


class GroupedQueryAttention(nn.Module):
    r"""Causal self-attention with ``n_heads`` query heads sharing ``n_kv_heads`` key/value heads.

    .. math::

        \operatorname{head}_i = \operatorname{softmax}\!\left(
            \frac{R(Q W_i^Q)\, R(K W^K_{j(i)})^\top}{\sqrt{d_k}} + M\right) V W^V_{j(i)},
        \qquad j(i) = \lfloor i / (h/g) \rfloor

    with :math:`R` the rotary embedding at each row's absolute position (when ``rotary`` is
    given), :math:`M` the causal mask (and ``mask``) as :math:`-\infty`, :math:`d_k =
    d_{\text{model}} / h`. The projections are ``nn.Linear`` s, as in
    :class:`~transformer_book.attention.MultiHeadAttention`: ``w_q`` (``d_model -> d_model``),
    ``w_k`` and ``w_v`` (``d_model -> n_kv_heads * d_k``; key/value head :math:`j` owns output
    features :math:`j d_k .. (j+1) d_k - 1`) and ``w_o`` (``d_model -> d_model``). With
    ``n_kv_heads == n_heads`` the module holds the parameters of a ``MultiHeadAttention`` under
    the same names.

    Two paths compute the same thing: by default PyTorch's fused ``F.scaled_dot_product_attention``
    (with ``enable_gqa`` where PyTorch has it, which reads each key/value head for its whole
    group; else on keys and values repeated to ``n_heads`` by :func:`repeat_kv_heads`); with
    ``need_weights=True`` the package's explicit
    :func:`~transformer_book.attention.scaled_dot_product_attention` on the repeated heads, which
    also returns the weights.

    With a :class:`~transformer_book.attention.KVCache` (incremental decoding) only the
    ``n_kv_heads`` key/value heads are stored, ``(B, n_kv_heads, t, d_k)``, after rotation: the
    new positions are ``t .. t + n - 1`` (``t`` the cache's length), query :math:`i` of the new
    ones sees keys :math:`0 .. t + i`, and decoding with a cache equals the full forward pass.

    Args:
        d_model: model width, divisible by ``n_heads``.
        n_heads: query heads :math:`h`.
        n_kv_heads: key/value heads :math:`g`, dividing ``n_heads`` (1: multi-query attention).
        bias: whether the four projections have biases (LLaMA's have none).
        dropout: dropout on the attention weights, in training mode.
        rotary: a :class:`~transformer_book.positional.RotaryEmbedding` of ``d_head = d_k`` applied
            to queries and keys (``None``: no positions here; a sub-module, so a model may share
            one among its layers).

    Shapes:
        ``x`` ``(B, n, d_model)``; ``mask`` boolean, ``True`` = key excluded, ``(B, 1, m)``,
        ``(B, n, m)`` or ``(B, h, n, m)`` (``B``, ``h`` may be 1), ``m`` the keys (cached plus new).
        Returns ``output (B, n, d_model)``, or ``(output, weights (B, h, n, m))`` with
        ``need_weights=True``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        *,
        bias: bool = False,
        dropout: float = 0.0,
        rotary: RotaryEmbedding | None = None,
    ) -> None:
        _check_heads("GroupedQueryAttention", d_model, n_heads, n_kv_heads, dropout, rotary)
        super().__init__()
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_k, self.group, self.dropout = d_model // n_heads, n_heads // n_kv_heads, float(dropout)
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.rotary = rotary
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform projections and zero biases (as :class:`~transformer_book.attention.MultiHeadAttention`)."""
        init_projections(self.w_q, self.w_k, self.w_v, self.w_o)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, d_k={self.d_k}, "
            f"dropout={self.dropout}"
        )

    def forward(
        self,
        x: torch.Tensor,
        *,
        causal: bool = True,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        batch, n, offset = self._check_inputs(x, mask, cache)  # offset: the positions already cached
        q = self._split(self.w_q(x), self.n_heads)  # (B, h, n, d_k)
        k = self._split(self.w_k(x), self.n_kv_heads)  # (B, g, n, d_k)
        v = self._split(self.w_v(x), self.n_kv_heads)  # (B, g, n, d_k)
        if self.rotary is not None:  # absolute positions offset .. offset + n - 1
            positions = torch.arange(offset, offset + n, device=x.device)
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        if cache is not None:  # the cache keeps the g heads, not h
            k, v = cache.update(k, v)  # (B, g, m, d_k)
        m = k.shape[2]
        if mask is not None and mask.dim() == 3:  # (B, 1 or n, m): one mask for every head
            mask = mask.unsqueeze(1)
        if causal and (need_weights or mask is not None or n != m):
            future = torch.ones(n, m, dtype=torch.bool, device=x.device).triu(m - n + 1)  # key j > t + i
            mask, causal = (future if mask is None else mask | future), False
        p = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(
                q, repeat_kv_heads(k, self.group), repeat_kv_heads(v, self.group), mask
            )
            if p > 0:  # dropout acts on the weights that multiply V; the clean ones are returned
                heads = torch.matmul(F.dropout(weights, p, training=True), repeat_kv_heads(v, self.group))
        else:
            heads, weights = self._fused(q, k, v, mask, causal, p), None
        out = self.w_o(heads.transpose(1, 2).reshape(batch, n, self.d_model))  # concatenate, mix with W^O
        return (out, weights) if need_weights else out

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """``(B, n, heads * d_k)`` -> ``(B, heads, n, d_k)``."""
        return x.view(x.shape[0], x.shape[1], heads, self.d_k).transpose(1, 2)

    def _fused(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool, p: float
    ) -> torch.Tensor:
        """``F.scaled_dot_product_attention`` in the book's conventions: ``mask`` True = excluded
        (PyTorch's boolean mask means the opposite), a fully masked query row gives zeros (no
        kernel sees a row of -inf), and ``causal`` arrives only with no mask and ``n == m``."""
        if _HAS_GQA:
            extra = {"enable_gqa": self.group > 1}
        else:  # an older PyTorch: give every query head its own copy of its key/value head
            k, v, extra = repeat_kv_heads(k, self.group), repeat_kv_heads(v, self.group), {}
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal, **extra)
        dead = mask.all(dim=-1, keepdim=True)  # (..., n, 1): queries with no key at all
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=~(mask & ~dead), dropout_p=p, **extra)
        return out.masked_fill(dead, 0.0)

    def _check_inputs(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None) -> tuple[int, int, int]:
        """``x`` ``(B, n, d_model)`` in the weights' dtype, a boolean mask that fits ``(B, h, n, m)``
        and a growing (not static) cache; returns ``(B, n, cached length)``."""
        where = "GroupedQueryAttention"
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            what = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{where}: x must have shape (B, n, {self.d_model}), got {what}")
        if 0 in x.shape[:2]:
            raise ValueError(f"{where}: x has shape {tuple(x.shape)}; at least one sequence and one position")
        dtype = self.w_q.weight.dtype
        if x.dtype != dtype and not (x.dtype.is_floating_point and torch.is_autocast_enabled(x.device.type)):
            raise ValueError(
                f"{where}: x has dtype {x.dtype} but the weights are {dtype}; convert one of them "
                f"(e.g. module.to({x.dtype}))"
            )
        if cache is not None and (not isinstance(cache, KVCache) or cache.static):
            raise ValueError(
                f"{where}: cache must be a growing KVCache (self-attention), got "
                f"{'a static KVCache' if isinstance(cache, KVCache) else type(cache).__name__}"
            )
        batch, n = x.shape[:2]
        offset = 0 if cache is None else len(cache)
        if mask is not None:
            _check_mask(where, mask, batch, self.n_heads, n, offset + n)
        return batch, n, offset


def _check_heads(
    where: str, d_model: object, n_heads: object, n_kv_heads: object, dropout: object, rotary: object
) -> None:
    """Positive widths, ``n_heads`` dividing ``d_model`` and divided by ``n_kv_heads``, a dropout
    rate in [0, 1), and a rotary embedding (or None) for heads of ``d_k`` features."""
    checks.positive_int(where, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv_heads)
    checks.divisible(where, "d_model", d_model, "n_heads", n_heads)
    why = " (each key/value head serves a whole group of query heads)"
    checks.divisible(where, "n_heads", n_heads, "n_kv_heads", n_kv_heads, why)
    checks.probability(where, "dropout", dropout)
    d_k = d_model // n_heads
    if rotary is not None and (not isinstance(rotary, RotaryEmbedding) or rotary.d_head != d_k):
        what = f"d_head={rotary.d_head}" if isinstance(rotary, RotaryEmbedding) else type(rotary).__name__
        raise ValueError(
            f"{where}: rotary must be a RotaryEmbedding with d_head = d_k = {d_k} "
            f"(an even d_k: rotations act on pairs of features), got {what}"
        )


def _check_mask(where: str, mask: object, batch: int, heads: int, n: int, m: int) -> None:
    """A boolean mask of shape (B, 1 or n, m) or (B, h, n, m), with B, h, n allowed to be 1."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        what = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{where}: mask must be a boolean tensor (True = key excluded), got {what}")
    target = (batch, n, m) if mask.dim() == 3 else (batch, heads, n, m)
    try:
        fits = mask.dim() in (3, 4) and torch.broadcast_shapes(mask.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"{where}: mask of shape {tuple(mask.shape)} does not fit (B, 1 or n, m) = (B, {n}, {m}) "
            f"or (B, h, n, m) = ({batch}, {heads}, {n}, {m}) (B, h and n may be 1; m counts the "
            "cached keys too)"
        )


def _check_repeat(kv: object, group: object) -> None:
    if not isinstance(kv, torch.Tensor) or kv.dim() != 4:
        what = tuple(kv.shape) if isinstance(kv, torch.Tensor) else type(kv).__name__
        raise ValueError(f"repeat_kv_heads: kv must have shape (B, g, m, d_k), got {what}")
    checks.positive_int("repeat_kv_heads", group=group)


def _check_cache_size(
    n_layers: object, n_kv_heads: object, d_k: object, length: object, batch: object, dtype: object
) -> None:
    checks.positive_int("kv_cache_bytes", n_layers=n_layers, n_kv_heads=n_kv_heads, d_k=d_k, batch=batch)
    checks.non_negative_int("kv_cache_bytes", length=length)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"kv_cache_bytes: dtype must be a torch.dtype, got {dtype!r}")
