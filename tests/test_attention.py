"""Tests of scaled dot-product attention and the stable masked softmax (chapter 1).

References are PyTorch's own ``F.scaled_dot_product_attention`` (float64) and hand-written
formulas; nothing expected here is produced by the code under test.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from transformer_book.attention import scaled_dot_product_attention, softmax
from transformer_book.masks import causal_mask, padding_mask

F64 = torch.float64


def _randn(*shape, seed=0, dtype=F64, generator=None):
    g = generator if generator is not None else torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _qkv(q_shape, k_shape, v_shape, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*q_shape, generator=g, dtype=dtype),
        torch.randn(*k_shape, generator=g, dtype=dtype),
        torch.randn(*v_shape, generator=g, dtype=dtype),
    )


def _reference_weights(q, k, mask=None, scale=None):
    """softmax(QK^T * scale) with excluded keys at -inf, via torch.softmax."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


# --------------------------------------------------------------------------------------
# Agreement with torch.nn.functional.scaled_dot_product_attention
# --------------------------------------------------------------------------------------


def test_matches_torch_sdpa_without_mask():
    q, k, v = _qkv((2, 5, 8), (2, 5, 8), (2, 5, 8))
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, _reference_weights(q, k), rtol=1e-12, atol=1e-12)
    assert out.shape == (2, 5, 8) and weights.shape == (2, 5, 5)
    assert out.dtype == F64 and weights.dtype == F64


def test_matches_torch_sdpa_with_padding_mask():
    q, k, v = _qkv((2, 4, 8), (2, 6, 8), (2, 6, 8), seed=1)
    tokens = torch.tensor([[5, 3, 9, 2, 0, 0], [7, 1, 4, 0, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)  # (2, 1, 6), True = excluded (book convention)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    # F's boolean attn_mask means True = the key TAKES PART, the opposite of the book's
    # convention (True = excluded), so PyTorch gets the complement ~mask.
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, _reference_weights(q, k, mask), rtol=1e-12, atol=1e-12)
    assert torch.all(weights.masked_select(mask.expand_as(weights)) == 0)


def test_matches_torch_sdpa_with_causal_mask():
    q, k, v = _qkv((3, 6, 4), (3, 6, 4), (3, 6, 4), seed=2)
    mask = causal_mask(6)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    # F's boolean attn_mask: True = take part (opposite of the book), hence ~mask.
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=1e-12, atol=1e-12)
    assert torch.all(weights.triu(diagonal=1) == 0)


def test_matches_torch_sdpa_with_batch_and_head_dims():
    B, h, n, d = 2, 3, 5, 4
    q, k, v = _qkv((B, h, n, d), (B, h, n, d), (B, h, n, d), seed=3)
    tokens = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0]])
    mask = padding_mask(tokens, 0).unsqueeze(1) | causal_mask(n)  # (B, 1, n, n)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)  # ~: F's True = take part
    assert out.shape == (B, h, n, d) and weights.shape == (B, h, n, n)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_cross_attention_with_different_lengths_and_value_size():
    """n != m and d_v != d_k: output is (..., n, d_v), weights (..., n, m)."""
    q, k, v = _qkv((2, 3, 6), (2, 7, 6), (2, 7, 5), seed=4)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 7)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12)


def test_custom_scale_matches_torch_and_changes_result():
    q, k, v = _qkv((2, 4, 8), (2, 6, 8), (2, 6, 3), seed=5)
    out, weights = scaled_dot_product_attention(q, k, v, scale=0.7)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.7), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, _reference_weights(q, k, scale=0.7), rtol=1e-12, atol=1e-12)
    default_out, _ = scaled_dot_product_attention(q, k, v)
    assert not torch.allclose(out, default_out)  # the scale argument is actually used


def test_default_scale_is_one_over_sqrt_dk():
    d_k = 16
    q, k, v = _qkv((2, 4, d_k), (2, 5, d_k), (2, 5, 3), seed=6)
    out, weights = scaled_dot_product_attention(q, k, v)
    out_explicit, weights_explicit = scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(d_k))
    torch.testing.assert_close(out, out_explicit, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(weights, weights_explicit, rtol=1e-14, atol=1e-14)
    # by hand: softmax(q k^T / 4)
    hand = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1)
    torch.testing.assert_close(weights, hand, rtol=1e-12, atol=1e-12)
    # and it is not the unscaled attention
    _, unscaled = scaled_dot_product_attention(q, k, v, scale=1.0)
    assert not torch.allclose(weights, unscaled)


