"""Tests of the Transformer block's pieces (chapter 5) and the encoder/decoder layers (chapter 6).

References: ``nn.LayerNorm``, ``nn.TransformerEncoderLayer``/``nn.TransformerDecoderLayer``
(through ``transformer_book.twins``), hand formulas written in this file (the LayerNorm
forward and its closed-form gradient, the FFN), and invariances. Comparisons run in float64.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from transformer_book import twins
from transformer_book.layers import DecoderLayer, EncoderLayer, LayerNorm, PositionwiseFeedForward, layer_norm
from transformer_book.masks import causal_mask, combine_masks

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)


pytestmark = pytest.mark.usefixtures("one_thread")


def _randn(*shape, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(requires_grad)


def _randomise(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial weights, biases, gammas and betas, drawn in float32, then widened to float64.

    (Drawn in float32 because ``twins`` rounds float64 weights to float32, see
    ``test_layer_twins_keep_float64_weights_exactly``.)
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
    return module.to(F64)


# --------------------------------------------------------------------------------------
# LayerNorm
# --------------------------------------------------------------------------------------


def _layer_norm_by_hand(x, gamma, beta, eps, unbiased=False):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=unbiased)
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta


def _norm(d, seed, eps=1e-5, fused=True):
    ln = LayerNorm(d, eps=eps, fused=fused).to(F64)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        ln.gamma.copy_(1.0 + 0.5 * torch.randn(d, generator=g, dtype=F64))
        ln.beta.copy_(torch.randn(d, generator=g, dtype=F64))
    return ln


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "written-out"])
@pytest.mark.parametrize("shape", [(8,), (5, 8), (2, 3, 16), (4, 1, 2, 6)])
def test_layer_norm_matches_torch_in_value_and_gradient(shape, fused):
    d = shape[-1]
    ours = _norm(d, seed=1, fused=fused)
    ref = nn.LayerNorm(d, eps=1e-5, dtype=F64)
    with torch.no_grad():
        ref.weight.copy_(ours.gamma)
        ref.bias.copy_(ours.beta)
    x = (3.0 * _randn(*shape, seed=2) + 1.5).requires_grad_(True)
    upstream = _randn(*shape, seed=3)
    out, expected = ours(x), ref(x)
    torch.testing.assert_close(out, expected, **TOL)
    g_ours = torch.autograd.grad((out * upstream).sum(), [x, ours.gamma, ours.beta])
    g_ref = torch.autograd.grad((expected * upstream).sum(), [x, ref.weight, ref.bias])
    for a, b in zip(g_ours, g_ref):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "written-out"])
def test_layer_norm_uses_biased_variance(fused):
    ln = _norm(6, seed=4, fused=fused)
    x = _randn(3, 6, seed=5)
    out = ln(x)
    biased = _layer_norm_by_hand(x, ln.gamma, ln.beta, ln.eps, unbiased=False)
    unbiased = _layer_norm_by_hand(x, ln.gamma, ln.beta, ln.eps, unbiased=True)
    torch.testing.assert_close(out, biased, **TOL)
    # the unbiased variant is visibly different, so this test catches the trap
    assert (out - unbiased).abs().max() > 1e-2
    # normalised rows (gamma = 1, beta = 0): mean 0 and biased variance 1 (up to eps)
    plain = LayerNorm(6, fused=fused).to(F64)(x)
    torch.testing.assert_close(plain.mean(-1), torch.zeros(3, dtype=F64), rtol=0, atol=1e-12)
    var = plain.var(-1, unbiased=False)
    torch.testing.assert_close(var, x.var(-1, unbiased=False) / (x.var(-1, unbiased=False) + 1e-5), **TOL)


def test_layer_norm_constant_rows_give_beta_and_finite_gradients():
    """eps inside the root: sqrt(0 + eps) > 0 has a finite derivative.

    With eps outside the root, (x - mu) / (sqrt(var) + eps), the value is still beta but the
    derivative of sqrt at var = 0 is infinite and the gradient is NaN (shown below by hand).
    """
    ln = _norm(8, seed=6)
    x = torch.tensor([[3.0] * 8, [-1.5] * 8, [0.0] * 8], dtype=F64, requires_grad=True)
    out = ln(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ln.beta.expand(3, 8), rtol=0, atol=0)
    upstream = _randn(3, 8, seed=7)
    grad_x, grad_gamma = torch.autograd.grad((out * upstream).sum(), [x, ln.gamma])
    assert torch.isfinite(grad_x).all() and torch.isfinite(grad_gamma).all()
    # closed form for a constant row: x_hat = 0, so dL/dx = (g - mean(g)) / sqrt(eps), g = upstream * gamma
    g = upstream * ln.gamma
    torch.testing.assert_close(grad_x, (g - g.mean(-1, keepdim=True)) / math.sqrt(ln.eps), **TOL)

    # the trap, by hand: eps outside the root
    x2 = x.detach().clone().requires_grad_(True)
    mu = x2.mean(-1, keepdim=True)
    wrong = ln.gamma * (x2 - mu) / (((x2 - mu) ** 2).mean(-1, keepdim=True).sqrt() + ln.eps) + ln.beta
    (wrong_grad,) = torch.autograd.grad((wrong * upstream).sum(), [x2])
    assert not torch.isfinite(wrong_grad).all()


def test_layer_norm_shift_and_scale_invariance():
    """LN_eps(a x + b) = LN_{eps / a^2}(x) exactly, for a > 0 and any per-row a, b.

    The a^2 (not a) is where eps inside the root shows: with eps outside the root the
    identity would need eps / a.
    """
    d = 10
    x = _randn(4, d, seed=8)
    a = torch.tensor([[0.5], [3.0], [7.0], [1.0]], dtype=F64)
    b = torch.tensor([[2.0], [-4.0], [0.25], [100.0]], dtype=F64)
    for row in range(4):
        ln = _norm(d, seed=9, eps=1e-3)
        ln_scaled = _norm(d, seed=9, eps=1e-3 / a[row].item() ** 2)
        torch.testing.assert_close(ln(a[row] * x[row] + b[row]), ln_scaled(x[row]), rtol=1e-9, atol=1e-10)
    # pure shifts leave the output unchanged with the same eps
    ln = _norm(d, seed=9, eps=1e-3)
    torch.testing.assert_close(ln(x + b), ln(x), rtol=1e-9, atol=1e-10)
    # and eps matters at this size (so the scaling check above is not vacuous)
    assert (ln(7.0 * x) - ln(x)).abs().max() > 1e-6


def test_layer_norm_gradient_closed_form():
    r"""dL/dx = (1/sigma_hat) (g - mean(g) - x_hat * mean(g * x_hat)), g = dL/dy * gamma.

    Derivation: x_hat_i = (x_i - mu) / sigma_hat with sigma_hat^2 = var + eps, so
    d x_hat_i / d x_j = (delta_ij - 1/d) / sigma_hat - x_hat_i x_hat_j / (d sigma_hat),
    since d sigma_hat / d x_j = (x_j - mu) / (d sigma_hat). Sum against g_i.
    dL/dgamma = sum over rows of dL/dy * x_hat; dL/dbeta = sum over rows of dL/dy.
    """
    d = 7
    ln = _norm(d, seed=10, eps=1e-2)  # a large eps, so that eps-placement errors show
    x = (0.3 * _randn(2, 3, d, seed=11)).requires_grad_(True)
    dy = _randn(2, 3, d, seed=12)
    grad_x, grad_gamma, grad_beta = torch.autograd.grad((ln(x) * dy).sum(), [x, ln.gamma, ln.beta])

    with torch.no_grad():
        mu = x.mean(-1, keepdim=True)
        sigma_hat = torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + ln.eps)
        x_hat = (x - mu) / sigma_hat
        g = dy * ln.gamma
        expected_x = (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True)) / sigma_hat
    torch.testing.assert_close(grad_x, expected_x, **TOL)
    torch.testing.assert_close(grad_gamma, (dy * x_hat).sum(dim=(0, 1)), **TOL)
    torch.testing.assert_close(grad_beta, dy.sum(dim=(0, 1)), **TOL)
    # the gradient of a LayerNorm input sums to zero along the features (shift invariance)
    torch.testing.assert_close(grad_x.sum(-1), torch.zeros(2, 3, dtype=F64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_layer_norm_fused_and_written_out_agree_in_value_and_gradient(dtype):
    """The module's two paths are one function: values and the gradients of x, gamma and beta."""
    fused, written = _norm(16, seed=11, fused=True).to(dtype), _norm(16, seed=11, fused=False).to(dtype)
    x = (4.0 * _randn(3, 5, 16, seed=12) - 2.0).to(dtype)
    upstream = _randn(3, 5, 16, seed=13).to(dtype)
    results = []
    for ln in (fused, written):
        xi = x.clone().requires_grad_(True)
        out = ln(xi)
        assert out.dtype == dtype
        results.append((out, *torch.autograd.grad((out * upstream).sum(), [xi, ln.gamma, ln.beta])))
    # float64: to rounding; the half types: to a few units in their last place (both compute in float32)
    tol = {
        torch.float64: TOL,
        torch.float32: dict(rtol=1e-5, atol=1e-5),
        torch.float16: dict(rtol=2e-3, atol=4e-3),
        torch.bfloat16: dict(rtol=2e-2, atol=3e-2),
    }[dtype]
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "written-out"])
def test_layer_norm_float16_statistics_do_not_overflow(fused):
    """One feature 400 away from the mean: (x - mu)^2 = 160,000 overflows float16 (max 65,504).

    Statistics computed in float16 make the variance inf and the whole row 0 (a GPT's logits
    all zero after ``.half()``); in float32 the row is normalised as in float64.
    """
    x = _randn(2, 8, seed=14)
    x[:, 3] = 400.0
    ln = _norm(8, seed=15, fused=fused)
    expected = ln(x)
    got = ln.to(torch.float16)(x.to(torch.float16))
    assert got.dtype == torch.float16 and torch.isfinite(got).all()
    assert got.abs().amax(-1).min() > 0.5  # no row collapsed to beta
    torch.testing.assert_close(got.double(), expected, rtol=1e-2, atol=1e-2)
    # the trap itself, in float16 arithmetic: the variance is inf
    x16 = x.to(torch.float16)
    assert torch.isinf((x16 - x16.mean(-1, keepdim=True)).pow(2).mean(-1)).all()


