r"""A decoder-only language model in the style of GPT (chapter 9).

.. math::

    H^{(0)} = E[x_{1:n}] + P_{0:n}, \qquad
    H^{(l)} = \operatorname{Block}_l\bigl(H^{(l-1)};\ M^{\text{causal}}\bigr), \qquad
    P(x_{t+1} \mid x_{\le t}) = \operatorname{softmax}\bigl(\operatorname{LN}(H^{(L)}_t)\, E^\top\bigr)

The blocks are the encoder layers of chapter 5 in their pre-LN form (as GPT-2), each
position attending only to itself and the positions before it (the causal mask of chapter 2);
the output layer shares the token embedding :math:`E` (``tie_output``). Trained with teacher
forcing, position :math:`t` predicts token :math:`t+1`, so one forward pass over a window of
:math:`n` tokens gives :math:`n` training targets.

Positions are GPT-2's learned table :math:`P` by default; ``GPTConfig(position=...)`` names
another encoding of :mod:`transformer_book.positional` (a sinusoidal table added in its place, or
ALiBi's causal bias on every layer's scores, with no :math:`P`).

Generation uses :meth:`GPT.decode_step` with a key/value cache: each new token costs one
position's work instead of the whole prefix's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from transformer_book import checks
from transformer_book.attention import KVCache
from transformer_book.masks import causal_mask
from transformer_book.models.transformer import Encoder
from transformer_book.positional import position_encoding

__all__ = ["GPT", "GPTConfig"]


@dataclass(frozen=True)
class GPTConfig:
    """Hyper-parameters of :class:`GPT`. ``context`` is the longest sequence (learned positions
    exist for ``0 .. context - 1``); ``d_ff`` defaults to ``4 * d_model``. ``position`` names the
    position encoding (:func:`~transformer_book.positional.position_encoding`, which :class:`GPT`
    asks for it): ``"learned"`` (GPT-2's, the default), ``"sinusoidal"`` or ``"alibi"``; GPT's
    attention rotates nothing, so not ``"rotary"``."""

    vocab_size: int
    context: int = 256
    d_model: int = 384
    n_heads: int = 6
    n_layers: int = 6
    d_ff: int | None = None
    dropout: float = 0.1
    activation: str = "gelu"
    tie_output: bool = True
    position: str = "learned"

    def __post_init__(self) -> None:
        checks.positive_int(
            "GPTConfig",
            vocab_size=self.vocab_size,
            context=self.context,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
        )
        if self.d_ff is not None:
            checks.positive_int("GPTConfig", d_ff=self.d_ff)
        checks.divisible("GPTConfig", "d_model", self.d_model, "n_heads", self.n_heads)
        checks.probability("GPTConfig", "dropout", self.dropout)

    @property
    def ff_width(self) -> int:
        """The feed-forward width, ``d_ff`` or ``4 * d_model``."""
        return self.d_ff if self.d_ff is not None else 4 * self.d_model


class GPT(nn.Module):
    """A decoder-only Transformer language model: token ids in, next-token logits out.

    ``forward(tokens)``: ``(B, n)`` integer ids, ``n <= context`` -> logits ``(B, n, vocab_size)``,
    position ``t`` scoring token ``t + 1``. Sub-modules ``embedding``, ``positional`` (the
    :class:`~transformer_book.positional.PositionEncoding` named by ``config.position``),
    ``dropout`` (on the embeddings), ``blocks`` (an :class:`~transformer_book.models.transformer.Encoder`
    of pre-LN layers with its final LayerNorm) and ``output``.

    Initialisation as GPT-2: every weight matrix and embedding :math:`\\mathcal{N}(0, 0.02^2)`,
    the two projections that write into the residual stream (``w_o`` and the FFN's
    ``linear2``) :math:`\\mathcal{N}(0, (0.02/\\sqrt{2L})^2)`, biases zero.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"GPT: config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.positional = position_encoding(
            c.position,
            d_model=c.d_model,
            n_heads=c.n_heads,
            max_len=c.context,
            causal=True,
            ways=("embedding", "bias"),
            where="GPT",
        )
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = Encoder(
            c.n_layers, c.d_model, c.n_heads, c.ff_width, c.dropout, norm_first=True, activation=c.activation
        )
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.embedding.weight
        self.register_buffer("causal", causal_mask(c.context), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation (see the class docstring); LayerNorms start at gamma 1, beta 0."""
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, parameter in self.named_parameters():  # a fixed order: seeded runs repeat
            if parameter.dim() < 2:
                if not name.endswith(("gamma", "beta")):
                    nn.init.zeros_(parameter)
            elif name.endswith(("w_o.weight", "linear2.weight")):
                nn.init.normal_(parameter, std=residual_std)
            else:
                nn.init.normal_(parameter, std=0.02)

    def _embed(self, tokens: torch.Tensor, offset: int) -> torch.Tensor:
        checks.id_tensor("GPT", "tokens", tokens, "(B, n)")
        if tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise ValueError(f"GPT: tokens have shape {tuple(tokens.shape)}; at least one sequence and one token")
        checks.ids_within("GPT", "tokens", tokens, self.config.vocab_size)
        if offset + tokens.shape[1] > self.config.context:
            raise ValueError(
                f"GPT: {offset + tokens.shape[1]} positions exceed the context of "
                f"{self.config.context}; crop the input to its last {self.config.context} tokens"
            )
        return self.dropout(self.positional.add(self.embedding(tokens), offset))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        r"""Next-token logits ``(B, n, vocab_size)`` for ``tokens`` ``(B, n)``:
        :math:`\operatorname{LN}(H^{(L)})\, E^\top`, the causal blocks run from
        :math:`H^{(0)} = \operatorname{dropout}(E[x] + P)`. With ALiBi there is no :math:`P`, and every
        layer adds the bias :math:`B` to its scores."""
        x, n = self._embed(tokens, 0), tokens.shape[1]
        # causal=True is the mask self.causal[:n, :n]; the fused path hands it to the flash kernel
        return self.output(self.blocks(x, causal=True, bias=self.positional.attention_bias(n, n)))

    def attention_weights(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The logits ``(B, n, vocab_size)`` of :meth:`forward` and every layer's attention
        weights, a list of ``(B, n_heads, n, n)`` (computed by the explicit attention path, whose
        rows over the keys sum to 1 with zeros above the diagonal)."""
        x, n = self._embed(tokens, 0), tokens.shape[1]
        hidden, weights = self.blocks(x, causal=True, need_weights=True, bias=self.positional.attention_bias(n, n))
        return self.output(hidden), weights

    def decode_step(
        self, tokens_new: torch.Tensor, caches: list[KVCache] | None = None
    ) -> tuple[torch.Tensor, list[KVCache]]:
        """Incremental decoding: logits of the new tokens only, reusing the earlier keys and values.

        ``tokens_new`` ``(B, k)`` continue the sequence of the previous calls (the prompt on the
        first call, with ``caches=None``; then one token per step). Returns ``(logits (B, k,
        vocab_size), caches)``; the logits equal the last ``k`` positions of :meth:`forward`
        over the whole sequence.
        """
        if caches is None:
            caches = [KVCache() for _ in self.blocks.layers]
        offset = len(caches[0])
        x = self._embed(tokens_new, offset)
        k = tokens_new.shape[1]
        mask = self.causal[None, offset : offset + k, : offset + k] if k > 1 else None
        bias = self.positional.attention_bias(k, offset + k)  # the k new queries against every key
        return self.output(self.blocks(x, mask, caches=caches, bias=bias)), caches

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"vocab_size={c.vocab_size}, context={c.context}, d_model={c.d_model}, n_layers={c.n_layers}, "
            f"position={c.position!r}"
        )
