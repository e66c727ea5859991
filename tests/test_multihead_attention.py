"""Tests of multi-head attention (chapter 3): ``transformer_book.attention.MultiHeadAttention``.

References are PyTorch's ``nn.MultiheadAttention`` (built by hand here and via
``transformer_book.twins``), a per-head loop written in this file, and symmetry properties.
Comparisons run in float64; nothing expected here is produced by the code under test.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from transformer_book import attention, grouped_attention, twins
from transformer_book.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_book.masks import causal_mask, combine_masks

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)


pytestmark = pytest.mark.usefixtures("one_thread")


def _randomise(module: nn.Module, seed: int) -> None:
    """Non-trivial weights *and* biases (the default init zeroes the biases, hiding bias bugs)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            scale = 0.5 if p.dim() == 1 else p.shape[-1] ** -0.5
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def _mha(d_model=16, n_heads=4, seed=0, **kwargs) -> MultiHeadAttention:
    """A float64 module whose weights are float32 numbers.

    The weights are drawn in float32 and then widened, because ``twins`` currently rounds a
    float64 module's weights to float32 (see ``test_twin_keeps_float64_weights_exactly``).
    """
    mha = MultiHeadAttention(d_model, n_heads, **kwargs)
    _randomise(mha, seed)
    return mha.to(F64)


def _inputs(*shapes, seed=1, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=g, dtype=F64).requires_grad_(requires_grad) for s in shapes)


# (B, m) key padding: batch 0 has 2 PAD keys, batch 1 has 1; no query loses every key.
KEY_PADDING = torch.tensor([[False, False, False, True, True], [False, False, False, False, True]])


# --------------------------------------------------------------------------------------
# Agreement with nn.MultiheadAttention
# --------------------------------------------------------------------------------------