# --------------------------------------------------------------------------------------
# Properties of the weights and the output
# --------------------------------------------------------------------------------------


def test_weights_are_distributions_and_output_is_weights_times_value():
    q, k, v = _qkv((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), seed=7)
    mask = torch.zeros(2, 1, 5, 7, dtype=torch.bool)
    mask[0, 0, :, 2] = True
    mask[1, 0, 3, 4:] = True
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(out, weights @ v, rtol=1e-12, atol=1e-12)
    # by hand for one query: output_i = sum_j A_ij v_j
    hand = sum(weights[1, 2, 3, j] * v[1, 2, j] for j in range(7))
    torch.testing.assert_close(out[1, 2, 3], hand, rtol=1e-12, atol=1e-12)


def test_excluded_keys_have_no_influence():
    """Changing the key and value vectors at masked positions changes nothing, bit for bit."""
    g = torch.Generator().manual_seed(8)
    q = torch.randn(2, 4, 8, generator=g, dtype=F64)
    k = torch.randn(2, 6, 8, generator=g, dtype=F64)
    v = torch.randn(2, 6, 5, generator=g, dtype=F64)
    tokens = torch.tensor([[3, 4, 5, 6, 0, 0], [3, 4, 0, 0, 0, 0]])
    mask = padding_mask(tokens, 0)
    out, weights = scaled_dot_product_attention(q, k, v, mask)

    pad = tokens == 0
    k2, v2 = k.clone(), v.clone()
    k2[pad] = 1e3 * torch.randn(int(pad.sum()), 8, generator=g, dtype=F64)
    v2[pad] = 1e3 * torch.randn(int(pad.sum()), 5, generator=g, dtype=F64)
    out2, weights2 = scaled_dot_product_attention(q, k2, v2, mask)
    assert torch.equal(out, out2)
    assert torch.equal(weights, weights2)
    # the change is real: without the mask it does change the result
    assert not torch.allclose(scaled_dot_product_attention(q, k, v)[0], scaled_dot_product_attention(q, k2, v2)[0])


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    g = torch.Generator().manual_seed(9)
    q = torch.randn(2, 3, 4, generator=g, dtype=F64, requires_grad=True)
    k = torch.randn(2, 5, 4, generator=g, dtype=F64, requires_grad=True)
    # large values make the upstream gradient of the weights large (stresses 0 * huge paths)
    v = (100 * torch.randn(2, 5, 4, generator=g, dtype=F64)).requires_grad_()
    mask = torch.zeros(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = True  # query 1 of batch 0 has no key at all
    out, weights = scaled_dot_product_attention(q, k, v, mask)

    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.equal(weights[0, 1], torch.zeros(5, dtype=F64))
    assert torch.equal(out[0, 1], torch.zeros(4, dtype=F64))
    torch.testing.assert_close(weights[0, [0, 2]].sum(-1), torch.ones(2, dtype=F64))

    (1e3 * out).pow(2).sum().backward()
    for name, t in (("query", q), ("key", k), ("value", v)):
        assert t.grad is not None and torch.isfinite(t.grad).all(), name
    # a query that sees nothing gets no gradient
    assert torch.equal(q.grad[0, 1], torch.zeros(4, dtype=F64))


def test_softmax_fully_masked_slice_float32_is_zero_with_finite_grad():
    scores = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    mask = torch.tensor([[False, True, False], [True, True, True]])
    p = softmax(scores, mask)
    assert torch.equal(p[1], torch.zeros(3))
    assert p[0, 1] == 0
    (p * 1e6).sum().backward()
    assert torch.isfinite(scores.grad).all()


# --------------------------------------------------------------------------------------
# The stable softmax
# --------------------------------------------------------------------------------------


def test_softmax_matches_torch_on_ordinary_inputs():
    x = _randn(4, 3, 7, seed=10)
    for dim in (-1, 0, 1):
        torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim), rtol=1e-12, atol=1e-14)


def test_softmax_does_not_overflow_where_naive_formula_does():
    scores = torch.tensor([1000.0, 1001.0, 1002.0], dtype=torch.float32)
    naive = torch.exp(scores) / torch.exp(scores).sum()
    assert torch.isnan(naive).all()  # exp(1000) = inf in float32: inf / inf = nan
    stable = softmax(scores)
    assert torch.isfinite(stable).all()
    e = [math.exp(-2), math.exp(-1), 1.0]
    expected = torch.tensor([x / sum(e) for x in e], dtype=torch.float32)
    torch.testing.assert_close(stable, expected, rtol=1e-6, atol=1e-7)


