"""Models built from the layers: the encoder-decoder Transformer (chapter 6), the recurrent
encoder-decoder baselines (chapter 7), a decoder-only language model (chapter 9), ELMo's
bidirectional LSTM language model (chapter 12), BERT (chapter 13) and the modern decoder of
chapter 18 (RMSNorm, SwiGLU, rotary positions, grouped-query attention)."""

from transformer_book.models.bert import BERT, BERTConfig
from transformer_book.models.elmo import BiLM, BiLMConfig, LSTMCell, LSTMLayer, ScalarMix
from transformer_book.models.gpt import GPT, GPTConfig
from transformer_book.models.modern import ModernGPT, ModernGPTConfig
from transformer_book.models.rnn import BahdanauAttention, LuongAttention, RNNSeq2Seq, RNNSeq2SeqConfig
from transformer_book.models.transformer import Decoder, Encoder, Transformer, TransformerConfig, shift_right

__all__ = [
    "Encoder",
    "Decoder",
    "Transformer",
    "TransformerConfig",
    "shift_right",
    "BahdanauAttention",
    "LuongAttention",
    "RNNSeq2Seq",
    "RNNSeq2SeqConfig",
    "GPT",
    "GPTConfig",
    "LSTMCell",
    "LSTMLayer",
    "ScalarMix",
    "BiLM",
    "BiLMConfig",
    "BERT",
    "BERTConfig",
    "ModernGPT",
    "ModernGPTConfig",
]
