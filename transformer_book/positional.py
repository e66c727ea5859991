r"""Positional encodings (chapter 4).

Attention is permutation equivariant: shuffle the tokens and the outputs shuffle with them.
Word order must therefore be put in by hand. This module holds every encoding of the chapter:

* :func:`sinusoidal_encoding` and :class:`SinusoidalPositionalEncoding` -- the fixed table of
  Vaswani et al. (2017), added to the token embeddings,

  .. math::

      PE_{pos, 2i} = \sin(pos\,\omega_i), \qquad PE_{pos, 2i+1} = \cos(pos\,\omega_i),
      \qquad \omega_i = \mathrm{base}^{-2i/d_{\text{model}}};

* :func:`offset_matrix` -- the rotation :math:`M_k` behind the table's linear offset property
  :math:`PE_{pos+k} = M_k\, PE_{pos}`, with :math:`M_k` independent of :math:`pos`;
* :class:`LearnedPositionalEmbedding` -- one trained vector per absolute position (BERT, GPT-2);
  it cannot extrapolate beyond the positions it was built with;
* :class:`RelativePositionBias` and :func:`relative_position_bucket` -- T5's learned scalar per
  head and bucket of the offset :math:`j - i`, added to the attention scores,
  :math:`A = \operatorname{softmax}(QK^\top/\sqrt{d_k} + B)`;
* :func:`alibi_slopes` and :class:`ALiBi` -- Press et al.'s (2022) attention with linear biases:
  no learned parameter, a penalty :math:`-s_h |i - j|` proportional to the distance, with a
  fixed slope per head, added to the attention scores (for an encoder, as in MosaicBERT, or a
  causal decoder);
* :class:`RotaryEmbedding` -- RoFormer's rotary position embedding (RoPE): queries and keys are
  rotated by position-dependent angles, so that :math:`q_m \cdot k_n` depends on :math:`m - n`
  only;
* :class:`LearnableFourierFeatures` -- Li et al.'s (2021) learnable Fourier features
  :math:`[\cos(p W_r), \sin(p W_r)]/\sqrt{D}` followed by an MLP, for 1-D positions.

Models choose among them by name. Positions enter a Transformer in one of three ways: added to
the embeddings (learned, sinusoidal), as a bias on the attention scores (ALiBi), or as rotations
of the queries and keys (rotary). Every encoding a model can name is a :class:`PositionEncoding`,
which answers for all three (:meth:`~PositionEncoding.add`,
:meth:`~PositionEncoding.attention_bias`, :attr:`~PositionEncoding.rotary`); one factory,
:func:`position_encoding`, builds the encoding of each name in :data:`POSITIONS` for GPT, BERT, the
Transformer and ModernGPT, and refuses the names a model cannot use.

Conventions. Feature pairs are *interleaved*: pair :math:`i` is the features
:math:`(2i, 2i+1)`, both for the sinusoidal table and for the rotary embedding. (Some
libraries, e.g. GPT-NeoX and Hugging Face's Llama, pair feature :math:`i` with
:math:`i + d/2` instead; the mathematics is the same up to a fixed permutation of features.)
Tables are created in float64 and then cast, so a float32 table is correctly rounded.
Constant tables are registered buffers, so they follow ``module.to(device)``; they are
non-persistent (rebuilt from the constructor's arguments, absent from ``state_dict``).

References: Vaswani et al. 2017, *Attention Is All You Need*; Raffel et al. 2020, *Exploring
the Limits of Transfer Learning with a Unified Text-to-Text Transformer* (T5); Press et al. 2022,
*Train Short, Test Long: Attention with Linear Biases Enables Input Length Extrapolation*
(ALiBi); Portes et al. 2023, *MosaicBERT*; Su et al. 2021,
*RoFormer: Enhanced Transformer with Rotary Position Embedding*; Li et al. 2021, *Learnable
Fourier Features for Multi-Dimensional Spatial Positional Encoding*.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import NamedTuple

import torch
from torch import nn

from transformer_book import checks

__all__ = [
    "PositionEncoding",
    "WAYS",
    "POSITIONS",
    "position_names",
    "position_encoding",
    "sinusoidal_encoding",
    "offset_matrix",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "relative_position_bucket",
    "RelativePositionBias",
    "alibi_slopes",
    "ALiBi",
    "RotaryEmbedding",
    "LearnableFourierFeatures",
]


# --------------------------------------------------------------------------- what a model asks


class PositionEncoding(nn.Module):
    r"""What a model asks of a position encoding, whichever way the positions enter.

    * :meth:`add`: the embeddings with the positions added, :math:`x_{pos} + P_{pos}`
      (:class:`LearnedPositionalEmbedding`, :class:`SinusoidalPositionalEncoding`);
    * :meth:`attention_bias`: a bias :math:`B` on the scores,
      :math:`A = \operatorname{softmax}(QK^\top/\sqrt{d_k} + B)` (:class:`ALiBi`);
    * :attr:`rotary`: the rotation :math:`q_m \mapsto R_m q_m`, :math:`k_n \mapsto R_n k_n` of
      the queries and keys (:class:`RotaryEmbedding`).

    A model uses all three; each encoding overrides what it does, and the defaults here do
    nothing: ``add`` returns ``x``, ``attention_bias`` and ``rotary`` are ``None``.
    """

    def add(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x`` ``(..., n, d_model)``, whose first row stands at position ``offset``, with the
        positions added; here ``x`` itself."""
        return x

    def attention_bias(self, n: int, m: int) -> torch.Tensor | None:
        """The bias ``(n_heads, n, m)`` on the scores of ``n`` queries, the last ``n`` of ``m``
        positions, against the ``m`` keys; here ``None``."""
        return None

    @property
    def rotary(self) -> RotaryEmbedding | None:
        """The rotation of the queries and keys; here ``None``."""
        return None


