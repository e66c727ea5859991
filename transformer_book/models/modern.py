r"""A decoder-only language model built as today's are (chapter 18), beside chapter 9's GPT.

.. math::

    H^{(0)} = E[x_{1:n}], \qquad
    H^{(l)} = \operatorname{ModernBlock}_l\bigl(H^{(l-1)}\bigr), \qquad
    P(x_{t+1} \mid x_{\le t}) = \operatorname{softmax}\bigl(\operatorname{RMSNorm}(H^{(L)}_t)\, E^\top\bigr)

Each block (:class:`~transformer_book.modern_layers.ModernBlock`, as in LLaMA, Touvron et al.
2023) is pre-norm with RMSNorm, causal grouped-query attention with rotary positions and a SwiGLU
feed-forward network, with no bias anywhere. There is no position table: positions enter only
as rotations of the queries and keys (one :class:`~transformer_book.positional.RotaryEmbedding`
shared by the layers), so nothing is learned per position (``ModernGPTConfig(position=...)`` may
name a table added to the embeddings instead, to compare). The interface is
:class:`~transformer_book.models.gpt.GPT`'s: ``forward``, ``decode_step`` with one
:class:`~transformer_book.attention.KVCache` per layer (which stores ``n_kv_heads`` heads), so
that :func:`transformer_book.decoding.generate` drives either model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from transformer_book import checks
from transformer_book.attention import KVCache
from transformer_book.modern_layers import ModernBlock, RMSNorm, swiglu_width
from transformer_book.positional import position_encoding

__all__ = ["ModernGPT", "ModernGPTConfig"]


@dataclass(frozen=True)
class ModernGPTConfig:
    """Hyper-parameters of :class:`ModernGPT`.

    ``context`` is the longest sequence the model accepts (rotary positions exist for any
    length; the limit keeps the model to the lengths it was trained on). ``n_kv_heads``: the
    key/value heads of grouped-query attention, dividing ``n_heads``; ``None`` means
    ``n_heads`` (multi-head attention), 1 multi-query attention. ``d_ff``: the SwiGLU width;
    ``None`` means :func:`~transformer_book.modern_layers.swiglu_width` ``(d_model)``, the integer
    part of :math:`\\tfrac{2}{3} \\cdot 4 d_{\\text{model}}` rounded up to a multiple of 8 (344 for
    ``d_model = 128``), at which the three SwiGLU matrices hold as many weights as a GPT's two
    ``4 d_model``-wide ones. ``rope_base``: the base of the rotary frequencies (LLaMA 10,000;
    SmolLM2 100,000; also of a sinusoidal table). ``norm_eps``: the :math:`\\epsilon` of every RMSNorm (LLaMA and SmolLM2 use
    1e-5). ``position`` names the position encoding
    (:func:`~transformer_book.positional.position_encoding`, which :class:`ModernGPT` asks for
    it): ``"rotary"`` (the default; ``d_model / n_heads`` must then be even, as rotations turn
    pairs of features), or ``"learned"`` or ``"sinusoidal"``, a table added to the embeddings; the
    grouped-query attention takes no bias, so not ``"alibi"``.
    """

    vocab_size: int
    context: int = 256
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None
    n_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    tie_output: bool = True
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    position: str = "rotary"

    def __post_init__(self) -> None:
        checks.positive_int(
            "ModernGPTConfig",
            vocab_size=self.vocab_size,
            context=self.context,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
        )
        if self.n_kv_heads is not None:
            checks.positive_int("ModernGPTConfig", n_kv_heads=self.n_kv_heads)
        if self.d_ff is not None:
            checks.positive_int("ModernGPTConfig", d_ff=self.d_ff)
        checks.divisible("ModernGPTConfig", "d_model", self.d_model, "n_heads", self.n_heads)
        checks.divisible("ModernGPTConfig", "n_heads", self.n_heads, "n_kv_heads", self.kv_heads)
        checks.probability("ModernGPTConfig", "dropout", self.dropout)
        checks.boolean("ModernGPTConfig", tie_output=self.tie_output)
        checks.finite_real("ModernGPTConfig", "rope_base", self.rope_base, above=1)
        checks.finite_real("ModernGPTConfig", "norm_eps", self.norm_eps, above=0)

    @property
    def kv_heads(self) -> int:
        """The key/value heads, ``n_kv_heads`` or ``n_heads``."""
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def ff_width(self) -> int:
        """The SwiGLU width, ``d_ff`` or :func:`~transformer_book.modern_layers.swiglu_width` ``(d_model)``."""
        return self.d_ff if self.d_ff is not None else swiglu_width(self.d_model)

    @property
    def d_k(self) -> int:
        """Features per head, ``d_model // n_heads``."""
        return self.d_model // self.n_heads


