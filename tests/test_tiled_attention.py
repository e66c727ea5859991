"""Tests of the online softmax and tiled attention (chapter 17).

References: ``torch.softmax``, ``torch.logsumexp`` and ``F.scaled_dot_product_attention`` (values,
and gradients through autograd), ``torch.autograd.gradcheck`` (finite differences), hand counts
of bytes and of floating-point operations; nothing expected here is produced by the code under test.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from transformer_book.tiled_attention import (
    TiledAttentionFunction,
    materialised_attention,
    memory_by_length,
    online_logsumexp,
    online_normaliser,
    online_softmax,
    peak_memory_bytes,
    tiled_attention,
    tiled_attention_backward,
    tiled_attention_forward,
)

pytestmark = pytest.mark.usefixtures("one_thread")

F32, F64 = torch.float32, torch.float64


def _qkv(B, h, n, m, d_k, d_v=None, *, seed=0, dtype=F32, grad=False):
    g = torch.Generator().manual_seed(seed)
    shapes = ((B, h, n, d_k), (B, h, m, d_k), (B, h, m, d_v or d_k))
    return tuple(torch.randn(*s, generator=g, dtype=dtype).requires_grad_(grad) for s in shapes)


def _sdpa(q, k, v, excluded=None, causal=False):
    """PyTorch's kernel; it takes True = *take part*, so the book's mask is inverted."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=None if excluded is None else ~excluded, is_causal=causal)


def _future(n, m):
    """The end-aligned causal mask written out: query i of n excludes key j > i + m - n."""
    return torch.arange(m)[None, :] > torch.arange(n)[:, None] + (m - n)


def _grads(out, inputs, seed=1):
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, inputs, dout)


# --------------------------------------------------------------------------- online softmax


@pytest.mark.parametrize("block", [1, 3, 7, 16, 100])
def test_online_softmax_equals_torch_softmax(block):
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(block), dtype=F64) * 3
    torch.testing.assert_close(online_softmax(x, block), torch.softmax(x, dim=-1), rtol=0, atol=1e-15)
    torch.testing.assert_close(online_logsumexp(x, block), torch.logsumexp(x, dim=-1), rtol=0, atol=1e-14)


def test_online_normaliser_is_the_max_and_the_shifted_sum():
    x = torch.randn(4, 23, generator=torch.Generator().manual_seed(0), dtype=F64)
    row_max, row_sum = online_normaliser(x, 5)
    torch.testing.assert_close(row_max, x.amax(dim=-1), rtol=0, atol=0)
    torch.testing.assert_close(row_sum, torch.exp(x - x.amax(dim=-1, keepdim=True)).sum(dim=-1), rtol=1e-14, atol=0)


def test_online_softmax_does_not_overflow_on_large_scores():
    # Spread so that no single entry takes all the weight, centred at 1e4 where exp overflows.
    x = 1e4 + torch.randn(2, 300, generator=torch.Generator().manual_seed(0)) * 2
    assert torch.isinf(torch.exp(x)).all()  # the naive formula's numerator
    got = online_softmax(x, 32)
    assert torch.isfinite(got).all()
    assert (got - torch.softmax(x, dim=-1)).abs().max() < 1e-6
    torch.testing.assert_close(online_logsumexp(x, 32), torch.logsumexp(x, dim=-1))


def test_online_softmax_with_minus_inf_entries_and_a_fully_masked_row():
    x = torch.randn(4, 12, generator=torch.Generator().manual_seed(0), dtype=F64)
    x[0, :7] = float("-inf")  # the first blocks see nothing: the running max starts at -inf
    x[1, ::2] = float("-inf")
    x[2, :] = float("-inf")  # no visible entry at all
    got = online_softmax(x, 4)
    torch.testing.assert_close(got[[0, 1, 3]], torch.softmax(x[[0, 1, 3]], dim=-1), rtol=0, atol=1e-15)
    assert torch.equal(got[2], torch.zeros(12, dtype=F64))  # torch.softmax gives NaN here
    assert torch.isnan(torch.softmax(x[2], dim=-1)).all()
    assert (got[0, :7] == 0).all() and (got[1, ::2] == 0).all()
    assert online_logsumexp(x, 4)[2] == float("-inf") == torch.logsumexp(x[2], dim=-1)