def test_layer_norm_function_keeps_the_input_dtype_and_shape():
    gamma, beta = torch.ones(4, dtype=torch.float32), torch.zeros(4, dtype=torch.float32)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        out = layer_norm(torch.arange(8.0).reshape(2, 4).to(dtype), gamma, beta)
        assert out.dtype == dtype and out.shape == (2, 4)
        torch.testing.assert_close(
            out.double(), torch.tensor([[-1.3416, -0.4472, 0.4472, 1.3416]] * 2, dtype=F64), rtol=1e-2, atol=1e-2
        )


def test_layer_norm_errors():
    ln = LayerNorm(8)
    with pytest.raises(ValueError, match=r"\(\.\.\., 8\).*" + re.escape("(2, 3, 7)")):
        ln(torch.randn(2, 3, 7))
    for eps in (0.0, -1e-5):
        with pytest.raises(ValueError, match=r"eps.*positive"):
            LayerNorm(8, eps=eps)
    with pytest.raises(ValueError, match="d_model"):
        LayerNorm(0)


def test_layer_norm_parameters():
    ln = LayerNorm(5, eps=1e-6)
    assert sorted(n for n, _ in ln.named_parameters()) == ["beta", "gamma"]
    assert torch.equal(ln.gamma, torch.ones(5)) and torch.equal(ln.beta, torch.zeros(5))
    assert ln.eps == 1e-6
    assert ln.fused and not LayerNorm(5, fused=False).fused
    assert "fused=False" in repr(LayerNorm(5, fused=False)) and "fused" not in repr(ln)


