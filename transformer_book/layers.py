r"""The pieces of a Transformer block (chapter 5) and the encoder and decoder layers (chapter 6).

* :func:`layer_norm`: :math:`\gamma \odot (x - \mu) / \sqrt{\sigma^2 + \epsilon} + \beta` over the
  features, with the *biased* variance and :math:`\epsilon` inside the root, written out;
  :class:`LayerNorm`, the module, runs PyTorch's fused kernel for the same function.
* :class:`PositionwiseFeedForward`: :math:`\max(0, x W_1 + b_1) W_2 + b_2`, applied to every
  position separately.
* :class:`EncoderLayer` and :class:`DecoderLayer`, each sub-layer wrapped in a residual
  connection and a LayerNorm, either after the residual sum (post-LN, the 2017 paper's form)
  or at the sub-layer's input (pre-LN), switched by ``norm_first``.

The sub-module names match ``torch.nn.TransformerEncoderLayer`` and
``torch.nn.TransformerDecoderLayer`` where the two have the same piece (``self_attn``,
``norm1``, ``dropout1``, ...), so that :mod:`transformer_book.twins` can copy weights across.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.attention import KVCache, MultiHeadAttention

__all__ = ["layer_norm", "LayerNorm", "PositionwiseFeedForward", "EncoderLayer", "DecoderLayer"]

_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    # GPT-2's "gelu_new": the tanh approximation of GELU, needed to reproduce its checkpoints exactly
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def _check_features(where: str, x: torch.Tensor, d_model: int) -> None:
    """A floating-point ``x`` whose last axis has ``d_model`` features."""
    if x.shape[-1:] != (d_model,):
        raise ValueError(f"{where}: expected (..., {d_model}), got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{where}: x must be a floating-point tensor, got dtype {x.dtype}")


def _check_ffn(where: str, d_model: int, d_ff: int, dropout: float, activation: str) -> None:
    """Positive widths, a dropout rate in [0, 1) and a known activation."""
    checks.positive_int(where, d_model=d_model, d_ff=d_ff)
    checks.probability(where, "dropout", dropout)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{where}: activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    r"""Layer normalisation over the last axis, written out as chapter 5 derives it.

    .. math::

        \mu = \frac{1}{d} \sum_{l=1}^{d} x_l, \qquad
        \sigma^2 = \frac{1}{d} \sum_{l=1}^{d} (x_l - \mu)^2, \qquad
        \operatorname{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta

    The variance is the biased one (divide by ``d``, not ``d - 1``) and ``eps`` sits inside the
    square root: two traps of peers' code, where either changes the result. The arithmetic runs
    in float32 at least (float64 stays float64), as ``F.layer_norm``'s does, and the result is
    rounded to ``x``'s dtype once: in float16 :math:`(x_l - \mu)^2` overflows 65,504 as soon as
    :math:`|x_l - \mu| > 256`.

    Shapes: ``x`` is ``(..., d)``; ``gamma`` and ``beta`` are ``(d,)``; the result has ``x``'s
    shape and dtype.
    """
    wide = torch.promote_types(x.dtype, torch.float32)
    xw = x.to(wide)
    mu = xw.mean(dim=-1, keepdim=True)
    var = (xw - mu).pow(2).mean(dim=-1, keepdim=True)  # biased: divide by d
    y = gamma.to(wide) * (xw - mu) / torch.sqrt(var + eps) + beta.to(wide)
    return y.to(x.dtype)


class LayerNorm(nn.Module):
    r"""Layer normalisation over the last axis, :func:`layer_norm` with learned ``gamma`` and
    ``beta``.

    The module runs PyTorch's fused kernel ``F.layer_norm`` (one pass, statistics in float32);
    with ``fused=False`` it runs the written-out :func:`layer_norm` instead. The two compute the
    same function, checked equal in value and gradient in float64 and float16 by the tests,
    the way :class:`~transformer_book.attention.MultiHeadAttention` has an explicit and a fused
    path.

    Args:
        d_model: ``d``, the size of the last axis.
        eps: :math:`\epsilon > 0`.
        fused: run ``F.layer_norm`` (default) or :func:`layer_norm`.

    Shapes: ``(..., d_model)`` in and out. Parameters ``gamma`` (ones) and ``beta`` (zeros), ``(d_model,)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, *, fused: bool = True) -> None:
        super().__init__()
        checks.positive_int("LayerNorm", d_model=d_model)
        if not eps > 0:
            raise ValueError(f"LayerNorm: eps must be positive, got {eps}")
        self.d_model, self.eps, self.fused = d_model, eps, bool(fused)
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}" + ("" if self.fused else ", fused=False")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_features("LayerNorm", x, self.d_model)
        if self.fused:
            return F.layer_norm(x, (self.d_model,), self.gamma, self.beta, self.eps)
        return layer_norm(x, self.gamma, self.beta, self.eps)


