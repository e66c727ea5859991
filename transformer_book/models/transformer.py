r"""The encoder-decoder Transformer (chapter 6).

.. math::

    \text{memory} = \operatorname{Encoder}(E_{src}[x] \sqrt{d_{\text{model}}} + PE), \qquad
    P(y_t \mid y_{<t}, x) = \operatorname{softmax}\bigl(\operatorname{Decoder}(E_{tgt}[y_{<t}]
    \sqrt{d_{\text{model}}} + PE,\ \text{memory})\, W_{out}\bigr)_{y_t}

Sequence conventions: the decoder's input is the target shifted right by one with SOS in
front (:func:`shift_right`), its output at position ``t`` predicts target token ``t``, and
targets end with EOS and are padded with PAD, which the loss ignores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from transformer_book import checks
from transformer_book.attention import KVCache
from transformer_book.layers import DecoderLayer, EncoderLayer, LayerNorm
from transformer_book.masks import causal_mask, combine_masks, padding_mask
from transformer_book.positional import PositionEncoding, position_encoding

__all__ = ["Encoder", "Decoder", "Transformer", "TransformerConfig", "shift_right"]


def _check_targets(where: str, targets: torch.Tensor) -> None:
    """A ``(B, n)`` integer tensor with at least one position."""
    checks.id_tensor(where, "targets", targets, "(B, n)")
    if targets.shape[1] == 0:
        raise ValueError(f"{where}: targets have no positions")


def shift_right(targets: torch.Tensor, sos_id: int) -> torch.Tensor:
    """The decoder's input for teacher forcing: SOS, then the targets without their last token.

    ``[y_1, ..., y_n]`` becomes ``[SOS, y_1, ..., y_{n-1}]``, so that the output at position
    ``t`` sees ``y_{<t}`` and is trained to predict ``y_t``.

    Args:
        targets: ``(B, n)`` integer ids (ending in EOS, then PAD).
        sos_id: the start-of-sequence id.

    Returns:
        ``(B, n)`` integer ids.

    Raises:
        ValueError: if ``targets`` is not a 2-D integer tensor with at least one position.
    """
    _check_targets("shift_right", targets)
    sos = torch.full_like(targets[:, :1], sos_id)
    return torch.cat([sos, targets[:, :-1]], dim=1)


def _stack(
    layer: type[EncoderLayer] | type[DecoderLayer],
    n_layers: int,
    d_model: int,
    n_heads: int,
    d_ff: int,
    dropout: float,
    norm_first: bool,
    activation: str,
    eps: float,
    final_norm: bool | None,
) -> tuple[nn.ModuleList, LayerNorm | None]:
    """``n_layers`` fresh layers, and the final LayerNorm (by default only for pre-LN)."""
    checks.positive_int(f"{layer.__name__} stack", n_layers=n_layers)
    layers = nn.ModuleList(
        layer(d_model, n_heads, d_ff, dropout, norm_first=norm_first, activation=activation, eps=eps)
        for _ in range(n_layers)
    )
    norm = LayerNorm(d_model, eps) if (norm_first if final_norm is None else final_norm) else None
    return layers, norm


def _per_layer(caches: list | None, n_layers: int, where: str) -> list:
    """One cache per layer, or ``None`` for every layer: a list of another length would leave
    layers without their cache (``zip`` stops at the shorter)."""
    if caches is None:
        return [None] * n_layers
    if not isinstance(caches, (list, tuple)) or len(caches) != n_layers:
        got = f"{len(caches)} caches" if isinstance(caches, (list, tuple)) else type(caches).__name__
        raise ValueError(f"{where}: caches must be a list of one cache per layer ({n_layers}), got {got}")
    return list(caches)


class Encoder(nn.Module):
    """A stack of :class:`~transformer_book.layers.EncoderLayer`, with a final LayerNorm when
    ``final_norm`` (default: only for pre-LN, whose last layer's output is otherwise unnormalised).

    Shapes: ``x`` ``(B, n, d_model)``, ``mask`` ``(B, 1, n)`` (padding) -> ``(B, n, d_model)``.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        final_norm: bool | None = None,
    ) -> None:
        super().__init__()
        self.layers, self.norm = _stack(
            EncoderLayer, n_layers, d_model, n_heads, d_ff, dropout, norm_first, activation, eps, final_norm
        )

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        caches: list[KVCache] | None = None,
        causal: bool = False,
        bias: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """``caches``: one :class:`~transformer_book.attention.KVCache` per layer, for a decoder-only
        model that generates one token at a time (chapter 9). ``causal``: every layer hides later
        positions (as :class:`~transformer_book.attention.MultiHeadAttention`'s ``causal``).
        ``bias``: added to every layer's attention scores (e.g. ALiBi's, ``(h, n, n)``).
        ``need_weights``: also return every layer's attention weights, a list of ``(B, h, n, m)``
        (computed by the explicit attention path)."""
        weights = []
        for layer, cache in zip(self.layers, _per_layer(caches, len(self.layers), "Encoder")):
            if need_weights:
                x, w = layer(x, mask, cache=cache, causal=causal, bias=bias, need_weights=True)
                weights.append(w)
            else:
                x = layer(x, mask, cache=cache, causal=causal, bias=bias)
        x = self.norm(x) if self.norm is not None else x
        return (x, weights) if need_weights else x


