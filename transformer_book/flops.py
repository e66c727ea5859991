r"""Counting a model's arithmetic, and how much of the hardware's a training run uses (MFU).

A matrix product of an :math:`(a \times b)` by a :math:`(b \times c)` matrix costs :math:`2abc`
floating-point operations (a multiply and an add per term). For one token passing forward
through a weight matrix of :math:`p` entries that is :math:`2p`; the backward pass computes two
such products per matrix (the gradient of the input and of the weight), so training costs
:math:`6p` per token and per weight that takes part in a product.

For the GPT of chapter 9 with :math:`L` layers of width :math:`d`, feed-forward width
:math:`d_{ff}`, vocabulary :math:`V` and context :math:`n`, the weights in products are
:math:`L(4d^2 + 2 d\,d_{ff})` in the blocks plus :math:`dV` in the output layer (the token
embedding's lookup is no product; tied or not, the output layer is one). Attention adds, per
token and layer, the scores :math:`QK^\top` and the mixture :math:`AV`: :math:`2 \cdot 2nd`
forward. So the training cost per token is

.. math::

    C = 6\bigl(L(4d^2 + 2d\,d_{ff}) + dV\bigr) + 12\,L\,n\,d

(the convention of the PaLM paper's appendix, which counts the full :math:`n \times n` scores
even under the causal mask, and ignores biases, LayerNorms, softmax and the loss, which are
small beside the products). *Model FLOPs utilisation* is then

.. math:: \text{MFU} = \frac{C \cdot \text{tokens per second}}{\text{peak FLOP/s of the device}}

with the datasheet's dense peak for the number format trained in; recomputation and padding do
not count as useful work, so MFU compares runs and hardware honestly.

Chapter 7 counts a second quantity beside the work: the *span*, the number of rounds of matrix
products that must run one after another because each needs the previous one's result. No
number of processors makes a computation take fewer rounds than its span (see
:func:`transformer_encoder_cost` and :func:`gru_encoder_cost`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from transformer_book import checks
from transformer_book.models import GPTConfig

__all__ = [
    "PEAK_BF16_FLOPS",
    "gpt_flops_per_token",
    "peak_flops",
    "mfu",
    "Cost",
    "transformer_encoder_cost",
    "gru_encoder_cost",
]

PEAK_BF16_FLOPS: dict[str, float] = {
    "H200": 989.4e12,
    "H100 PCIe": 756.0e12,
    "H100 NVL": 835.0e12,
    "H100": 989.4e12,  # SXM (its name reads "NVIDIA H100 80GB HBM3")
    "GH200": 989.4e12,
    "A100": 312.0e12,
    "L40S": 362.1e12,
    "L40": 181.0e12,
    "L4": 121.0e12,
}
"""Dense (not sparse) bfloat16 tensor-core peaks in FLOP/s from NVIDIA's datasheets, keyed by a
part of the device name; longer keys are tried first, so "H100 PCIe" wins over "H100"."""


def gpt_flops_per_token(config: GPTConfig, context: int | None = None) -> float:
    """Training FLOPs per token, :math:`C`, of a :class:`~transformer_book.models.gpt.GPT` trained on
    windows of ``context`` tokens (default: ``config.context``); see the module docstring.

    Raises:
        ValueError: ``config`` not a ``GPTConfig``, or ``context`` not in ``1 .. config.context``.
    """
    if not isinstance(config, GPTConfig):
        raise ValueError(f"gpt_flops_per_token: config must be a GPTConfig, got {type(config).__name__}")
    n = config.context if context is None else checks.integer("gpt_flops_per_token", "context", context, minimum=1)
    if n > config.context:
        raise ValueError(f"gpt_flops_per_token: context={n} exceeds the model's context of {config.context} positions")
    d, layers = config.d_model, config.n_layers
    weights = layers * (4 * d * d + 2 * d * config.ff_width) + d * config.vocab_size
    return float(6 * weights + 12 * layers * n * d)


def peak_flops(device: torch.device | str | None = None) -> float | None:
    """The datasheet's dense bfloat16 peak of a CUDA device (FLOP/s), or ``None`` for the CPU and
    for GPUs not in :data:`PEAK_BF16_FLOPS` (MFU is then not reported)."""
    device = (
        torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    for key in sorted(PEAK_BF16_FLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_BF16_FLOPS[key]
    return None


def mfu(tokens_per_s: float, flops_per_token: float, peak: float) -> float:
    """Model FLOPs utilisation, a fraction: ``tokens_per_s * flops_per_token / peak``.

    Raises:
        ValueError: a negative rate, or non-positive FLOPs or peak.
    """
    if not tokens_per_s >= 0:
        raise ValueError(f"mfu: tokens_per_s must be non-negative, got {tokens_per_s}")
    if not flops_per_token > 0 or not peak > 0:
        raise ValueError(f"mfu: flops_per_token and peak must be positive, got {flops_per_token} and {peak}")
    return tokens_per_s * flops_per_token / peak


class Cost(NamedTuple):
    """The forward pass of an encoder over one sentence: ``flops``, the work of its matrix products
    (2 per multiply-add), and ``rounds``, its span, the matrix products on its longest chain of
    dependent ones."""

    flops: int
    rounds: int


def _check_cost(where: str, bidirectional: object = True, **sizes: object) -> None:
    """Each of ``sizes`` a positive int, and ``bidirectional`` a bool."""
    checks.positive_int(where, **sizes)
    checks.boolean(where, bidirectional=bidirectional)


def transformer_encoder_cost(n: int, d_model: int, d_ff: int, n_layers: int = 1) -> Cost:
    r"""Work and span of ``n_layers`` Transformer encoder layers over a sentence of ``n`` tokens.

    Per layer: the projections :math:`Q, K, V` and the output :math:`W_O`, :math:`4 \cdot 2nd^2`;
    the scores :math:`QK^\top` and the mixture :math:`AV`, :math:`2 \cdot 2n^2 d` over all heads;
    the feed-forward network, :math:`2 \cdot 2nd\,d_{ff}`:

    .. math:: W = L\,(8nd^2 + 4nd\,d_{ff} + 4n^2 d), \qquad S = 6L

    rounds: :math:`Q, K, V` (one round, side by side), the scores, the mixture, :math:`W_O`, and the
    two feed-forward products, whatever ``n``. Biases, softmax, LayerNorm and dropout are not
    counted (element-wise or row-wise work, small beside the products).

    Raises:
        ValueError: an argument that is not a positive int.
    """
    _check_cost("transformer_encoder_cost", n=n, d_model=d_model, d_ff=d_ff, n_layers=n_layers)
    d = d_model
    return Cost(n_layers * (8 * n * d * d + 4 * n * d * d_ff + 4 * n * n * d), 6 * n_layers)


def gru_encoder_cost(n: int, d_input: int, d_hidden: int, n_layers: int = 1, bidirectional: bool = True) -> Cost:
    r"""Work and span of a (``bidirectional``) ``n_layers``-layer GRU, like :class:`torch.nn.GRU`, over
    a sentence of ``n`` tokens.

    Each step of each direction multiplies its input :math:`x_t` (width :math:`e`) and its previous
    state :math:`h_{t-1}` (width :math:`h`) by the weights of the three gates, :math:`2 \cdot 3h(e + h)`;
    layers above the first read both directions' states, :math:`e = 2h`. One bidirectional layer:

    .. math:: W = 2 \cdot n \cdot 6h(e + h), \qquad S = n

    rounds: step :math:`t` needs :math:`h_{t-1}`, so the :math:`n` state products form a chain (the
    input products and the other direction run beside it). A layer above a bidirectional layer
    waits for both of its directions to finish, :math:`S = Ln`; in a one-directional stack step
    :math:`t` of layer :math:`l` waits only for step :math:`t` below, :math:`S = n + L - 1`.

    Raises:
        ValueError: an argument that is not a positive int, or ``bidirectional`` not a bool.
    """
    _check_cost("gru_encoder_cost", bidirectional, n=n, d_input=d_input, d_hidden=d_hidden, n_layers=n_layers)
    directions, h = (2 if bidirectional else 1), d_hidden
    widths = [d_input] + [directions * h] * (n_layers - 1)
    work = sum(directions * n * 6 * h * (e + h) for e in widths)
    return Cost(work, n_layers * n if bidirectional else n + n_layers - 1)