def test_softmax_invariant_to_adding_a_constant_per_row():
    x = _randn(5, 6, seed=11)
    c = _randn(5, 1, seed=12) * 50
    torch.testing.assert_close(softmax(x + c), softmax(x), rtol=1e-12, atol=1e-14)


def test_softmax_rejects_integer_scores_and_bad_masks():
    with pytest.raises(ValueError, match="floating-point.*torch.int64"):
        softmax(torch.arange(3))
    with pytest.raises(ValueError, match="boolean"):
        softmax(torch.zeros(2, 3), mask=torch.zeros(2, 3))
    with pytest.raises(ValueError, match=re.escape("(4,)")):
        softmax(torch.zeros(2, 3), mask=torch.zeros(4, dtype=torch.bool))


# --------------------------------------------------------------------------------------
# Gradients and symmetry
# --------------------------------------------------------------------------------------


def test_gradcheck_with_mask():
    g = torch.Generator().manual_seed(13)
    q = torch.randn(2, 3, 4, generator=g, dtype=F64, requires_grad=True)
    k = torch.randn(2, 4, 4, generator=g, dtype=F64, requires_grad=True)
    v = torch.randn(2, 4, 2, generator=g, dtype=F64, requires_grad=True)
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[0, :, 3] = True
    mask[1, 0, 1:] = True
    mask[1, 2] = True  # one fully masked row too

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask)

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-8)


def test_permutation_equivariance_of_self_attention():
    """Permuting the input rows X permutes the output rows the same way (no positions)."""
    g = torch.Generator().manual_seed(14)
    n, d_model, d_k, d_v = 6, 8, 4, 5
    x = torch.randn(n, d_model, generator=g, dtype=F64)
    w_q = torch.randn(d_model, d_k, generator=g, dtype=F64)
    w_k = torch.randn(d_model, d_k, generator=g, dtype=F64)
    w_v = torch.randn(d_model, d_v, generator=g, dtype=F64)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])

    out, weights = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
    xp = x[perm]
    out_p, weights_p = scaled_dot_product_attention(xp @ w_q, xp @ w_k, xp @ w_v)
    torch.testing.assert_close(out_p, out[perm], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights_p, weights[perm][:, perm], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(out_p, out)  # the permutation is not trivial


# --------------------------------------------------------------------------------------
# Half precision on CPU
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)])
def test_half_precision_close_to_float32(dtype, tol):
    q, k, v = _qkv((2, 5, 8), (2, 6, 8), (2, 6, 4), seed=15, dtype=torch.float32)
    mask = padding_mask(torch.tensor([[1, 2, 3, 4, 0, 0], [1, 2, 3, 4, 5, 6]]), 0)
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask)
    out, weights = scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert out.dtype == dtype and weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(out.float(), ref_out, rtol=tol, atol=tol)
    torch.testing.assert_close(weights.float(), ref_w, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------
# Errors: ValueError whose message names the problem
# --------------------------------------------------------------------------------------


def test_error_mismatched_dk():
    q, k, v = _qkv((2, 5, 8), (2, 7, 6), (2, 7, 3))
    with pytest.raises(ValueError, match=r"d_k.*" + re.escape("query (2, 5, 8), key (2, 7, 6)")):
        scaled_dot_product_attention(q, k, v)


def test_error_key_value_length_mismatch():
    q, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 6, 3))
    with pytest.raises(ValueError, match=r"length.*" + re.escape("key (2, 7, 8), value (2, 6, 3)")):
        scaled_dot_product_attention(q, k, v)


def test_error_rank_one_input():
    q, k, v = _qkv((8,), (7, 8), (7, 3))
    with pytest.raises(ValueError, match=r"query.*at least 2 dimensions.*" + re.escape("(8,)")):
        scaled_dot_product_attention(q, k, v)


def test_error_integer_dtype():
    _, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 7, 3))
    q = torch.ones(2, 5, 8, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"query.*floating point.*torch\.int64"):
        scaled_dot_product_attention(q, k, v)


def test_error_mixed_dtypes():
    q, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 7, 3))
    with pytest.raises(ValueError, match=r"one dtype.*query torch\.float32, key torch\.float64"):
        scaled_dot_product_attention(q.float(), k, v)


