"""Tests of transformer_book.grouped_attention: grouped-query attention (and its cases multi-head,
g = h, and multi-query, g = 1) against multi-head attention, an explicit loop over heads with
rotary positions written out here, and the key/value cache it shrinks."""

import math

import pytest
import torch

from transformer_book import grouped_attention
from transformer_book.attention import KVCache, MultiHeadAttention
from transformer_book.grouped_attention import GroupedQueryAttention, kv_cache_bytes, repeat_kv_heads
from transformer_book.masks import causal_mask
from transformer_book.positional import RotaryEmbedding

pytestmark = pytest.mark.usefixtures("one_thread")

D, H = 16, 4  # d_model, n_heads: d_k = 4


def gqa(n_kv_heads, *, rotary=True, seed=0, **kwargs):
    torch.manual_seed(seed)
    rot = RotaryEmbedding(D // H) if rotary else None
    return GroupedQueryAttention(D, H, n_kv_heads, rotary=rot, **kwargs).double().eval()


def rotate(x, positions, base=10000.0):
    """RoPE by hand: feature pairs (2i, 2i+1) as complex numbers times exp(i * pos * base^(-2i/d))."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(
        torch.ones(len(positions), d // 2, dtype=torch.float64), positions.to(torch.float64)[:, None] * theta
    )
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).reshape(x.shape)


def loop_reference(module, x, *, rotary, mask=None):
    """Head by head: query head i uses key/value head i // (h / g); causal softmax written out."""
    n, d_k, group = x.shape[1], module.d_k, module.n_heads // module.n_kv_heads
    positions = torch.arange(n)
    heads, all_weights = [], []
    for i in range(module.n_heads):
        j = i // group
        q = x @ module.w_q.weight[i * d_k : (i + 1) * d_k].T  # (B, n, d_k)
        k = x @ module.w_k.weight[j * d_k : (j + 1) * d_k].T
        v = x @ module.w_v.weight[j * d_k : (j + 1) * d_k].T
        if rotary:
            q, k = rotate(q, positions), rotate(k, positions)
        scores = q @ k.transpose(1, 2) / math.sqrt(d_k)  # (B, n, n)
        excluded = torch.ones(n, n, dtype=torch.bool).triu(1)
        if mask is not None:
            excluded = excluded | mask
        weights = torch.softmax(scores.masked_fill(excluded, float("-inf")), dim=-1)
        heads.append(weights @ v)
        all_weights.append(weights)
    return torch.cat(heads, dim=-1) @ module.w_o.weight.T, torch.stack(all_weights, dim=1)


def test_with_as_many_kv_heads_as_heads_it_is_multi_head_attention():
    torch.manual_seed(1)
    mha = MultiHeadAttention(D, H, bias=True).double().eval()
    module = gqa(H, rotary=False, bias=True)
    module.load_state_dict(mha.state_dict())  # the same parameter names and shapes
    x = torch.randn(2, 7, D, dtype=torch.float64)
    expected, expected_weights = mha(x, x, x, causal_mask(7)[None])
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)
    out, weights = module(x, need_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)
    # a padding mask (B, 1, m) as well, and no causal mask
    pad = torch.tensor([[False] * 7, [False] * 5 + [True] * 2])[:, None]
    expected, _ = mha(x, x, x, pad)
    torch.testing.assert_close(module(x, causal=False, mask=pad), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("rotary", [True, False])
def test_equals_a_loop_over_heads_that_shares_key_value_heads(n_kv_heads, rotary):
    module = gqa(n_kv_heads, rotary=rotary)
    assert module.w_k.weight.shape == module.w_v.weight.shape == (n_kv_heads * D // H, D)
    x = torch.randn(3, 9, D, dtype=torch.float64)
    expected, expected_weights = loop_reference(module, x, rotary=rotary)
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)  # fused path
    out, weights = module(x, need_weights=True)  # explicit path
    assert weights.shape == (3, H, 9, 9)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)


def test_a_user_mask_combines_with_the_causal_one():
    module = gqa(2)
    x = torch.randn(2, 6, D, dtype=torch.float64)
    mask = torch.zeros(2, 6, 6, dtype=torch.bool)
    mask[1, :, 0] = True  # sequence 1 may not look at its first token
    mask[1, 0, :] = True  # ... so its first query has no key left: a zero row, not NaN
    expected, _ = loop_reference(module, x, rotary=True, mask=mask)
    for need_weights in (False, True):
        out = module(x, mask=mask, need_weights=need_weights)
        out = out[0] if need_weights else out
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[0], expected[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(out[1, 1:], expected[1, 1:], rtol=0, atol=1e-12)
        torch.testing.assert_close(out[1, 0], torch.zeros(D, dtype=torch.float64), rtol=0, atol=0)


def test_the_fused_path_without_enable_gqa_repeats_the_heads(monkeypatch):
    module = gqa(1)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    expected = module(x)
    monkeypatch.setattr(grouped_attention, "_HAS_GQA", False)  # as on PyTorch before 2.5
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)