# --------------------------------------------------------------------------------------
# Position-wise feed-forward network
# --------------------------------------------------------------------------------------


def test_ffn_equals_hand_formula_relu():
    ffn = _randomise(PositionwiseFeedForward(6, 10), seed=13)
    x = _randn(2, 4, 6, seed=14)
    w1, b1, w2, b2 = ffn.linear1.weight, ffn.linear1.bias, ffn.linear2.weight, ffn.linear2.bias
    hidden = x @ w1.T + b1
    expected = torch.where(hidden > 0, hidden, torch.zeros_like(hidden)) @ w2.T + b2
    torch.testing.assert_close(ffn(x), expected, **TOL)
    assert (hidden < 0).any() and (hidden > 0).any()  # ReLU is active on both sides


def test_ffn_equals_hand_formula_gelu():
    ffn = _randomise(PositionwiseFeedForward(6, 10, activation="gelu"), seed=15)
    x = _randn(3, 6, seed=16)
    hidden = x @ ffn.linear1.weight.T + ffn.linear1.bias
    gelu = 0.5 * hidden * (1.0 + torch.erf(hidden / math.sqrt(2.0)))  # exact GELU, x * Phi(x)
    torch.testing.assert_close(ffn(x), gelu @ ffn.linear2.weight.T + ffn.linear2.bias, **TOL)
    relu = _randomise(PositionwiseFeedForward(6, 10, activation="relu"), seed=15)
    assert not torch.allclose(relu(x), ffn(x))