@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.int64])
def test_error_non_boolean_mask(mask_dtype):
    q, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 7, 3))
    mask = torch.zeros(2, 1, 7, dtype=mask_dtype)
    with pytest.raises(ValueError, match=r"boolean.*" + re.escape(str(mask_dtype))):
        scaled_dot_product_attention(q, k, v, mask)


def test_error_mask_not_broadcastable():
    q, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 7, 3))
    mask = torch.zeros(2, 5, 6, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape("(2, 5, 6)") + ".*" + re.escape("(2, 5, 7)")):
        scaled_dot_product_attention(q, k, v, mask)


def test_error_mask_would_enlarge_the_scores():
    """A mask with extra leading dims would silently broadcast the output; it is refused."""
    q, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 7, 3))
    mask = torch.zeros(3, 2, 5, 7, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape("(3, 2, 5, 7)") + ".*" + re.escape("(2, 5, 7)")):
        scaled_dot_product_attention(q, k, v, mask)


def test_error_non_tensor_input():
    _, k, v = _qkv((2, 5, 8), (2, 7, 8), (2, 7, 3))
    with pytest.raises(ValueError, match=r"query must be a torch\.Tensor, got list"):
        scaled_dot_product_attention([[0.0] * 8] * 5, k, v)
    with pytest.raises(ValueError, match=r"value must be a torch\.Tensor, got ndarray"):
        scaled_dot_product_attention(k, k, v.numpy())


def test_error_batch_dims_do_not_broadcast():
    q, k, v = _qkv((2, 5, 8), (3, 7, 8), (3, 7, 3))
    with pytest.raises(ValueError, match=r"batch.*" + re.escape("query (2, 5, 8), key (3, 7, 8)")):
        scaled_dot_product_attention(q, k, v)


def test_broadcasting_batch_dims_are_accepted():
    """A key/value shared across the batch (no batch dims) broadcasts against the query."""
    q, k, v = _qkv((2, 5, 8), (7, 8), (7, 3), seed=16)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 5, 3) and weights.shape == (2, 5, 7)
    torch.testing.assert_close(out[1], scaled_dot_product_attention(q[1], k, v)[0], rtol=1e-14, atol=1e-14)


# --------------------------------------------------------------------------------------
# Half precision and infinities
# --------------------------------------------------------------------------------------


def test_float16_scores_do_not_overflow_before_the_scaling():
    """q . k = 64 * 40 * 40 = 102,400 is past float16's 65,504, the scaled score 12,800 is not:
    computed in float16 the scores were inf and the weights NaN."""
    q = torch.full((1, 2, 64), 40.0)
    k = torch.full((1, 3, 64), 40.0)
    k[0, 1] = 39.0
    v = torch.randn(1, 3, 5, generator=torch.Generator().manual_seed(0))
    expected_out, expected_w = scaled_dot_product_attention(q.double(), k.double(), v.double())
    out, weights = scaled_dot_product_attention(q.half(), k.half(), v.half())
    assert out.dtype == weights.dtype == torch.float16
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(weights.double(), expected_w, rtol=0, atol=1e-3)
    torch.testing.assert_close(out.double(), expected_out, rtol=0, atol=1e-2)


def test_float16_softmax_over_more_keys_than_float16_can_count():
    """70,000 equal scores: a float16 sum of their exponentials is inf and every weight 0."""
    scores = torch.zeros(1, 70_000, dtype=torch.float16)
    weights = softmax(scores)
    assert weights.dtype == torch.float16
    assert abs(weights.float().sum().item() - 1.0) < 1e-2
    assert bool((weights > 0).all())


def test_softmax_with_positive_infinity_takes_the_limit():
    scores = torch.tensor([[1.0, float("inf"), 2.0, float("inf")], [1.0, 2.0, 3.0, 4.0]])
    weights = softmax(scores)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(weights[0], torch.tensor([0.0, 0.5, 0.0, 0.5]))
    torch.testing.assert_close(weights[1], torch.softmax(scores[1], -1))  # other rows untouched
    hide = torch.tensor([[False, True, False, False], [False] * 4])
    torch.testing.assert_close(softmax(scores, mask=hide)[0], torch.tensor([0.0, 0.0, 0.0, 1.0]))
    # the limit it stands for: a score growing without bound takes all the weight
    torch.testing.assert_close(softmax(torch.tensor([1.0, 1e30]))[1], torch.tensor(1.0))