class PositionwiseFeedForward(nn.Module):
    r"""The same two-layer network applied to every position.

    .. math:: \operatorname{FFN}(x) = \phi(x W_1 + b_1)\, W_2 + b_2,
        \qquad W_1 \in \mathbb{R}^{d_{\text{model}} \times d_{ff}},\;
        W_2 \in \mathbb{R}^{d_{ff} \times d_{\text{model}}}

    with :math:`\phi` = ReLU (the 2017 paper) or GELU, and dropout after :math:`\phi` in training.

    Shapes: ``(..., d_model)`` in and out. Sub-modules ``linear1``, ``linear2``, ``dropout``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu") -> None:
        _check_ffn("PositionwiseFeedForward", d_model, d_ff, dropout, activation)
        super().__init__()
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(_ACTIVATIONS[self.activation](self.linear1(x))))


class EncoderLayer(nn.Module):
    r"""Self-attention and a feed-forward network, each with a residual connection and LayerNorm.

    Post-LN (``norm_first=False``, the 2017 paper)::

        x = LayerNorm(x + Dropout(SelfAttention(x)))
        x = LayerNorm(x + Dropout(FFN(x)))

    Pre-LN (``norm_first=True``)::

        x = x + Dropout(SelfAttention(LayerNorm(x)))
        x = x + Dropout(FFN(LayerNorm(x)))

    Args:
        d_model, n_heads, d_ff: widths; ``d_model`` divisible by ``n_heads``.
        dropout: on attention weights, inside the FFN and on each sub-layer's output.
        norm_first: pre-LN if True, post-LN if False.

    Shapes: ``x`` ``(B, n, d_model)``; ``mask`` as for
    :class:`~transformer_book.attention.MultiHeadAttention` (typically the padding mask
    ``(B, 1, n)``). Returns ``(B, n, d_model)``, or ``(output, weights (B, h, n, n))`` with
    ``need_weights=True``. With a :class:`~transformer_book.attention.KVCache` the
    self-attention also reads the keys and values of earlier calls (incremental decoding).
    ``causal=True`` hides later positions as the causal mask would (see
    :class:`~transformer_book.attention.MultiHeadAttention`); ``bias`` (broadcastable to
    ``(B, h, n, m)``, e.g. :class:`~transformer_book.positional.ALiBi`'s) is added to the
    self-attention's scaled scores.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        checks.probability("EncoderLayer", "dropout", dropout)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1, self.norm2 = LayerNorm(d_model, eps), LayerNorm(d_model, eps)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: KVCache | None = None,
        causal: bool = False,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        def attend(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            out, weights = self.self_attn(
                h, h, h, mask, need_weights=need_weights, cache=cache, causal=causal, bias=bias
            )
            return self.dropout1(out), weights

        if self.norm_first:
            attended, weights = attend(self.norm1(x))
            x = x + attended
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            attended, weights = attend(x)
            x = self.norm1(x + attended)
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return (x, weights) if need_weights else x


class DecoderLayer(nn.Module):
    r"""Masked self-attention, cross-attention over the encoder's output, and an FFN.

    Post-LN (``norm_first=False``)::

        y = LayerNorm(y + Dropout(SelfAttention(y, causal and padding mask)))
        y = LayerNorm(y + Dropout(CrossAttention(y, memory, source padding mask)))
        y = LayerNorm(y + Dropout(FFN(y)))

    Pre-LN applies each LayerNorm to the sub-layer's input instead. The cross-attention's
    queries come from the decoder, its keys and values from the encoder's output ``memory``.

    Shapes: ``y`` ``(B, n, d_model)``, ``memory`` ``(B, m, d_model)``; ``self_mask``
    broadcastable to ``(B, h, n, n)`` (causal OR target padding); ``memory_mask`` to
    ``(B, h, n, m)`` (source padding ``(B, 1, m)``). Returns ``(B, n, d_model)``, or with
    ``need_weights=True`` ``(output, self_weights (B, h, n, n), cross_weights (B, h, n, m))``.
    ``cache`` is a pair of :class:`~transformer_book.attention.KVCache`, a growing one for the
    self-attention and a static one for the cross-attention (incremental decoding).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        checks.probability("DecoderLayer", "dropout", dropout)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, eps) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: tuple[KVCache, KVCache] | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self_cache, cross_cache = cache if cache is not None else (None, None)

        def self_attend(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            out, weights = self.self_attn(h, h, h, self_mask, need_weights=need_weights, cache=self_cache)
            return self.dropout1(out), weights

        def cross_attend(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            out, weights = self.cross_attn(h, memory, memory, memory_mask, need_weights=need_weights, cache=cross_cache)
            return self.dropout2(out), weights

        if self.norm_first:
            attended, self_weights = self_attend(self.norm1(y))
            y = y + attended
            attended, cross_weights = cross_attend(self.norm2(y))
            y = y + attended
            y = y + self.dropout3(self.ffn(self.norm3(y)))
        else:
            attended, self_weights = self_attend(y)
            y = self.norm1(y + attended)
            attended, cross_weights = cross_attend(y)
            y = self.norm2(y + attended)
            y = self.norm3(y + self.dropout3(self.ffn(y)))
        return (y, self_weights, cross_weights) if need_weights else y
