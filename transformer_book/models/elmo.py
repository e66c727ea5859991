r"""ELMo (Peters et al., 2018): a bidirectional LSTM language model whose layers, mixed per task,
give contextual word vectors (chapter 12).

A forward LM reads a sentence left to right and predicts the next token; a backward LM reads it
right to left and predicts the previous one. The two share the token embedding and the
output softmax (:math:`\Theta_x`, :math:`\Theta_s`) and are trained together, maximising

.. math::

    \sum_{k=1}^{N} \Bigl( \log p(t_k \mid t_1, \dots, t_{k-1};\ \Theta_x, \overrightarrow{\Theta}_{LSTM}, \Theta_s)
    + \log p(t_k \mid t_{k+1}, \dots, t_N;\ \Theta_x, \overleftarrow{\Theta}_{LSTM}, \Theta_s) \Bigr).

Every layer :math:`j = 0 \dots L` of the trained :class:`BiLM` gives each token a vector
:math:`h_{k,j} = [\overrightarrow{h}_{k,j}; \overleftarrow{h}_{k,j}]`, and a downstream task learns
its own mixture of them (:class:`ScalarMix`, the paper's eq. 1):

.. math:: \mathrm{ELMo}_k = \gamma \sum_{j=0}^{L} s_j\, h_{k,j}, \qquad s = \operatorname{softmax}(w).

Each LSTM layer is the recurrence (gates in PyTorch's order :math:`i, f, g, o`):

.. math::

    \begin{aligned}
    i_t &= \sigma(W_{ii} x_t + b_{ii} + W_{hi} h_{t-1} + b_{hi}) \\
    f_t &= \sigma(W_{if} x_t + b_{if} + W_{hf} h_{t-1} + b_{hf}) \\
    g_t &= \tanh(W_{ig} x_t + b_{ig} + W_{hg} h_{t-1} + b_{hg}) \\
    o_t &= \sigma(W_{io} x_t + b_{io} + W_{ho} h_{t-1} + b_{ho}) \\
    c_t &= f_t \odot c_{t-1} + i_t \odot g_t \\
    h_t &= o_t \odot \tanh(c_t)
    \end{aligned}

written out in :class:`LSTMCell` and unrolled over time in :class:`LSTMLayer`, whose parameters
are named and laid out as those of a one-layer ``torch.nn.LSTM``, so that weights load across.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checks

__all__ = ["lstm_update", "LSTMCell", "LSTMLayer", "ScalarMix", "BiLMConfig", "BiLM"]

ENGINES = ("torch", "book")


def _describe(t: object) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__


def _check_float(owner: str, name: str, t: object, shape: tuple[int | None, ...], dtype: torch.dtype) -> None:
    """``t`` must be a tensor of ``dtype`` whose shape matches ``shape`` (``None``: any size >= 1)."""
    ok = (
        isinstance(t, torch.Tensor)
        and t.dtype == dtype
        and t.dim() == len(shape)
        and all(s >= 1 if want is None else s == want for s, want in zip(t.shape, shape))
    )
    if not ok:
        wanted = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{owner}: {name} must be a {dtype} tensor of shape {wanted}, got {_describe(t)}")


def lstm_update(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The LSTM's state update, from the gates' pre-activations ``(B, 4h)`` (stacked ``[i, f, g, o]``)
    and the cell ``c`` ``(B, h)`` to ``(h', c')``:

    .. math:: c' = \sigma(f) \odot c + \sigma(i) \odot \tanh(g), \qquad h' = \sigma(o) \odot \tanh(c')
    """
    i, f, g, o = gates.chunk(4, dim=-1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def _add_lstm_parameters(module: nn.Module, owner: str, d_input: int, d_hidden: int, suffix: str) -> None:
    """Register ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` (+ ``suffix``), gates stacked
    (i, f, g, o) as in ``torch.nn.LSTM``, and draw them."""
    checks.positive_int(owner, d_input=d_input, d_hidden=d_hidden)
    module.d_input, module.d_hidden = d_input, d_hidden
    for name, shape in [
        ("weight_ih", (4 * d_hidden, d_input)),
        ("weight_hh", (4 * d_hidden, d_hidden)),
        ("bias_ih", (4 * d_hidden,)),
        ("bias_hh", (4 * d_hidden,)),
    ]:
        module.register_parameter(name + suffix, nn.Parameter(torch.empty(shape)))
    _reset_uniform(module)


def _reset_uniform(module: nn.Module) -> None:
    bound = 1.0 / math.sqrt(module.d_hidden)
    for parameter in module.parameters():  # registration order: seeded draws repeat nn.LSTM's
        nn.init.uniform_(parameter, -bound, bound)


class LSTMCell(nn.Module):
    r"""One step of an LSTM, the gate equations written out (compare ``torch.nn.LSTMCell``).

    .. math::

        \begin{aligned}
        i &= \sigma(W_{ii} x + b_{ii} + W_{hi} h + b_{hi}), &
        f &= \sigma(W_{if} x + b_{if} + W_{hf} h + b_{hf}), \\
        g &= \tanh(W_{ig} x + b_{ig} + W_{hg} h + b_{hg}), &
        o &= \sigma(W_{io} x + b_{io} + W_{ho} h + b_{ho}), \\
        c' &= f \odot c + i \odot g, &
        h' &= o \odot \tanh(c').
        \end{aligned}

    The four gates' weights are stacked in PyTorch's order :math:`(i, f, g, o)`: parameters
    ``weight_ih`` ``(4h, d_input)`` :math:`= [W_{ii}; W_{if}; W_{ig}; W_{io}]`, ``weight_hh``
    ``(4h, h)``, ``bias_ih`` and ``bias_hh`` ``(4h,)``, all initialised
    :math:`\mathcal{U}(-1/\sqrt{h}, 1/\sqrt{h})` as PyTorch does (in the same order, so a seeded
    cell equals a seeded ``nn.LSTMCell``). One matrix product per weight, then a split in four.

    Shapes: ``x`` ``(B, d_input)``; ``state`` a pair ``(h (B, h), c (B, h))``, or ``None`` for
    zeros. Returns ``(h', c')``, each ``(B, h)``. All tensors of the parameters' dtype.
    """

    def __init__(self, d_input: int, d_hidden: int) -> None:
        super().__init__()
        _add_lstm_parameters(self, "LSTMCell", d_input, d_hidden, suffix="")

    def reset_parameters(self) -> None:
        """:math:`\\mathcal{U}(-1/\\sqrt{h}, 1/\\sqrt{h})` for every parameter, in registration order."""
        _reset_uniform(self)

    def extra_repr(self) -> str:
        return f"{self.d_input}, {self.d_hidden}"

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._check_inputs(x, state)
        h, c = state if state is not None else (x.new_zeros(x.shape[0], self.d_hidden),) * 2
        gates = x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh  # (B, 4h)
        return lstm_update(gates, c)

    def _check_inputs(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        """A floating ``(B, d_input)`` ``x`` of the weights' dtype, and a state ``(h, c)`` of
        ``(B, d_hidden)`` each, or none."""
        dtype = self.weight_ih.dtype
        _check_float("LSTMCell", "x", x, (None, self.d_input), dtype)
        if state is None:
            return
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError(
                f"LSTMCell: state must be a pair (h, c) or None, got {type(state).__name__}"
                + (f" of length {len(state)}" if isinstance(state, (tuple, list)) else "")
            )
        for name, t in zip(("state h", "state c"), state):
            _check_float("LSTMCell", name, t, (x.shape[0], self.d_hidden), dtype)


class LSTMLayer(nn.Module):
    r"""A one-layer, batch-first LSTM unrolled over time in Python: the recurrence of
    :class:`LSTMCell` applied at :math:`t = 1, \dots, n`, :math:`(h_t, c_t) = \operatorname{cell}(x_t, (h_{t-1}, c_{t-1}))`.

    A drop-in for ``nn.LSTM(d_input, d_hidden, batch_first=True)``: the parameters are called
    ``weight_ih_l0`` ``(4h, d_input)``, ``weight_hh_l0`` ``(4h, h)``, ``bias_ih_l0`` and
    ``bias_hh_l0`` ``(4h,)``, gates stacked :math:`(i, f, g, o)`, so ``state_dict`` loads either
    way, and are initialised as PyTorch does. The input half of every step's gates,
    :math:`W_{i\cdot} x_t + b_{i\cdot}`, does not depend on the state, so it is computed for all
    :math:`t` in one product before the loop; only :math:`W_{h\cdot} h_{t-1}` is sequential.

    Shapes: ``x`` ``(B, n, d_input)``; ``state`` ``(h_0 (1, B, h), c_0 (1, B, h))`` or ``None``
    for zeros. Returns ``(outputs (B, n, h), (h_n (1, B, h), c_n (1, B, h)))``, ``outputs[:, t]``
    being :math:`h_t`: the return convention of ``nn.LSTM(batch_first=True)``.
    """

    def __init__(self, d_input: int, d_hidden: int) -> None:
        super().__init__()
        _add_lstm_parameters(self, "LSTMLayer", d_input, d_hidden, suffix="_l0")

    def reset_parameters(self) -> None:
        """:math:`\\mathcal{U}(-1/\\sqrt{h}, 1/\\sqrt{h})` for every parameter, in registration order."""
        _reset_uniform(self)

    def extra_repr(self) -> str:
        return f"{self.d_input}, {self.d_hidden}, batch_first=True"

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        dtype = self.weight_ih_l0.dtype
        _check_float("LSTMLayer", "x", x, (None, None, self.d_input), dtype)
        batch = x.shape[0]
        if state is None:
            h = c = x.new_zeros(batch, self.d_hidden)
        else:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                raise ValueError(
                    f"LSTMLayer: state must be a pair (h_0, c_0) or None, got {type(state).__name__}"
                    + (f" of length {len(state)}" if isinstance(state, (tuple, list)) else "")
                )
            _check_float("LSTMLayer", "state h_0", state[0], (1, batch, self.d_hidden), dtype)
            _check_float("LSTMLayer", "state c_0", state[1], (1, batch, self.d_hidden), dtype)
            h, c = state[0][0], state[1][0]
        from_input = x @ self.weight_ih_l0.T + self.bias_ih_l0  # (B, n, 4h), all steps at once
        outputs = []
        for from_input_t in from_input.unbind(1):  # t = 1 .. n
            gates = from_input_t + h @ self.weight_hh_l0.T + self.bias_hh_l0
            h, c = lstm_update(gates, c)
            outputs.append(h)
        return torch.stack(outputs, dim=1), (h.unsqueeze(0), c.unsqueeze(0))


class ScalarMix(nn.Module):
    r"""A learned, softmax-normalised weighting of a model's layers (ELMo's eq. 1).

    .. math:: \operatorname{ScalarMix}(h_0, \dots, h_{L-1}) = \gamma \sum_{j=0}^{L-1} s_j\, h_j,
        \qquad s = \operatorname{softmax}(w)

    Parameters ``w`` ``(n_layers,)``, zeros (so the mix starts as the plain average) and the scale
    ``gamma`` ``()``, 1. The property ``weights`` gives :math:`s` (detached).

    Shapes: ``layers`` a tensor ``(n_layers, ..., d)``, as from :meth:`BiLM.layer_representations`,
    or a sequence of ``n_layers`` tensors of one shape ``(..., d)``; returns ``(..., d)``. The
    layers must have the parameters' dtype.
    """

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        checks.positive_int("ScalarMix", n_layers=n_layers)
        self.n_layers = n_layers
        self.w = nn.Parameter(torch.zeros(n_layers))
        self.gamma = nn.Parameter(torch.tensor(1.0))

    @property
    def weights(self) -> torch.Tensor:
        """:math:`s = \\operatorname{softmax}(w)`, ``(n_layers,)``, detached."""
        return torch.softmax(self.w.detach(), dim=0)

    def extra_repr(self) -> str:
        return f"n_layers={self.n_layers}"

    def forward(self, layers: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
        stacked = self._stacked(layers)  # (L, ..., d), checked
        s = torch.softmax(self.w, dim=0)
        return self.gamma * torch.tensordot(s, stacked, dims=1)

    def _stacked(self, layers: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
        """``layers`` as one ``(L, ..., d)`` tensor: a tensor with ``L`` first, or ``L`` tensors of
        one shape, in the parameters' dtype."""
        if isinstance(layers, torch.Tensor):
            if layers.dim() < 2 or layers.shape[0] != self.n_layers:
                raise ValueError(
                    f"ScalarMix: layers must be a ({self.n_layers}, ..., d) tensor, got shape {tuple(layers.shape)}"
                )
            stacked = layers
        elif isinstance(layers, Sequence) and not isinstance(layers, str):
            if len(layers) != self.n_layers:
                raise ValueError(f"ScalarMix: expected {self.n_layers} layers, got {len(layers)}")
            for j, layer in enumerate(layers):
                if not isinstance(layer, torch.Tensor):
                    raise ValueError(f"ScalarMix: layer {j} must be a tensor, got {type(layer).__name__}")
                if layer.shape != layers[0].shape or layer.dim() == 0:
                    raise ValueError(
                        f"ScalarMix: the layers must share one shape (..., d); layer 0 has shape "
                        f"{tuple(layers[0].shape)}, layer {j} has {tuple(layer.shape)}"
                    )
            stacked = torch.stack(list(layers))
        else:
            raise ValueError(
                f"ScalarMix: layers must be a tensor or a sequence of tensors, got {type(layers).__name__}"
            )
        if stacked.dtype != self.w.dtype:
            raise ValueError(f"ScalarMix: layers have dtype {stacked.dtype}, the parameters {self.w.dtype}")
        return stacked


@dataclass(frozen=True)
class BiLMConfig:
    """Hyper-parameters of :class:`BiLM`.

    ``d_embed`` is the width of the token embedding, of every layer's projected output and of the
    softmax input; ``d_hidden`` that of each LSTM's state. ``cutoffs`` splits the vocabulary
    (ids sorted by decreasing frequency) into the head and tail clusters of an adaptive softmax,
    each tail cluster's projection ``div_value`` times narrower than the previous one; an empty
    tuple gives a full softmax. ``engine`` picks the LSTM implementation: ``"torch"``,
    ``nn.LSTM`` (fused kernels, fast), or ``"book"``, :class:`LSTMLayer` (the loop written out,
    slow); both have the same parameter names, so weights load across.
    """

    vocab_size: int
    d_embed: int = 256
    d_hidden: int = 1024
    n_layers: int = 2
    dropout: float = 0.1
    cutoffs: tuple[int, ...] = (2000, 10000)
    div_value: float = 4.0
    engine: str = "torch"

    def __post_init__(self) -> None:
        checks.positive_int(
            "BiLMConfig",
            vocab_size=self.vocab_size,
            d_embed=self.d_embed,
            d_hidden=self.d_hidden,
            n_layers=self.n_layers,
        )
        checks.probability("BiLMConfig", "dropout", self.dropout)
        cutoffs = self.cutoffs
        if not isinstance(cutoffs, (tuple, list)) or any(
            isinstance(c, bool) or not isinstance(c, int) for c in cutoffs
        ):
            raise ValueError(f"BiLMConfig: cutoffs must be a tuple of ints, got {cutoffs!r}")
        object.__setattr__(self, "cutoffs", tuple(cutoffs))
        if cutoffs:
            if any(b <= a for a, b in zip(cutoffs, cutoffs[1:])) or cutoffs[0] < 1 or cutoffs[-1] >= self.vocab_size:
                raise ValueError(
                    f"BiLMConfig: cutoffs must increase strictly and lie in [1, vocab_size="
                    f"{self.vocab_size}), got {tuple(cutoffs)}; use cutoffs=() for a full softmax"
                )
            checks.finite_real("BiLMConfig", "div_value", self.div_value, at_least=1)
            narrowest = int(self.d_embed // self.div_value ** len(cutoffs))
            if narrowest < 1:
                raise ValueError(
                    f"BiLMConfig: div_value={self.div_value} leaves the last of {len(cutoffs)} tail "
                    f"clusters d_embed // div_value**{len(cutoffs)} = {narrowest} features; "
                    f"lower div_value or raise d_embed={self.d_embed}"
                )
        if self.engine not in ENGINES:
            raise ValueError(f"BiLMConfig: engine must be one of {ENGINES}, got {self.engine!r}")


class BiLM(nn.Module):
    r"""ELMo's bidirectional language model, with a word-level token encoder.

    Per direction (the backward one reads each sequence right to left), with :math:`D` dropout
    (identity in eval mode), :math:`P_j` the projection ``nn.Linear(d_hidden, d_embed)`` after
    LSTM layer :math:`j`:

    .. math::

        r_0 = D(E[x]), \qquad
        r_1 = P_1 \operatorname{LSTM}_1(r_0), \qquad
        r_j = P_j \operatorname{LSTM}_j\bigl(D(r_{j-1})\bigr) + D(r_{j-1}) \quad (j \ge 2),

    and the next (forward) or previous (backward) token is predicted from :math:`D(r_L)` by the
    output layer. The dropout on each layer's input, and the residual connection that carries
    that dropped-out input, are those of the original ``bilm-tf`` (a ``DropoutWrapper`` around a
    ``ResidualWrapper``). The embedding :math:`E` and the output layer are shared by the two
    directions; each direction has its own LSTMs and projections.

    Sub-modules: ``embedding`` ``nn.Embedding(V, d_embed)``; ``forward_layers``,
    ``backward_layers`` (``nn.ModuleList`` of ``n_layers`` ``nn.LSTM`` or :class:`LSTMLayer`
    ``(d_embed -> d_hidden)``); ``forward_projections``, ``backward_projections``
    (``nn.ModuleList`` of ``nn.Linear(d_hidden, d_embed)``); ``dropout``; ``output``, an
    ``nn.AdaptiveLogSoftmaxWithLoss(d_embed, V, cutoffs, div_value)`` (Grave et al., 2017: an
    exact, normalised distribution, much cheaper than a full softmax over a large vocabulary),
    or ``nn.Linear(d_embed, V)`` followed by a log-softmax when ``cutoffs`` is empty. Default
    PyTorch initialisation; seeded construction is reproducible.

    Differences from ELMo: the token encoder is a word embedding, not ELMo's character CNN;
    the projection :math:`P_j` is applied to each LSTM's output, whereas ELMo's LSTMP cell feeds
    the projected state back into its recurrence (and clips the cell); no layer norm in the mix.

    Methods: :meth:`layer_representations` (the vectors a task mixes with :class:`ScalarMix`),
    :meth:`loss` (the two directions' training losses), :meth:`log_probs`.
    """

    def __init__(self, config: BiLMConfig) -> None:
        super().__init__()
        if not isinstance(config, BiLMConfig):
            raise ValueError(f"BiLM: config must be a BiLMConfig, got {type(config).__name__}")
        self.config = c = config

        def lstm() -> nn.Module:
            if c.engine == "torch":
                return nn.LSTM(c.d_embed, c.d_hidden, batch_first=True)
            return LSTMLayer(c.d_embed, c.d_hidden)

        self.embedding = nn.Embedding(c.vocab_size, c.d_embed)
        self.forward_layers = nn.ModuleList(lstm() for _ in range(c.n_layers))
        self.forward_projections = nn.ModuleList(nn.Linear(c.d_hidden, c.d_embed) for _ in range(c.n_layers))
        self.backward_layers = nn.ModuleList(lstm() for _ in range(c.n_layers))
        self.backward_projections = nn.ModuleList(nn.Linear(c.d_hidden, c.d_embed) for _ in range(c.n_layers))
        self.dropout = nn.Dropout(c.dropout)
        if c.cutoffs:
            self.output: nn.Module = nn.AdaptiveLogSoftmaxWithLoss(
                c.d_embed, c.vocab_size, list(c.cutoffs), div_value=float(c.div_value)
            )
        else:
            self.output = nn.Linear(c.d_embed, c.vocab_size)

    def extra_repr(self) -> str:
        c = self.config
        softmax = f"adaptive softmax, cutoffs={c.cutoffs}" if c.cutoffs else "full softmax"
        return (
            f"vocab_size={c.vocab_size}, d_embed={c.d_embed}, d_hidden={c.d_hidden}, n_layers={c.n_layers}, "
            f"{softmax}, engine={c.engine!r}"
        )

    # --- input checks ------------------------------------------------------------------------

    def _check_tokens(self, owner: str, tokens: torch.Tensor, min_length: int) -> None:
        checks.id_tensor(f"BiLM.{owner}", "tokens", tokens, "(B, n)")
        if tokens.shape[0] < 1 or tokens.shape[1] < min_length:
            raise ValueError(
                f"BiLM.{owner}: tokens have shape {tuple(tokens.shape)}; need at least one sequence "
                f"of at least {min_length} token{'s' if min_length > 1 else ''}"
            )
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"BiLM.{owner}: tokens hold ids in [{low}, {high}], outside the vocabulary "
                f"[0, {self.config.vocab_size})"
            )

    @staticmethod
    def _check_lengths(lengths: torch.Tensor, batch: int, n: int) -> None:
        if (
            not isinstance(lengths, torch.Tensor)
            or lengths.dim() != 1
            or lengths.dtype.is_floating_point
            or lengths.dtype.is_complex
            or lengths.dtype == torch.bool
            or lengths.shape[0] != batch
        ):
            raise ValueError(
                f"BiLM.layer_representations: lengths must be a ({batch},) integer tensor, got {_describe(lengths)}"
            )
        low, high = int(lengths.min()), int(lengths.max())
        if low < 1 or high > n:
            raise ValueError(
                f"BiLM.layer_representations: lengths must lie in [1, n={n}], got values in [{low}, {high}]"
            )

    # --- the two directions ------------------------------------------------------------------

    def _stack(self, r0: torch.Tensor, layers: nn.ModuleList, projections: nn.ModuleList) -> list[torch.Tensor]:
        """``[r_0, r_1, ..., r_L]`` of one direction, each ``(B, n, d_embed)``, read left to right."""
        reps = [r0]
        for j, (lstm, projection) in enumerate(zip(layers, projections)):
            x = r0 if j == 0 else self.dropout(reps[-1])
            out = projection(lstm(x)[0])
            reps.append(out if j == 0 else out + x)
        return reps

    def _run(self, tokens: torch.Tensor, lengths: torch.Tensor | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Both directions' ``[r_0, ..., r_L]``, the backward ones put back in reading order."""
        r0 = self.dropout(self.embedding(tokens))
        if lengths is None:

            def reverse(x: torch.Tensor) -> torch.Tensor:
                return x.flip(1)
        else:
            index = _reversal_index(lengths.to(tokens.device), tokens.shape[1])[..., None]

            def reverse(x: torch.Tensor) -> torch.Tensor:
                return x.gather(1, index.expand(-1, -1, x.shape[-1]))

        forward = self._stack(r0, self.forward_layers, self.forward_projections)
        backward = self._stack(reverse(r0), self.backward_layers, self.backward_projections)
        return forward, [r0] + [reverse(r) for r in backward[1:]]

    def layer_representations(self, tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        r"""Every layer's contextual vectors, ``(n_layers + 1, B, n, 2 * d_embed)``.

        Layer 0 is the token embedding twice, :math:`[E x_k; E x_k]` (so that all layers have
        one width, as in ELMo); layer :math:`j \ge 1` is :math:`[\overrightarrow{r}_{k,j};
        \overleftarrow{r}_{k,j}]`. The forward half at position :math:`k` depends on tokens
        :math:`\le k` only, the backward half on tokens :math:`\ge k` only.

        Args:
            tokens: ``(B, n)`` integer ids in ``[0, vocab_size)``.
            lengths: ``(B,)`` the real lengths of a right-padded batch, ``1 <= lengths <= n``,
                or ``None`` when every row is full. The backward direction then reverses only
                each row's first ``lengths[b]`` tokens (the padding stays at the end), so padding
                never reaches a real position in either direction: the vectors there are those
                of the unpadded row. Vectors at padded positions are meaningless.

        Dropout applies in train mode only; call ``eval()`` for features.
        """
        self._check_tokens("layer_representations", tokens, 1)
        if lengths is not None:
            self._check_lengths(lengths, tokens.shape[0], tokens.shape[1])
        forward, backward = self._run(tokens, lengths)
        return torch.stack([torch.cat([f, b], dim=-1) for f, b in zip(forward, backward)])

    def _predictors(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``D(r_L)`` of the positions that predict: forward ``0 .. n-2``, backward ``1 .. n-1``."""
        forward, backward = self._run(tokens, None)
        return self.dropout(forward[-1][:, :-1]), self.dropout(backward[-1][:, 1:])

    def loss(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r"""The two directions' language-modelling losses on full windows ``(B, n)``, ``n >= 2``.

        .. math::

            \mathcal{L}_{fwd} = -\frac{1}{B(n-1)} \sum_{b} \sum_{t=0}^{n-2} \log p(x_{b,t+1} \mid x_{b,\le t}),
            \qquad
            \mathcal{L}_{bwd} = -\frac{1}{B(n-1)} \sum_{b} \sum_{t=1}^{n-1} \log p(x_{b,t-1} \mid x_{b,\ge t})

        in nats; ``exp`` of each is that direction's perplexity, and ELMo trains on their sum.
        No padding: every row is a window of ``n`` real tokens of the training stream (as
        :class:`~transformer_book.data.RandomWindows` gives; join its ``x`` with ``y[:, -1:]``).

        Returns:
            ``(loss_fwd, loss_bwd)``, two scalars.
        """
        self._check_tokens("loss", tokens, 2)
        fwd, bwd = self._predictors(tokens)
        d = self.config.d_embed
        inputs = torch.cat([fwd.reshape(-1, d), bwd.reshape(-1, d)])
        targets = torch.cat([tokens[:, 1:].reshape(-1), tokens[:, :-1].reshape(-1)])
        if self.config.cutoffs:
            target_log_probs = self.output(inputs, targets).output  # (2N,), log p of each target
            nll = -target_log_probs
        else:
            nll = F.cross_entropy(self.output(inputs), targets, reduction="none")
        half = fwd.shape[0] * fwd.shape[1]
        return nll[:half].mean(), nll[half:].mean()

    def log_probs(self, tokens: torch.Tensor, direction: str = "forward") -> torch.Tensor:
        """Log-probabilities over the vocabulary at the predicting positions, ``(B, n - 1, V)``.

        ``direction="forward"``: entry ``[b, t]`` is the distribution of token ``t + 1`` given
        tokens ``0 .. t``; ``"backward"``: entry ``[b, t]`` is that of token ``t`` given tokens
        ``t + 1 .. n - 1``. So the targets are ``tokens[:, 1:]`` and ``tokens[:, :-1]``, and
        :meth:`loss` is the mean negative log-probability of the targets.
        """
        if direction not in ("forward", "backward"):
            raise ValueError(f"BiLM.log_probs: direction must be 'forward' or 'backward', got {direction!r}")
        self._check_tokens("log_probs", tokens, 2)
        fwd, bwd = self._predictors(tokens)
        h = fwd if direction == "forward" else bwd
        flat = h.reshape(-1, self.config.d_embed)
        if self.config.cutoffs:
            out = self.output.log_prob(flat)
        else:
            out = F.log_softmax(self.output(flat), dim=-1)
        return out.reshape(h.shape[0], h.shape[1], self.config.vocab_size)


def _reversal_index(lengths: torch.Tensor, n: int) -> torch.Tensor:
    """``(B, n)`` positions that reverse each row's first ``lengths[b]`` entries and keep the rest:
    ``lengths[b] - 1 - t`` for ``t < lengths[b]``, else ``t``. Its own inverse."""
    t = torch.arange(n, device=lengths.device)
    length = lengths.long()[:, None]
    return torch.where(t < length, length - 1 - t, t).expand(lengths.shape[0], n)
