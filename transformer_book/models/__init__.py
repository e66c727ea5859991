"""Models built from the layers: the encoder-decoder Transformer (chapter 6) and the recurrent
encoder-decoder baselines (chapter 7)."""

from transformer_book.models.rnn import BahdanauAttention, LuongAttention, RNNSeq2Seq, RNNSeq2SeqConfig
from transformer_book.models.transformer import Decoder, Encoder, Transformer, TransformerConfig, shift_right

__all__ = [
    "Encoder", "Decoder", "Transformer", "TransformerConfig", "shift_right",
    "BahdanauAttention", "LuongAttention", "RNNSeq2Seq", "RNNSeq2SeqConfig",
]
