"""Tests of the positional encodings (chapter 4).

Expected values come from Python's ``math`` module in plain loops, from numpy, or from
hand-checked tables; nothing expected is produced by the code under test.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy.special import erf
from torch import nn

from transformer_book.attention import scaled_dot_product_attention
from transformer_book.positional import (
    POSITIONS,
    WAYS,
    ALiBi,
    LearnableFourierFeatures,
    LearnedPositionalEmbedding,
    PositionEncoding,
    RelativePositionBias,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    offset_matrix,
    position_encoding,
    position_names,
    relative_position_bucket,
    sinusoidal_encoding,
)

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pe_math(pos: int, j: int, d: int, base: float = 10000.0) -> float:
    """PE[pos, j] straight from the paper's formula."""
    i = j // 2
    angle = pos / base ** (2 * i / d)
    return math.sin(angle) if j % 2 == 0 else math.cos(angle)


def _rotate_pairs_np(x: np.ndarray, pos: float, d: int, base: float = 10000.0) -> np.ndarray:
    """RoFormer's rotation, counter-clockwise by pos * theta_i on pairs (2i, 2i+1)."""
    out = np.empty_like(x)
    for i in range(d // 2):
        t = pos * base ** (-2 * i / d)
        c, s = math.cos(t), math.sin(t)
        out[2 * i] = c * x[2 * i] - s * x[2 * i + 1]
        out[2 * i + 1] = s * x[2 * i] + c * x[2 * i + 1]
    return out


def _block_rotation_np(angle_scale: float, d: int, base: float = 10000.0) -> np.ndarray:
    """Block-diagonal [[cos, -sin], [sin, cos]] with angles angle_scale * theta_i."""
    r = np.zeros((d, d))
    for i in range(d // 2):
        t = angle_scale * base ** (-2 * i / d)
        c, s = math.cos(t), math.sin(t)
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return r


# ----------------------------------------------------------------------------- sinusoidal


def test_sinusoidal_values_match_the_formula():
    n, d = 30, 16
    pe = sinusoidal_encoding(n, d, dtype=F64)
    assert pe.shape == (n, d) and pe.dtype == F64
    expected = torch.tensor([[_pe_math(p, j, d) for j in range(d)] for p in range(n)], dtype=F64)
    torch.testing.assert_close(pe, expected, rtol=0, atol=1e-12)
    # by hand: row 0 is (0, 1, 0, 1, ...); PE[1, 0] = sin 1; PE[2, 3] = cos(2 / 10000^(2/16))
    assert pe[0, 0::2].abs().max() == 0 and torch.all(pe[0, 1::2] == 1)
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0), abs=1e-15)
    assert pe[2, 3].item() == pytest.approx(math.cos(2 / 10000 ** (2 / 16)), abs=1e-15)


def test_sinusoidal_default_dtype_shape_base_and_range():
    pe = sinusoidal_encoding(100, 32)
    assert pe.shape == (100, 32) and pe.dtype == torch.float32
    assert pe.abs().max() <= 1.0
    assert sinusoidal_encoding(3, 4, dtype=torch.bfloat16).dtype == torch.bfloat16
    pe_b = sinusoidal_encoding(10, 6, base=100.0, dtype=F64)
    assert pe_b[7, 5].item() == pytest.approx(_pe_math(7, 5, 6, base=100.0), abs=1e-14)


def test_sinusoidal_wavelengths_from_2pi_to_base_times_2pi():
    d = 8
    # Column 0 is sin(pos), of period 2*pi.
    pe = sinusoidal_encoding(2000, d, dtype=F64)
    pos = np.arange(2000)
    np.testing.assert_allclose(pe[:, 0].numpy(), np.sin(pos), atol=1e-12)
    # The last pair's angular frequency, fitted to its unwrapped phase atan2(sin, cos),
    # gives the wavelength 2*pi*base^((d-2)/d).
    phase = np.unwrap(np.arctan2(pe[:, d - 2].numpy(), pe[:, d - 1].numpy()))
    omega = np.polyfit(pos, phase, 1)[0]
    assert 2 * math.pi / omega == pytest.approx(2 * math.pi * 10000 ** ((d - 2) / d), rel=1e-9)
    # the wavelengths grow geometrically, the last one below 2*pi*base
    assert 2 * math.pi / omega < 2 * math.pi * 10000


@pytest.mark.parametrize(
    "args, name",
    [
        ((10, 7), "d_model"),
        ((10, 0), "d_model"),
        ((10, -4), "d_model"),
        ((10, 8.0), "d_model"),
        ((0, 8), "n_positions"),
        ((-3, 8), "n_positions"),
        ((2.5, 8), "n_positions"),
        ((True, 8), "n_positions"),
        ((10, 8, 1.0), "base"),
        ((10, 8, -5.0), "base"),
        ((10, 8, float("inf")), "base"),
    ],
)
def test_sinusoidal_bad_arguments_raise(args, name):
    with pytest.raises(ValueError, match=name):
        sinusoidal_encoding(*args)


