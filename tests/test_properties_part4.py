"""Property-based tests (hypothesis) of Part IV's modules (issue 41): statements that must hold for
every shape, block size, rank and budget the strategies draw, not only for the examples of the
unit tests."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book import scaling
from transformer_book.grouped_attention import GroupedQueryAttention
from transformer_book.lora import LoRALinear
from transformer_book.modern_layers import RMSNorm
from transformer_book.tiled_attention import tiled_attention

pytestmark = pytest.mark.usefixtures("one_thread")

PROPERTY = settings(max_examples=30, deadline=None, derandomize=True, database=None)


@PROPERTY
@given(
    n=st.integers(1, 20),
    m=st.integers(1, 20),
    d=st.integers(1, 9),
    block_q=st.integers(1, 8),
    block_k=st.integers(1, 8),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_tiled_attention_equals_sdpa_for_any_lengths_and_blocks(n, m, d, block_q, block_k, causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(1, 2, n, d, generator=g),
        torch.randn(1, 2, m, d, generator=g),
        torch.randn(1, 2, m, d, generator=g),
    )
    got = tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    if causal:  # query i sees keys j <= i + m - n: rows that see none are zeros
        visible = torch.arange(m)[None, :] <= torch.arange(n)[:, None] + m - n
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=visible).nan_to_num(0.0)
        want = torch.where(visible.any(-1)[:, None], want, torch.zeros(()))
    else:
        want = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@PROPERTY
@given(
    heads=st.sampled_from([(4, 1), (4, 2), (4, 4), (6, 3)]),
    n=st.integers(1, 10),
    split=st.integers(0, 9),
    seed=st.integers(0, 2**16),
)
def test_grouped_attention_with_a_cache_equals_one_full_pass(heads, n, split, seed):
    """Feeding a sequence in two parts through the KV cache gives the full pass's outputs."""
    torch.manual_seed(seed)
    n_heads, kv = heads
    layer = GroupedQueryAttention(8 * n_heads, n_heads, kv).eval()
    x = torch.randn(2, n, 8 * n_heads)
    cut = split % n
    from transformer_book.attention import KVCache

    cache = KVCache()
    with torch.no_grad():
        full = layer(x)
        parts = [layer(x[:, :cut], cache=cache)] if cut else []
        parts.append(layer(x[:, cut:], cache=cache))
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-5, atol=1e-5)


@PROPERTY
@given(d=st.integers(1, 32), scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_rms_norm_is_invariant_to_scaling_its_input(d, scale, seed):
    g = torch.Generator().manual_seed(seed)
    norm = RMSNorm(d, eps=1e-12).double()
    x = torch.randn(3, d, generator=g, dtype=torch.float64)
    torch.testing.assert_close(norm(x * scale), norm(x), rtol=1e-5, atol=1e-5)


@PROPERTY
@given(
    d_in=st.integers(1, 12),
    d_out=st.integers(1, 12),
    r=st.integers(1, 12),
    alpha=st.floats(0.5, 64.0),
    seed=st.integers(0, 2**16),
)
def test_a_merged_lora_layer_computes_what_the_unmerged_one_does(d_in, d_out, r, alpha, seed):
    r = min(r, d_in, d_out)
    torch.manual_seed(seed)
    layer = LoRALinear(torch.nn.Linear(d_in, d_out).double(), r=r, alpha=alpha)
    torch.nn.init.normal_(layer.lora_b)
    x = torch.randn(4, d_in, dtype=torch.float64)
    before = layer(x)
    layer.merge()
    torch.testing.assert_close(layer(x), before, rtol=1e-9, atol=1e-9)
    layer.unmerge()
    torch.testing.assert_close(layer(x), before, rtol=1e-9, atol=1e-9)


@PROPERTY
@given(
    E=st.floats(0.5, 3.0),
    A=st.floats(10.0, 1e3),
    B=st.floats(10.0, 1e3),
    alpha=st.floats(0.1, 0.8),
    beta=st.floats(0.1, 0.8),
    log_C=st.floats(15.0, 25.0),
)
def test_the_compute_optimal_split_spends_the_budget_and_beats_its_neighbours(E, A, B, alpha, beta, log_C):
    law = scaling.ScalingLaw(E, A, B, alpha, beta)
    C = 10.0**log_C
    best = law.compute_optimal(C)
    assert 6 * best.N * best.D == pytest.approx(C, rel=1e-9)
    for factor in (0.8, 1.25):  # any other split of the same compute does worse
        N = best.N * factor
        assert law.loss(N, C / (6 * N)) > best.loss