def test_twin_built_by_hand_matches_self_attention():
    """Checks the twin recipe itself: in_proj_weight = [W_q; W_k; W_v], out_proj = W_o."""
    d, h = 16, 4
    mha = MultiHeadAttention(d, h).to(F64)
    _randomise(mha, seed=3)  # full float64 weights: no float32 twin in between
    ref = nn.MultiheadAttention(d, h, batch_first=True, dtype=F64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight], dim=0))
        ref.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        ref.out_proj.weight.copy_(mha.w_o.weight)
        ref.out_proj.bias.copy_(mha.w_o.bias)
    (x,) = _inputs((2, 5, d))
    mask = KEY_PADDING[:, None, :]
    out, weights = mha(x, x, x, mask)
    ref_out, ref_weights = ref(x, x, x, key_padding_mask=KEY_PADDING, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    # and the package's twin builder holds the same numbers as this hand-made copy
    twin = twins.torch_multihead_attention(_mha(d, h, seed=3))
    built = MultiHeadAttention(d, h)
    _randomise(built, seed=3)
    with torch.no_grad():
        expected_in = torch.cat([built.w_q.weight, built.w_k.weight, built.w_v.weight]).to(F64)
    torch.testing.assert_close(twin.in_proj_weight, expected_in, rtol=0, atol=0)
    torch.testing.assert_close(twin.out_proj.weight, built.w_o.weight.to(F64), rtol=0, atol=0)


def test_twin_built_by_hand_matches_cross_attention_with_kdim_vdim():
    d, h, kdim, vdim = 12, 3, 7, 5
    mha = MultiHeadAttention(d, h, kdim=kdim, vdim=vdim).to(F64)
    _randomise(mha, seed=4)
    ref = nn.MultiheadAttention(d, h, batch_first=True, kdim=kdim, vdim=vdim, dtype=F64)
    with torch.no_grad():
        ref.q_proj_weight.copy_(mha.w_q.weight)
        ref.k_proj_weight.copy_(mha.w_k.weight)
        ref.v_proj_weight.copy_(mha.w_v.weight)
        ref.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
        ref.out_proj.weight.copy_(mha.w_o.weight)
        ref.out_proj.bias.copy_(mha.w_o.bias)
    q, k, v = _inputs((2, 3, d), (2, 5, kdim), (2, 5, vdim))
    out, weights = mha(q, k, v, KEY_PADDING[:, None, :])
    ref_out, ref_weights = ref(q, k, v, key_padding_mask=KEY_PADDING, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    assert out.shape == (2, 3, d) and weights.shape == (2, h, 3, 5)


def _masks_for(case: str, n: int, m: int):
    """(book mask, nn.MultiheadAttention kwargs) for a named case."""
    if case == "none":
        return None, {}
    if case == "padding":
        return KEY_PADDING[:, None, :], dict(key_padding_mask=KEY_PADDING)
    if case == "causal":
        return causal_mask(n)[None], dict(attn_mask=causal_mask(n))
    if case == "both":
        return combine_masks(KEY_PADDING[:, None, :], causal_mask(n)), dict(
            key_padding_mask=KEY_PADDING, attn_mask=causal_mask(n)
        )
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["none", "padding", "causal", "both"])
def test_matches_twin_self_attention(case):
    mha = _mha(16, 4, seed=5)
    twin = twins.torch_multihead_attention(mha)
    (x,) = _inputs((2, 5, 16), seed=6)
    mask, kwargs = _masks_for(case, 5, 5)
    out, weights = mha(x, x, x, mask)
    ref_out, ref_weights = twin(x, x, x, average_attn_weights=False, **kwargs)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    # averaged weights too
    _, ref_mean = twin(x, x, x, **kwargs)
    torch.testing.assert_close(weights.mean(dim=1), ref_mean, **TOL)


@pytest.mark.parametrize("case", ["none", "padding"])
def test_matches_twin_cross_attention(case):
    mha = _mha(16, 2, seed=7)
    twin = twins.torch_multihead_attention(mha)
    q, kv = _inputs((2, 3, 16), (2, 5, 16), seed=8)  # n = 3 queries, m = 5 keys
    mask, kwargs = _masks_for(case, 3, 5)
    out, weights = mha(q, kv, kv, mask)
    ref_out, ref_weights = twin(q, kv, kv, average_attn_weights=False, **kwargs)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    assert weights.shape == (2, 2, 3, 5)


def test_matches_twin_with_kdim_vdim_and_distinct_key_value():
    mha = _mha(12, 3, seed=9, kdim=8, vdim=20)
    twin = twins.torch_multihead_attention(mha)
    q, k, v = _inputs((2, 4, 12), (2, 5, 8), (2, 5, 20), seed=10)
    out, weights = mha(q, k, v, KEY_PADDING[:, None, :])
    ref_out, ref_weights = twin(q, k, v, key_padding_mask=KEY_PADDING, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)


def test_gradients_match_twin():
    mha = _mha(16, 4, seed=11)
    twin = twins.torch_multihead_attention(mha)
    q, kv = _inputs((2, 4, 16), (2, 5, 16), seed=12, requires_grad=True)
    mask, kwargs = _masks_for("padding", 4, 5)
    upstream = _inputs((2, 4, 16), seed=13)[0]
    ours = torch.autograd.grad((mha(q, kv, kv, mask)[0] * upstream).sum(), [q, kv, mha.w_q.weight, mha.w_o.bias])
    theirs = torch.autograd.grad(
        (twin(q, kv, kv, **kwargs)[0] * upstream).sum(), [q, kv, twin.in_proj_weight, twin.out_proj.bias]
    )
    torch.testing.assert_close(ours[0], theirs[0], **TOL)
    torch.testing.assert_close(ours[1], theirs[1], **TOL)
    torch.testing.assert_close(ours[2], theirs[2][:16], **TOL)  # W_q's rows of in_proj_weight
    torch.testing.assert_close(ours[3], theirs[3], **TOL)


def test_twin_keeps_float64_weights_exactly():
    mha = MultiHeadAttention(16, 4).to(F64)
    _randomise(mha, seed=14)  # genuine float64 weights, not float32 numbers
    twin = twins.torch_multihead_attention(mha)
    torch.testing.assert_close(twin.in_proj_weight[:16], mha.w_q.weight, rtol=0, atol=0)
    (x,) = _inputs((2, 5, 16), seed=15)
    torch.testing.assert_close(mha(x, x, x)[0], twin(x, x, x)[0], **TOL)


# --------------------------------------------------------------------------------------
# The heads, one at a time
# --------------------------------------------------------------------------------------


def test_equals_loop_over_heads():
    d, h = 12, 3
    d_k = d // h
    mha = _mha(d, h, seed=16)
    q_in, kv_in = _inputs((2, 4, d), (2, 5, d), seed=17)
    mask = KEY_PADDING[:, None, :]  # (B, 1, m)
    heads, head_weights = [], []
    for i in range(h):
        rows = slice(i * d_k, (i + 1) * d_k)
        q = q_in @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
        k = kv_in @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
        v = kv_in @ mha.w_v.weight[rows].T + mha.w_v.bias[rows]
        out_i, w_i = scaled_dot_product_attention(q, k, v, mask)
        heads.append(out_i)
        head_weights.append(w_i)
    expected = torch.cat(heads, dim=-1) @ mha.w_o.weight.T + mha.w_o.bias
    out, weights = mha(q_in, kv_in, kv_in, mask)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(weights, torch.stack(head_weights, dim=1), **TOL)
    # the heads really differ (a module that used one head's weights everywhere would fail above)
    assert not torch.allclose(head_weights[0], head_weights[1])


def test_mask_shapes_all_accepted_and_equivalent():
    mha = _mha(8, 2, seed=18)
    (x,) = _inputs((2, 5, 8), seed=19)
    pad = KEY_PADDING[:, None, :]  # (B, 1, m)
    full = pad.expand(2, 5, 5)  # (B, n, m)
    per_head = full[:, None].expand(2, 2, 5, 5)  # (B, h, n, m)
    reference = mha(x, x, x, pad)[0]
    for mask in (full, per_head):
        torch.testing.assert_close(mha(x, x, x, mask)[0], reference, **TOL)
    causal = causal_mask(5)[None]  # (1, n, m): shared by the batch
    torch.testing.assert_close(mha(x, x, x, causal)[0], mha(x, x, x, causal.expand(2, 5, 5))[0], **TOL)
    torch.testing.assert_close(mha(x, x, x, causal[None])[0], mha(x, x, x, causal)[0], **TOL)  # (1, 1, n, m)


# --------------------------------------------------------------------------------------
# Fast path (need_weights=False, fused kernel) == explicit path
# --------------------------------------------------------------------------------------


def _grads_both_paths(mha, q, kv, mask=None, bias=None):
    params = list(mha.parameters())
    upstream = torch.linspace(-1, 1, q.numel(), dtype=F64).reshape(q.shape)
    results = []
    for need_weights in (True, False):
        out, weights = mha(q, kv, kv, mask, need_weights=need_weights, bias=bias)
        assert (weights is None) == (not need_weights)
        grads = torch.autograd.grad((out * upstream).sum(), [q, kv, *params])
        results.append((out, grads))
    return results


@pytest.mark.parametrize("case", ["none", "padding", "causal", "both", "bias", "bias+causal"])
def test_fast_path_equals_explicit_path(case):
    mha = _mha(16, 4, seed=20)
    q, kv = _inputs((2, 5, 16), (2, 5, 16), seed=21, requires_grad=True)
    mask, _ = _masks_for(case.replace("bias+", "").replace("bias", "none"), 5, 5)
    bias = None
    if "bias" in case:
        bias = torch.randn(4, 5, 5, generator=torch.Generator().manual_seed(22), dtype=F64)  # (h, n, m)
    (out_e, grads_e), (out_f, grads_f) = _grads_both_paths(mha, q, kv, mask, bias)
    torch.testing.assert_close(out_f, out_e, **TOL)
    for g_f, g_e in zip(grads_f, grads_e):
        torch.testing.assert_close(g_f, g_e, **TOL)
    if bias is not None:  # the bias does change the result
        assert not torch.allclose(out_e, mha(q, kv, kv, mask)[0])


@pytest.mark.parametrize("with_bias", [False, True])
def test_fully_masked_rows_give_output_bias_and_finite_gradients(with_bias):
    mha = _mha(16, 4, seed=23)
    q, kv = _inputs((2, 4, 16), (2, 5, 16), seed=24, requires_grad=True)
    mask = torch.zeros(2, 4, 5, dtype=torch.bool)
    mask[0, 1] = True  # query 1 of batch 0 sees no key
    mask[1, 3] = True
    mask[1, 0, 2:] = True  # an ordinary partly masked row as well
    bias = torch.randn(4, 4, 5, generator=torch.Generator().manual_seed(25), dtype=F64) if with_bias else None
    (out_e, grads_e), (out_f, grads_f) = _grads_both_paths(mha, q, kv, mask, bias)
    for out in (out_e, out_f):
        assert torch.isfinite(out).all()
        # zero head outputs, so the output is W_o's bias alone
        torch.testing.assert_close(out[0, 1], mha.w_o.bias, rtol=0, atol=1e-15)
        torch.testing.assert_close(out[1, 3], mha.w_o.bias, rtol=0, atol=1e-15)
    torch.testing.assert_close(out_f, out_e, **TOL)
    for g_f, g_e in zip(grads_f, grads_e):
        assert torch.isfinite(g_f).all() and torch.isfinite(g_e).all()
        torch.testing.assert_close(g_f, g_e, **TOL)
    # the dead query receives no gradient through attention (its output does not depend on it)
    assert torch.all(grads_e[0][0, 1] == 0) and torch.all(grads_f[0][0, 1] == 0)
    _, weights = mha(q, kv, kv, mask, bias=bias)
    assert torch.all(weights[0, :, 1] == 0) and torch.all(weights[1, :, 3] == 0)


# --------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False])
def test_dropout_inactive_in_eval_mode(need_weights):
    with_dropout = _mha(16, 4, seed=26, dropout=0.5).eval()
    without = _mha(16, 4, seed=26, dropout=0.0).eval()
    (x,) = _inputs((2, 5, 16), seed=27)
    a = with_dropout(x, x, x, need_weights=need_weights)[0]
    torch.testing.assert_close(a, without(x, x, x, need_weights=need_weights)[0], rtol=0, atol=0)
    torch.testing.assert_close(a, with_dropout(x, x, x, need_weights=need_weights)[0], rtol=0, atol=0)


@pytest.mark.parametrize("need_weights", [True, False])
def test_dropout_in_train_mode_random_but_seeded(need_weights):
    mha = _mha(16, 4, seed=28, dropout=0.5).train()
    (x,) = _inputs((2, 5, 16), seed=29)
    torch.manual_seed(123)
    first = mha(x, x, x, need_weights=need_weights)[0]
    second = mha(x, x, x, need_weights=need_weights)[0]
    torch.manual_seed(123)
    again = mha(x, x, x, need_weights=need_weights)[0]
    assert not torch.allclose(first, second)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    clean = mha.eval()(x, x, x, need_weights=need_weights)[0]
    assert not torch.allclose(first, clean)


def test_dropout_returns_clean_weights():
    mha = _mha(16, 4, seed=30, dropout=0.5).train()
    (x,) = _inputs((2, 5, 16), seed=31)
    torch.manual_seed(0)
    _, weights = mha(x, x, x, causal_mask(5)[None])
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5, dtype=F64), rtol=0, atol=1e-12)
    _, clean = mha.eval()(x, x, x, causal_mask(5)[None])
    torch.testing.assert_close(weights, clean, **TOL)


