"""Incremental decoding with a key/value cache gives the logits of recomputing the whole prefix,
for multi-head attention, the encoder-decoder Transformer, the recurrent baselines and GPT."""

import pytest
import torch

from transformer_book.attention import KVCache, MultiHeadAttention
from transformer_book.masks import causal_mask
from transformer_book.models import GPT, GPTConfig, RNNSeq2Seq, RNNSeq2SeqConfig, Transformer, TransformerConfig
from transformer_book.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding

pytestmark = pytest.mark.usefixtures("one_thread")

V = 13


def test_cached_self_attention_equals_causal_attention_over_the_whole_sequence():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).double().eval()
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    full, _ = mha(x, x, x, causal_mask(6)[None])
    cache, steps = KVCache(), []
    for t in range(6):
        out, _ = mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
        steps.append(out)
    assert len(cache) == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
    # the first call may hold several positions, with the causal block as its mask
    cache = KVCache()
    first, _ = mha(x[:, :4], x[:, :4], x[:, :4], causal_mask(4)[None], cache=cache)
    rest, _ = mha(x[:, 4:], x[:, 4:], x[:, 4:], causal_mask(6)[None, 4:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, rtol=0, atol=1e-12)


def test_static_cache_computes_the_memory_once():
    torch.manual_seed(1)
    mha = MultiHeadAttention(8, 2).double().eval()
    q, memory = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 5, 8, dtype=torch.float64)
    expected, _ = mha(q, memory, memory)
    cache = KVCache(static=True)
    mha(q[:, :1], memory, memory, cache=cache)
    stored = cache.k
    garbage = torch.full_like(memory, 1e6)  # ignored once the cache is filled
    out, _ = mha(q, garbage, garbage, cache=cache)
    assert cache.k is stored
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_kv_cache_select_and_errors():
    k = torch.arange(24.0).view(3, 2, 2, 2)
    cache = KVCache()
    cache.update(k, -k)
    picked = cache.select(torch.tensor([2, 0, 0]))
    assert torch.equal(picked.k, k[[2, 0, 0]]) and torch.equal(picked.v, -k[[2, 0, 0]]) and len(picked) == 2
    with pytest.raises(ValueError, match="does not continue the cached"):
        cache.update(torch.zeros(2, 2, 1, 2), torch.zeros(2, 2, 1, 2))
    assert len(KVCache()) == 0 and KVCache().select(torch.tensor([0])).k is None


@pytest.mark.parametrize("module", [SinusoidalPositionalEncoding(8, 10), LearnedPositionalEmbedding(10, 8)])
def test_positional_offset_adds_the_later_positions(module):
    module.eval()
    x = torch.randn(2, 10, 8)
    whole = module(x)
    torch.testing.assert_close(module(x[:, 6:9], offset=6), whole[:, 6:9])
    with pytest.raises(ValueError, match=r"positions 8\.\.10 exceed max_len=10"):
        module(x[:, :3], offset=8)
    with pytest.raises(ValueError, match="offset must be a non-negative int"):
        module(x[:, :3], offset=-1)


def _transformer(norm_first=False):
    torch.manual_seed(2)
    config = TransformerConfig(
        V,
        V,
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_encoder_layers=2,
        n_decoder_layers=2,
        max_len=12,
        norm_first=norm_first,
        dropout=0.1,
    )
    return Transformer(config).double().eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decode_step_equals_decode_over_the_prefix(norm_first):
    model = _transformer(norm_first)
    src = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0]])
    tgt = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 10, 11, 12, 4, 5]])
    memory, src_mask = model.encode(src)
    full = model.decode(tgt, memory, src_mask)
    states, caches = model.decode_step(tgt[:, :2], memory, src_mask)  # a prompt of two tokens
    pieces = [states]
    for t in range(2, tgt.shape[1]):
        states, caches = model.decode_step(tgt[:, t : t + 1], memory, src_mask, caches)
        pieces.append(states)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="longer than max_len=12"):
        model.decode_step(torch.ones(2, 7, dtype=torch.long), memory, src_mask, caches)


@pytest.mark.parametrize("attention", [None, "luong", "bahdanau"])
def test_rnn_decode_step_equals_decode_over_the_prefix(attention):
    torch.manual_seed(3)
    model = (
        RNNSeq2Seq(RNNSeq2SeqConfig(V, V, d_embedding=6, d_hidden=8, n_layers=2, attention=attention)).double().eval()
    )
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0]])
    tgt = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 11, 12]])
    memory, src_mask = model.encode(src)
    full = model.decode(tgt, memory, src_mask)
    out, state = model.decode_step(tgt[:, :1], memory, src_mask)
    pieces = [out]
    for t in range(1, tgt.shape[1]):
        out, state = model.decode_step(tgt[:, t : t + 1], memory, src_mask, state)
        pieces.append(out)
    assert state.shape == (2, 2, 8)  # batch first, for beam search
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="state must have shape"):
        model.decode_step(tgt[:, :1], memory, src_mask, state[:, :1])


def test_gpt_decode_step_equals_forward():
    torch.manual_seed(4)
    model = GPT(GPTConfig(V, context=10, d_model=16, n_heads=2, n_layers=2, dropout=0.1)).double().eval()
    tokens = torch.randint(0, V, (3, 9))
    full = model(tokens)
    logits, caches = model.decode_step(tokens[:, :3])
    pieces = [logits]
    for t in range(3, 9):
        logits, caches = model.decode_step(tokens[:, t : t + 1], caches)
        pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-10)
    model.decode_step(tokens[:, :1], caches)  # position 9 is the last one there is
    with pytest.raises(ValueError, match="exceed the context of 10"):
        model.decode_step(tokens[:, :1], caches)
