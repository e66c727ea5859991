"""Tests of ``transformer_book.flops``: the FLOP count of a GPT against PyTorch's own FLOP
counter (``torch.utils.flop_counter``) run over a real forward and backward pass, the datasheet
table's lookup by device name, and MFU's arithmetic."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_book import flops
from transformer_book.attention import scaled_dot_product_attention
from transformer_book.models import GPT, GPTConfig


@pytest.mark.parametrize("tie_output", [True, False])
@pytest.mark.parametrize("n", [16, 9])
def test_gpt_flops_per_token_equals_the_counted_matrix_products(tie_output, n):
    """PyTorch counts every matrix product of one training step, forward and backward. Its
    counter does not see inside the CPU's fused attention kernel, so the attention's products
    are counted separately, on the book's explicit attention of the same shapes (full n x n
    scores, the formula's convention), once per layer."""
    config = GPTConfig(50, context=16, d_model=32, n_heads=4, n_layers=2, d_ff=48, dropout=0.0, tie_output=tie_output)
    model = GPT(config)
    tokens = torch.randint(0, 50, (3, n), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        model(tokens).sum().backward()
    q, k, v = (torch.randn(3, 4, n, 8, requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False) as attention_counter:
        scaled_dot_product_attention(q, k, v)[0].sum().backward()
    counted = counter.get_total_flops() + config.n_layers * attention_counter.get_total_flops()
    assert flops.gpt_flops_per_token(config, n) * tokens.numel() == pytest.approx(counted, rel=1e-9)


def test_gpt2_small_costs_what_the_published_estimate_says():
    """GPT-2 small (124M, context 1024): the 6N + 12 L n d estimate, N = 85M block weights plus
    the 38.6M-entry output layer (vocabulary padded to 50,304), is about 0.85 GFLOP per token."""
    config = GPTConfig(50_304, context=1024, d_model=768, n_heads=12, n_layers=12)
    n_weights = 12 * (4 * 768**2 + 2 * 768 * 3072) + 768 * 50_304
    assert flops.gpt_flops_per_token(config) == 6 * n_weights + 12 * 12 * 1024 * 768
    assert 0.85e9 < flops.gpt_flops_per_token(config) < 0.86e9


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H100 80GB HBM3", 989.4e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989.4e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA L40S", 362.1e12),
        ("NVIDIA L4", 121e12),
        ("Some Future GPU", None),
    ],
)
def test_peak_flops_reads_the_datasheet_by_device_name(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert flops.peak_flops("cuda") == peak


def test_peak_flops_is_unknown_on_the_cpu():
    assert flops.peak_flops("cpu") is None


def test_mfu_is_achieved_over_peak_flops():
    assert flops.mfu(1e5, 8e8, 1e14) == pytest.approx(0.8)
    assert flops.mfu(0.0, 8e8, 1e14) == 0.0


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: flops.mfu(-1.0, 1e9, 1e14), "tokens_per_s"),
        (lambda: flops.mfu(1.0, 0.0, 1e14), "flops_per_token and peak"),
        (lambda: flops.mfu(1.0, 1e9, float("nan")), "flops_per_token and peak"),
        (
            lambda: flops.gpt_flops_per_token(GPTConfig(10, context=8), 9),
            r"context=9 exceeds the model's context of 8 positions",
        ),
        (lambda: flops.gpt_flops_per_token(GPTConfig(10, context=8), 0), "context must be a positive int, got 0"),
        (lambda: flops.gpt_flops_per_token("gpt2"), "config must be a GPTConfig"),
    ],
)
def test_bad_input_is_named(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("n", [1, 7, 20])
@pytest.mark.parametrize("n_layers", [1, 2])
def test_transformer_encoder_cost_equals_the_counted_matrix_products(n, n_layers):
    """The explicit attention path (``need_weights=True``) runs the scores and the mixture as
    products that PyTorch's counter sees; the fused kernel would hide them on the CPU."""
    from transformer_book.models.transformer import Encoder

    encoder = Encoder(n_layers, d_model=32, n_heads=4, d_ff=48, dropout=0.0)
    with FlopCounterMode(display=False) as counter:
        encoder(torch.randn(3, n, 32), need_weights=True)
    cost = flops.transformer_encoder_cost(n, 32, 48, n_layers)
    assert 3 * cost.flops == counter.get_total_flops()
    assert cost.rounds == 6 * n_layers


@pytest.mark.parametrize("n", [1, 9])
@pytest.mark.parametrize("n_layers, bidirectional", [(1, True), (2, True), (1, False), (3, False)])
def test_gru_encoder_cost_equals_the_counted_matrix_products(n, n_layers, bidirectional):
    gru = torch.nn.GRU(24, 40, n_layers, batch_first=True, bidirectional=bidirectional)
    with FlopCounterMode(display=False) as counter:
        gru(torch.randn(2, n, 24))
    cost = flops.gru_encoder_cost(n, 24, 40, n_layers, bidirectional)
    assert 2 * cost.flops == counter.get_total_flops()


def test_the_rounds_of_a_gru_grow_with_n_and_those_of_a_transformer_do_not():
    assert [flops.gru_encoder_cost(n, 8, 8).rounds for n in (1, 10, 100)] == [1, 10, 100]
    assert flops.gru_encoder_cost(10, 8, 8, n_layers=6).rounds == 60  # waits for both directions
    assert flops.gru_encoder_cost(10, 8, 8, n_layers=6, bidirectional=False).rounds == 15  # a wavefront
    assert {flops.transformer_encoder_cost(n, 8, 8, n_layers=6).rounds for n in (1, 10, 100)} == {36}


def test_the_chapter_7_encoders_do_equal_work_per_token_but_for_the_scores():
    """3 layers of d = 256, d_ff = 1024 against a bidirectional GRU of 256 -> 512: 4,718,592 FLOPs
    per token each, plus the Transformer's 4 n d per layer for the scores and the mixture."""
    for n in (1, 16, 128):
        transformer = flops.transformer_encoder_cost(n, 256, 1024, 3).flops
        gru = flops.gru_encoder_cost(n, 256, 512).flops
        assert gru == 4_718_592 * n and transformer - gru == 3 * 4 * n * n * 256


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: flops.transformer_encoder_cost(0, 8, 8), "n must be"),
        (lambda: flops.transformer_encoder_cost(4, 8, 8, n_layers=1.5), "n_layers must be"),
        (lambda: flops.gru_encoder_cost(4, 8, -1), "d_hidden must be"),
        (lambda: flops.gru_encoder_cost(4, 8, 8, bidirectional="yes"), "bidirectional must be a bool"),
    ],
)
def test_bad_cost_arguments_are_named(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