# --------------------------------------------------------------------------------------
# Parameters, construction errors
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model,n_heads", [(16, 4), (512, 8), (6, 1)])
def test_parameter_count(d_model, n_heads):
    mha = MultiHeadAttention(d_model, n_heads)
    assert sum(p.numel() for p in mha.parameters()) == 4 * d_model**2 + 4 * d_model
    no_bias = MultiHeadAttention(d_model, n_heads, bias=False)
    assert sum(p.numel() for p in no_bias.parameters()) == 4 * d_model**2
    assert mha.d_k == d_model // n_heads
    for name in ("w_q", "w_k", "w_v", "w_o"):
        assert isinstance(getattr(mha, name), nn.Linear)


def test_error_d_model_not_divisible():
    with pytest.raises(ValueError, match=r"(?=.*\b10\b)(?=.*\b3\b).*divisible"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(d_model=8, n_heads=0), r"n_heads.*0"),
        (dict(d_model=8, n_heads=2, dropout=-0.1), r"dropout.*-0\.1"),
        (dict(d_model=8, n_heads=2, dropout=1.0), r"dropout.*1\.0"),
    ],
)
def test_error_bad_construction(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MultiHeadAttention(**kwargs)


# --------------------------------------------------------------------------------------
# Input errors
# --------------------------------------------------------------------------------------


@pytest.fixture
def small():
    mha = _mha(8, 2, seed=32)
    q, kv = _inputs((2, 3, 8), (2, 5, 8), seed=33)
    return mha, q, kv


def test_error_query_rank_two(small):
    mha, q, kv = small
    with pytest.raises(ValueError, match=r"query.*" + re.escape("(3, 8)")):
        mha(q[0], kv, kv)


def test_error_wrong_feature_size(small):
    mha, q, kv = small
    with pytest.raises(ValueError, match=r"key.*\(B, length, 8\).*" + re.escape("(2, 5, 6)")):
        mha(q, kv[..., :6], kv)


def test_error_batch_mismatch(small):
    mha, q, kv = small
    with pytest.raises(ValueError, match=r"batch.*" + re.escape("query (1, 3, 8)")):
        mha(q[:1], kv, kv)


def test_error_key_value_length_mismatch(small):
    mha, q, kv = small
    with pytest.raises(ValueError, match=r"length.*" + re.escape("key (2, 5, 8), value (2, 4, 8)")):
        mha(q, kv, kv[:, :4])


def test_error_dtype_mismatch():
    mha = MultiHeadAttention(8, 2)  # float32
    x = torch.randn(2, 3, 8, dtype=F64)
    with pytest.raises(ValueError, match=r"torch\.float64.*torch\.float32"):
        mha(x, x, x)


def test_error_non_boolean_mask(small):
    mha, q, kv = small
    for mask in (torch.zeros(3, 5, dtype=torch.int64), torch.zeros(3, 5)):
        with pytest.raises(ValueError, match=r"boolean.*" + re.escape(str(mask.dtype))):
            mha(q, kv, kv, mask)
        with pytest.raises(ValueError, match="boolean"):
            mha(q, kv, kv, mask, need_weights=False)


def test_error_mask_rank_five(small):
    mha, q, kv = small
    with pytest.raises(ValueError, match=re.escape("(1, 2, 2, 3, 5)")):
        mha(q, kv, kv, torch.zeros(1, 2, 2, 3, 5, dtype=torch.bool))


@pytest.mark.parametrize(
    "shape",
    [
        (3, 4),
        (2, 3, 3, 5),
        (2, 1, 4),
        (3, 1, 5),
    ],
)
def test_error_mask_does_not_broadcast(small, shape):
    """The message names the shape the caller passed."""
    mha, q, kv = small
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=re.escape(str(shape))):
            mha(q, kv, kv, torch.zeros(shape, dtype=torch.bool), need_weights=need_weights)


