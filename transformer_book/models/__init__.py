"""Models built from the layers: the encoder-decoder Transformer (chapter 6)."""

from transformer_book.models.transformer import Decoder, Encoder, Transformer, TransformerConfig, shift_right

__all__ = ["Encoder", "Decoder", "Transformer", "TransformerConfig", "shift_right"]