def test_ffn_acts_on_each_position_independently():
    ffn = _randomise(PositionwiseFeedForward(8, 16), seed=17)
    x = _randn(2, 5, 8, seed=18)
    changed = x.clone()
    changed[:, 3] = _randn(2, 8, seed=19)
    out, out_changed = ffn(x), ffn(changed)
    keep = [0, 1, 2, 4]
    torch.testing.assert_close(out_changed[:, keep], out[:, keep], rtol=0, atol=0)
    assert not torch.allclose(out_changed[:, 3], out[:, 3])
    # and each position alone gives the same as the batch
    torch.testing.assert_close(ffn(x[:, 2:3]), out[:, 2:3], **TOL)


def test_ffn_errors():
    with pytest.raises(ValueError, match=r"activation.*'swish'"):
        PositionwiseFeedForward(8, 16, activation="swish")
    with pytest.raises(ValueError, match="d_ff"):
        PositionwiseFeedForward(8, 0)
    with pytest.raises(ValueError, match="dropout"):
        PositionwiseFeedForward(8, 16, dropout=1.0)


# --------------------------------------------------------------------------------------
# Encoder and decoder layers against their torch.nn twins
# --------------------------------------------------------------------------------------

SRC_PADDING = torch.tensor([[False] * 4 + [True] * 2, [False] * 6])  # (B, m) = (2, 6)
TGT_PADDING = torch.tensor([[False] * 3 + [True] * 2, [False] * 5])  # (B, n) = (2, 5)
MODES = [(nf, mode) for nf in (False, True) for mode in ("eval", "train")]


def _set_mode(module, mode):
    return module.train(mode == "train")


@pytest.mark.parametrize("norm_first,mode", MODES)
def test_encoder_layer_matches_torch(norm_first, mode):
    layer = _set_mode(_randomise(EncoderLayer(16, 4, 24, dropout=0.0, norm_first=norm_first), seed=20), mode)
    twin = twins.torch_encoder_layer(layer)
    assert twin.training == layer.training
    x = _randn(2, 6, 16, seed=21, requires_grad=True)
    upstream = _randn(2, 6, 16, seed=22)
    out = layer(x, SRC_PADDING[:, None, :])
    expected = twin(x, src_key_padding_mask=SRC_PADDING)
    torch.testing.assert_close(out, expected, **TOL)
    (g_ours,) = torch.autograd.grad((out * upstream).sum(), [x])
    (g_theirs,) = torch.autograd.grad((expected * upstream).sum(), [x])
    torch.testing.assert_close(g_ours, g_theirs, **TOL)
    with torch.no_grad():  # PyTorch's inference fast path, where it applies
        torch.testing.assert_close(layer(x, SRC_PADDING[:, None, :]), twin(x, src_key_padding_mask=SRC_PADDING), **TOL)


@pytest.mark.parametrize("norm_first,mode", MODES)
def test_decoder_layer_matches_torch(norm_first, mode):
    layer = _set_mode(_randomise(DecoderLayer(16, 4, 24, dropout=0.0, norm_first=norm_first), seed=23), mode)
    twin = twins.torch_decoder_layer(layer)
    y = _randn(2, 5, 16, seed=24, requires_grad=True)
    memory = _randn(2, 6, 16, seed=25, requires_grad=True)
    upstream = _randn(2, 5, 16, seed=26)
    self_mask = combine_masks(TGT_PADDING[:, None, :], causal_mask(5))
    out = layer(y, memory, self_mask, SRC_PADDING[:, None, :])
    expected = twin(
        y, memory, tgt_mask=causal_mask(5), tgt_key_padding_mask=TGT_PADDING, memory_key_padding_mask=SRC_PADDING
    )
    torch.testing.assert_close(out, expected, **TOL)
    g_ours = torch.autograd.grad((out * upstream).sum(), [y, memory])
    g_theirs = torch.autograd.grad((expected * upstream).sum(), [y, memory])
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_layers_differ_between_post_ln_and_pre_ln(norm_first):
    """Guards the twin tests above: norm placement changes the result."""
    a = _randomise(EncoderLayer(8, 2, 12, dropout=0.0, norm_first=norm_first), seed=27)
    b = _randomise(EncoderLayer(8, 2, 12, dropout=0.0, norm_first=not norm_first), seed=27)
    x = _randn(1, 4, 8, seed=28)
    assert not torch.allclose(a(x), b(x))