def test_sinusoidal_bad_dtype_raises():
    with pytest.raises(ValueError, match="dtype"):
        sinusoidal_encoding(4, 4, dtype=torch.int64)


# ----------------------------------------------------------------------------- offset matrix


@pytest.mark.parametrize("k", [0, 1, 2, 5, 17, -1, -7, 2.5])
def test_offset_matrix_shifts_every_position(k):
    d, n = 12, 80
    m = offset_matrix(k, d, dtype=F64)
    assert m.shape == (d, d) and m.dtype == F64
    pos = np.arange(20, 60, dtype=np.float64)
    # Independent table at pos and pos + k (k may be fractional or negative).
    table = lambda p: np.array([[_pe_math(q, j, d) for j in range(d)] for q in p])
    shifted = table(pos) @ m.numpy().T
    np.testing.assert_allclose(shifted, table(pos + k), rtol=0, atol=1e-10)
    # Column-vector form on the package table: PE(pos + k) = M_k PE(pos).
    if float(k).is_integer():
        pe = sinusoidal_encoding(n, d, dtype=F64)
        for p in range(max(0, -int(k)), n - max(0, int(k))):
            torch.testing.assert_close(m @ pe[p], pe[p + int(k)], rtol=0, atol=1e-10)


def test_offset_matrix_blocks_by_hand():
    d = 4
    m = offset_matrix(3, d, dtype=F64).numpy()
    w0, w1 = 1.0, 10000 ** (-2 / 4)
    expected = np.array(
        [
            [math.cos(3 * w0), math.sin(3 * w0), 0, 0],
            [-math.sin(3 * w0), math.cos(3 * w0), 0, 0],
            [0, 0, math.cos(3 * w1), math.sin(3 * w1)],
            [0, 0, -math.sin(3 * w1), math.cos(3 * w1)],
        ]
    )
    np.testing.assert_allclose(m, expected, rtol=0, atol=1e-15)


