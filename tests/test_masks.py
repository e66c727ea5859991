"""Tests of the padding and causal masks (book convention: True = key excluded)."""

from __future__ import annotations

import math
import re

import pytest
import torch

from transformer_book.attention import scaled_dot_product_attention
from transformer_book.masks import causal_mask, padding_mask

F64 = torch.float64


# --------------------------------------------------------------------------------------
# padding_mask
# --------------------------------------------------------------------------------------


def test_padding_mask_shape_values_dtype():
    tokens = torch.tensor([[4, 7, 1, 0, 0], [9, 0, 3, 2, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.shape == (2, 1, 5)
    assert mask.dtype == torch.bool
    expected = torch.tensor([[[False, False, False, True, True]], [[False, True, False, False, True]]])
    assert torch.equal(mask, expected)


def test_padding_mask_uses_the_given_pad_id():
    tokens = torch.tensor([[4, 7, 1, 0, 1]])
    assert torch.equal(padding_mask(tokens, pad_id=1)[0, 0], torch.tensor([False, False, True, False, True]))


def test_padding_mask_broadcasts_over_query_rows():
    """(B, 1, m) masks every row of scores (B, n, m) on the key axis only."""
    B, n, m = 2, 3, 5
    tokens = torch.tensor([[4, 7, 1, 0, 0], [9, 8, 3, 2, 0]])
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, n, 4, generator=g, dtype=F64)
    k = torch.randn(B, m, 4, generator=g, dtype=F64)
    v = torch.randn(B, m, 2, generator=g, dtype=F64)
    _, weights = scaled_dot_product_attention(q, k, v, padding_mask(tokens, 0))
    assert weights.shape == (B, n, m)
    for b in range(B):
        for i in range(n):
            for j in range(m):
                if tokens[b, j] == 0:
                    assert weights[b, i, j] == 0
                else:
                    assert weights[b, i, j] > 0
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, n, dtype=F64))


@pytest.mark.parametrize(
    "tokens, match",
    [
        (torch.tensor([[1.0, 2.0, 0.0]]), "integer"),
        (torch.tensor([True, False]).reshape(1, 2), "integer"),
        (torch.tensor([1, 2, 0]), r"\(B, m\).*\(3,\)"),
        (torch.zeros(2, 3, 4, dtype=torch.long), r"\(B, m\).*\(2, 3, 4\)"),
        ([[1, 2, 0]], r"\(B, m\) integer tensor, got list"),
    ],
)
def test_padding_mask_errors(tokens, match):
    with pytest.raises(ValueError, match=match):
        padding_mask(tokens, 0)


# --------------------------------------------------------------------------------------
# causal_mask
# --------------------------------------------------------------------------------------


def test_causal_mask_excludes_exactly_the_future():
    m = 5
    mask = causal_mask(m)
    assert mask.shape == (m, m) and mask.dtype == torch.bool
    for i in range(m):
        for j in range(m):
            assert bool(mask[i, j]) == (j > i), (i, j)
    assert not mask.diagonal().any()  # the diagonal is kept
    assert (~mask[0]).sum() == 1 and not mask[0, 0]  # row 0 sees only key 0


def test_causal_mask_of_length_one():
    assert torch.equal(causal_mask(1), torch.tensor([[False]]))


def test_causal_mask_device_argument():
    assert causal_mask(3, device="cpu").device == torch.device("cpu")
    assert causal_mask(3, device=torch.device("cpu")).device.type == "cpu"
    # the argument is honoured, not ignored: the meta device needs no hardware
    meta = causal_mask(3, device="meta")
    assert meta.device.type == "meta" and meta.shape == (3, 3) and meta.dtype == torch.bool


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "3", None])
def test_causal_mask_rejects_non_positive_or_non_int(bad):
    with pytest.raises(ValueError, match="positive int.*" + re.escape(repr(bad))):
        causal_mask(bad)


# --------------------------------------------------------------------------------------
# Combining and using the masks
# --------------------------------------------------------------------------------------


def _hand_attention(q, k, v, allowed):
    """Loop-over-positions attention; allowed(b, i, j) says whether query i sees key j."""
    B, n, d_k = q.shape
    m, d_v = v.shape[1], v.shape[2]
    out = torch.zeros(B, n, d_v, dtype=q.dtype)
    weights = torch.zeros(B, n, m, dtype=q.dtype)
    for b in range(B):
        for i in range(n):
            keys = [j for j in range(m) if allowed(b, i, j)]
            if not keys:
                continue  # a query with no key at all: zeros (the book's convention)
            scores = [float(q[b, i] @ k[b, j]) / math.sqrt(d_k) for j in keys]
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            for j, e in zip(keys, exps):
                weights[b, i, j] = e / sum(exps)
                out[b, i] += weights[b, i, j] * v[b, j]
    return out, weights


def test_or_combination_of_padding_and_causal_equals_hand_loop():
    tokens = torch.tensor([[5, 6, 7, 8, 0, 0], [0, 0, 3, 4, 5, 6]])  # right and left padding
    B, m = tokens.shape
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, m, 4, generator=g, dtype=F64)
    k = torch.randn(B, m, 4, generator=g, dtype=F64)
    v = torch.randn(B, m, 3, generator=g, dtype=F64)

    mask = padding_mask(tokens, 0) | causal_mask(m)
    assert mask.shape == (B, m, m)
    out, weights = scaled_dot_product_attention(q, k, v, mask)

    hand_out, hand_weights = _hand_attention(q, k, v, lambda b, i, j: j <= i and tokens[b, j] != 0)
    torch.testing.assert_close(weights, hand_weights, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, hand_out, rtol=1e-12, atol=1e-12)
    # left padding makes queries 0 and 1 of sequence 1 fully masked: zeros, not NaN
    assert torch.equal(weights[1, :2], torch.zeros(2, m, dtype=F64))


def test_causal_row_zero_attends_to_itself_with_weight_one():
    """Regression trap: masking j >= i instead of j > i would leave row 0 with no key."""
    m = 4
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, m, 3, generator=g, dtype=F64)
    v = torch.randn(1, m, 2, generator=g, dtype=F64)

    out, weights = scaled_dot_product_attention(x, x, v, causal_mask(m))
    assert weights[0, 0, 0] == 1.0
    assert torch.equal(weights[0, 0, 1:], torch.zeros(m - 1, dtype=F64))
    torch.testing.assert_close(out[0, 0], v[0, 0], rtol=0, atol=1e-15)

    # the wrong mask (diagonal excluded) blanks row 0 entirely, which is what the test guards
    wrong = torch.ones(m, m, dtype=torch.bool).triu(diagonal=0)
    _, wrong_weights = scaled_dot_product_attention(x, x, v, wrong)
    assert torch.equal(wrong_weights[0, 0], torch.zeros(m, dtype=F64))
    assert not torch.equal(causal_mask(m), wrong)