def test_layer_twins_keep_float64_weights_exactly():
    layer = EncoderLayer(8, 2, 12, dropout=0.0).to(F64)
    g = torch.Generator().manual_seed(29)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    twin = twins.torch_encoder_layer(layer)
    torch.testing.assert_close(twin.linear1.weight, layer.ffn.linear1.weight, rtol=0, atol=0)
    torch.testing.assert_close(twin.norm1.weight, layer.norm1.gamma, rtol=0, atol=0)


def test_encoder_layer_need_weights():
    layer = _randomise(EncoderLayer(16, 4, 24, dropout=0.0), seed=30)
    x = _randn(2, 6, 16, seed=31)
    mask = SRC_PADDING[:, None, :]
    out, weights = layer(x, mask, need_weights=True)
    assert weights.shape == (2, 4, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 6, dtype=F64), rtol=0, atol=1e-12)
    assert torch.all(weights[0, :, :, 4:] == 0)  # PAD keys get no weight
    torch.testing.assert_close(out, layer(x, mask), **TOL)  # the weights path gives the same output


def test_decoder_layer_need_weights():
    layer = _randomise(DecoderLayer(16, 4, 24, dropout=0.0), seed=32)
    y, memory = _randn(2, 5, 16, seed=33), _randn(2, 6, 16, seed=34)
    self_mask = combine_masks(TGT_PADDING[:, None, :], causal_mask(5))
    out, self_w, cross_w = layer(y, memory, self_mask, SRC_PADDING[:, None, :], need_weights=True)
    assert self_w.shape == (2, 4, 5, 5) and cross_w.shape == (2, 4, 5, 6)
    for w in (self_w, cross_w):
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1], dtype=F64), rtol=0, atol=1e-12)
    assert torch.all(self_w.triu(diagonal=1) == 0)  # no look-ahead
    assert torch.all(cross_w[0, :, :, 4:] == 0)  # no attention to source PAD
    torch.testing.assert_close(out, layer(y, memory, self_mask, SRC_PADDING[:, None, :]), **TOL)


# --------------------------------------------------------------------------------------
# Residual connections
# --------------------------------------------------------------------------------------


def _zero_sublayers(layer):
    with torch.no_grad():
        for name in ("self_attn", "cross_attn", "ffn"):
            if hasattr(layer, name):
                for p in getattr(layer, name).parameters():
                    p.zero_()
    return layer


def test_pre_ln_layers_with_zero_sublayers_are_the_identity():
    x = _randn(2, 5, 8, seed=35)
    memory = _randn(2, 6, 8, seed=36)
    enc = _zero_sublayers(_randomise(EncoderLayer(8, 2, 12, dropout=0.0, norm_first=True), seed=37))
    dec = _zero_sublayers(_randomise(DecoderLayer(8, 2, 12, dropout=0.0, norm_first=True), seed=38))
    torch.testing.assert_close(enc(x, SRC_PADDING[:, None, :5]), x, rtol=0, atol=0)
    torch.testing.assert_close(dec(x, memory, causal_mask(5)[None]), x, rtol=0, atol=0)
    # post-LN has no clean residual path: the output is LayerNorm(x), not x
    post = _zero_sublayers(_randomise(EncoderLayer(8, 2, 12, dropout=0.0, norm_first=False), seed=37))
    expected = post.norm2(post.norm1(x))
    torch.testing.assert_close(post(x), expected, **TOL)
    assert not torch.allclose(post(x), x)


def test_layer_dropout_active_only_in_training():
    layer = _randomise(EncoderLayer(8, 2, 12, dropout=0.3), seed=39)
    x = _randn(2, 5, 8, seed=40)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x), rtol=0, atol=0)
    layer.train()
    torch.manual_seed(0)
    a = layer(x)
    torch.manual_seed(0)
    b = layer(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.allclose(a, layer(x))


def test_layer_errors():
    with pytest.raises(ValueError, match="dropout"):
        EncoderLayer(8, 2, 12, dropout=1.5)
    with pytest.raises(ValueError, match=r"(?=.*\b10\b)(?=.*\b4\b)"):
        DecoderLayer(10, 4, 12)
    with pytest.raises(ValueError, match="activation"):
        EncoderLayer(8, 2, 12, activation="tanh")