@pytest.mark.parametrize("shape", [(2, 1, 4), (3, 1, 5)])
def test_error_three_dimensional_mask_does_not_broadcast(small, shape):
    """Rejected all the same (whatever shape the message names)."""
    mha, q, kv = small
    for need_weights in (True, False):
        with pytest.raises(ValueError, match="does not broadcast"):
            mha(q, kv, kv, torch.zeros(shape, dtype=torch.bool), need_weights=need_weights)


def test_error_bias_does_not_broadcast(small):
    mha, q, kv = small
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=re.escape("(2, 4, 5)")):
            mha(q, kv, kv, need_weights=need_weights, bias=torch.zeros(2, 4, 5, dtype=F64))


# --------------------------------------------------------------------------------------
# Symmetry
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [True, False])
def test_permutation_equivariance_of_self_attention(need_weights):
    mha = _mha(16, 4, seed=34)
    (x,) = _inputs((2, 6, 16), seed=35)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out, weights = mha(x, x, x, need_weights=need_weights)
    out_p, weights_p = mha(x[:, perm], x[:, perm], x[:, perm], need_weights=need_weights)
    torch.testing.assert_close(out_p, out[:, perm], **TOL)
    if need_weights:
        torch.testing.assert_close(weights_p, weights[:, :, perm][:, :, :, perm], **TOL)
    assert not torch.allclose(out_p, out)  # the permutation did move something


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("with_padding", [False, True])
def test_causal_flag_equals_the_causal_mask(need_weights, with_padding):
    """``causal=True`` is the causal mask of chapter 2, on both paths, alone or OR-ed with padding."""
    mha = _mha().eval()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 6, 16, generator=g, dtype=F64)
    padding = torch.zeros(3, 1, 6, dtype=torch.bool)
    padding[1, 0, 4:] = True
    mask = combine_masks(padding, causal_mask(6)) if with_padding else causal_mask(6)[None]
    expected, expected_weights = mha(x, x, x, mask, need_weights=need_weights)
    got, got_weights = mha(x, x, x, padding if with_padding else None, need_weights=need_weights, causal=True)
    torch.testing.assert_close(got, expected, **TOL)
    if need_weights:
        torch.testing.assert_close(got_weights, expected_weights, **TOL)
        assert bool((got_weights[..., :, :][causal_mask(6).expand_as(got_weights)] == 0).all())