def test_offset_matrix_is_orthogonal_and_composes():
    d = 10
    eye = torch.eye(d, dtype=F64)
    for j, k in [(1, 2), (3, -3), (-4, 11), (0.5, 1.25), (100, 250)]:
        mj, mk = offset_matrix(j, d, dtype=F64), offset_matrix(k, d, dtype=F64)
        torch.testing.assert_close(mj.T @ mj, eye, rtol=0, atol=1e-12)
        torch.testing.assert_close(mj @ mk, offset_matrix(j + k, d, dtype=F64), rtol=0, atol=1e-12)
        torch.testing.assert_close(mj.T, offset_matrix(-j, d, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(offset_matrix(0, d, dtype=F64), eye, rtol=0, atol=0)


def test_offset_matrix_does_not_depend_on_position():
    # Solve for the map pe[pos] -> pe[pos + k] from different windows of positions:
    # a least-squares fit on each window recovers the same matrix, equal to M_k.
    d, k = 6, 4
    pe = sinusoidal_encoding(400, d, dtype=F64).numpy()
    fits = []
    for start in (0, 100, 300):
        src, dst = pe[start : start + 40], pe[start + k : start + k + 40]
        fits.append(np.linalg.lstsq(src, dst, rcond=None)[0].T)  # dst^T = M src^T
    for fit in fits:
        np.testing.assert_allclose(fit, offset_matrix(k, d, dtype=F64).numpy(), atol=1e-6)


def test_offset_matrix_bad_arguments_raise():
    with pytest.raises(ValueError, match="k"):
        offset_matrix(float("nan"), 4)
    with pytest.raises(ValueError, match="k"):
        offset_matrix("3", 4)
    with pytest.raises(ValueError, match="d_model"):
        offset_matrix(1, 5)
    with pytest.raises(ValueError, match="base"):
        offset_matrix(1, 4, base=0.5)


# ----------------------------------------------------------------------------- sinusoidal module


def test_sinusoidal_module_registers_a_non_persistent_buffer():
    module = SinusoidalPositionalEncoding(8, max_len=20)
    assert "pe" in dict(module.named_buffers())
    assert "pe" not in module.state_dict()
    assert list(module.parameters()) == []
    assert module.pe.shape == (20, 8)
    module.to(F64)
    assert module.pe.dtype == F64
    torch.testing.assert_close(module.pe, sinusoidal_encoding(20, 8, dtype=F64), rtol=0, atol=1e-7)
    assert "d_model=8" in repr(module) and "max_len=20" in repr(module)


def test_sinusoidal_module_adds_the_table():
    d, n = 8, 5
    module = SinusoidalPositionalEncoding(d, max_len=50)
    x = torch.randn(3, n, d, generator=_gen(1))
    expected = x + torch.tensor([[_pe_math(p, j, d) for j in range(d)] for p in range(n)])
    torch.testing.assert_close(module(x), expected, rtol=0, atol=1e-6)
    x64 = x.double()
    assert module(x64).dtype == F64


def test_sinusoidal_module_dropout_only_in_training():
    module = SinusoidalPositionalEncoding(8, max_len=10, dropout=0.5)
    x = torch.zeros(2, 10, 8)
    module.eval()
    torch.testing.assert_close(module(x), module.pe.expand(2, 10, 8))
    module.train()
    torch.manual_seed(0)
    out = module(x)
    assert (out == 0).any() and ((out == 0) | torch.isclose(out, 2 * module.pe)).all()


def test_sinusoidal_module_errors():
    module = SinusoidalPositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError) as info:
        module(torch.zeros(1, 11, 8))
    assert "11" in str(info.value) and "10" in str(info.value)
    with pytest.raises(ValueError, match="d_model"):
        module(torch.zeros(1, 4, 6))
    with pytest.raises(ValueError, match="d_model"):
        SinusoidalPositionalEncoding(7)
    with pytest.raises(ValueError, match="dropout"):
        SinusoidalPositionalEncoding(8, dropout=1.5)


# ----------------------------------------------------------------------------- learned


def test_learned_embedding_adds_rows_and_learns():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(max_len=12, d_model=6)
    assert "weight" in dict(module.embedding.named_parameters())
    w = module.embedding.weight
    assert 0.01 < w.std().item() < 0.03  # N(0, 0.02^2), 72 samples
    x = torch.randn(2, 5, 6, generator=_gen(2))
    out = module(x)
    torch.testing.assert_close(out, x + w[:5].detach().unsqueeze(0), rtol=0, atol=0)
    out.sum().backward()
    grad = module.embedding.weight.grad
    torch.testing.assert_close(grad[:5], torch.full((5, 6), 2.0))  # batch of 2
    assert torch.all(grad[5:] == 0)
    assert "max_len=12" in repr(module)


def test_learned_embedding_cannot_extrapolate():
    module = LearnedPositionalEmbedding(max_len=4, d_model=3)
    with pytest.raises(ValueError) as info:
        module(torch.zeros(1, 5, 3))
    assert "5" in str(info.value) and "4" in str(info.value)
    with pytest.raises(ValueError, match="d_model"):
        module(torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="max_len"):
        LearnedPositionalEmbedding(0, 3)


# ----------------------------------------------------------------------------- T5 relative bias


def _t5_bucket_math(r: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The T5 rule in plain Python (float64 logarithm)."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        if r > 0:
            offset = num_buckets
        dist = abs(r)
    else:
        dist = max(-r, 0)
    exact = num_buckets // 2
    if dist < exact:
        return offset + dist
    fraction = math.log(dist / exact) / math.log(max_distance / exact)
    large = exact + int(fraction * (num_buckets - exact))
    return offset + min(large, num_buckets - 1)


def test_bucket_hand_checked_values_bidirectional():
    # 32 buckets, max_distance 128: 16 per sign, 8 of them exact.
    cases = {
        0: 0,
        -1: 1,
        -7: 7,
        -8: 8,
        -15: 9,
        -16: 10,
        -32: 12,
        -127: 15,
        -128: 15,
        -5000: 15,
        1: 17,
        3: 19,
        7: 23,
        8: 24,
        16: 26,
        200: 31,
    }
    r = torch.tensor(list(cases))
    assert relative_position_bucket(r, True, 32, 128).tolist() == list(cases.values())


def test_bucket_hand_checked_values_unidirectional():
    # 32 buckets, all for the past: 16 exact, log(32/16)/log(128/16)*16 = 5.33 -> 21.
    cases = {0: 0, 1: 0, 5: 0, 1000: 0, -1: 1, -15: 15, -16: 16, -32: 21, -128: 31, -(10**6): 31}
    r = torch.tensor(list(cases))
    assert relative_position_bucket(r, False, 32, 128).tolist() == list(cases.values())


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20), (64, 512)])
def test_bucket_matches_the_rule_and_is_monotone(bidirectional, num_buckets, max_distance):
    r = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    got = relative_position_bucket(r, bidirectional, num_buckets, max_distance)
    assert got.dtype == torch.long and got.shape == r.shape
    expected = [_t5_bucket_math(v, bidirectional, num_buckets, max_distance) for v in r.tolist()]
    assert got.tolist() == expected
    assert got.min() >= 0 and got.max() < num_buckets
    past = got[r <= 0].flip(0)  # distances 0, 1, 2, ... into the past
    assert torch.all(past[1:] >= past[:-1])
    last = num_buckets // 2 - 1 if bidirectional else num_buckets - 1
    assert torch.all(got[r <= -max_distance] == last)
    if bidirectional:
        future = got[r > 0]
        assert torch.all(future[1:] >= future[:-1])
        assert torch.all(future >= num_buckets // 2) and torch.all(got[r <= 0] < num_buckets // 2)
        assert torch.all(got[r >= max_distance] == num_buckets - 1)
        # the same distance in the two directions lands in the mirrored bucket
        d = torch.arange(1, 2 * max_distance)
        torch.testing.assert_close(
            relative_position_bucket(d, True, num_buckets, max_distance) - num_buckets // 2,
            relative_position_bucket(-d, True, num_buckets, max_distance),
        )
    else:
        assert torch.all(got[r >= 0] == 0)


def test_bucket_bad_arguments_raise():
    r = torch.arange(3)
    with pytest.raises(ValueError, match="relative_position"):
        relative_position_bucket(r.float())
    with pytest.raises(ValueError, match="num_buckets"):
        relative_position_bucket(r, True, 7, 128)
    with pytest.raises(ValueError, match="max_distance"):
        relative_position_bucket(r, True, 32, 8)
    with pytest.raises(ValueError, match="bidirectional"):
        relative_position_bucket(r, 1, 32, 128)


def test_relative_position_bias_is_toeplitz_per_head():
    torch.manual_seed(0)
    h, n, m = 3, 7, 11
    module = RelativePositionBias(h, num_buckets=8, max_distance=6)
    assert module.relative_position_bucket is relative_position_bucket
    bias = module(n, m)
    assert bias.shape == (h, n, m)
    table = module.embedding.weight.detach()  # (num_buckets, h)
    for i in range(n):
        for j in range(m):
            b = _t5_bucket_math(j - i, True, 8, 6)
            torch.testing.assert_close(bias[:, i, j].detach(), table[b], rtol=0, atol=0)
            if i > 0 and j > 0:
                torch.testing.assert_close(bias[:, i, j], bias[:, i - 1, j - 1], rtol=0, atol=0)
    # it extends to any length: 1000 x 1000 works, far offsets share the end buckets
    far = module(1000, 1000)
    torch.testing.assert_close(far[:, 999, 0].detach(), table[3], rtol=0, atol=0)
    torch.testing.assert_close(far[:, 0, 999].detach(), table[7], rtol=0, atol=0)


def test_relative_position_bias_as_attention_bias():
    torch.manual_seed(0)
    b, h, n, m, d = 2, 4, 5, 6, 8
    module = RelativePositionBias(h, bidirectional=False).double()
    with torch.no_grad():
        module.embedding.weight.normal_()
    g = _gen(3)
    q, k, v = (torch.randn(b, h, length, d, generator=g, dtype=F64) for length in (n, m, m))
    out, weights = scaled_dot_product_attention(q, k, v, bias=module(n, m))
    assert out.shape == (b, h, n, d) and weights.shape == (b, h, n, m)
    scores = (q @ k.transpose(-2, -1)).numpy() / math.sqrt(d)
    table = module.embedding.weight.detach().numpy()
    for i in range(n):
        for j in range(m):
            scores[:, :, i, j] += table[_t5_bucket_math(j - i, False, 32, 128)]
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights.detach().numpy(), expected, rtol=0, atol=1e-12)
    out.sum().backward()
    assert module.embedding.weight.grad is not None and module.embedding.weight.grad.abs().sum() > 0