# --------------------------------------------------------------------------- values against SDPA


@pytest.mark.parametrize("block_q, block_k", [(16, 16), (8, 32), (7, 5), (64, 64), (1, 3)])
def test_tiled_attention_equals_sdpa_for_blocks_that_do_and_do_not_divide(block_q, block_k):
    q, k, v = _qkv(2, 3, 48, 32, 16)  # 48 and 32 divide by 16, not by 7 or 5; 64 exceeds both
    err = (tiled_attention(q, k, v, block_q=block_q, block_k=block_k) - _sdpa(q, k, v)).abs().max()
    assert err < 1e-5


def test_tiled_attention_with_n_not_m_and_d_k_not_d_v_float64():
    q, k, v = _qkv(2, 2, 13, 29, 8, 5, dtype=F64)
    got = tiled_attention(q, k, v, block_q=4, block_k=6)
    assert got.shape == (2, 2, 13, 5) and got.dtype == F64
    torch.testing.assert_close(got, _sdpa(q, k, v), rtol=0, atol=1e-13)


def test_tiled_attention_with_a_padding_mask():
    q, k, v = _qkv(3, 2, 20, 27, 8, 12)
    lengths = torch.tensor([27, 11, 1])
    excluded = (torch.arange(27)[None, :] >= lengths[:, None])[:, None, None, :]  # (B, 1, 1, m)
    assert (tiled_attention(q, k, v, mask=excluded, block_q=6, block_k=8) - _sdpa(q, k, v, excluded)).abs().max() < 1e-5


def test_tiled_attention_with_a_full_random_mask_and_a_custom_scale():
    q, k, v = _qkv(2, 3, 17, 19, 8, dtype=F64)
    excluded = torch.rand(2, 3, 17, 19, generator=torch.Generator().manual_seed(3)) < 0.6
    excluded[..., 0] = False  # every row keeps a key, so SDPA's rows are defined
    got = tiled_attention(q, k, v, mask=excluded, block_q=5, block_k=4, scale=0.7)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=~excluded, scale=0.7)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("block_q, block_k", [(8, 8), (5, 7), (16, 4)])
def test_causal_equals_sdpa_is_causal(block_q, block_k):
    q, k, v = _qkv(2, 2, 40, 40, 16)
    err = (
        (tiled_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k) - _sdpa(q, k, v, causal=True))
        .abs()
        .max()
    )
    assert err < 1e-5


def test_causal_with_padding():
    q, k, v = _qkv(2, 2, 24, 24, 8, dtype=F64)
    excluded = torch.zeros(2, 1, 1, 24, dtype=torch.bool)
    excluded[1, ..., 15:] = True  # padding at the end: every query still sees key 0
    got = tiled_attention(q, k, v, mask=excluded, causal=True, block_q=5, block_k=7)
    torch.testing.assert_close(got, _sdpa(q, k, v, excluded | _future(24, 24)), rtol=0, atol=1e-13)


def test_causal_with_fewer_queries_than_keys_is_aligned_at_the_end():
    q, k, v = _qkv(1, 2, 6, 20, 8, dtype=F64)  # the last 6 positions of 20, as with a KV cache
    got = tiled_attention(q, k, v, causal=True, block_q=4, block_k=3)
    torch.testing.assert_close(got, _sdpa(q, k, v, _future(6, 20)), rtol=0, atol=1e-13)
    # The last query sees every key: its row is unmasked attention's.
    torch.testing.assert_close(got[:, :, -1], _sdpa(q, k, v)[:, :, -1], rtol=0, atol=1e-13)


def test_causal_skips_the_tiles_above_the_diagonal():
    q, k, v = _qkv(1, 2, 64, 64, 8)

    def flops(causal):
        with FlopCounterMode(display=False) as counter:
            tiled_attention(q, k, v, causal=causal, block_q=16, block_k=16)
        return counter.get_total_flops()

    tile = 2 * (2 * 1 * 2 * 16 * 16 * 8)  # QK^T and PV of one 16 x 16 tile, 2 flops per multiply-add
    assert flops(False) == 16 * tile  # 4 x 4 tiles
    assert flops(True) == 10 * tile  # only the 4 + 3 + 2 + 1 tiles on or below the diagonal