def test_causal_flag_with_fewer_queries_than_keys_aligns_with_the_last_query():
    """With earlier keys (a cache), query i of n sees keys up to i + m - n: the last query sees all."""
    mha = _mha().eval()
    g = torch.Generator().manual_seed(8)
    memory = torch.randn(2, 7, 16, generator=g, dtype=F64)
    queries = memory[:, 4:]  # the last 3 of 7 positions
    full, _ = mha(memory, memory, memory, causal_mask(7)[None], need_weights=False)
    for need_weights in (True, False):
        got, _ = mha(queries, memory, memory, need_weights=need_weights, causal=True)
        torch.testing.assert_close(got, full[:, 4:], **TOL)


def test_causal_flag_reaches_the_fused_kernel_as_is_causal(monkeypatch):
    """With no other mask or bias the fused path passes ``is_causal=True`` and no mask tensor."""
    import transformer_book.attention as attention_module

    calls = []
    real = attention_module.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    mha = _mha().eval()
    x = torch.randn(2, 5, 16, dtype=F64)
    mha(x, x, x, need_weights=False, causal=True)
    assert calls[-1].get("is_causal") is True and calls[-1].get("attn_mask") is None
    mha(x, x, x, torch.zeros(2, 1, 5, dtype=torch.bool), need_weights=False, causal=True)
    assert not calls[-1].get("is_causal") and calls[-1]["attn_mask"] is not None  # the padding needs a mask