def test_relative_position_bias_errors_and_repr():
    with pytest.raises(ValueError, match="n_heads"):
        RelativePositionBias(0)
    module = RelativePositionBias(2)
    with pytest.raises(ValueError, match="n"):
        module(0, 3)
    assert "num_buckets=32" in repr(module) and "bidirectional=True" in repr(module)


# ----------------------------------------------------------------------------- rotary


def test_rotary_matches_an_independent_block_rotation():
    d, n = 8, 12
    rope = RotaryEmbedding(d)
    x = torch.randn(2, 3, n, d, generator=_gen(4), dtype=F64)
    out = rope(x)
    assert out.shape == x.shape and out.dtype == F64
    xn = x.numpy()
    for pos in range(n):
        expected = np.stack([_rotate_pairs_np(v, pos, d) for v in xn[..., pos, :].reshape(-1, d)])
        got = out[..., pos, :].reshape(-1, d).numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        # in matrix form: R_pos x, and R_pos = M_pos^T of the sinusoidal offset property
        r = _block_rotation_np(pos, d)
        np.testing.assert_allclose(xn[..., pos, :] @ r.T, out[..., pos, :].numpy(), atol=1e-12)
        np.testing.assert_allclose(r, offset_matrix(pos, d, dtype=F64).numpy().T, atol=1e-12)


def test_rotary_direction_on_the_first_pair():
    # e_0 at position 1 turns counter-clockwise by theta_0 = 1 radian: (cos 1, sin 1).
    rope = RotaryEmbedding(4)
    x = torch.zeros(2, 4, dtype=F64)
    x[1, 0] = 1.0
    out = rope(x)
    assert out[1, :2].tolist() == pytest.approx([math.cos(1.0), math.sin(1.0)], abs=1e-15)
    assert out[1, 2:].tolist() == [0.0, 0.0]


def test_rotary_identity_at_zero_and_norms():
    rope = RotaryEmbedding(16)
    x = torch.randn(4, 50, 16, generator=_gen(5), dtype=F64)
    out = rope(x)
    torch.testing.assert_close(out[:, 0], x[:, 0], rtol=0, atol=0)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=0)


