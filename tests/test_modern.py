"""Tests of chapter 18's modern decoder: RMSNorm against torch.nn.RMSNorm and its formula, SwiGLU
against its definition, the pre-norm block, and ModernGPT (decoding with the cache, generation,
training, parameter count, initialisation, bad input)."""

import math
from dataclasses import asdict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.attention import KVCache
from transformer_book.decoding import generate
from transformer_book.grouped_attention import kv_cache_bytes
from transformer_book.models import GPT, GPTConfig
from transformer_book.models.modern import ModernGPT, ModernGPTConfig
from transformer_book.modern_layers import ModernBlock, RMSNorm, SwiGLU, rms_norm, swiglu_width
from transformer_book.positional import LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding

pytestmark = pytest.mark.usefixtures("one_thread")

needs_rmsnorm = pytest.mark.skipif(not hasattr(nn, "RMSNorm"), reason="torch.nn.RMSNorm arrived in PyTorch 2.4")


def small(**changes):
    torch.manual_seed(0)
    sizes = dict(vocab_size=11, context=16, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2)
    return ModernGPT(ModernGPTConfig(**{**sizes, **changes}))


# ------------------------------------------------------------------------------------ RMSNorm


@needs_rmsnorm
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_equals_torch_rmsnorm(dtype):
    torch.manual_seed(0)
    x = 3 * torch.randn(4, 5, 12, dtype=dtype) + 1
    reference = nn.RMSNorm(12, eps=1e-6, dtype=dtype)
    with torch.no_grad():
        reference.weight.copy_(torch.randn(12, dtype=dtype))
    expected = reference(x)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=0, atol=1e-13)
    torch.testing.assert_close(rms_norm(x, reference.weight, 1e-6), expected, **tol)
    for fused in (True, False):
        module = RMSNorm(12, eps=1e-6, fused=fused).to(dtype)
        with torch.no_grad():
            module.gamma.copy_(reference.weight)
        torch.testing.assert_close(module(x), expected, **tol)
    # and the gradients, in float64
    if dtype == torch.float64:
        xg = x.clone().requires_grad_()
        module = RMSNorm(12, fused=False).double()
        with torch.no_grad():
            module.gamma.copy_(reference.weight)
        module(xg).pow(2).sum().backward()
        xr = x.clone().requires_grad_()
        reference(xr).pow(2).sum().backward()
        torch.testing.assert_close(xg.grad, xr.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(module.gamma.grad, reference.weight.grad, rtol=0, atol=1e-12)


def test_rms_norm_by_hand():
    x = torch.tensor([[1.0, 2.0, 2.0, 4.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    gamma = torch.tensor([1.0, 1.0, 2.0, -1.0], dtype=torch.float64)
    eps = 1e-6
    rms = math.sqrt((1 + 4 + 4 + 16) / 4 + eps)  # sqrt(6.25 + eps): no mean subtracted
    expected = torch.tensor([[1 / rms, 2 / rms, 4 / rms, -4 / rms], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(rms_norm(x, gamma, eps), expected, rtol=0, atol=1e-15)
    # unlike LayerNorm, a constant shift is not removed
    assert not torch.allclose(rms_norm(x + 1, gamma, eps), rms_norm(x, gamma, eps))


def test_rms_norm_in_float16_computes_in_float32():
    x = torch.tensor([300.0, -400.0, 0.0, 500.0], dtype=torch.float16)  # x^2 overflows float16
    gamma = torch.ones(4, dtype=torch.float16)
    out = rms_norm(x, gamma)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    expected = x.double() / math.sqrt((300**2 + 400**2 + 500**2) / 4 + 1e-6)
    torch.testing.assert_close(out, expected.half(), rtol=0, atol=0)


def test_rms_norm_bad_input():
    with pytest.raises(ValueError, match="rms_norm: x must be a floating-point tensor"):
        rms_norm(torch.ones(3, dtype=torch.long), torch.ones(3))
    with pytest.raises(ValueError, match=r"rms_norm: x of shape \(2, 3\) and gamma of shape \(4,\) do not fit"):
        rms_norm(torch.ones(2, 3), torch.ones(4))
    with pytest.raises(ValueError, match="eps must be a finite real > 0"):
        rms_norm(torch.ones(2, 3), torch.ones(3), eps=0.0)
    with pytest.raises(ValueError, match="RMSNorm: d_model must be a positive int"):
        RMSNorm(0)
    with pytest.raises(ValueError, match="RMSNorm: x of shape"):
        RMSNorm(4)(torch.ones(2, 3))


# ------------------------------------------------------------------------------------ SwiGLU


def test_swiglu_on_a_hand_made_example():
    ffn = SwiGLU(2, 3)
    with torch.no_grad():  # nn.Linear stores W^T: weight (out, in)
        ffn.w1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        ffn.w3.weight.copy_(torch.tensor([[2.0, 0.0], [1.0, -1.0], [0.0, 0.5]]))
        ffn.w2.weight.copy_(torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, -1.0]]))
    x = torch.tensor([[1.0, -2.0]])
    gate = [1.0, -2.0, -1.0]  # x W1
    value = [2.0, 3.0, -1.0]  # x W3
    silu = [z / (1 + math.exp(-z)) for z in gate]
    hidden = [s * v for s, v in zip(silu, value)]
    expected = torch.tensor([[hidden[0] + hidden[2], 2 * hidden[1] - hidden[2]]])
    torch.testing.assert_close(ffn(x), expected, rtol=1e-6, atol=1e-6)
    assert all(linear.bias is None for linear in (ffn.w1, ffn.w2, ffn.w3))


def test_swiglu_width_matches_a_4d_ffn_in_weights():
    # LLaMA's rule: int(2/3 * 4d), rounded up to a multiple of 8
    assert [swiglu_width(d) for d in (64, 96, 128, 768)] == [176, 256, 344, 2048]
    assert swiglu_width(128, multiple_of=256) == 512
    for d in (64, 128, 768):
        assert abs(3 * d * swiglu_width(d) - 2 * d * 4 * d) / (8 * d * d) < 0.04
    with pytest.raises(ValueError, match="swiglu_width: d_model must be a positive int"):
        swiglu_width(0)


# ------------------------------------------------------------------------------------ the block


def test_modern_block_is_pre_norm_attention_then_swiglu():
    torch.manual_seed(0)
    block = ModernBlock(16, 4, 2, 24, RotaryEmbedding(4)).double().eval()
    with torch.no_grad():
        block.norm1.gamma.uniform_(0.5, 1.5)
        block.norm2.gamma.uniform_(0.5, 1.5)
    x = torch.randn(2, 6, 16, dtype=torch.float64)

    def norm(h, gamma):  # RMSNorm written out here
        return h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma

    h = x + block.self_attn(norm(x, block.norm1.gamma))
    ffn = block.ffn
    expected = h + ffn.w2(F.silu(ffn.w1(norm(h, block.norm2.gamma))) * ffn.w3(norm(h, block.norm2.gamma)))
    torch.testing.assert_close(block(x), expected, rtol=0, atol=1e-12)
    out, weights = block(x, need_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    assert weights.shape == (2, 4, 6, 6)
    with pytest.raises(ValueError, match="ModernBlock: dropout"):
        ModernBlock(16, 4, 2, 24, dropout=-0.1)


# ------------------------------------------------------------------------------------ ModernGPT


def test_shapes_tied_output_and_no_position_table():
    model = small()
    assert model(torch.randint(0, 11, (3, 7))).shape == (3, 7, 11)
    assert model.output.weight is model.embedding.weight
    assert not any(isinstance(m, nn.Embedding) for m in model.modules() if m is not model.embedding)
    assert model.config.position == "rotary" and isinstance(model.positional, RotaryEmbedding)
    assert all(block.self_attn.rotary is model.positional for block in model.blocks)
    assert not any("bias" in name for name, _ in model.named_parameters())
    assert "n_kv_heads=2" in repr(model) and "d_ff=48" in repr(model)


def test_parameter_count_by_formula():
    for n_kv_heads, tie in ((None, True), (2, True), (1, False)):
        c = ModernGPTConfig(
            vocab_size=65, context=256, d_model=128, n_heads=4, n_kv_heads=n_kv_heads, n_layers=4, tie_output=tie
        )
        d, g, d_k, d_ff = 128, n_kv_heads or 4, 32, 344
        per_layer = 2 * d * d + 2 * d * g * d_k + 3 * d * d_ff + 2 * d
        expected = 65 * d * (1 if tie else 2) + 4 * per_layer + d
        assert sum(p.numel() for p in ModernGPT(c).parameters()) == expected
    # the sizes of chapter 18's comparison: 800,000 against chapter 9's GPT's 834,432, which adds a
    # 256 x 128 position table and biases; outside the embeddings 791,680 against 793,344
    modern = ModernGPT(ModernGPTConfig(vocab_size=65))
    gpt = GPT(GPTConfig(vocab_size=65, context=256, d_model=128, n_heads=4, n_layers=4))
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert (count(modern), count(gpt)) == (800_000, 834_432)
    embeddings = lambda m: sum(e.weight.numel() for e in m.modules() if isinstance(e, nn.Embedding))
    assert (count(modern) - embeddings(modern), count(gpt) - embeddings(gpt)) == (791_680, 793_344)


def test_causal_the_future_does_not_change_the_past():
    model = small(dropout=0.1).eval()
    tokens = torch.randint(0, 11, (2, 10))
    changed = tokens.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 11
    a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=0)
    assert not torch.allclose(a[:, 6], b[:, 6])


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_decode_step_equals_forward_and_the_cache_holds_the_kv_heads(n_kv_heads):
    model = small(n_kv_heads=n_kv_heads).double().eval()
    tokens = torch.randint(0, 11, (2, 12))
    full = model(tokens)
    logits, caches = model.decode_step(tokens[:, :5])  # the prompt
    steps = [logits]
    for t in range(5, 12):  # then one token at a time
        logits, caches = model.decode_step(tokens[:, t : t + 1], caches)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)
    assert len(caches) == 2 and all(c.k.shape == c.v.shape == (2, n_kv_heads, 12, 4) for c in caches)
    stored = sum(t.numel() * t.element_size() for c in caches for t in (c.k, c.v))
    assert kv_cache_bytes(2, n_kv_heads, 4, 12, batch=2, dtype=torch.float64) == stored


def test_generate_with_and_without_the_cache_and_by_hand():
    model = small()
    prompt = torch.randint(0, 11, (2, 4))
    cached = generate(model, prompt=prompt, max_new_tokens=8, eos_id=None)
    uncached = generate(model, prompt=prompt, max_new_tokens=8, eos_id=None, use_cache=False)
    assert torch.equal(cached, uncached)
    sequence = prompt
    with torch.no_grad():
        for _ in range(8):  # greedy by hand: the argmax of the last position of forward
            sequence = torch.cat([sequence, model(sequence)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, sequence[:, 4:])
    with pytest.raises(ValueError, match="more than the model's 16"):
        generate(model, prompt=prompt, max_new_tokens=14, eos_id=None)


def test_attention_weights_are_causal_distributions():
    model = small().eval()
    tokens = torch.randint(0, 11, (2, 6))
    logits, weights = model.attention_weights(tokens)
    torch.testing.assert_close(logits, model(tokens), rtol=1e-5, atol=1e-6)
    assert len(weights) == 2 and all(w.shape == (2, 4, 6, 6) for w in weights)
    for w in weights:
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 6))
        assert torch.all(w.triu(1) == 0)


def test_it_learns_a_repeating_pattern():
    model = small()
    pattern = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(50):
        start = torch.randint(0, 16, (8,))
        windows = torch.stack([pattern[s : s + 12] for s in start])
        loss = F.cross_entropy(model(windows[:, :-1]).reshape(-1, 11), windows[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert abs(losses[0] - math.log(11)) < 0.2  # starts near uniform
    assert losses[-1] < 0.25 * losses[0]


def test_gpt2_initialisation_and_seeded_determinism():
    torch.manual_seed(0)
    model = ModernGPT(ModernGPTConfig(vocab_size=500, context=64, d_model=128, n_heads=4, n_layers=8))
    assert model.embedding.weight.std().item() == pytest.approx(0.02, rel=0.05)
    block = model.blocks[0]
    assert block.self_attn.w_q.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert block.ffn.w1.weight.std().item() == pytest.approx(0.02, rel=0.05)
    residual = 0.02 / math.sqrt(2 * 8)
    assert block.self_attn.w_o.weight.std().item() == pytest.approx(residual, rel=0.1)
    assert block.ffn.w2.weight.std().item() == pytest.approx(residual, rel=0.1)
    assert torch.all(block.norm1.gamma == 1) and torch.all(model.norm.gamma == 1)
    a, b = small().state_dict(), small().state_dict()  # small() seeds itself
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(1)
    c = ModernGPT(small().config).state_dict()
    assert not torch.equal(a["embedding.weight"], c["embedding.weight"])


def test_norm_eps_reaches_every_rmsnorm():
    model = ModernGPT(ModernGPTConfig(vocab_size=11, d_model=16, n_heads=2, n_layers=2, norm_eps=1e-5))
    norms = [m for m in model.modules() if isinstance(m, RMSNorm)]
    assert len(norms) == 2 * 2 + 1 and {m.eps for m in norms} == {1e-5}
    assert ModernGPTConfig(vocab_size=11).norm_eps == 1e-6  # the default: what the book's models trained with


def test_config_defaults_and_round_trip():
    c = ModernGPTConfig(vocab_size=65)
    assert (c.context, c.d_model, c.n_heads, c.kv_heads, c.n_layers, c.ff_width, c.d_k) == (256, 128, 4, 4, 4, 344, 32)
    assert ModernGPTConfig(**asdict(c)) == c  # how checkpoints rebuild a config
    assert ModernGPTConfig(vocab_size=65, n_kv_heads=1, d_ff=100).ff_width == 100


def test_bad_config_and_input_raise_clear_errors():
    with pytest.raises(ValueError, match="n_heads=4 is not divisible by n_kv_heads=3"):
        ModernGPTConfig(vocab_size=10, n_kv_heads=3)
    with pytest.raises(ValueError, match="d_model=130 is not divisible by n_heads=4"):
        ModernGPTConfig(vocab_size=10, d_model=130)
    with pytest.raises(
        ValueError,
        match=r"^ModernGPT: position 'rotary' does not fit d_model=12, n_heads=4, "
        r"max_len=256: RotaryEmbedding: d_head must be an even int >= 2, got 3$",
    ):
        ModernGPT(ModernGPTConfig(vocab_size=10, d_model=12, n_heads=4))  # rotations turn pairs of features
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        ModernGPTConfig(vocab_size=10, n_layers=0)
    with pytest.raises(ValueError, match="ModernGPTConfig: d_ff must be a positive int, got 0"):
        ModernGPTConfig(vocab_size=10, d_ff=0)
    with pytest.raises(ValueError, match="dropout"):
        ModernGPTConfig(vocab_size=10, dropout=1.0)
    with pytest.raises(ValueError, match="rope_base"):
        ModernGPTConfig(vocab_size=10, rope_base=1.0)
    for eps in (0.0, -1e-5, float("nan"), True):
        with pytest.raises(ValueError, match="norm_eps must be a finite real > 0"):
            ModernGPTConfig(vocab_size=10, norm_eps=eps)
    with pytest.raises(ValueError, match="config must be a ModernGPTConfig"):
        ModernGPT(GPTConfig(vocab_size=10))
    model = small()
    with pytest.raises(
        ValueError, match=r"tokens must be a \(B, n\) integer tensor, got shape \(2, 3\), dtype torch.float32"
    ):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 11\)"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="exceed the context of 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one sequence"):
        model(torch.zeros(0, 3, dtype=torch.long))
    _, caches = model.decode_step(torch.zeros(1, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="exceed the context of 16"):
        model.decode_step(torch.zeros(1, 7, dtype=torch.long), caches)
    with pytest.raises(ValueError, match="caches must be the list of 2 KVCaches"):
        model.decode_step(torch.zeros(1, 1, dtype=torch.long), caches[:1])
    with pytest.raises(ValueError, match="caches must be the list of 2 KVCaches"):
        model.decode_step(torch.zeros(1, 1, dtype=torch.long), [caches[0], KVCache()])


# ------------------------------------------------------------------------------------ positions


@pytest.mark.parametrize(
    "position, kind", [("learned", LearnedPositionalEmbedding), ("sinusoidal", SinusoidalPositionalEncoding)]
)
def test_a_table_added_to_the_embeddings_instead_of_rotations(position, kind):
    model = small(position=position).double().eval()
    assert isinstance(model.positional, kind) and model.positional.rotary is None
    assert all(block.self_attn.rotary is None for block in model.blocks)
    tokens = torch.randint(0, 11, (2, 9))
    table = model.positional.pe[:9] if position == "sinusoidal" else model.positional.embedding.weight[:9]
    x = model.embedding.weight[tokens] + table
    for block in model.blocks:
        x = block(x, causal=True)
    torch.testing.assert_close(model(tokens), model.output(model.norm(x)))
    with torch.no_grad():  # the cache's positions continue the table's
        logits, caches = model.decode_step(tokens[:, :4])
        steps = [logits] + [model.decode_step(tokens[:, t : t + 1], caches)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), model(tokens))
    odd = ModernGPT(
        ModernGPTConfig(vocab_size=11, d_model=12, n_heads=4, position=position)
    )  # d_k = 3: no pairs needed
    assert odd(torch.randint(0, 11, (1, 5))).shape == (1, 5, 11)


def test_positions_the_grouped_attention_cannot_take_are_refused():
    with pytest.raises(
        ValueError,
        match=r"^ModernGPT: position 'alibi' adds a bias to the attention scores, which "
        r"ModernGPT does not take; choose 'learned', 'sinusoidal' or 'rotary'$",
    ):
        small(position="alibi")
    with pytest.raises(
        ValueError,
        match=r"^ModernGPT: unknown position 'rope'; ModernGPT takes 'learned', "
        r"'sinusoidal' or 'rotary'$",
    ):
        small(position="rope")


class ModernGPTBeforeTheFactory(ModernGPT):
    """ModernGPT's construction and embedding before the position encodings had one factory
    (reproduced from the package's history): one :class:`RotaryEmbedding` named ``rotary``."""

    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.rotary = RotaryEmbedding(c.d_k, c.rope_base)
        self.blocks = nn.ModuleList(
            ModernBlock(c.d_model, c.n_heads, c.kv_heads, c.ff_width, self.rotary, c.dropout, eps=c.norm_eps)
            for _ in range(c.n_layers)
        )
        self.norm = RMSNorm(c.d_model, c.norm_eps)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.embedding.weight
        self.reset_parameters()

    def _embed(self, tokens, offset):
        return self.dropout(self.embedding(tokens))


def test_a_seeded_modern_gpt_has_the_weights_and_outputs_it_had_before_the_factory():
    config = ModernGPTConfig(
        vocab_size=11, context=16, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, dropout=0.1, rope_base=500.0
    )
    torch.manual_seed(0)
    before = ModernGPTBeforeTheFactory(config)
    torch.manual_seed(0)
    now = ModernGPT(config)
    assert list(before.state_dict()) == list(now.state_dict())  # the same keys, in the same order
    assert all(torch.equal(a, b) for a, b in zip(before.state_dict().values(), now.state_dict().values()))
    assert torch.equal(before.rotary.inv_freq, now.positional.inv_freq)  # the base reaches the rotations
    tokens = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(2))
    for train in (True, False):  # dropout drawn from one seed, and none
        outputs = []
        for model in (before, now):
            torch.manual_seed(1)
            outputs.append(model.train(train)(tokens))
        assert torch.equal(*outputs)