# --------------------------------------------------------------------------------------
# Q, K and V from one stacked product (self-attention on a GPU)
# --------------------------------------------------------------------------------------


def _packed_twin(mha: MultiHeadAttention, packed: bool) -> MultiHeadAttention:
    import copy

    twin = copy.deepcopy(mha)
    twin.pack_projections = packed
    return twin


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_packed_projection_equals_three_products_with_gradients(bias, need_weights, causal):
    """Stacking W^Q, W^K, W^V into one product changes nothing but rounding: outputs, weights,
    and the gradients of the input and of every parameter (w_q, w_k, w_v keep their own)."""
    mha = _mha(bias=bias)
    packed, separate = _packed_twin(mha, True), _packed_twin(mha, False)
    (x,) = _inputs((2, 6, 16), requires_grad=True)
    results = []
    for module in (packed, separate):
        padding = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 1]], dtype=torch.bool).unsqueeze(1)
        out, weights = module(x, x, x, None if causal else padding, need_weights=need_weights, causal=causal)
        (grad_x,) = torch.autograd.grad((out * out.detach().cos()).sum(), x, retain_graph=True)
        out.sum().backward()
        results.append((out, weights, grad_x, {n: p.grad for n, p in module.named_parameters()}))
    (out_p, w_p, gx_p, grads_p), (out_s, w_s, gx_s, grads_s) = results
    torch.testing.assert_close(out_p, out_s, **TOL)
    torch.testing.assert_close(gx_p, gx_s, **TOL)
    if need_weights:
        torch.testing.assert_close(w_p, w_s, **TOL)
    assert grads_p.keys() == grads_s.keys() and {"w_q.weight", "w_k.weight", "w_v.weight"} <= grads_p.keys()
    for name in grads_p:
        torch.testing.assert_close(grads_p[name], grads_s[name], **TOL)