# --------------------------------------------------------------------------- sinusoidal


def _frequencies(d: int, base: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    r"""Frequencies :math:`\omega_i = \mathrm{base}^{-2i/d}`, :math:`0 \le i < d/2`: ``(d/2,)``."""
    exponents = torch.arange(0, d, 2, dtype=torch.float64) / d
    return torch.pow(torch.tensor(float(base), dtype=torch.float64), -exponents).to(dtype)


def sinusoidal_encoding(
    n_positions: int,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The sinusoidal position table of Vaswani et al. (2017), section 3.5.

    .. math::

        PE_{pos, 2i} = \sin\!\left(\frac{pos}{\mathrm{base}^{2i/d_{\text{model}}}}\right),
        \qquad
        PE_{pos, 2i+1} = \cos\!\left(\frac{pos}{\mathrm{base}^{2i/d_{\text{model}}}}\right)

    Pair :math:`i` oscillates with angular frequency
    :math:`\omega_i = \mathrm{base}^{-2i/d_{\text{model}}}`, i.e. wavelength
    :math:`2\pi\,\mathrm{base}^{2i/d_{\text{model}}}`: from :math:`2\pi` for the first pair
    (column 0 is :math:`\sin(pos)`) up to
    :math:`2\pi\,\mathrm{base}^{(d_{\text{model}}-2)/d_{\text{model}}}` for the last one,
    just short of :math:`2\pi \cdot \mathrm{base}` (:math:`10000 \cdot 2\pi` by default),
    a geometric progression. Every entry lies in :math:`[-1, 1]`.

    Args:
        n_positions: number of positions (rows), an int :math:`\ge 1`.
        d_model: model width (columns), an even int :math:`\ge 2`.
        base: the base of the geometric progression of wavelengths, a real :math:`> 1`.
        dtype: floating dtype of the result (computed in float64, then rounded).
        device: where to put the result.

    Returns:
        Tensor of shape ``(n_positions, d_model)``; row ``pos`` is :math:`PE_{pos}`.

    Raises:
        ValueError: if ``n_positions``, ``d_model``, ``base`` or ``dtype`` is invalid.
    """
    _check_table("sinusoidal_encoding", d_model, base, dtype, n_positions=n_positions)
    positions = torch.arange(n_positions, dtype=torch.float64)
    angles = positions[:, None] * _frequencies(d_model, base)[None, :]  # (n, d/2)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.to(device=device, dtype=dtype)


def offset_matrix(
    k: int | float,
    d_model: int,
    base: float = 10000.0,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The linear map :math:`M_k` that shifts the sinusoidal encoding by ``k`` positions.

    .. math::

        PE_{pos+k} = M_k\, PE_{pos} \quad \text{for every } pos,

    with :math:`PE_{pos}` a column vector. Derivation, pair by pair: by the angle-addition
    identities, with :math:`a = pos\,\omega_i` and :math:`b = k\,\omega_i`,

    .. math::

        \sin(a + b) &= \cos b \,\sin a + \sin b \,\cos a, \\
        \cos(a + b) &= -\sin b \,\sin a + \cos b \,\cos a,

    so the pair :math:`(\sin a, \cos a)^\top` is mapped to
    :math:`(\sin(a+b), \cos(a+b))^\top` by the :math:`2 \times 2` block

    .. math::

        \begin{pmatrix} \cos k\omega_i & \sin k\omega_i \\
                        -\sin k\omega_i & \cos k\omega_i \end{pmatrix},
        \qquad \omega_i = \mathrm{base}^{-2i/d_{\text{model}}},

    and :math:`M_k` is block-diagonal with these blocks on features :math:`(2i, 2i+1)`.
    The blocks contain :math:`k` but not :math:`pos`: one matrix shifts every position.
    Each block is a rotation, so :math:`M_k` is orthogonal, :math:`M_k^\top = M_k^{-1} = M_{-k}`,
    and :math:`M_j M_k = M_{j+k}`. For the row-per-position tables that
    :func:`sinusoidal_encoding` returns the identity reads ``pe[pos + k] == pe[pos] @ M_k.T``.

    (In the usual :math:`(x, y)` orientation each block turns a vector by the angle
    :math:`-k\omega_i`, because the pair stores the sine first; :class:`RotaryEmbedding`
    uses :math:`M_m^\top`, the counter-clockwise rotation by :math:`+m\theta_i` of RoFormer.)

    Args:
        k: the offset, an int or a finite real (negative offsets shift backwards).
        d_model: model width, an even int :math:`\ge 2`.
        base: as in :func:`sinusoidal_encoding`.
        dtype: floating dtype of the result (computed in float64, then rounded).
        device: where to put the result.

    Returns:
        Tensor of shape ``(d_model, d_model)``.

    Raises:
        ValueError: if ``k``, ``d_model``, ``base`` or ``dtype`` is invalid.
    """
    _check_table("offset_matrix", d_model, base, dtype, offset=k)
    angles = float(k) * _frequencies(d_model, base)  # (d/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    m[idx, idx] = cos
    m[idx, idx + 1] = sin
    m[idx + 1, idx] = -sin
    m[idx + 1, idx + 1] = cos
    return m.to(device=device, dtype=dtype)


class SinusoidalPositionalEncoding(PositionEncoding):
    r"""Add the sinusoidal table to a batch of embeddings, then apply dropout.

    .. math:: \text{output} = \operatorname{dropout}(X + PE_{0:n})

    :meth:`add` is the sum alone, :math:`X + PE_{0:n}` (what a model that applies its own
    dropout asks for).

    The table :math:`PE` of shape ``(max_len, d_model)`` (see :func:`sinusoidal_encoding`) is a
    registered, non-persistent buffer named ``pe``: it moves with ``.to(device)`` and
    ``.to(dtype)``, is not a parameter (nothing is learned) and is not saved in ``state_dict``
    (it is rebuilt from the constructor's arguments).

    Args:
        d_model: model width, an even int :math:`\ge 2`.
        max_len: the longest sequence accepted (rows of the table), an int :math:`\ge 1`.
            The formula itself works for any position: build a longer module to go further.
        dropout: dropout probability applied to the sum, in :math:`[0, 1]`.
        base: as in :func:`sinusoidal_encoding`.

    Shape:
        input ``(..., n, d_model)`` with ``n <= max_len``; output the same shape, in the
        input's dtype.
    """

    pe: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0, base: float = 10000.0) -> None:
        super().__init__()
        where = type(self).__name__
        _check_even(where, "d_model", d_model)
        checks.positive_int(where, max_len=max_len)
        checks.probability(where, "dropout", dropout, one=True)
        checks.finite_real(where, "base", base, above=1)
        self.d_model = d_model
        self.max_len = max_len
        self.base = float(base)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model, base), persistent=False)

    def add(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x + pe[offset:offset + n]`` for ``x`` of shape ``(..., n, d_model)``
        (``offset``: the position of ``x``'s first row, when decoding one token at a time)."""
        n = _check_offset_input(x, offset, self.d_model, self.max_len, type(self).__name__)
        return x + self.pe[offset : offset + n].to(x.dtype)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``dropout(x + pe[offset:offset + n])`` (see :meth:`add`)."""
        return self.dropout(self.add(x, offset))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}, base={self.base:g}"


# --------------------------------------------------------------------------- learned


class LearnedPositionalEmbedding(PositionEncoding):
    r"""One learned vector per absolute position, added to the embeddings (BERT, GPT-2).

    .. math:: \text{output}_{pos} = \operatorname{dropout}(x_{pos} + P_{pos}),
        \qquad P \in \mathbb{R}^{\text{max\_len} \times d_{\text{model}}}

    ``P`` is the weight of the ``nn.Embedding`` named ``embedding``, initialised
    :math:`\mathcal{N}(0, 0.02^2)` as in GPT-2 and BERT. :meth:`add` is the sum alone,
    :math:`x_{pos} + P_{pos}`.

    This encoding **cannot extrapolate at all**: there is no row for a position
    :math:`\ge` ``max_len``, so longer inputs raise ``ValueError``; and rows for positions
    that never occurred in training stay at their random initialisation.

    Args:
        max_len: number of positions (rows), an int :math:`\ge 1`.
        d_model: model width, an int :math:`\ge 1`.
        dropout: dropout probability applied to the sum, in :math:`[0, 1]`.
        initialise: draw ``P`` from :math:`\mathcal{N}(0, 0.02^2)` (:meth:`reset_parameters`);
            ``False`` keeps the :math:`\mathcal{N}(0, 1)` that ``nn.Embedding`` draws, for a model
            whose own ``reset_parameters`` draws every weight afterwards (one draw fewer from the
            random generator).

    Shape:
        input ``(..., n, d_model)`` with ``n <= max_len``; output the same shape.
    """

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0, *, initialise: bool = True) -> None:
        super().__init__()
        where = type(self).__name__
        checks.positive_int(where, max_len=max_len, d_model=d_model)
        checks.probability(where, "dropout", dropout, one=True)
        checks.boolean(where, initialise=initialise)
        self.max_len = max_len
        self.d_model = d_model
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        if initialise:
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the table from :math:`\\mathcal{N}(0, 0.02^2)`."""
        nn.init.normal_(self.embedding.weight, mean=0.0, std=0.02)

    def add(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``x + P[offset:offset + n]`` for ``x`` of shape ``(..., n, d_model)``."""
        n = _check_offset_input(x, offset, self.d_model, self.max_len, type(self).__name__)
        positions = torch.arange(offset, offset + n, device=x.device)
        return x + self.embedding(positions)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Return ``dropout(x + P[offset:offset + n])`` (see :meth:`add`)."""
        return self.dropout(self.add(x, offset))

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"


# --------------------------------------------------------------------------- relative (T5)


def relative_position_bucket(
    relative_position: torch.Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    r"""T5's bucket of a relative position :math:`r = j - i` (key minus query).

    Let :math:`B` be the number of buckets available to one direction: ``num_buckets // 2``
    when ``bidirectional``, else ``num_buckets``. The distance :math:`\delta` is

    * bidirectional: :math:`\delta = |r|`, and offsets :math:`r > 0` (keys after the query)
      use buckets :math:`B, \dots, 2B-1`, offsets :math:`r \le 0` buckets :math:`0, \dots, B-1`;
    * unidirectional (causal): :math:`\delta = \max(-r, 0)`, so every future key
      (:math:`r > 0`, masked anyway in a decoder) shares bucket 0 with :math:`r = 0`.

    Within a direction, with :math:`E = \lfloor B/2 \rfloor` exact buckets,

    .. math::

        \operatorname{bucket}(\delta) = \begin{cases}
            \delta & \delta < E, \\
            \min\!\left(B - 1,\; E + \left\lfloor
                \dfrac{\ln(\delta / E)}{\ln(\text{max\_distance} / E)}\,(B - E)
            \right\rfloor\right) & \delta \ge E,
        \end{cases}

    i.e. half the buckets hold one small distance each, the other half cover
    :math:`[E, \text{max\_distance})` in logarithmically growing ranges, and every distance
    :math:`\ge` ``max_distance`` falls into the last bucket. The bucket is non-decreasing
    in :math:`\delta`. The logarithm is evaluated in float32, as in T5's reference code, so
    the buckets agree with T5 checkpoints.

    Args:
        relative_position: integer tensor of any shape holding :math:`j - i`.
        bidirectional: ``True`` for an encoder (both signs distinguished), ``False`` for
            a causal decoder.
        num_buckets: total number of buckets; even and :math:`\ge 4` when bidirectional,
            :math:`\ge 2` otherwise.
        max_distance: distances from here on share the last bucket; must exceed :math:`E`.

    Returns:
        ``torch.long`` tensor of the shape of ``relative_position``, values in
        ``[0, num_buckets)``.

    Raises:
        ValueError: for a non-integer tensor or invalid bucket settings.
    """
    where = "relative_position_bucket"
    if not isinstance(relative_position, torch.Tensor):
        raise ValueError(
            f"{where}: relative_position must be an integer torch.Tensor, got {type(relative_position).__name__}"
        )
    if (
        relative_position.dtype.is_floating_point
        or relative_position.dtype.is_complex
        or relative_position.dtype == torch.bool
    ):
        raise ValueError(f"{where}: relative_position must hold integers, got dtype {relative_position.dtype}")
    _check_buckets(bidirectional, num_buckets, max_distance, where)
    return _bucket(relative_position, bidirectional, num_buckets, max_distance)


def _bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """:func:`relative_position_bucket` of settings already checked (a :class:`RelativePositionBias`'s)."""
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    exact = per_direction // 2
    r = relative_position.long()
    bucket = torch.zeros_like(r)
    if bidirectional:
        bucket = bucket + (r > 0).long() * per_direction
        distance = r.abs()
    else:
        distance = (-r).clamp_min(0)
    # Logarithmic region; the clamp keeps log() away from 0 where the exact branch is used.
    scaled = torch.log(distance.clamp_min(exact).float() / exact) / math.log(max_distance / exact)
    large = exact + (scaled * (per_direction - exact)).long()
    large = large.clamp_max(per_direction - 1)
    return bucket + torch.where(distance < exact, distance, large)


class RelativePositionBias(nn.Module):
    r"""T5's relative position bias: a learned scalar per head and bucket of :math:`j - i`.

    .. math::

        B_{h, i, j} = b_{h,\, \operatorname{bucket}(j - i)}, \qquad
        A_h = \operatorname{softmax}\!\left(\frac{Q_h K_h^\top}{\sqrt{d_k}} + B_h\right)

    The table :math:`b` is the transposed weight of the ``nn.Embedding(num_buckets, n_heads)``
    named ``embedding`` (initialised :math:`\mathcal{N}(0, 0.02^2)`); buckets come from
    :func:`relative_position_bucket`. Within one head, :math:`B_{h,i,j}` depends on
    :math:`j - i` only (a Toeplitz matrix). Nothing depends on absolute positions, so the bias
    extends to any ``n`` and ``m``: distances beyond ``max_distance`` simply share the last
    bucket.

    The output ``(n_heads, n, m)`` broadcasts against scores ``(B, n_heads, n, m)``: pass it as
    ``bias=`` to :func:`transformer_book.attention.scaled_dot_product_attention`.

    Args:
        n_heads: number of attention heads, an int :math:`\ge 1`.
        num_buckets, max_distance, bidirectional: see :func:`relative_position_bucket`.
    """

    relative_position_bucket = staticmethod(relative_position_bucket)

    def __init__(
        self,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        checks.positive_int(where, n_heads=n_heads)
        _check_buckets(bidirectional, num_buckets, max_distance, where)
        self.n_heads = n_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bool(bidirectional)
        self.embedding = nn.Embedding(num_buckets, n_heads)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw the bias table from :math:`\\mathcal{N}(0, 0.02^2)`."""
        nn.init.normal_(self.embedding.weight, mean=0.0, std=0.02)

    def buckets(self, n: int, m: int) -> torch.Tensor:
        """The bucket of every (query ``i``, key ``j``) pair, ``torch.long`` of shape ``(n, m)``."""
        checks.positive_int(type(self).__name__, n=n, m=m)
        device = self.embedding.weight.device
        query = torch.arange(n, device=device)[:, None]
        key = torch.arange(m, device=device)[None, :]
        return _bucket(key - query, self.bidirectional, self.num_buckets, self.max_distance)

    def forward(self, n: int, m: int) -> torch.Tensor:
        """Return the bias of shape ``(n_heads, n, m)`` for ``n`` queries and ``m`` keys."""
        return self.embedding(self.buckets(n, m)).permute(2, 0, 1)  # (n, m, h) -> (h, n, m)

    def extra_repr(self) -> str:
        return (
            f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, "
            f"max_distance={self.max_distance}, bidirectional={self.bidirectional}"
        )


# --------------------------------------------------------------------------- ALiBi


def alibi_slopes(n_heads: int) -> torch.Tensor:
    r"""ALiBi's slope of every head, ``(n_heads,)`` float64 (Press et al. 2022, section 3).

    For :math:`h` a power of two the slopes are the geometric sequence
    :math:`s_k = 2^{-8k/h}`, :math:`k = 1, \dots, h` (for 8 heads :math:`\tfrac12, \tfrac14,
    \dots, \tfrac1{256}`). For other :math:`h`, the slopes of the largest power of two
    :math:`a < h` come first, followed by the first :math:`h - a` of the odd-numbered slopes
    (:math:`k = 1, 3, 5, \dots`) of :math:`2a` heads, as the paper's code does.

    Raises:
        ValueError: ``n_heads`` not a positive int.
    """
    checks.positive_int("alibi_slopes", n_heads=n_heads)

    def geometric(h: int) -> list[float]:
        return [2.0 ** (-8.0 * k / h) for k in range(1, h + 1)]

    a = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(a) + geometric(2 * a)[0::2][: n_heads - a]
    return torch.tensor(slopes, dtype=torch.float64)


class ALiBi(PositionEncoding):
    r"""Attention with linear biases (ALiBi): a fixed penalty proportional to the distance.

    .. math::

        B_{h, i, j} = -s_h\, |i - j| \quad \text{(bidirectional)}, \qquad
        B_{h, i, j} = -s_h\, (i - j) \quad \text{(causal: } j \le i\text{; later keys are masked anyway)},
        \qquad A_h = \operatorname{softmax}\!\left(\frac{Q_h K_h^\top}{\sqrt{d_k}} + B_h\right)

    with the slopes :math:`s_h` of :func:`alibi_slopes`. Nothing is learned: from the first
    step every head prefers near keys to far ones, the steep heads strongly, the shallow ones
    barely, and the queries and keys only have to learn *what* to look for, not *where*. The
    model has no position embedding. Press et al. (2022) introduced it for causal language
    models; MosaicBERT (Portes et al. 2023) uses ALiBi in a BERT, whose encoder penalises the
    distance both ways.

    The output ``(n_heads, n, m)`` broadcasts against scores ``(B, n_heads, n, m)``: pass it as
    ``bias=`` to :class:`~transformer_book.attention.MultiHeadAttention`. With ``m > n`` (keys
    of earlier calls in a cache) query :math:`i` sits at position :math:`m - n + i`.

    Args:
        n_heads: number of attention heads, an int :math:`\ge 1`.
        bidirectional: ``True`` for an encoder, ``False`` for a causal decoder.

    Buffers:
        ``slopes``: ``(n_heads,)`` float32, non-persistent.
    """

    def __init__(self, n_heads: int, *, bidirectional: bool = True) -> None:
        super().__init__()
        checks.boolean("ALiBi", bidirectional=bidirectional)
        self.n_heads, self.bidirectional = n_heads, bidirectional
        self.register_buffer("slopes", alibi_slopes(n_heads).float(), persistent=False)

    def forward(self, n: int, m: int | None = None) -> torch.Tensor:
        """The bias ``(n_heads, n, m)`` for ``n`` queries and ``m`` keys (default ``m = n``)."""
        m = _checked_lengths(n, m)  # m = n by default, and m >= n >= 1
        query = torch.arange(m - n, m, device=self.slopes.device)[:, None]
        key = torch.arange(m, device=self.slopes.device)[None, :]
        distance = (query - key).abs() if self.bidirectional else (query - key).clamp_min(0)
        return self.slopes[:, None, None] * (-distance).to(self.slopes.dtype)

    def attention_bias(self, n: int, m: int) -> torch.Tensor:
        """The bias ``(n_heads, n, m)`` of :meth:`forward`."""
        return self(n, m)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, bidirectional={self.bidirectional}"


# --------------------------------------------------------------------------- rotary


class RotaryEmbedding(PositionEncoding):
    r"""Rotary position embedding (RoPE) of Su et al. (2021), RoFormer, section 3.4.

    Feature pair :math:`i` (features :math:`2i, 2i+1`, interleaved) of a vector at position
    :math:`m` is turned counter-clockwise by the angle :math:`m\theta_i`,
    :math:`\theta_i = \mathrm{base}^{-2i/d_{\text{head}}}`:

    .. math::

        \begin{pmatrix} x'_{2i} \\ x'_{2i+1} \end{pmatrix} =
        \begin{pmatrix} \cos m\theta_i & -\sin m\theta_i \\
                        \sin m\theta_i & \cos m\theta_i \end{pmatrix}
        \begin{pmatrix} x_{2i} \\ x_{2i+1} \end{pmatrix},
        \qquad x' = R_m x .

    :math:`R_m` is block-diagonal and orthogonal, with :math:`R_m^\top R_n = R_{n-m}`; in terms
    of :func:`offset_matrix` (same frequencies, same pairing),
    :math:`R_m = M_m^\top = M_{-m}` -- for row vectors, ``rotate(x, m) == x @ offset_matrix(m)``.
    Applied to queries and keys (not values), it makes the score depend on the offset only:

    .. math:: (R_m q)^\top (R_n k) = q^\top R_{n-m}\, k .

    Norms are preserved, and position 0 is the identity. Angles are computed in float32
    (float64 for float64 inputs, from a float64 recomputation of :math:`\theta`), then
    :math:`\cos` and :math:`\sin` are cast to the input's dtype.

    Args:
        d_head: features per head, an even int :math:`\ge 2`.
        base: base of the geometric progression of :math:`\theta_i`, a real :math:`> 1`.

    Buffers:
        ``inv_freq``: :math:`\theta_i`, shape ``(d_head/2,)``, float32, non-persistent.

    Shape:
        ``x``: ``(..., n, d_head)``; ``positions``: ``(n,)`` or broadcastable to ``(..., n)``;
        output: the shape and dtype of ``x``.
    """

    inv_freq: torch.Tensor

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        where = type(self).__name__
        _check_even(where, "d_head", d_head)
        checks.finite_real(where, "base", base, above=1)
        self.d_head = d_head
        self.base = float(base)
        self.register_buffer("inv_freq", _frequencies(d_head, base, torch.float32), persistent=False)

    def rotation_angles(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        r"""The angles :math:`m\,\theta_i`, shape ``(*positions.shape, d_head/2)``.

        Computed in ``dtype`` (default: float64 for float64 ``positions``, else float32).
        """
        where = type(self).__name__
        if not isinstance(positions, torch.Tensor):
            raise ValueError(f"{where}: positions must be a torch.Tensor, got {type(positions).__name__}")
        if positions.dtype.is_complex or positions.dtype == torch.bool:
            raise ValueError(f"{where}: positions must be real numbers, got dtype {positions.dtype}")
        if dtype is None:
            dtype = torch.float64 if positions.dtype == torch.float64 else torch.float32
        if dtype == torch.float64:
            # The buffer holds float32 values (even after .double()); recompute exactly.
            inv_freq = _frequencies(self.d_head, self.base).to(positions.device)
        else:
            inv_freq = self.inv_freq.to(device=positions.device, dtype=dtype)
        return positions.to(dtype)[..., None] * inv_freq

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Rotate ``x`` of shape ``(..., n, d_head)``; ``positions`` default to ``0, ..., n-1``."""
        _check_rotary_input(type(self).__name__, x, positions, self.d_head)
        if positions is None:
            positions = torch.arange(x.shape[-2], device=x.device)
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        angles = self.rotation_angles(positions.to(x.device), dtype=compute)  # (..., n, d/2)
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)  # interleave back: (..., n, d/2, 2) -> (..., n, d)

    @property
    def rotary(self) -> RotaryEmbedding:
        """The rotation of the queries and keys, which is this module itself."""
        return self

    def extra_repr(self) -> str:
        return f"d_head={self.d_head}, base={self.base:g}"


# --------------------------------------------------------------------------- Fourier features


class LearnableFourierFeatures(nn.Module):
    r"""Learnable Fourier features (Li et al. 2021), here for 1-D positions.

    .. math::

        r_p = \frac{1}{\sqrt{D}} \bigl[\cos(p\, W_r) \,\Vert\, \sin(p\, W_r)\bigr],
        \qquad PE_p = W_2\, \operatorname{GELU}(W_1 r_p + b_1) + b_2,

    with :math:`W_r \in \mathbb{R}^{D/2}` the learnable frequencies (the weight of the
    ``nn.Linear(1, D/2, bias=False)`` named ``w_r``, initialised
    :math:`\mathcal{N}(0, \gamma^{-2})`), :math:`D` = ``n_features``, and an MLP ``mlp``
    (Linear → GELU → Linear) to ``d_model``. The sinusoidal table is the special case of fixed,
    geometrically spaced frequencies without the MLP; here the frequencies are trained, and
    :math:`\gamma` sets their initial scale (small :math:`\gamma`, high frequencies).
    Positions are used as given (0, 1, 2, ...), so any position has an encoding.

    Args:
        d_model: model width, an int :math:`\ge 1`.
        n_features: :math:`D`, an even int :math:`\ge 2`.
        hidden: hidden width of the MLP, an int :math:`\ge 1`.
        gamma: :math:`\gamma > 0`; the frequencies start with standard deviation
            :math:`1/\gamma`.
        max_len: if given, ``forward`` refuses sequences longer than this (to keep a model
            within the lengths it was trained on); ``None`` accepts any length.

    Shape:
        ``forward``: ``(..., n, d_model)`` to the same shape; ``encode``: positions ``(n,)``
        to ``(n, d_model)``.
    """

    def __init__(
        self,
        d_model: int,
        n_features: int = 64,
        hidden: int = 64,
        gamma: float = 1.0,
        max_len: int | None = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        checks.positive_int(where, d_model=d_model)
        _check_even(where, "n_features", n_features)
        checks.positive_int(where, hidden=hidden)
        checks.finite_real(where, "gamma", gamma, above=0)
        if max_len is not None:
            checks.positive_int(where, max_len=max_len)
        self.d_model = d_model
        self.n_features = n_features
        self.hidden = hidden
        self.gamma = float(gamma)
        self.max_len = max_len
        self.w_r = nn.Linear(1, n_features // 2, bias=False)
        self.mlp = nn.Sequential(nn.Linear(n_features, hidden), nn.GELU(), nn.Linear(hidden, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Draw :math:`W_r` from :math:`\mathcal{N}(0, \gamma^{-2})` (the MLP keeps PyTorch's)."""
        nn.init.normal_(self.w_r.weight, mean=0.0, std=1.0 / self.gamma)

    def encode(self, positions: torch.Tensor) -> torch.Tensor:
        """The encoding of ``positions`` (shape ``(n,)``, any real values): ``(n, d_model)``."""
        where = type(self).__name__
        if not isinstance(positions, torch.Tensor) or positions.dim() != 1:
            what = _describe(positions)
            raise ValueError(f"{where}: positions must be a 1-D tensor (n,), got {what}")
        if positions.dtype.is_complex or positions.dtype == torch.bool:
            raise ValueError(f"{where}: positions must be real numbers, got dtype {positions.dtype}")
        weight = self.w_r.weight
        p = positions.to(device=weight.device, dtype=weight.dtype)[:, None]  # (n, 1)
        projected = self.w_r(p)  # (n, D/2) = p W_r
        features = torch.cat((torch.cos(projected), torch.sin(projected)), dim=-1)
        return self.mlp(features / math.sqrt(self.n_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``x + PE[0:n]`` for ``x`` of shape ``(..., n, d_model)``."""
        n = _check_input(x, self.d_model, self.max_len, type(self).__name__)
        return x + self.encode(torch.arange(n, device=x.device))

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_features={self.n_features}, hidden={self.hidden}, "
            f"gamma={self.gamma:g}, max_len={self.max_len}"
        )


# --------------------------------------------------------------------------- one name per encoding


WAYS: dict[str, str] = {
    "embedding": "adds a vector to each embedding",
    "bias": "adds a bias to the attention scores",
    "rotation": "rotates the queries and keys",
}
"""The three ways positions enter a model, by name, with what an encoding of each way does."""


class _Sizes(NamedTuple):
    """What :func:`position_encoding` knows of the model, handed to each encoding's builder."""

    d_model: int
    n_heads: int
    max_len: int
    causal: bool
    base: float
    initialise: bool


_ENCODINGS: dict[str, tuple[str, Callable[[_Sizes], PositionEncoding]]] = {
    "learned": ("embedding", lambda s: LearnedPositionalEmbedding(s.max_len, s.d_model, initialise=s.initialise)),
    "sinusoidal": ("embedding", lambda s: SinusoidalPositionalEncoding(s.d_model, s.max_len, base=s.base)),
    "alibi": ("bias", lambda s: ALiBi(s.n_heads, bidirectional=not s.causal)),
    "rotary": ("rotation", lambda s: RotaryEmbedding(s.d_model // s.n_heads, s.base)),
}
"""Every encoding a model can name: its way (a key of :data:`WAYS`) and how to build it. Adding
an encoding is one entry here."""

POSITIONS: tuple[str, ...] = tuple(_ENCODINGS)
"""The names of the encodings a model can choose (``position=`` in the model configs)."""


def position_names(ways: Collection[str] = tuple(WAYS)) -> tuple[str, ...]:
    """The names in :data:`POSITIONS` of the encodings that enter by one of ``ways``."""
    _check_ways(ways, "position_names")
    return tuple(name for name, (way, _) in _ENCODINGS.items() if way in ways)


def position_encoding(
    name: str,
    *,
    d_model: int,
    n_heads: int,
    max_len: int,
    causal: bool = False,
    base: float = 10000.0,
    initialise: bool = True,
    ways: Collection[str] = tuple(WAYS),
    where: str = "position_encoding",
) -> PositionEncoding:
    r"""The position encoding called ``name``, built for a model of these sizes.

    * ``"learned"``: a :class:`LearnedPositionalEmbedding`, added to the embeddings;
    * ``"sinusoidal"``: a :class:`SinusoidalPositionalEncoding`, added to the embeddings;
    * ``"alibi"``: :class:`ALiBi`, a bias on the attention scores;
    * ``"rotary"``: a :class:`RotaryEmbedding`, rotations of the queries and keys.

    The result is a :class:`PositionEncoding`: a model calls its ``add``, ``attention_bias`` and
    ``rotary`` and uses what it gets. The encodings built here apply no dropout; the model drops
    out of the embeddings itself.

    Args:
        name: one of :data:`POSITIONS`.
        d_model, n_heads: the model's width and heads (a rotation turns the ``d_model / n_heads``
            features of each head).
        max_len: the longest sequence (the rows of a table added to the embeddings).
        causal: the queries see earlier keys only (a decoder): ALiBi then penalises the distance
            one way.
        base: the base of the frequencies of the sinusoidal table and of the rotations.
        initialise: ``False`` leaves a learned table as ``nn.Embedding`` draws it, for a model
            whose ``reset_parameters`` draws every weight afterwards (see
            :class:`LearnedPositionalEmbedding`).
        ways: the ways (keys of :data:`WAYS`) the model takes positions in; another way is refused.
        where: the model's name, which begins every error message.

    Raises:
        ValueError: an unknown ``name`` or one whose way is not in ``ways`` (the message lists the
            names the model takes), or sizes the encoding cannot be built for.
    """
    _check_ways(ways, where)
    accepted = position_names(ways)
    if not isinstance(name, str) or name not in _ENCODINGS:
        raise ValueError(f"{where}: unknown position {name!r}; {where} takes {_listed(accepted)}")
    way, build = _ENCODINGS[name]
    if way not in ways:
        raise ValueError(
            f"{where}: position {name!r} {WAYS[way]}, which {where} does not take; choose {_listed(accepted)}"
        )
    checks.positive_int(where, d_model=d_model, n_heads=n_heads, max_len=max_len)
    checks.boolean(where, causal=causal, initialise=initialise)
    try:
        return build(_Sizes(d_model, n_heads, max_len, causal, base, initialise))
    except ValueError as err:
        raise ValueError(
            f"{where}: position {name!r} does not fit d_model={d_model}, n_heads={n_heads}, max_len={max_len}: {err}"
        ) from None


def _listed(names: tuple[str, ...]) -> str:
    """``'a', 'b' or 'c'``."""
    quoted = [repr(name) for name in names]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]


def _check_ways(ways: object, where: str) -> None:
    if isinstance(ways, str) or not isinstance(ways, Collection) or not ways or any(w not in WAYS for w in ways):
        raise ValueError(f"{where}: ways must be a non-empty collection of {_listed(tuple(WAYS))}, got {ways!r}")


# --------------------------------------------------------------------------- checks


def _check_even(where: str, name: str, value: object) -> None:
    """An even int of at least 2: a width made of feature pairs (a table's, a rotation's)."""
    checks.integer(where, name, value, minimum=2)
    if value % 2:
        raise ValueError(f"{where}: {name} must be an even int >= 2, got {value!r}")


def _check_float_dtype(dtype: object, where: str) -> None:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{where}: dtype must be a floating torch.dtype, got {dtype!r}")


def _check_table(
    where: str, d_model: object, base: object, dtype: object, *, n_positions: object = None, offset: object = None
) -> None:
    """The arguments of a sinusoidal table (:func:`sinusoidal_encoding`) or of its rotation
    (:func:`offset_matrix`): an even ``d_model``, a ``base`` above 1, a floating dtype, and a
    positive ``n_positions`` or a finite ``offset`` when given."""
    if n_positions is not None:
        checks.positive_int(where, n_positions=n_positions)
    if offset is not None:
        checks.finite_real(where, "k", offset)
    _check_even(where, "d_model", d_model)
    checks.finite_real(where, "base", base, above=1)
    _check_float_dtype(dtype, where)


def _check_rotary_input(where: str, x: object, positions: object, d_head: int) -> None:
    """A floating ``x`` of shape ``(..., n, d_head)`` and ``positions`` of shape ``(..., n)`` (or none)."""
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        what = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{where}: x must be a floating-point tensor, got {what}")
    if x.dim() < 2 or x.shape[-1] != d_head:
        raise ValueError(f"{where}: x must have shape (..., n, d_head={d_head}), got shape {tuple(x.shape)}")
    n = x.shape[-2]
    if positions is not None and (
        not isinstance(positions, torch.Tensor) or positions.dim() < 1 or positions.shape[-1] != n
    ):
        raise ValueError(f"{where}: positions must have shape (..., n={n}), got {_describe(positions)}")


def _checked_lengths(n: int, m: int | None) -> int:
    """ALiBi's key count: ``m`` (``n`` when None), with ``m >= n >= 1``."""
    m = n if m is None else m
    checks.positive_int("ALiBi", n=n)
    return checks.integer("ALiBi", "m", m, minimum=n)


def _check_buckets(bidirectional: object, num_buckets: object, max_distance: object, where: str) -> None:
    """T5's bucket settings: ``num_buckets`` even and at least 4 when bidirectional (at least 2
    otherwise), and ``max_distance`` above :math:`E`, the number of exact buckets (see
    :func:`relative_position_bucket`)."""
    checks.boolean(where, bidirectional=bidirectional)
    checks.integer(where, "num_buckets", num_buckets, minimum=4 if bidirectional else 2)
    if bidirectional and num_buckets % 2:
        raise ValueError(f"{where}: num_buckets must be an even int >= 4 when bidirectional, got {num_buckets!r}")
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    checks.integer(where, "max_distance", max_distance, minimum=exact + 1)


def _describe(value: object) -> object:
    """A tensor's shape, or any other object's type name, for error messages."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _check_input(x: object, d_model: int, max_len: int | None, where: str) -> int:
    """Check ``x`` is ``(..., n, d_model)`` with ``n <= max_len``; return ``n``."""
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        what = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{where}: x must be a floating-point tensor, got {what}")
    if x.dim() < 2 or x.shape[-1] != d_model:
        raise ValueError(f"{where}: x must have shape (..., n, d_model={d_model}), got shape {tuple(x.shape)}")
    n = x.shape[-2]
    if max_len is not None and n > max_len:
        raise ValueError(
            f"{where}: sequence length n={n} exceeds max_len={max_len}; build the module with max_len >= {n}"
        )
    return n


def _check_offset_input(x: object, offset: int, d_model: int, max_len: int, where: str) -> int:
    """Check ``x`` as :func:`_check_input` and that positions ``offset .. offset + n - 1`` exist."""
    n = _check_input(x, d_model, max_len, where)
    checks.non_negative_int(where, offset=offset)
    if offset + n > max_len:
        raise ValueError(f"{where}: positions {offset}..{offset + n - 1} exceed max_len={max_len}")
    return n