def test_rotary_scores_depend_only_on_the_offset():
    d = 16
    rope = RotaryEmbedding(d)
    g = _gen(6)
    q, k = torch.randn(d, generator=g, dtype=F64), torch.randn(d, generator=g, dtype=F64)

    def score(m: int, n: int) -> float:
        qm = rope(q.expand(1, d), positions=torch.tensor([m]))[0]
        kn = rope(k.expand(1, d), positions=torch.tensor([n]))[0]
        return float(qm @ kn)

    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-12)
    assert score(3, 1) != pytest.approx(score(1, 3), abs=1e-6)  # the sign of the offset matters
    rng = np.random.default_rng(0)
    for m, n in rng.integers(0, 500, size=(40, 2)).tolist():
        shift = int(rng.integers(0, 500))
        assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-10)
        # q_m . k_n = q . R_{n-m} k, with R computed independently
        relative = float(q.numpy() @ _block_rotation_np(n - m, d) @ k.numpy())
        assert score(m, n) == pytest.approx(relative, abs=1e-10)


def test_rotary_positions_argument_and_dtypes():
    rope = RotaryEmbedding(8)
    x = torch.randn(3, 5, 8, generator=_gen(7), dtype=F64)
    torch.testing.assert_close(rope(x, positions=torch.arange(5)), rope(x), rtol=0, atol=0)
    shifted = rope(x, positions=torch.arange(5) + 7)
    for p in range(5):
        expected = x[:, p].numpy() @ _block_rotation_np(p + 7, 8).T
        np.testing.assert_allclose(shifted[:, p].numpy(), expected, atol=1e-12)
    # per-batch positions broadcast (..., n)
    per_batch = rope(x, positions=torch.tensor([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6], [0, 0, 0, 0, 0]]))
    torch.testing.assert_close(per_batch[0], rope(x[0]))
    torch.testing.assert_close(per_batch[2], x[2])
    # float32 input stays float32 and is accurate; a float64 module (.double()) stays exact
    out32 = rope(x.float())
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), rope(x), rtol=0, atol=1e-5)
    torch.testing.assert_close(rope.double()(x), rope(x), rtol=0, atol=0)
    angles = rope.rotation_angles(torch.arange(3, dtype=F64))
    assert angles.shape == (3, 4)
    expected = [2 * 10000 ** (-2 * i / 8) for i in range(4)]
    np.testing.assert_allclose(angles[2].numpy(), expected, rtol=1e-15)


def test_rotary_buffer_and_errors():
    rope = RotaryEmbedding(6, base=500.0)
    assert "inv_freq" in dict(rope.named_buffers()) and "inv_freq" not in rope.state_dict()
    expected = [500 ** (-2 * i / 6) for i in range(3)]
    np.testing.assert_allclose(rope.inv_freq.numpy(), expected, rtol=1e-7)
    assert "d_head=6" in repr(rope)
    with pytest.raises(ValueError, match="d_head"):
        RotaryEmbedding(7)
    with pytest.raises(ValueError, match="d_head"):
        rope(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="positions"):
        rope(torch.zeros(3, 6), positions=torch.arange(4))


# ----------------------------------------------------------------------------- learnable Fourier


def test_fourier_features_shapes_and_formula():
    torch.manual_seed(0)
    module = LearnableFourierFeatures(d_model=12, n_features=10, hidden=7, gamma=2.0).double()
    x = torch.randn(2, 9, 12, generator=_gen(8), dtype=F64)
    out = module(x)
    assert out.shape == (2, 9, 12)
    enc = module.encode(torch.arange(9))
    assert enc.shape == (9, 12)
    torch.testing.assert_close(out, x + enc, rtol=0, atol=0)
    # recompute by hand with numpy from the parameters
    w = module.w_r.weight.detach().numpy()[:, 0]  # (5,)
    lin1, lin2 = module.mlp[0], module.mlp[2]
    p = np.arange(9, dtype=np.float64)[:, None]
    feats = np.concatenate([np.cos(p * w), np.sin(p * w)], axis=1) / math.sqrt(10)
    hidden = feats @ lin1.weight.detach().numpy().T + lin1.bias.detach().numpy()
    hidden = 0.5 * hidden * (1 + erf(hidden / math.sqrt(2)))  # exact GELU
    expected = hidden @ lin2.weight.detach().numpy().T + lin2.bias.detach().numpy()
    np.testing.assert_allclose(enc.detach().numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 4.0])
def test_fourier_features_init_std_is_one_over_gamma(gamma):
    torch.manual_seed(1)
    module = LearnableFourierFeatures(d_model=4, n_features=40000, hidden=2, gamma=gamma)
    w = module.w_r.weight.detach().double()
    assert w.numel() == 20000
    # standard error of the sample std is about sigma / sqrt(2N) = 0.5%; allow 3%
    assert w.std().item() == pytest.approx(1 / gamma, rel=0.03)
    assert abs(w.mean().item()) < 5 / gamma / math.sqrt(20000)