def test_packed_projection_with_a_growing_cache_equals_the_whole_sequence():
    from transformer_book.attention import KVCache

    mha = _packed_twin(_mha().eval(), True)
    (x,) = _inputs((2, 5, 16))
    full, _ = mha(x, x, x, need_weights=False, causal=True)
    cache, steps = KVCache(), []
    for t in range(5):
        step, _ = mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], need_weights=False, cache=cache)
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)


def test_packing_only_for_self_attention_and_by_default_only_on_cuda(monkeypatch):
    """The stacked product runs only when query, key and value are one tensor, and with the
    default ``pack_projections=None`` only for CUDA tensors: the CPU keeps the three products."""
    calls = []
    real = MultiHeadAttention._packed_projection

    def spy(self, x):
        calls.append(tuple(x.shape))
        return real(self, x)

    monkeypatch.setattr(MultiHeadAttention, "_packed_projection", spy)
    mha = _mha().eval()
    x, y = _inputs((2, 5, 16), (2, 5, 16))
    assert MultiHeadAttention.pack_projections is None
    mha(x, x, x)
    assert calls == []  # CPU, default: three products
    mha.pack_projections = True
    mha(x, y, y)
    mha(x, x, y)
    assert calls == []  # not self-attention
    mha(x, x, x)
    assert calls == [(2, 5, 16)]


# --------------------------------------------------------------------------------------
# Choosing the fused attention kernel
# --------------------------------------------------------------------------------------


def test_prefer_attention_kernel_puts_the_kernel_first_and_restores_the_order():
    from torch.nn.attention import SDPBackend

    from transformer_book.attention import ATTENTION_KERNELS, prefer_attention_kernel

    before = torch._C._get_sdp_priority_order()
    with prefer_attention_kernel("cudnn"):
        order = torch._C._get_sdp_priority_order()
        assert order[0] == int(SDPBackend.CUDNN_ATTENTION)
        # every kernel stays allowed: a preference, not a restriction
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.cudnn_sdp_enabled()
    assert torch._C._get_sdp_priority_order() == before
    with prefer_attention_kernel(None):
        assert torch._C._get_sdp_priority_order() == before
    with prefer_attention_kernel("math"):
        assert torch._C._get_sdp_priority_order()[0] == int(SDPBackend.MATH)
    assert set(ATTENTION_KERNELS) == {"flash", "efficient", "cudnn", "math"}
    with pytest.raises(
        ValueError,
        match=r"prefer_attention_kernel: name must be one of 'flash', 'efficient', 'cudnn' "
        r"or 'math', got 'cudn'",
    ):
        with prefer_attention_kernel("cudn"):
            pass


def test_prefer_attention_kernel_only_allows_no_other_kernel():
    """``only=True`` disables the rest: on the CPU (whose fused path is a flash kernel) only
    ``math`` runs the plain formula, and only ``cudnn`` (a GPU kernel) leaves nothing to run."""
    import torch.nn.functional as F
    from torch.profiler import profile

    from transformer_book.attention import prefer_attention_kernel

    q = torch.randn(1, 2, 6, 4)
    with prefer_attention_kernel("math", only=True), profile() as prof:
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    ops = {event.key for event in prof.key_averages()}
    assert "aten::_scaled_dot_product_attention_math" in ops
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in ops
    with pytest.raises(RuntimeError):
        with prefer_attention_kernel("cudnn", only=True):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert torch.backends.cuda.flash_sdp_enabled()  # restored afterwards


