r"""The pieces of a modern decoder block (chapter 18), as in LLaMA (Touvron et al. 2023).

* :func:`rms_norm` and :class:`RMSNorm` (Zhang and Sennrich 2019): LayerNorm without the mean
  and without the shift,

  .. math:: \operatorname{RMSNorm}(x) = \frac{x}{\sqrt{\frac{1}{d}\sum_{l=1}^{d} x_l^2 + \epsilon}} \odot \gamma ;

* :class:`SwiGLU` (Shazeer 2020): a gated feed-forward network,
  :math:`\operatorname{FFN}_{\text{SwiGLU}}(x) = (\operatorname{SiLU}(x W_1) \odot x W_3)\, W_2`,
  with :math:`\operatorname{SiLU}(z) = z\,\sigma(z)` and no biases; :func:`swiglu_width` gives the
  width :math:`d_{ff}` at which it has as many weights as a :math:`4 d_{\text{model}}`-wide
  two-matrix FFN;
* :class:`ModernBlock`: the pre-norm block that stacks them with grouped-query attention and
  rotary positions (:class:`~transformer_book.grouped_attention.GroupedQueryAttention`),

  .. math::

      h = x + \operatorname{GQA}(\operatorname{RMSNorm}_1(x)), \qquad
      \text{out} = h + \operatorname{SwiGLU}(\operatorname{RMSNorm}_2(h)) .

References: Zhang and Sennrich 2019, *Root Mean Square Layer Normalization*; Shazeer 2020, *GLU
Variants Improve Transformer*; Touvron et al. 2023, *LLaMA: Open and Efficient Foundation
Language Models*.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks
from transformer_book.attention import KVCache
from transformer_book.grouped_attention import GroupedQueryAttention
from transformer_book.positional import RotaryEmbedding

__all__ = ["rms_norm", "RMSNorm", "swiglu_width", "SwiGLU", "ModernBlock"]


def rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    r"""Root-mean-square normalisation over the last axis, written out.

    .. math::

        \operatorname{RMS}(x) = \sqrt{\frac{1}{d} \sum_{l=1}^{d} x_l^2 + \epsilon}, \qquad
        \operatorname{RMSNorm}(x) = \frac{x}{\operatorname{RMS}(x)} \odot \gamma

    Unlike LayerNorm (chapter 5) nothing is subtracted, neither the mean before nor a
    :math:`\beta` after: only the scale of :math:`x` is normalised. ``eps`` sits inside the root,
    as in ``torch.nn.RMSNorm``. The arithmetic runs in float32 at least (float64 stays float64)
    and the result is rounded to ``x``'s dtype once: in float16 :math:`x_l^2` overflows 65,504 as
    soon as :math:`|x_l| > 256`.

    Shapes: ``x`` ``(..., d)``, ``gamma`` ``(d,)``; the result has ``x``'s shape and dtype.

    Raises:
        ValueError: a non-floating ``x``, a ``gamma`` that is not ``(d,)``, or ``eps`` not a
            finite real > 0.
    """
    _check_norm("rms_norm", x, gamma, eps)
    wide = torch.promote_types(x.dtype, torch.float32)
    xw = x.to(wide)
    rms = torch.sqrt(xw.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1)
    return (xw / rms * gamma.to(wide)).to(x.dtype)


class RMSNorm(nn.Module):
    r""":func:`rms_norm` with a learned gain ``gamma`` ``(d_model,)``, initialised to ones.

    The module runs PyTorch's ``F.rms_norm`` (one fused kernel where the device has one) when
    PyTorch has it (2.4 on) and ``fused`` is true; with ``fused=False`` it runs the written-out
    :func:`rms_norm`. Both compute the function of ``torch.nn.RMSNorm(d_model, eps)``.

    Args:
        d_model: ``d``, the size of the last axis.
        eps: :math:`\epsilon > 0`, inside the root (LLaMA uses 1e-6 or 1e-5).
        fused: prefer ``F.rms_norm`` to the written-out function.

    Shapes: ``(..., d_model)`` in and out.
    """

    def __init__(self, d_model: int, eps: float = 1e-6, *, fused: bool = True) -> None:
        _check_rms_module(d_model, eps)
        super().__init__()
        self.d_model, self.eps, self.fused = d_model, float(eps), bool(fused)
        self.gamma = nn.Parameter(torch.ones(d_model))

    def reset_parameters(self) -> None:
        """``gamma`` back to ones."""
        nn.init.ones_(self.gamma)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}" + ("" if self.fused else ", fused=False")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_norm("RMSNorm", x, self.gamma, self.eps)
        if self.fused and hasattr(F, "rms_norm"):
            return F.rms_norm(x, (self.d_model,), self.gamma, self.eps)
        return rms_norm(x, self.gamma, self.eps)


def swiglu_width(d_model: int, multiple_of: int = 8) -> int:
    r"""The hidden width :math:`d_{ff}` of a :class:`SwiGLU` with as many weights as a two-matrix
    feed-forward network of width :math:`4 d_{\text{model}}`.

    A GELU FFN of width :math:`4d` has :math:`2 \cdot d \cdot 4d = 8d^2` weights; SwiGLU has three
    matrices, :math:`3 d\, d_{ff}`, so :math:`d_{ff} = \tfrac{2}{3} \cdot 4d`. As in LLaMA, the
    integer part of :math:`\tfrac{2}{3} \cdot 4d` is rounded up to a multiple of ``multiple_of``
    (a width that matrix units like): 344 for :math:`d = 128`, where the exact value is 341.3.
    (The GELU FFN's biases, :math:`5d`, are not matched: SwiGLU has none.)

    Raises:
        ValueError: ``d_model`` or ``multiple_of`` not a positive int.
    """
    checks.positive_int("swiglu_width", d_model=d_model, multiple_of=multiple_of)
    return multiple_of * math.ceil((2 * 4 * d_model // 3) / multiple_of)


class SwiGLU(nn.Module):
    r"""The gated feed-forward network of Shazeer (2020), without biases.

    .. math::

        \operatorname{SwiGLU}(x) = \bigl(\operatorname{SiLU}(x W_1) \odot x W_3\bigr) W_2, \qquad
        \operatorname{SiLU}(z) = z\, \sigma(z),

    :math:`W_1, W_3 \in \mathbb{R}^{d_{\text{model}} \times d_{ff}}` (``w1``, the gate, and ``w3``,
    the value), :math:`W_2 \in \mathbb{R}^{d_{ff} \times d_{\text{model}}}` (``w2``), each an
    ``nn.Linear`` without bias: :math:`3\, d_{\text{model}} d_{ff}` weights.

    Shapes: ``(..., d_model)`` in and out.
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        checks.positive_int("SwiGLU", d_model=d_model, d_ff=d_ff)
        super().__init__()
        self.d_model, self.d_ff = d_model, d_ff
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_ff={self.d_ff}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ModernBlock(nn.Module):
    r"""A pre-norm decoder block as in LLaMA: RMSNorm, grouped-query attention with rotary
    positions, RMSNorm, SwiGLU, each sub-layer added to the residual stream::

        x = x + Dropout(GQA(RMSNorm(x)))      # causal, rotary positions on q and k
        x = x + Dropout(SwiGLU(RMSNorm(x)))

    Sub-modules ``norm1``, ``self_attn`` (a
    :class:`~transformer_book.grouped_attention.GroupedQueryAttention` without biases), ``norm2``,
    ``ffn`` (a :class:`SwiGLU`), ``dropout1``, ``dropout2``. Against chapter 5's pre-LN block:
    RMSNorm for LayerNorm, SwiGLU for the GELU FFN, no bias anywhere, and positions inside the
    attention instead of a table added to the embeddings.

    Args:
        d_model, n_heads, n_kv_heads, d_ff: widths (``n_heads`` divides ``d_model``,
            ``n_kv_heads`` divides ``n_heads``).
        rotary: the :class:`~transformer_book.positional.RotaryEmbedding` (``d_head = d_model /
            n_heads``) that the attention applies, or ``None`` for no positions.
        dropout: on the attention weights and on each sub-layer's output, in training.
        eps: the RMSNorms' :math:`\epsilon`.

    Shapes: ``x`` ``(B, n, d_model)`` -> ``(B, n, d_model)``, or ``(output, weights (B, h, n, m))``
    with ``need_weights=True``; ``causal``, ``mask`` and ``cache`` as for
    :class:`~transformer_book.grouped_attention.GroupedQueryAttention`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int,
        d_ff: int,
        rotary: RotaryEmbedding | None = None,
        dropout: float = 0.0,
        *,
        eps: float = 1e-6,
    ) -> None:
        checks.probability("ModernBlock", "dropout", dropout)
        super().__init__()
        self.norm1 = RMSNorm(d_model, eps)
        self.self_attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, dropout=dropout, rotary=rotary)
        self.norm2 = RMSNorm(d_model, eps)
        self.ffn = SwiGLU(d_model, d_ff)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        *,
        causal: bool = True,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        attended = self.self_attn(self.norm1(x), causal=causal, mask=mask, cache=cache, need_weights=need_weights)
        attended, weights = attended if need_weights else (attended, None)
        x = x + self.dropout1(attended)
        x = x + self.dropout2(self.ffn(self.norm2(x)))
        return (x, weights) if need_weights else x


def _check_norm(where: str, x: object, gamma: torch.Tensor, eps: object) -> None:
    """A floating ``x`` ``(..., d)`` with ``gamma`` ``(d,)``, and a finite ``eps > 0``."""
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        what = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{where}: x must be a floating-point tensor, got {what}")
    if not isinstance(gamma, torch.Tensor) or gamma.dim() != 1 or x.shape[-1:] != gamma.shape:
        what = tuple(gamma.shape) if isinstance(gamma, torch.Tensor) else type(gamma).__name__
        raise ValueError(
            f"{where}: x of shape {tuple(x.shape)} and gamma of shape {what} do not fit: x must be "
            "(..., d) and gamma (d,)"
        )
    checks.finite_real(where, "eps", eps, above=0)


def _check_rms_module(d_model: object, eps: object) -> None:
    checks.positive_int("RMSNorm", d_model=d_model)
    checks.finite_real("RMSNorm", "eps", eps, above=0)