def test_fourier_features_gradients_and_limits():
    torch.manual_seed(2)
    module = LearnableFourierFeatures(d_model=6, n_features=8, max_len=10)
    out = module(torch.zeros(1, 10, 6))
    (out**2).sum().backward()
    assert module.w_r.weight.grad is not None and module.w_r.weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in module.mlp.parameters())
    with pytest.raises(ValueError) as info:
        module(torch.zeros(1, 11, 6))
    assert "11" in str(info.value) and "10" in str(info.value)
    unlimited = LearnableFourierFeatures(d_model=6, n_features=8)
    assert unlimited(torch.zeros(1, 300, 6)).shape == (1, 300, 6)
    assert "n_features=8" in repr(module)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"n_features": 7}, "n_features"),
        ({"n_features": 0}, "n_features"),
        ({"gamma": 0.0}, "gamma"),
        ({"gamma": -1.0}, "gamma"),
        ({"hidden": 0}, "hidden"),
        ({"max_len": 0}, "max_len"),
    ],
)
def test_fourier_features_bad_arguments_raise(kwargs, name):
    with pytest.raises(ValueError, match=re.escape(name)):
        LearnableFourierFeatures(d_model=4, **kwargs)


# --------------------------------------------------------------------------- ALiBi


def test_alibi_slopes_for_powers_of_two_are_the_papers_geometric_sequence():
    from transformer_book.positional import alibi_slopes

    assert alibi_slopes(8).tolist() == [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    for h in (1, 2, 4, 16):
        s = alibi_slopes(h)
        assert s[0].item() == pytest.approx(2.0 ** (-8 / h)) and s.dtype == torch.float64
        torch.testing.assert_close(s[1:] / s[:-1], torch.full((h - 1,), 2.0 ** (-8 / h), dtype=torch.float64))


def test_alibi_slopes_between_powers_of_two_interleave_the_next_power():
    from transformer_book.positional import alibi_slopes

    # 6 heads: the 4 slopes of 4 heads, then slopes 1 and 3 of 8 heads (1/2 and 1/8)
    assert alibi_slopes(6).tolist() == [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
    assert alibi_slopes(3).tolist() == [2**-4, 2**-8, 2**-2]
    assert len(set(alibi_slopes(12).tolist())) == 12


def test_alibi_bias_is_minus_slope_times_distance():
    from transformer_book.positional import ALiBi, alibi_slopes

    bias = ALiBi(4)(5)
    slopes = alibi_slopes(4).float()
    for h in range(4):
        for i in range(5):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * abs(i - j))
    torch.testing.assert_close(bias, bias.transpose(1, 2))  # symmetric both ways
    causal = ALiBi(4, bidirectional=False)(5)
    assert torch.equal(causal.tril(), bias.tril()) and (causal.triu(1) == 0).all()


def test_alibi_with_earlier_keys_aligns_the_queries_with_the_last_positions():
    from transformer_book.positional import ALiBi

    alibi = ALiBi(2, bidirectional=False)
    torch.testing.assert_close(alibi(2, 6), alibi(6)[:, 4:])
    torch.testing.assert_close(ALiBi(2)(3, 7), ALiBi(2)(7)[:, 4:])


def test_alibi_has_no_parameters_and_follows_the_module():
    from transformer_book.positional import ALiBi

    alibi = ALiBi(8)
    assert list(alibi.parameters()) == [] and alibi.state_dict() == {}
    assert alibi.double().slopes.dtype == torch.float64 and alibi(3).dtype == torch.float64


def test_alibi_errors():
    from transformer_book.positional import ALiBi, alibi_slopes

    with pytest.raises(ValueError, match="alibi_slopes: n_heads must be a positive int, got 0"):
        alibi_slopes(0)
    with pytest.raises(ValueError, match="bidirectional must be a bool"):
        ALiBi(2, bidirectional=1)
    with pytest.raises(ValueError, match=r"m must be an int >= 3"):
        ALiBi(2)(3, 2)
    with pytest.raises(ValueError, match="ALiBi: n must be a positive int, got 0"):
        ALiBi(2)(0)


# --------------------------------------------------------------------------- one factory for the models


def test_the_factory_knows_four_encodings_in_three_ways():
    assert POSITIONS == ("learned", "sinusoidal", "alibi", "rotary")
    assert set(WAYS) == {"embedding", "bias", "rotation"}
    assert position_names(("embedding",)) == ("learned", "sinusoidal")
    assert position_names(("bias", "rotation")) == ("alibi", "rotary")
    assert position_names() == POSITIONS
    for ways in ((), "embedding", ("embedding", "table")):
        with pytest.raises(
            ValueError, match="ways must be a non-empty collection of 'embedding', 'bias' or 'rotation'"
        ):
            position_names(ways)


def test_the_factory_builds_each_encoding_for_the_models_sizes():
    sizes = dict(d_model=12, n_heads=3, max_len=10)
    learned = position_encoding("learned", **sizes)
    assert type(learned) is LearnedPositionalEmbedding and learned.embedding.weight.shape == (10, 12)
    sinusoidal = position_encoding("sinusoidal", **sizes, base=100.0)
    assert type(sinusoidal) is SinusoidalPositionalEncoding and sinusoidal.pe.shape == (10, 12)
    assert sinusoidal.pe[3, 2].item() == pytest.approx(_pe_math(3, 2, 12, base=100.0), abs=1e-7)
    encoder, decoder = position_encoding("alibi", **sizes), position_encoding("alibi", **sizes, causal=True)
    assert type(encoder) is ALiBi and encoder.n_heads == 3 and encoder.bidirectional and not decoder.bidirectional
    rotary = position_encoding("rotary", **sizes, base=500.0)
    assert type(rotary) is RotaryEmbedding and rotary.d_head == 4 and rotary.base == 500.0
    assert all(isinstance(e, PositionEncoding) for e in (learned, sinusoidal, encoder, rotary))
    for encoding in (learned, sinusoidal):  # no dropout inside: the model drops out
        assert encoding.dropout.p == 0.0


def test_each_encoding_answers_for_the_three_ways():
    x = torch.randn(2, 5, 8, generator=_gen(1))
    for name in POSITIONS:
        encoding = position_encoding(name, d_model=8, n_heads=2, max_len=16).eval()
        added, bias, rotary = encoding.add(x, 3), encoding.attention_bias(5, 9), encoding.rotary
        if name in ("learned", "sinusoidal"):  # added to the embeddings
            table = encoding.embedding.weight if name == "learned" else encoding.pe
            torch.testing.assert_close(added, x + table[3:8], rtol=0, atol=0)
            torch.testing.assert_close(encoding(x, 3), added, rtol=0, atol=0)  # forward = dropout(add)
            assert bias is None and rotary is None
        elif name == "alibi":  # a bias on the scores
            slopes = torch.tensor([2.0**-4, 2.0**-8])
            distance = (torch.arange(4, 9)[:, None] - torch.arange(9)[None, :]).abs().float()  # queries 4..8
            torch.testing.assert_close(bias, -slopes[:, None, None] * distance, rtol=0, atol=0)
            assert added is x and rotary is None
        else:  # rotations of q and k
            assert rotary is encoding and rotary.d_head == 4
            assert added is x and bias is None


def test_initialise_false_leaves_the_table_as_nn_embedding_draws_it():
    torch.manual_seed(0)
    table = position_encoding("learned", d_model=8, n_heads=2, max_len=6, initialise=False).embedding.weight
    after = torch.rand(3)
    torch.manual_seed(0)
    reference = nn.Embedding(6, 8).weight  # one draw from N(0, 1), nothing more
    assert torch.equal(table, reference) and torch.equal(after, torch.rand(3))
    torch.manual_seed(0)
    drawn = position_encoding("learned", d_model=8, n_heads=2, max_len=6).embedding.weight
    torch.manual_seed(0)
    assert torch.equal(drawn, LearnedPositionalEmbedding(6, 8).embedding.weight)  # N(0, 0.02^2) redrawn
    with pytest.raises(ValueError, match="initialise must be a bool"):
        LearnedPositionalEmbedding(6, 8, initialise=1)


def test_the_factory_refuses_names_and_sizes_clearly():
    sizes = dict(d_model=8, n_heads=2, max_len=16)
    with pytest.raises(
        ValueError,
        match=r"^position_encoding: unknown position 'rope'; position_encoding takes "
        r"'learned', 'sinusoidal', 'alibi' or 'rotary'$",
    ):
        position_encoding("rope", **sizes)
    with pytest.raises(ValueError, match=r"^M: unknown position None; M takes 'learned' or 'sinusoidal'$"):
        position_encoding(None, **sizes, ways=("embedding",), where="M")
    with pytest.raises(
        ValueError,
        match=r"^M: position 'alibi' adds a bias to the attention scores, which M does "
        r"not take; choose 'learned', 'sinusoidal' or 'rotary'$",
    ):
        position_encoding("alibi", **sizes, ways=("embedding", "rotation"), where="M")
    with pytest.raises(
        ValueError,
        match=r"^M: position 'learned' adds a vector to each embedding, which M does not "
        r"take; choose 'alibi'$",
    ):
        position_encoding("learned", **sizes, ways=("bias",), where="M")
    with pytest.raises(
        ValueError,
        match=r"^M: position 'sinusoidal' does not fit d_model=7, n_heads=1, max_len=16: "
        r"SinusoidalPositionalEncoding: d_model must be an even int >= 2, got 7$",
    ):
        position_encoding("sinusoidal", d_model=7, n_heads=1, max_len=16, where="M")
    with pytest.raises(ValueError, match="M: max_len must be a positive int, got 0"):
        position_encoding("learned", d_model=8, n_heads=2, max_len=0, where="M")
    with pytest.raises(ValueError, match=r"M: causal must be a bool \(True or False\), got 1"):
        position_encoding("alibi", **sizes, causal=1, where="M")
    with pytest.raises(ValueError, match="M: ways must be a non-empty collection"):
        position_encoding("alibi", **sizes, ways=("scores",), where="M")


def test_an_encoding_added_to_the_registry_reaches_every_model(monkeypatch):
    """Adding an encoding is one entry in positional.py: no model names the encodings it takes."""
    from transformer_book import positional
    from transformer_book.models import GPT, BERTConfig, GPTConfig
    from transformer_book.models.bert import BERT

    class Doubled(positional.PositionEncoding):
        def add(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
            return 2 * x

    monkeypatch.setitem(positional._ENCODINGS, "doubled", ("embedding", lambda sizes: Doubled()))
    gpt = GPT(GPTConfig(vocab_size=11, context=8, d_model=8, n_heads=2, n_layers=1, position="doubled")).eval()
    bert = BERT(BERTConfig(vocab_size=11, max_len=8, d_model=8, n_heads=2, n_layers=1, position="doubled")).eval()
    assert isinstance(gpt.positional, Doubled) and isinstance(bert.positional, Doubled)
    tokens = torch.randint(0, 11, (2, 5))
    torch.testing.assert_close(gpt._embed(tokens, 0), 2 * gpt.embedding(tokens))


def test_every_encoding_names_itself_and_the_argument_it_refuses():
    """The argument checks of the module, one message shape: the class or function, the argument,
    what it must be, and the value given."""
    sinusoidal, learned, t5 = "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "RelativePositionBias"
    fourier = "LearnableFourierFeatures"
    cases = [
        (lambda: SinusoidalPositionalEncoding(8, max_len=0), f"{sinusoidal}: max_len must be a positive int, got 0"),
        (lambda: SinusoidalPositionalEncoding(0), f"{sinusoidal}: d_model must be an int >= 2, got 0"),
        (
            lambda: SinusoidalPositionalEncoding(8, dropout=-0.1),
            rf"{sinusoidal}: dropout must lie in \[0, 1\], got -0.1",
        ),
        (lambda: SinusoidalPositionalEncoding(8, base=1), f"{sinusoidal}: base must be a finite real > 1, got 1"),
        (lambda: LearnedPositionalEmbedding(4, True), f"{learned}: d_model must be a positive int, got True"),
        (lambda: LearnedPositionalEmbedding(4, 8, dropout=1.5), rf"{learned}: dropout must lie in \[0, 1\], got 1.5"),
        (
            lambda: LearnedPositionalEmbedding(4, 8)(torch.zeros(1, 2, 8), -1),
            f"{learned}: offset must be a non-negative int, got -1",
        ),
        (lambda: RelativePositionBias(0), f"{t5}: n_heads must be a positive int, got 0"),
        (lambda: RelativePositionBias(2)(0, 3), f"{t5}: n must be a positive int, got 0"),
        (
            lambda: RelativePositionBias(2, num_buckets=9),
            f"{t5}: num_buckets must be an even int >= 4 when bidirectional, got 9",
        ),
        (
            lambda: RelativePositionBias(2, num_buckets=8, max_distance=2),
            f"{t5}: max_distance must be an int >= 3, got 2",
        ),
        (
            lambda: RelativePositionBias(2, num_buckets=8, max_distance=4, bidirectional=False),
            f"{t5}: max_distance must be an int >= 5, got 4",
        ),
        (lambda: RotaryEmbedding(7), "RotaryEmbedding: d_head must be an even int >= 2, got 7"),
        (
            lambda: LearnableFourierFeatures(8, gamma=float("inf")),
            f"{fourier}: gamma must be a finite real > 0, got inf",
        ),
        (lambda: LearnableFourierFeatures(8, n_features=3), f"{fourier}: n_features must be an even int >= 2, got 3"),
        (lambda: offset_matrix(float("nan"), 8), "offset_matrix: k must be a finite real, got nan"),
        (lambda: sinusoidal_encoding(0, 8), "sinusoidal_encoding: n_positions must be a positive int, got 0"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=f"^{message}$"):
            call()


def test_the_added_tables_take_a_dropout_of_one():
    """The two tables added to the embeddings accept dropout in [0, 1], 1 included (as before)."""
    x = torch.randn(2, 3, 8)
    for encoding in (
        SinusoidalPositionalEncoding(8, max_len=4, dropout=1.0),
        LearnedPositionalEmbedding(4, 8, dropout=1.0),
    ):
        assert encoding.dropout.p == 1.0
        assert torch.equal(encoding.train()(x), torch.zeros_like(x))  # everything dropped in training


def test_the_bias_module_buckets_as_the_function_does():
    """RelativePositionBias buckets its offsets without checking its settings again: the same
    buckets as relative_position_bucket, both directions."""
    for bidirectional, num_buckets, max_distance in ((True, 32, 128), (False, 8, 20), (True, 4, 2)):
        bias = RelativePositionBias(2, num_buckets, max_distance, bidirectional)
        r = torch.arange(40)[None, :] - torch.arange(30)[:, None]
        assert torch.equal(bias.buckets(30, 40), relative_position_bucket(r, bidirectional, num_buckets, max_distance))
