"""Property-based tests (hypothesis) of attention, masks and LayerNorm: statements that must hold
for every shape, mask and input, checked on many drawn at random (the draws are derandomized, so a
run is reproducible; a failure prints the smallest example hypothesis found)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_book.layers import EncoderLayer, LayerNorm
from transformer_book.masks import causal_mask

pytestmark = pytest.mark.usefixtures("one_thread")

PROPERTY = settings(max_examples=40, deadline=None, derandomize=True, database=None)
sizes = st.integers(min_value=1, max_value=6)
seeds = st.integers(min_value=0, max_value=2**31 - 1)


def tensors(seed, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def random_mask(seed, *shape, p=0.4):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed + 1)) < p


@PROPERTY
@given(b=sizes, n=sizes, m=sizes, d=sizes, seed=seeds, masked=st.booleans())
def test_weights_are_distributions_over_the_kept_keys(b, n, m, d, seed, masked):
    q, k, v = tensors(seed, b, n, d), tensors(seed + 2, b, m, d), tensors(seed + 3, b, m, d)
    mask = random_mask(seed, b, n, m) if masked else torch.zeros(b, n, m, dtype=torch.bool)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (w >= 0).all() and (w[mask] == 0).all()  # excluded keys get no weight
    alive = ~mask.all(-1)
    torch.testing.assert_close(w.sum(-1)[alive], torch.ones_like(w.sum(-1)[alive]))  # rows sum to one
    assert (w[~alive] == 0).all() and (out[~alive] == 0).all()  # fully masked rows: zeros, not NaN


@PROPERTY
@given(n=sizes, m=sizes, d=sizes, seed=seeds)
def test_permuting_queries_permutes_outputs_and_permuting_keys_changes_nothing(n, m, d, seed):
    q, k, v = tensors(seed, n, d), tensors(seed + 2, m, d), tensors(seed + 3, m, d)
    g = torch.Generator().manual_seed(seed)
    pq, pk = torch.randperm(n, generator=g), torch.randperm(m, generator=g)
    out, w = scaled_dot_product_attention(q, k, v)
    out_q, _ = scaled_dot_product_attention(q[pq], k, v)
    out_k, w_k = scaled_dot_product_attention(q, k[pk], v[pk])
    torch.testing.assert_close(out_q, out[pq])
    torch.testing.assert_close(out_k, out)  # attention is a set operation over keys
    torch.testing.assert_close(w_k, w[:, pk])


@PROPERTY
@given(n=sizes, d_head=st.integers(1, 4), heads=st.integers(1, 3), seed=seeds)
def test_self_attention_without_positions_is_permutation_equivariant(n, d_head, heads, seed):
    torch.manual_seed(seed % 10_000)
    mha = MultiHeadAttention(d_head * heads, heads).double().eval()
    x = tensors(seed, 2, n, d_head * heads)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    out, _ = mha(x, x, x)
    out_p, _ = mha(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])


@PROPERTY
@given(b=sizes, n=sizes, m=sizes, d=sizes, seed=seeds)
def test_excluded_keys_have_no_influence(b, n, m, d, seed):
    q, k, v = tensors(seed, b, n, d), tensors(seed + 2, b, m, d), tensors(seed + 3, b, m, d)
    excluded = random_mask(seed, b, 1, m)  # the same keys excluded for every query
    out, _ = scaled_dot_product_attention(q, k, v, excluded)
    noise_k, noise_v = 1e3 * tensors(seed + 4, b, m, d), 1e3 * tensors(seed + 5, b, m, d)
    where = excluded.transpose(-1, -2)  # (b, m, 1): rows of k and v
    out2, _ = scaled_dot_product_attention(q, torch.where(where, noise_k, k), torch.where(where, noise_v, v), excluded)
    torch.testing.assert_close(out2, out)


@PROPERTY
@given(n=st.integers(2, 7), seed=seeds, cut=st.integers(0, 6), norm_first=st.booleans())
def test_causal_outputs_do_not_depend_on_the_future(n, seed, cut, norm_first):
    cut = cut % (n - 1)  # positions 0..cut stay, the rest change
    torch.manual_seed(seed % 10_000)
    layer = EncoderLayer(8, 2, 16, 0.0, norm_first=norm_first).double().eval()
    x = tensors(seed, 2, n, 8)
    y = x.clone()
    y[:, cut + 1 :] = tensors(seed + 9, 2, n - cut - 1, 8)
    mask = causal_mask(n)[None]
    torch.testing.assert_close(layer(y, mask)[:, : cut + 1], layer(x, mask)[:, : cut + 1])


@PROPERTY
@given(
    b=st.integers(1, 3),
    n=sizes,
    m=sizes,
    heads=st.integers(1, 3),
    seed=seeds,
    kind=st.sampled_from(["none", "random", "causal", "all"]),
)
def test_fast_and_explicit_attention_paths_agree(b, n, m, heads, seed, kind):
    torch.manual_seed(seed % 10_000)
    mha = MultiHeadAttention(4 * heads, heads).double().eval()
    q, kv = tensors(seed, b, n, 4 * heads), tensors(seed + 2, b, m, 4 * heads)
    mask = {
        "none": None,
        "random": random_mask(seed, b, 1, n, m),
        "all": torch.ones(b, 1, n, m, dtype=torch.bool),
        "causal": causal_mask(max(n, m))[None, :n, :m],
    }[kind]
    explicit, _ = mha(q, kv, kv, mask, need_weights=True)
    fast, none = mha(q, kv, kv, mask, need_weights=False)
    assert none is None and torch.isfinite(fast).all()
    torch.testing.assert_close(fast, explicit)


@PROPERTY
@given(b=sizes, d=st.integers(2, 16), seed=seeds, scale=st.floats(0.1, 100.0), shift=st.floats(-100.0, 100.0))
def test_layernorm_is_invariant_to_shifting_and_scaling_its_input(b, d, seed, scale, shift):
    norm = LayerNorm(d, eps=1e-12).double()
    with torch.no_grad():
        norm.gamma.copy_(tensors(seed + 1, d))
        norm.beta.copy_(tensors(seed + 2, d))
    x = tensors(seed, b, d) + 0.1  # rows with spread (a constant row has none)
    torch.testing.assert_close(norm(scale * x + shift), norm(x), rtol=1e-6, atol=1e-6)
    y = norm(x)
    z = (y - norm.beta) / norm.gamma  # before gamma and beta: mean 0, variance 1
    torch.testing.assert_close(z.mean(-1), torch.zeros(b, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(z.var(-1, unbiased=False), torch.ones(b, dtype=torch.float64), atol=1e-5, rtol=0)