def test_causal_the_future_does_not_change_the_past():
    module = gqa(2)
    x = torch.randn(2, 8, D, dtype=torch.float64)
    changed = x.clone()
    changed[:, 5:] = torch.randn(2, 3, D, dtype=torch.float64)
    for need_weights in (False, True):
        a, b = (module(t, need_weights=need_weights) for t in (x, changed))
        a, b = (a[0], b[0]) if need_weights else (a, b)
        torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=1e-12)
        assert not torch.allclose(a[:, 5], b[:, 5])


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_decoding_with_the_cache_equals_the_full_forward(n_kv_heads):
    module = gqa(n_kv_heads)
    x = torch.randn(2, 9, D, dtype=torch.float64)
    full = module(x)
    cache = KVCache()
    steps = [module(x[:, :4], cache=cache)]  # the prompt, causal within itself
    for t in range(4, 9):  # then one position at a time, at positions 4 .. 8
        steps.append(module(x[:, t : t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)
    # the cache holds the g key/value heads (rotated), not h
    assert cache.k.shape == cache.v.shape == (2, n_kv_heads, 9, D // H)
    stored = cache.k.numel() * cache.k.element_size() + cache.v.numel() * cache.v.element_size()
    assert kv_cache_bytes(1, n_kv_heads, D // H, 9, batch=2, dtype=torch.float64) == stored
    # a chunk of several new positions after the prompt sees the cache and itself causally
    cache = KVCache()
    first = module(x[:, :3], cache=cache)
    rest = module(x[:, 3:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, rtol=0, atol=1e-12)


def test_kv_cache_bytes_by_hand():
    # LLaMA-2 70B's shape: 80 layers, 8 key/value heads of 128 features, 4096 positions, float16
    assert kv_cache_bytes(80, 8, 128, 4096, dtype=torch.float16) == 2 * 80 * 8 * 4096 * 128 * 2 == 1_342_177_280
    assert kv_cache_bytes(4, 4, 32, 256, batch=3) == 2 * 4 * 3 * 4 * 256 * 32 * 4
    assert kv_cache_bytes(4, 1, 32, 256) * 4 == kv_cache_bytes(4, 4, 32, 256)  # MQA: h times smaller
    assert kv_cache_bytes(2, 2, 8, 0) == 0
    with pytest.raises(ValueError, match="kv_cache_bytes: n_kv_heads must be a positive int"):
        kv_cache_bytes(2, 0, 8, 10)
    with pytest.raises(ValueError, match="length must be a non-negative int"):
        kv_cache_bytes(2, 2, 8, -1)
    with pytest.raises(ValueError, match="dtype must be a torch.dtype"):
        kv_cache_bytes(2, 2, 8, 10, dtype="float32")


def test_repeat_kv_heads_gives_query_head_i_the_head_i_over_group():
    kv = torch.randn(2, 3, 5, 4)
    repeated = repeat_kv_heads(kv, 2)
    assert repeated.shape == (2, 6, 5, 4)
    for i in range(6):
        assert torch.equal(repeated[:, i], kv[:, i // 2])
    with pytest.raises(ValueError, match="repeat_kv_heads: kv must have shape"):
        repeat_kv_heads(torch.zeros(3, 5, 4), 2)
    with pytest.raises(ValueError, match="group must be a positive int"):
        repeat_kv_heads(kv, 0)


def test_dropout_acts_in_training_only():
    module = gqa(2, dropout=0.5)
    x = torch.randn(2, 6, D, dtype=torch.float64)
    expected, _ = loop_reference(module, x, rotary=True)
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-12)  # eval: no dropout
    module.train()
    torch.manual_seed(0)
    assert not torch.allclose(module(x), expected)
    torch.manual_seed(0)
    out, weights = module(x, need_weights=True)
    assert not torch.allclose(out, expected)
    torch.testing.assert_close(weights, loop_reference(module, x, rotary=True)[1], rtol=0, atol=1e-12)


def test_bad_construction_and_input_raise_clear_errors():
    with pytest.raises(ValueError, match="n_heads=4 is not divisible by n_kv_heads=3"):
        GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="d_model=18 is not divisible by n_heads=4"):
        GroupedQueryAttention(18, 4, 2)
    with pytest.raises(ValueError, match="n_kv_heads must be a positive int"):
        GroupedQueryAttention(16, 4, 0)
    with pytest.raises(ValueError, match="d_head = d_k = 4"):
        GroupedQueryAttention(16, 4, 2, rotary=RotaryEmbedding(8))
    with pytest.raises(ValueError, match="d_head must be an even int"):  # odd d_k: no rotary embedding for it
        GroupedQueryAttention(12, 4, 2, rotary=RotaryEmbedding(3))
    with pytest.raises(ValueError, match="dropout"):
        GroupedQueryAttention(16, 4, 2, dropout=1.0)
    module = gqa(2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, n, 16\)"):
        module(torch.zeros(2, 5, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="dtype torch.float32 but the weights are torch.float64"):
        module(torch.zeros(2, 5, D))
    x = torch.zeros(2, 5, D, dtype=torch.float64)
    with pytest.raises(ValueError, match="mask must be a boolean tensor"):
        module(x, mask=torch.zeros(2, 5, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 5, 4\) does not fit"):
        module(x, mask=torch.zeros(2, 5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="growing KVCache"):
        module(x, cache=KVCache(static=True))
    cache = KVCache()
    module(x, cache=cache)
    with pytest.raises(ValueError, match="does not continue the cached"):
        module(torch.zeros(3, 1, D, dtype=torch.float64), cache=cache)