def test_a_two_dimensional_mask_is_refused_as_ambiguous():
    """(n, m) shared by the batch and (B, m) one row per sequence have the same shape when B == n:
    a (B, m) padding mask used to be read silently as (n, m). Every 2-D mask is refused, naming
    the two shapes that say what is meant."""
    mha = _mha(8, 2, seed=40)
    (x,) = _inputs((5, 5, 8), seed=41)  # B == n == m
    key_padding = torch.zeros(5, 5, dtype=torch.bool)
    key_padding[0, 3:] = True  # sequence 0 has two padded keys
    for need_weights in (True, False):
        with pytest.raises(ValueError, match=r"2-D mask \(5, 5\) is ambiguous.*\(1, n, m\).*\(B, 1, m\)"):
            mha(x, x, x, key_padding, need_weights=need_weights)
    # said the unambiguous way, the padding mask hides sequence 0's last keys and no one else's
    _, weights = mha(x, x, x, key_padding[:, None, :])
    assert bool((weights[0, :, :, 3:] == 0).all()) and bool((weights[1:] > 0).all())


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_float16_attention_with_large_activations_matches_float64(need_weights):
    """Inputs large enough that the float16 scores QK^T overflow unless computed in float32."""
    mha = _mha(64, 1, seed=42)
    with torch.no_grad():
        for proj in (mha.w_q, mha.w_k, mha.w_v, mha.w_o):
            proj.weight.copy_(torch.eye(64, dtype=F64))
            proj.bias.zero_()
    x = torch.full((1, 3, 64), 40.0, dtype=F64)
    x[0, 1] = 39.0
    x[0, :, 0] += torch.tensor([0.0, 1.0, 2.0], dtype=F64)
    expected, _ = mha(x, x, x, need_weights=True)
    got, _ = mha.half()(x.half(), x.half(), x.half(), need_weights=need_weights)
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=0.1)


@pytest.mark.parametrize("need_weights", [True, False], ids=["explicit", "fused"])
def test_bfloat16_input_under_cpu_autocast_is_accepted(need_weights):
    """Under autocast the projections cast their inputs: bfloat16 activations with float32 weights
    are a valid use (they were refused as a dtype mismatch)."""
    mha = _mha(16, 4, seed=43).float()
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(44))
    expected, _ = mha(x, x, x, need_weights=need_weights)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = mha(x.bfloat16(), x.bfloat16(), x.bfloat16(), need_weights=need_weights)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, rtol=0.05, atol=0.05)
    # without autocast the mismatch is still an error that says what to do
    with pytest.raises(ValueError, match=r"query has dtype torch.bfloat16 but the weights are torch.float32"):
        mha(x.bfloat16(), x.bfloat16(), x.bfloat16())


def test_the_device_decides_packing_in_one_place_outside_forward(monkeypatch):
    """Q/K/V are packed into one product inside attention.device_kernels for CUDA (what fit and
    the benchmarks enter), never elsewhere, and a choice made by hand wins; forward reads the flag only."""
    from transformer_book.attention import MultiHeadAttention, device_kernels

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    packed = []
    original = MultiHeadAttention._packed_projection
    monkeypatch.setattr(MultiHeadAttention, "_packed_projection", lambda self, h: packed.append(1) or original(self, h))
    plain, _ = mha(x, x, x)
    with device_kernels("cpu"):
        mha(x, x, x)
    assert packed == [] and MultiHeadAttention.pack_projections is None
    with device_kernels("cuda"):  # only the flag is set: the module itself runs on the CPU here
        assert MultiHeadAttention.pack_projections is True
        stacked, _ = mha(x, x, x)
    assert packed == [1] and MultiHeadAttention.pack_projections is None
    torch.testing.assert_close(stacked, plain)
    monkeypatch.setattr(MultiHeadAttention, "pack_projections", False)
    with device_kernels("cuda"):
        mha(x, x, x)
    assert packed == [1]


def test_init_projections_is_glorot_uniform_with_zero_biases():
    torch.manual_seed(0)
    wide, narrow = nn.Linear(64, 64), nn.Linear(64, 16, bias=False)
    with torch.no_grad():
        wide.bias.fill_(3.0)
    attention.init_projections(wide, narrow)
    assert torch.equal(wide.bias, torch.zeros(64))
    for linear in (wide, narrow):
        bound = math.sqrt(6 / (linear.in_features + linear.out_features))
        assert linear.weight.abs().max() <= bound
        assert linear.weight.abs().max() > 0.9 * bound  # spread over the whole interval, not a smaller one
        assert abs(linear.weight.var().item() - bound**2 / 3) < 0.15 * bound**2 / 3  # U(-a, a) has variance a^2 / 3


def test_grouped_and_multi_head_attention_start_alike():
    # the same seed gives the same projections when the shapes and biases agree (g = h, no biases)
    torch.manual_seed(0)
    mha = attention.MultiHeadAttention(32, 4, bias=False)
    torch.manual_seed(0)
    gqa = grouped_attention.GroupedQueryAttention(32, 4, 4)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        assert torch.equal(getattr(mha, name).weight, getattr(gqa, name).weight), name
