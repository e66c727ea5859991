"""PyTorch twins of the book's modules: ``torch.nn`` modules holding copies of the same weights.

The book checks its own layers against PyTorch's: build the twin, feed both the same input,
compare. PyTorch's modules take masks as ``key_padding_mask`` ``(B, m)`` and ``attn_mask``
``(n, m)``, both boolean with True = excluded, the book's convention.

The twins are also the baselines that later benchmarks time the book's code against.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_book.attention import MultiHeadAttention
from transformer_book.layers import DecoderLayer, EncoderLayer, LayerNorm, PositionwiseFeedForward
from transformer_book.models.transformer import Decoder, Encoder

__all__ = ["torch_multihead_attention", "torch_encoder_layer", "torch_decoder_layer", "torch_transformer"]


def _like(source: nn.Module, twin: nn.Module) -> nn.Module:
    """Move ``twin`` to ``source``'s dtype and device (before copying, so nothing is rounded)."""
    parameter = next(source.parameters())
    return twin.to(device=parameter.device, dtype=parameter.dtype)


@torch.no_grad()
def _copy_attention(source: MultiHeadAttention, target: nn.MultiheadAttention) -> None:
    if source.w_q.bias is None:
        raise ValueError("twins: only MultiHeadAttention with biases has an nn.MultiheadAttention twin here")
    if target._qkv_same_embed_dim:
        target.in_proj_weight.copy_(torch.cat([source.w_q.weight, source.w_k.weight, source.w_v.weight]))
    else:
        target.q_proj_weight.copy_(source.w_q.weight)
        target.k_proj_weight.copy_(source.w_k.weight)
        target.v_proj_weight.copy_(source.w_v.weight)
    target.in_proj_bias.copy_(torch.cat([source.w_q.bias, source.w_k.bias, source.w_v.bias]))
    target.out_proj.weight.copy_(source.w_o.weight)
    target.out_proj.bias.copy_(source.w_o.bias)


@torch.no_grad()
def _copy_norm(source: LayerNorm, target: nn.LayerNorm) -> None:
    target.weight.copy_(source.gamma)
    target.bias.copy_(source.beta)


@torch.no_grad()
def _copy_ffn(source: PositionwiseFeedForward, target: nn.Module) -> None:
    for name in ("linear1", "linear2"):
        getattr(target, name).weight.copy_(getattr(source, name).weight)
        getattr(target, name).bias.copy_(getattr(source, name).bias)


def torch_multihead_attention(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention(batch_first=True)`` with ``mha``'s weights: ``in_proj_weight``
    stacks :math:`[W^Q; W^K; W^V]`, ``out_proj`` is :math:`W^O`."""
    twin = _like(
        mha,
        nn.MultiheadAttention(
            mha.d_model, mha.n_heads, dropout=mha.dropout, batch_first=True, kdim=mha.kdim, vdim=mha.vdim
        ),
    )
    _copy_attention(mha, twin)
    return twin.train(mha.training)


def _layer_options(layer: EncoderLayer | DecoderLayer) -> dict:
    attn = layer.self_attn
    return dict(
        d_model=attn.d_model,
        nhead=attn.n_heads,
        dim_feedforward=layer.ffn.linear1.out_features,
        dropout=attn.dropout,
        activation=layer.ffn.activation,
        layer_norm_eps=layer.norm1.eps,
        batch_first=True,
        norm_first=layer.norm_first,
    )


def torch_encoder_layer(layer: EncoderLayer) -> nn.TransformerEncoderLayer:
    """``nn.TransformerEncoderLayer`` with ``layer``'s weights and norm placement."""
    twin = _like(layer, nn.TransformerEncoderLayer(**_layer_options(layer)))
    _copy_attention(layer.self_attn, twin.self_attn)
    _copy_ffn(layer.ffn, twin)
    _copy_norm(layer.norm1, twin.norm1)
    _copy_norm(layer.norm2, twin.norm2)
    return twin.train(layer.training)


def torch_decoder_layer(layer: DecoderLayer) -> nn.TransformerDecoderLayer:
    """``nn.TransformerDecoderLayer`` with ``layer``'s weights (``cross_attn`` -> ``multihead_attn``)."""
    twin = _like(layer, nn.TransformerDecoderLayer(**_layer_options(layer)))
    _copy_attention(layer.self_attn, twin.self_attn)
    _copy_attention(layer.cross_attn, twin.multihead_attn)
    _copy_ffn(layer.ffn, twin)
    for name in ("norm1", "norm2", "norm3"):
        _copy_norm(getattr(layer, name), getattr(twin, name))
    return twin.train(layer.training)


def torch_transformer(encoder: Encoder, decoder: Decoder) -> nn.Transformer:
    """``nn.Transformer(batch_first=True)`` with the weights of an encoder and a decoder stack.

    ``nn.Transformer`` always ends both stacks with a LayerNorm, so both must have been built
    with a final norm (``final_norm=True``, the default for pre-LN).

    Raises:
        ValueError: if a stack has no final LayerNorm.
    """
    if encoder.norm is None or decoder.norm is None:
        raise ValueError(
            "torch_transformer: nn.Transformer ends the encoder and the decoder with a LayerNorm; "
            "build both stacks with final_norm=True"
        )
    # Explicit stacks: nn.Transformer's own would take the nested-tensor path (and warn) for
    # some settings; the twin must compute the plain equations.
    encoder_twin = nn.TransformerEncoder(
        torch_encoder_layer(encoder.layers[0]),
        len(encoder.layers),
        norm=nn.LayerNorm(encoder.norm.d_model, eps=encoder.norm.eps),
        enable_nested_tensor=False,
    )
    decoder_twin = nn.TransformerDecoder(
        torch_decoder_layer(decoder.layers[0]),
        len(decoder.layers),
        norm=nn.LayerNorm(decoder.norm.d_model, eps=decoder.norm.eps),
    )
    options = _layer_options(encoder.layers[0])
    twin = _like(encoder, nn.Transformer(custom_encoder=encoder_twin, custom_decoder=decoder_twin, **options))
    # nn.Transformer re-initialises every parameter it holds, so copy the weights afterwards.
    for ours, theirs in zip(encoder.layers, twin.encoder.layers):
        theirs.load_state_dict(torch_encoder_layer(ours).state_dict())
    for ours, theirs in zip(decoder.layers, twin.decoder.layers):
        theirs.load_state_dict(torch_decoder_layer(ours).state_dict())
    _copy_norm(encoder.norm, twin.encoder.norm)
    _copy_norm(decoder.norm, twin.decoder.norm)
    return twin.train(encoder.training)