def test_half_precision_is_computed_in_float32():
    q, k, v = _qkv(1, 2, 24, 24, 16)
    got = tiled_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), block_q=8, block_k=8)
    assert got.dtype == torch.bfloat16
    want = _sdpa(*(t.bfloat16().float() for t in (q, k, v)))
    assert (got.float() - want).abs().max() < 1e-2


# --------------------------------------------------------------------------- gradients


def test_the_forward_and_backward_of_half_precision_tiles_do_not_overflow():
    """Scores whose dot products pass float16's largest number (65,504) before they are scaled:
    the tiles are multiplied and summed in float32, as tiled_attention's are (issue 41)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=g) * 60 for _ in range(3))
    half = [t.half() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*(t.double() for t in half))
    assert not torch.isfinite(half[0] @ half[1].transpose(-2, -1)).all()  # the naive product overflows
    out, lse = tiled_attention_forward(*half, block_q=16, block_k=16)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32 and torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=0.05 * ref.abs().max().item())
    dq, dk, dv = tiled_attention_backward(torch.ones_like(out), *half, out, lse, block_q=16, block_k=16)
    assert all(t.dtype == torch.float16 and torch.isfinite(t).all() for t in (dq, dk, dv))


@pytest.mark.parametrize("causal, padded", [(False, False), (False, True), (True, False), (True, True)])
def test_gradients_equal_sdpa_float32(causal, padded):
    q, k, v = _qkv(2, 2, 30, 30, 16, 8, grad=True)
    excluded = None
    if padded:
        excluded = torch.zeros(2, 1, 1, 30, dtype=torch.bool)
        excluded[0, ..., 21:] = True
    out = tiled_attention(q, k, v, mask=excluded, causal=causal, block_q=8, block_k=7)
    ref = _sdpa(q, k, v, excluded, causal) if not (causal and padded) else _sdpa(q, k, v, excluded | _future(30, 30))
    assert (out - ref).abs().max() < 1e-5
    for got, want in zip(_grads(out, (q, k, v)), _grads(ref, (q, k, v))):
        assert (got - want).abs().max() < 1e-5


def test_gradients_equal_sdpa_float64_with_n_not_m():
    q, k, v = _qkv(2, 2, 11, 17, 6, 4, dtype=F64, grad=True)
    excluded = torch.rand(2, 1, 11, 17, generator=torch.Generator().manual_seed(5)) < 0.4
    excluded[..., -1] = False
    out = tiled_attention(q, k, v, mask=excluded, causal=True, block_q=3, block_k=4)
    ref = _sdpa(q, k, v, excluded | _future(11, 17))
    for got, want in zip(_grads(out, (q, k, v)), _grads(ref, (q, k, v))):
        assert (got - want).abs().max() < 1e-10


def test_gradcheck_float64():
    q, k, v = _qkv(1, 2, 5, 4, 3, 2, dtype=F64, grad=True)
    excluded = torch.tensor([False, False, True, False])[None, None, None, :]
    assert torch.autograd.gradcheck(
        lambda q, k, v: tiled_attention(q, k, v, mask=excluded, causal=True, block_q=2, block_k=3), (q, k, v)
    )


def test_backward_function_equals_autograd_through_sdpa():
    q, k, v = _qkv(1, 2, 9, 9, 4, dtype=F64, grad=True)
    out, lse = tiled_attention_forward(q.detach(), k.detach(), v.detach(), causal=True, block_q=4, block_k=4)
    torch.testing.assert_close(
        lse, torch.logsumexp((q @ k.transpose(-2, -1) / 2).masked_fill(_future(9, 9), -math.inf), -1)
    )
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=F64)
    got = tiled_attention_backward(
        dout, q.detach(), k.detach(), v.detach(), out, lse, causal=True, block_q=2, block_k=5
    )
    want = torch.autograd.grad(_sdpa(q, k, v, causal=True), (q, k, v), dout)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- fully masked rows


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = _qkv(1, 2, 6, 5, 4, dtype=F64, grad=True)
    excluded = torch.zeros(1, 1, 6, 5, dtype=torch.bool)
    excluded[..., [1, 4], :] = True  # queries 1 and 4 see no key
    excluded[..., 2, 3:] = True
    visible = [0, 2, 3, 5]
    out = tiled_attention(q, k, v, mask=excluded, block_q=4, block_k=2)
    assert torch.equal(out[:, :, [1, 4]], torch.zeros(1, 2, 2, 4, dtype=F64))
    # The other rows, and the gradients, equal SDPA's with the empty rows left out.
    ref = _sdpa(q[:, :, visible], k, v, excluded[:, :, visible])
    torch.testing.assert_close(out[:, :, visible], ref, rtol=0, atol=1e-13)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=F64)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))
    assert torch.equal(dq[:, :, [1, 4]], torch.zeros(1, 2, 2, 4, dtype=F64))
    dq_ref, dk_ref, dv_ref = torch.autograd.grad(ref, (q, k, v), dout[:, :, visible])
    torch.testing.assert_close(dq[:, :, visible], dq_ref[:, :, visible], rtol=0, atol=1e-12)
    torch.testing.assert_close(dk, dk_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(dv, dv_ref, rtol=0, atol=1e-12)


def test_causal_with_more_queries_than_keys_leaves_the_first_rows_empty():
    q, k, v = _qkv(1, 1, 7, 4, 3, dtype=F64, grad=True)  # end-aligned: queries 0..2 see no key
    out = tiled_attention(q, k, v, causal=True, block_q=2, block_k=2)
    assert torch.equal(out[:, :, :3], torch.zeros(1, 1, 3, 3, dtype=F64))
    torch.testing.assert_close(out[:, :, 3:], _sdpa(q[:, :, 3:], k, v, causal=True), rtol=0, atol=1e-13)
    assert all(torch.isfinite(g).all() for g in _grads(out, (q, k, v)))


# --------------------------------------------------------------------------- memory


def test_the_function_saves_o_n_numbers_beyond_its_inputs():
    B, h, n, m, d_k, d_v = 1, 2, 256, 320, 16, 8
    q, k, v = _qkv(B, h, n, m, d_k, d_v, grad=True)

    def saved_sizes(attention):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            attention()
        return sizes

    tiled = saved_sizes(lambda: tiled_attention(q, k, v, causal=True, block_q=64, block_k=64))
    inputs = q.numel() + k.numel() + v.numel()
    assert sum(tiled) - inputs == B * h * n * d_v + B * h * n  # the output and the logsumexp
    assert sum(tiled) - inputs < B * h * n * m / 10
    # The hooks do see an (n, m) tensor when one is saved: the materialised path saves its probabilities.
    assert max(saved_sizes(lambda: materialised_attention(q, k, v))) >= B * h * n * m


def test_peak_memory_of_a_known_allocation():
    one = 1024 * 1024 * 4  # a (1024, 1024) float32 tensor: 4 MiB
    assert peak_memory_bytes(lambda: torch.empty(1024, 1024)) == one
    assert peak_memory_bytes(lambda: torch.empty(256, 1024, dtype=F64)) == 2 * 2**20

    def one_after_the_other():
        a = torch.empty(1024, 1024)
        del a
        return torch.empty(1024, 1024)

    def both_at_once():
        a = torch.empty(1024, 1024)
        return a, torch.empty(1024, 1024)

    assert peak_memory_bytes(one_after_the_other) == one
    assert peak_memory_bytes(both_at_once) == 2 * one
    x = torch.ones(512, 512)  # allocated before: not counted
    assert peak_memory_bytes(lambda t: t.zero_(), x) == 0


def test_peak_memory_is_deterministic():
    q, k, v = _qkv(1, 2, 128, 128, 16)
    runs = {peak_memory_bytes(tiled_attention, q, k, v) for _ in range(3)}
    assert len(runs) == 1


def test_materialised_peak_holds_the_scores_and_tiled_does_not_grow_with_m():
    n, d_k, h, block = 64, 16, 2, 64
    tiled, materialised = [], []
    for m in (256, 2048):
        q, k, v = _qkv(1, h, n, m, d_k)
        tiled.append(peak_memory_bytes(functools.partial(tiled_attention, block_q=block, block_k=block), q, k, v))
        materialised.append(peak_memory_bytes(materialised_attention, q, k, v))
        assert materialised[-1] >= 2 * h * n * m * 4  # the scores and the probabilities, float32
    assert tiled[1] == tiled[0]  # one tile at a time, whatever the number of keys
    assert tiled[0] < h * n * d_k * 4 + 8 * h * block * block * 4  # the output and a few tiles


@pytest.mark.parametrize("backward", [False, True])
def test_memory_by_length(backward):
    rows = memory_by_length([128, 512], n_heads=2, d_k=16, block=64, backward=backward)
    assert [r.n for r in rows] == [128, 512]
    assert rows[1].ratio > rows[0].ratio and rows[1].ratio > 4
    assert rows[1].materialised_bytes >= 2 * 2 * 512 * 512 * 4
    assert all(r.materialised_seconds > 0 and r.tiled_seconds > 0 for r in rows)


# --------------------------------------------------------------------------- bad input


def _bad_calls():
    q, k, v = _qkv(2, 2, 5, 6, 4)
    return [
        (lambda: tiled_attention(q, k[..., :3], v), "d_k"),
        (lambda: tiled_attention(q, k, v[:, :, :5]), "same length m"),
        (lambda: tiled_attention(q, k[:1], v[:1]), r"\(B, h\)"),
        (lambda: tiled_attention(q[0], k[0], v[0]), "4 axes"),
        (lambda: tiled_attention(q, k[:, :, :0], v[:, :, :0]), "m >= 1"),
        (lambda: tiled_attention(q.long(), k.long(), v.long()), "floating point"),
        (lambda: tiled_attention(q, k.double(), v), "one dtype"),
        (lambda: tiled_attention(q, k, v, block_q=0), "block_q must be a positive int"),
        (lambda: tiled_attention(q, k, v, block_k=2.0), "block_k must be a positive int"),
        (lambda: tiled_attention(q, k, v, block_k=True), "block_k must be a positive int"),
        (lambda: tiled_attention(q, k, v, mask=torch.zeros(2, 1, 1, 5, dtype=torch.bool)), "does not broadcast"),
        (lambda: tiled_attention(q, k, v, mask=torch.zeros(3, 1, 1, 6, dtype=torch.bool)), "does not broadcast"),
        (lambda: tiled_attention(q, k, v, mask=torch.zeros(2, 1, 1, 6)), "boolean"),
        (lambda: tiled_attention(q, k, v, mask=torch.zeros(2, 1, 1, 6, dtype=torch.uint8)), "boolean"),
        (lambda: tiled_attention(q, k, v, causal=1), "causal must be a bool"),
        (lambda: tiled_attention(q, k, v, scale=float("inf")), "scale"),
        (lambda: TiledAttentionFunction.apply(q, k[..., :3], v, None, False, 4, 4, None), "d_k"),
        (lambda: tiled_attention_backward(k, q, k, v, q, q[..., 0], block_q=4), "dout must have shape"),
        (lambda: tiled_attention_backward(q, q, k, v, q, q, block_q=4), "lse must have shape"),
        (lambda: materialised_attention(q, k, v[:, :1]), r"\(B, h\)"),
        (lambda: online_softmax(torch.arange(5), 2), "floating-point"),
        (lambda: online_softmax(torch.randn(5), 0), "block must be a positive int"),
        (lambda: online_softmax(torch.tensor([0.0, float("nan")]), 1), "NaN"),
        (lambda: online_normaliser(torch.tensor(1.0), 1), "at least one axis"),
        (lambda: peak_memory_bytes(3), "callable"),
        (lambda: memory_by_length([0, 128]), "positive int"),
        (lambda: memory_by_length([128], block=-1), "block must be a positive int"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_bad_input_raises_value_error(index):
    call, message = _bad_calls()[index]
    with pytest.raises(ValueError, match=message):
        call()