class ModernGPT(nn.Module):
    r"""A decoder-only language model of :class:`~transformer_book.modern_layers.ModernBlock` s.

    ``forward(tokens)``: ``(B, n)`` integer ids, ``n <= context`` -> logits ``(B, n, vocab_size)``,
    position ``t`` scoring token ``t + 1``. Sub-modules ``embedding``, ``dropout`` (on the
    embeddings), ``positional`` (the :class:`~transformer_book.positional.PositionEncoding` named by
    ``config.position``: a :class:`~transformer_book.positional.RotaryEmbedding` shared by every
    layer's attention, by default), ``blocks`` (an ``nn.ModuleList``),
    ``norm`` (the final RMSNorm) and ``output`` (tied to ``embedding`` when ``tie_output``).

    Parameters: :math:`V d` (embedding) :math:`+\, L\,(2 d^2 + 2 d\, g\, d_k + 3 d\, d_{ff} + 2d)`
    (attention with :math:`g` key/value heads, SwiGLU, two RMSNorm gains) :math:`+\, d` (final
    RMSNorm), plus :math:`V d` for an untied output layer and ``context`` :math:`\cdot\, d` for learned
    positions.

    Initialisation as :class:`~transformer_book.models.gpt.GPT`'s (GPT-2's): every weight matrix
    and the embedding :math:`\mathcal{N}(0, 0.02^2)`, the two projections that write into the
    residual stream (``self_attn.w_o`` and ``ffn.w2``) :math:`\mathcal{N}(0, (0.02/\sqrt{2L})^2)`,
    RMSNorm gains one.
    """

    def __init__(self, config: ModernGPTConfig) -> None:
        _check_config(config)
        super().__init__()
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.positional = position_encoding(
            c.position,
            d_model=c.d_model,
            n_heads=c.n_heads,
            max_len=c.context,
            causal=True,
            base=c.rope_base,
            ways=("embedding", "rotation"),
            where="ModernGPT",
        )
        rotary = self.positional.rotary  # None for a table added to the embeddings
        self.blocks = nn.ModuleList(
            ModernBlock(c.d_model, c.n_heads, c.kv_heads, c.ff_width, rotary, c.dropout, eps=c.norm_eps)
            for _ in range(c.n_layers)
        )
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.embedding.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation (see the class docstring); RMSNorm gains back to one."""
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, parameter in self.named_parameters():  # a fixed order: seeded runs repeat
            if name.endswith("gamma"):
                nn.init.ones_(parameter)
            elif parameter.dim() < 2:
                nn.init.zeros_(parameter)
            elif name.endswith(("w_o.weight", "ffn.w2.weight")):
                nn.init.normal_(parameter, std=residual_std)
            else:
                nn.init.normal_(parameter, std=0.02)

    def _embed(self, tokens: torch.Tensor, offset: int) -> torch.Tensor:
        _check_tokens(tokens, offset, self.config)
        return self.dropout(self.positional.add(self.embedding(tokens), offset))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self._embed(tokens, 0)
        for block in self.blocks:
            x = block(x, causal=True)
        return self.output(self.norm(x))

    def attention_weights(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The logits ``(B, n, vocab_size)`` of :meth:`forward` and every layer's attention
        weights, a list of ``(B, n_heads, n, n)`` (the explicit attention path: rows sum to 1,
        zeros above the diagonal; the heads of one group share their keys, not their weights)."""
        x, weights = self._embed(tokens, 0), []
        for block in self.blocks:
            x, w = block(x, causal=True, need_weights=True)
            weights.append(w)
        return self.output(self.norm(x)), weights

    def decode_step(
        self, tokens_new: torch.Tensor, caches: list[KVCache] | None = None
    ) -> tuple[torch.Tensor, list[KVCache]]:
        """Incremental decoding: logits of the new tokens only, reusing the earlier keys and values.

        ``tokens_new`` ``(B, k)`` continue the sequence of the previous calls (the prompt on the
        first call, with ``caches=None``; then one token per step). Returns ``(logits (B, k,
        vocab_size), caches)``, one :class:`~transformer_book.attention.KVCache` per layer
        holding ``(B, n_kv_heads, t, d_k)`` keys and values (rotated); the logits equal the last
        ``k`` positions of :meth:`forward` over the whole sequence.
        """
        caches = self._caches(caches)  # a fresh cache per layer, or the given ones, checked
        x = self._embed(tokens_new, len(caches[0]))
        for block, cache in zip(self.blocks, caches):
            x = block(x, causal=True, cache=cache)
        return self.output(self.norm(x)), caches

    def _caches(self, caches: list[KVCache] | None) -> list[KVCache]:
        if caches is None:
            return [KVCache() for _ in self.blocks]
        if (
            not isinstance(caches, (list, tuple))
            or len(caches) != len(self.blocks)
            or not all(isinstance(cache, KVCache) for cache in caches)
            or len({len(cache) for cache in caches}) != 1
        ):
            raise ValueError(
                f"ModernGPT: caches must be the list of {len(self.blocks)} KVCaches (one per layer, "
                "all of one length) that decode_step returned, or None to start"
            )
        return list(caches)

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"vocab_size={c.vocab_size}, context={c.context}, d_model={c.d_model}, n_heads={c.n_heads}, "
            f"n_kv_heads={c.kv_heads}, n_layers={c.n_layers}, d_ff={c.ff_width}, position={c.position!r}"
        )


def _check_config(config: object) -> None:
    if not isinstance(config, ModernGPTConfig):
        raise ValueError(f"ModernGPT: config must be a ModernGPTConfig, got {type(config).__name__}")


def _check_tokens(tokens: object, offset: int, config: ModernGPTConfig) -> None:
    """A ``(B, n)`` integer tensor, non-empty, of ids in the vocabulary, whose positions
    ``offset .. offset + n - 1`` lie within the context."""
    checks.id_tensor("ModernGPT", "tokens", tokens, "(B, n)")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"ModernGPT: tokens have shape {tuple(tokens.shape)}; at least one sequence and one token")
    checks.ids_within("ModernGPT", "tokens", tokens, config.vocab_size)
    if offset + tokens.shape[1] > config.context:
        raise ValueError(
            f"ModernGPT: {offset + tokens.shape[1]} positions exceed the context of "
            f"{config.context}; crop the input to its last {config.context} tokens"
        )
