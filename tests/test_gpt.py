"""Tests of transformer_book.models.GPT, the decoder-only language model of chapter 9."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_book.models import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def small(**changes):
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**dict(vocab_size=11, context=16, d_model=16, n_heads=2, n_layers=2), **changes}))


def test_shapes_and_the_tied_output():
    model = small()
    logits = model(torch.randint(0, 11, (3, 7)))
    assert logits.shape == (3, 7, 11)
    assert model.output.weight is model.embedding.weight
    untied = small(tie_output=False)
    assert untied.output.weight is not untied.embedding.weight
    n = lambda m: sum(p.numel() for p in m.parameters())
    assert n(untied) - n(model) == 11 * 16


def test_causal_the_future_does_not_change_the_past():
    model = small(dropout=0.1).eval()
    tokens = torch.randint(0, 11, (2, 10))
    changed = tokens.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 11
    a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=0)
    assert not torch.allclose(a[:, 6], b[:, 6])


def test_parameter_count_by_formula():
    c = GPTConfig(vocab_size=65, context=64, d_model=128, n_heads=4, n_layers=4)
    per_layer = 4 * (c.d_model**2 + c.d_model) + 2 * c.d_model * c.ff_width + c.ff_width + c.d_model + 4 * c.d_model
    expected = c.vocab_size * c.d_model + c.context * c.d_model + c.n_layers * per_layer + 2 * c.d_model
    assert sum(p.numel() for p in GPT(c).parameters()) == expected


def test_gpt2_initialisation():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=500, context=64, d_model=128, n_heads=4, n_layers=8))
    assert model.embedding.weight.std().item() == pytest.approx(0.02, rel=0.05)
    layer = model.blocks.layers[0]
    assert layer.self_attn.w_q.weight.std().item() == pytest.approx(0.02, rel=0.05)
    residual = 0.02 / math.sqrt(2 * 8)
    assert layer.self_attn.w_o.weight.std().item() == pytest.approx(residual, rel=0.1)
    assert layer.ffn.linear2.weight.std().item() == pytest.approx(residual, rel=0.1)
    assert torch.all(layer.ffn.linear1.bias == 0) and torch.all(layer.norm1.gamma == 1)
    # so the untrained model predicts nearly uniformly: loss close to log |V|
    tokens = torch.randint(0, 500, (4, 64))
    loss = F.cross_entropy(model(tokens)[:, :-1].reshape(-1, 500), tokens[:, 1:].reshape(-1))
    assert abs(loss.item() - math.log(500)) < 0.1


def test_it_learns_a_repeating_pattern():
    model = small(dropout=0.0)
    pattern = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        start = torch.randint(0, 16, (8,))
        windows = torch.stack([pattern[s:s + 12] for s in start])
        loss = F.cross_entropy(model(windows[:, :-1]).reshape(-1, 11), windows[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05


def test_bad_input_and_config():
    model = small()
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 11\)"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="exceed the context of 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one sequence"):
        model(torch.zeros(0, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="n_heads"):
        GPTConfig(vocab_size=10, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        GPTConfig(vocab_size=10, n_layers=0)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(vocab_size=10, dropout=1.0)
