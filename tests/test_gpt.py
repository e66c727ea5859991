"""Tests of transformer_book.models.GPT, the decoder-only language model of chapter 9."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.masks import causal_mask
from transformer_book.models import GPT, GPTConfig
from transformer_book.models.transformer import Encoder
from transformer_book.positional import ALiBi, LearnedPositionalEmbedding, SinusoidalPositionalEncoding, alibi_slopes

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
        windows = torch.stack([pattern[s : s + 12] for s in start])
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


# ---- positions ------------------------------------------------------------------------------------


def test_positions_default_to_gpt2s_learned_table():
    model = small()
    assert model.config.position == "learned" and isinstance(model.positional, LearnedPositionalEmbedding)
    assert model.positional.embedding.weight.shape == (16, 16) and "positional.embedding.weight" in model.state_dict()


def test_sinusoidal_positions_add_the_fixed_table():
    model = small(position="sinusoidal", dropout=0.0).double().eval()
    assert isinstance(model.positional, SinusoidalPositionalEncoding)
    assert not any(name.startswith("positional.") for name, _ in model.named_parameters())
    tokens = torch.randint(0, 11, (2, 6))
    table = torch.tensor(
        [
            [
                math.sin(p / 10000 ** (2 * (j // 2) / 16)) if j % 2 == 0 else math.cos(p / 10000 ** (2 * (j // 2) / 16))
                for j in range(16)
            ]
            for p in range(6)
        ],
        dtype=torch.float64,
    )
    x = model.embedding.weight[tokens] + table
    expected = model.output(model.blocks(x, model.causal[None, :6, :6]))
    torch.testing.assert_close(model(tokens), expected)


def test_alibi_positions_bias_every_layers_scores_causally():
    model = small(position="alibi", dropout=0.0).double().eval()
    assert isinstance(model.positional, ALiBi) and not model.positional.bidirectional
    assert not any(name.startswith("positional.") for name, _ in model.named_parameters())
    n = 7
    tokens = torch.randint(0, 11, (2, n))
    slopes = torch.tensor([2.0**-4, 2.0**-8], dtype=torch.float64)  # 2 heads: 2^(-8k/2)
    assert torch.equal(alibi_slopes(2), slopes)
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).clamp_min(0).double()  # i - j for j <= i
    bias = -slopes[:, None, None] * distance  # (h, n, n)
    x = model.embedding.weight[tokens]  # no position vector
    expected = model.output(model.blocks(x, model.causal[None, :n, :n], bias=bias))
    torch.testing.assert_close(model(tokens), expected)
    logits, weights = model.attention_weights(tokens)
    torch.testing.assert_close(logits, expected)
    assert all(torch.all(w[..., causal_mask(n)] == 0) for w in weights)


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "alibi"])
def test_cached_decoding_equals_the_full_pass_for_every_position(position):
    model = small(position=position, dropout=0.0).eval()
    tokens = torch.randint(0, 11, (2, 12))
    with torch.no_grad():
        full = model(tokens)
        logits, caches = model.decode_step(tokens[:, :5])
        steps = [logits]
        for t in range(5, 12):
            logits, caches = model.decode_step(tokens[:, t : t + 1], caches)
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_rotary_and_unknown_positions_are_refused_by_name():
    with pytest.raises(
        ValueError,
        match=r"^GPT: position 'rotary' rotates the queries and keys, which GPT does not "
        r"take; choose 'learned', 'sinusoidal' or 'alibi'$",
    ):
        small(position="rotary")
    with pytest.raises(
        ValueError,
        match=r"^GPT: unknown position 'rope'; GPT takes 'learned', 'sinusoidal' or "
        r"'alibi'$",
    ):
        small(position="rope")


class GPTBeforeTheFactory(GPT):
    """GPT's construction and forward pass before the position encodings had one factory
    (reproduced from the package's history): a :class:`LearnedPositionalEmbedding` built in place
    with the model's dropout inside it."""

    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.positional = LearnedPositionalEmbedding(c.context, c.d_model, c.dropout)
        self.blocks = Encoder(
            c.n_layers, c.d_model, c.n_heads, c.ff_width, c.dropout, norm_first=True, activation=c.activation
        )
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.embedding.weight
        self.register_buffer("causal", causal_mask(c.context), persistent=False)
        self.reset_parameters()

    def forward(self, tokens):
        return self.output(self.blocks(self.positional(self.embedding(tokens), 0), causal=True))


def test_a_seeded_gpt_has_the_weights_and_outputs_it_had_before_the_factory():
    config = GPTConfig(vocab_size=11, context=16, d_model=16, n_heads=2, n_layers=2, dropout=0.1)
    torch.manual_seed(0)
    before = GPTBeforeTheFactory(config)
    torch.manual_seed(0)
    now = GPT(config)
    assert list(before.state_dict()) == list(now.state_dict())  # the same keys, in the same order
    assert all(torch.equal(a, b) for a, b in zip(before.state_dict().values(), now.state_dict().values()))
    tokens = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(2))
    for train in (True, False):  # dropout drawn from one seed, and none
        outputs = []
        for model in (before, now):
            torch.manual_seed(1)
            outputs.append(model.train(train)(tokens))
        assert torch.equal(*outputs)