class Decoder(nn.Module):
    """A stack of :class:`~transformer_book.layers.DecoderLayer`, final LayerNorm as in :class:`Encoder`.

    Shapes: ``y`` ``(B, n, d_model)``, ``memory`` ``(B, m, d_model)``, ``self_mask``
    ``(B, n, n)`` or ``(1, n, n)``, ``memory_mask`` ``(B, 1, m)`` -> ``(B, n, d_model)``. With
    ``need_weights=True`` also a list, one ``(self_weights, cross_weights)`` pair per layer.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        final_norm: bool | None = None,
    ) -> None:
        super().__init__()
        self.layers, self.norm = _stack(
            DecoderLayer, n_layers, d_model, n_heads, d_ff, dropout, norm_first, activation, eps, final_norm
        )

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        caches: list[tuple[KVCache, KVCache]] | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        weights = []
        for layer, cache in zip(self.layers, _per_layer(caches, len(self.layers), "Decoder")):
            if need_weights:
                y, self_w, cross_w = layer(y, memory, self_mask, memory_mask, need_weights=True, cache=cache)
                weights.append((self_w, cross_w))
            else:
                y = layer(y, memory, self_mask, memory_mask, cache=cache)
        y = self.norm(y) if self.norm is not None else y
        return (y, weights) if need_weights else y


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of :class:`Transformer` (defaults: the 2017 paper's base model).

    ``tie_output`` shares the target embedding with the output projection; ``share_embeddings``
    also shares it with the source embedding (needs one vocabulary for both sides).
    ``scale_embeddings`` multiplies embeddings by :math:`\\sqrt{d_{model}}` before adding positions.
    ``position`` names the positions added to both sides' embeddings
    (:func:`~transformer_book.positional.position_encoding`, which :class:`Transformer` asks for
    them): ``"sinusoidal"`` (the paper's, the default) or ``"learned"``. Encodings that bias or
    rotate the attention are refused: the cross-attention relates positions of two different
    sequences, which neither defines.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    max_len: int = 512
    pad_id: int = 0
    norm_first: bool = False
    final_norm: bool | None = None
    activation: str = "relu"
    position: str = "sinusoidal"
    scale_embeddings: bool = True
    tie_output: bool = True
    share_embeddings: bool = False
    eps: float = 1e-5

    def __post_init__(self) -> None:
        checks.positive_int(
            "TransformerConfig",
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_decoder_layers,
            max_len=self.max_len,
        )
        checks.divisible("TransformerConfig", "d_model", self.d_model, "n_heads", self.n_heads)
        checks.probability("TransformerConfig", "dropout", self.dropout)
        checks.integer(
            "TransformerConfig",
            "pad_id",
            self.pad_id,
            minimum=0,  # an id of both vocabularies
            below=min(self.src_vocab_size, self.tgt_vocab_size),
        )
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "TransformerConfig: share_embeddings needs one vocabulary, got "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )


class Transformer(nn.Module):
    """The encoder-decoder Transformer: token ids in, next-token logits out.

    ``forward(src, tgt_in)``: ``src`` ``(B, m)`` and ``tgt_in`` ``(B, n)`` integer ids (``tgt_in``
    = :func:`shift_right` of the targets) -> logits ``(B, n, tgt_vocab_size)``. Padding masks
    are made from ``config.pad_id``; the decoder's self-attention also gets the causal mask.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.src_embedding = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embedding = (
            self.src_embedding
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        )
        # dict.fromkeys: each distinct embedding once, in a fixed order (a set's order would
        # follow memory addresses and make seeded initialisation differ between runs).
        for embedding in dict.fromkeys([self.src_embedding, self.tgt_embedding]):
            nn.init.normal_(embedding.weight, std=c.d_model**-0.5)  # unit variance once scaled
            with torch.no_grad():
                embedding.weight[c.pad_id].zero_()
        sizes = dict(d_model=c.d_model, n_heads=c.n_heads, max_len=c.max_len, ways=("embedding",), where="Transformer")
        self.src_positional = position_encoding(c.position, **sizes)
        self.tgt_positional = position_encoding(c.position, causal=True, **sizes)
        self.dropout = nn.Dropout(c.dropout)  # on the sums of embeddings and positions
        layer_args = dict(d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout)
        options = dict(norm_first=c.norm_first, activation=c.activation, eps=c.eps, final_norm=c.final_norm)
        self.encoder = Encoder(c.n_encoder_layers, **layer_args, **options)
        self.decoder = Decoder(c.n_decoder_layers, **layer_args, **options)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.tgt_embedding.weight

    def _embed(
        self, tokens: torch.Tensor, embedding: nn.Embedding, positional: PositionEncoding, name: str, offset: int = 0
    ) -> torch.Tensor:
        checks.id_tensor("Transformer", name, tokens, "(B, length)")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= embedding.num_embeddings):
            raise ValueError(
                f"Transformer: {name} holds ids in [{int(tokens.min())}, {int(tokens.max())}], "
                f"outside the vocabulary [0, {embedding.num_embeddings})"
            )
        if offset + tokens.shape[1] > self.config.max_len:
            raise ValueError(
                f"Transformer: {name} has length {offset + tokens.shape[1]}, longer than max_len={self.config.max_len}"
            )
        x = embedding(tokens)
        if self.config.scale_embeddings:
            x = x * math.sqrt(self.config.d_model)
        return self.dropout(positional.add(x, offset))

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``src`` ``(B, m)`` -> ``(memory (B, m, d_model), src_mask (B, 1, m))``."""
        src_mask = padding_mask(src, self.config.pad_id)
        memory = self.encoder(self._embed(src, self.src_embedding, self.src_positional, "src"), src_mask)
        return memory, src_mask

    def decode(
        self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None, *, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """``tgt_in`` ``(B, n)`` and the encoder's output -> decoder states ``(B, n, d_model)``
        (and the per-layer attention weights with ``need_weights=True``)."""
        target_padding = padding_mask(tgt_in, self.config.pad_id)  # also checks tgt_in is (B, n) integer
        self_mask = combine_masks(target_padding, causal_mask(tgt_in.shape[1], device=tgt_in.device))
        y = self._embed(tgt_in, self.tgt_embedding, self.tgt_positional, "tgt_in")
        return self.decoder(y, memory, self_mask, src_mask, need_weights=need_weights)

    def decode_step(
        self,
        tgt_new: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        caches: list[tuple[KVCache, KVCache]] | None = None,
    ) -> tuple[torch.Tensor, list[tuple[KVCache, KVCache]]]:
        """Incremental decoding: the decoder states of the new tokens only, reusing the keys and
        values of the earlier ones.

        ``tgt_new`` ``(B, k)`` are the next ``k`` decoder inputs (one token per step while
        generating; the whole prefix on the first call), ``caches`` the value returned by the
        previous call (``None`` at the start). Returns ``(states (B, k, d_model), caches)``;
        ``states`` equal the last ``k`` positions of :meth:`decode` over the whole prefix.
        Generated tokens after a sentence's EOS are never masked out, as they only affect that
        sentence's later, ignored positions.
        """
        if caches is None:
            caches = [(KVCache(), KVCache(static=True)) for _ in self.decoder.layers]
        offset = len(caches[0][0])
        y = self._embed(tgt_new, self.tgt_embedding, self.tgt_positional, "tgt_new", offset)  # checks tgt_new
        k = tgt_new.shape[1]
        # New query i (position offset + i) sees every cached key and the new keys j <= i.
        self_mask = causal_mask(offset + k, device=tgt_new.device)[None, offset:] if k > 1 else None
        return self.decoder(y, memory, self_mask, src_mask, caches=caches), caches

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, src_mask = self.encode(src)
        return self.output(self.decode(tgt_in, memory, src_mask))
