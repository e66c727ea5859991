"""Tests of the encoder-decoder Transformer (chapter 6): ``transformer_book.models.transformer``.

References: ``nn.Transformer`` (through ``transformer_book.twins``), hand examples, and the
properties the model must have whatever its weights: causality in training *and* eval mode,
no influence of padding, zero cross-attention to source PAD. A tiny model trains to
memorise a reversal task, end to end.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checkpoints, twins
from transformer_book.masks import causal_mask, combine_masks
from transformer_book.models import Decoder, Encoder, Transformer, TransformerConfig, shift_right
from transformer_book.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding

F64 = torch.float64
PAD, SOS, EOS = 0, 1, 2
TOL = dict(rtol=1e-10, atol=1e-12)


pytestmark = pytest.mark.usefixtures("one_thread")


def _randn(*shape, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(requires_grad)


def _randomise(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial parameters drawn in float32 (``twins`` rounds float64 weights to float32),
    then widened to float64."""
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


def _config(**overrides) -> TransformerConfig:
    options = dict(
        src_vocab_size=13,
        tgt_vocab_size=11,
        d_model=16,
        n_heads=4,
        d_ff=32,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        max_len=24,
        pad_id=PAD,
    )
    options.update(overrides)
    return TransformerConfig(**options)


def _model(seed=0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(_config(**overrides)).to(F64)


# src: batch 0 has 2 PAD, batch 1 none; tgt_in: SOS first, batch 0 has 2 PAD.
SRC = torch.tensor([[3, 4, 5, 6, PAD, PAD], [7, 8, 9, 10, 11, 12]])
TGT_IN = torch.tensor([[SOS, 3, 4, 5, PAD, PAD], [SOS, 5, 6, 7, 8, 9]])
TGT_REAL = TGT_IN != PAD


# --------------------------------------------------------------------------------------
# Encoder + Decoder against nn.Transformer
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_stacks_match_torch_transformer(norm_first, mode):
    encoder = _randomise(Encoder(2, 16, 4, 24, dropout=0.0, norm_first=norm_first, final_norm=True), seed=1)
    decoder = _randomise(Decoder(2, 16, 4, 24, dropout=0.0, norm_first=norm_first, final_norm=True), seed=2)
    encoder.train(mode == "train")
    decoder.train(mode == "train")
    twin = twins.torch_transformer(encoder, decoder)
    src_padding, tgt_padding = SRC == PAD, TGT_IN == PAD  # (B, m), (B, n)
    x = _randn(2, 6, 16, seed=3, requires_grad=True)
    y = _randn(2, 6, 16, seed=4, requires_grad=True)

    memory = encoder(x, src_padding[:, None, :])
    out = decoder(y, memory, combine_masks(tgt_padding[:, None, :], causal_mask(6)), src_padding[:, None, :])
    expected = twin(
        x,
        y,
        tgt_mask=causal_mask(6),
        src_key_padding_mask=src_padding,
        tgt_key_padding_mask=tgt_padding,
        memory_key_padding_mask=src_padding,
    )
    real = ~tgt_padding
    torch.testing.assert_close(out[real], expected[real], **TOL)
    upstream = _randn(2, 6, 16, seed=5) * real[..., None]  # loss on real positions only
    g_ours = torch.autograd.grad((out * upstream).sum(), [x, y])
    g_theirs = torch.autograd.grad((expected * upstream).sum(), [x, y])
    for a, b in zip(g_ours, g_theirs):
        torch.testing.assert_close(a, b, **TOL)
    with torch.no_grad():  # PyTorch's inference fast paths, where they apply
        again = twin(
            x,
            y,
            tgt_mask=causal_mask(6),
            src_key_padding_mask=src_padding,
            tgt_key_padding_mask=tgt_padding,
            memory_key_padding_mask=src_padding,
        )
    torch.testing.assert_close(out[real], again[real], **TOL)


def test_torch_transformer_refuses_stacks_without_final_norm():
    with_norm = Encoder(1, 8, 2, 12, final_norm=True)
    without = Decoder(1, 8, 2, 12, final_norm=False)
    with pytest.raises(ValueError, match="final_norm=True"):
        twins.torch_transformer(with_norm, without)
    with pytest.raises(ValueError, match="final_norm=True"):
        twins.torch_transformer(Encoder(1, 8, 2, 12), Decoder(1, 8, 2, 12, final_norm=True))  # post-LN default: none


def test_final_norm_defaults_follow_norm_first():
    assert Encoder(1, 8, 2, 12).norm is None and Decoder(1, 8, 2, 12).norm is None
    assert Encoder(1, 8, 2, 12, norm_first=True).norm is not None
    assert Decoder(1, 8, 2, 12, norm_first=True).norm is not None


def test_torch_transformer_keeps_float64_weights_exactly():
    encoder = Encoder(1, 8, 2, 12, dropout=0.0, final_norm=True).to(F64)
    decoder = Decoder(1, 8, 2, 12, dropout=0.0, final_norm=True).to(F64)
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for p in [*encoder.parameters(), *decoder.parameters()]:
            p.copy_(torch.randn(p.shape, generator=g, dtype=F64))
    twin = twins.torch_transformer(encoder, decoder)
    torch.testing.assert_close(
        twin.encoder.layers[0].linear1.weight, encoder.layers[0].ffn.linear1.weight, rtol=0, atol=0
    )


# --------------------------------------------------------------------------------------
# The model: shapes, sharing, parameter counts
# --------------------------------------------------------------------------------------


def _count(model):
    return sum(p.numel() for p in model.parameters())


def test_output_shape():
    model = _model()
    logits = model(SRC, TGT_IN[:, :5])
    assert logits.shape == (2, 5, 11) and logits.dtype == F64
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("scale_embeddings", [True, False])
def test_stack_inputs_are_scaled_embeddings_plus_sinusoids(scale_embeddings):
    """Encoder input = E_src[x] sqrt(d_model) + PE, decoder input likewise (hand formula)."""
    model = _model(seed=13, scale_embeddings=scale_embeddings)
    seen = {}
    hooks = [
        model.encoder.register_forward_pre_hook(lambda mod, args: seen.__setitem__("src", args[0])),
        model.decoder.register_forward_pre_hook(lambda mod, args: seen.__setitem__("tgt", args[0])),
    ]
    try:
        model(SRC, TGT_IN)
    finally:
        for hook in hooks:
            hook.remove()
    d = 16
    position = torch.arange(6, dtype=F64)[:, None]
    angle = position / 10000.0 ** (torch.arange(0, d, 2, dtype=F64) / d)  # (6, d/2)
    pe = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(6, d)  # interleaved sin, cos
    factor = d**0.5 if scale_embeddings else 1.0
    for name, tokens, embedding in (("src", SRC, model.src_embedding), ("tgt", TGT_IN, model.tgt_embedding)):
        expected = embedding.weight[tokens] * factor + pe
        torch.testing.assert_close(seen[name], expected, rtol=1e-6, atol=1e-6)  # the table is built in float32
    # PAD embeddings are zero vectors (padding_idx), so a PAD position carries only its sinusoid
    torch.testing.assert_close(seen["src"][0, 4], pe[4], rtol=1e-6, atol=1e-6)


def test_tie_output_shares_one_parameter():
    tied = _model(tie_output=True)
    untied = _model(tie_output=False)
    assert tied.output.weight is tied.tgt_embedding.weight
    assert untied.output.weight is not untied.tgt_embedding.weight
    assert _count(untied) - _count(tied) == 11 * 16  # V * d
    # a gradient step on the logits moves the embedding too (one tensor, two roles)
    before = tied.tgt_embedding.weight.detach().clone()
    tied(SRC, TGT_IN).sum().backward()
    with torch.no_grad():
        tied.output.weight -= 0.1 * tied.output.weight.grad
    assert not torch.equal(tied.tgt_embedding.weight, before)


def test_share_embeddings_shares_source_and_target():
    shared = _model(src_vocab_size=11, share_embeddings=True)
    separate = _model(src_vocab_size=11, share_embeddings=False)
    assert shared.src_embedding.weight is shared.tgt_embedding.weight is shared.output.weight
    assert _count(separate) - _count(shared) == 11 * 16
    assert shared(SRC.clamp(max=10), TGT_IN).shape == (2, 6, 11)


def test_share_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match=r"share_embeddings(?=.*\b13\b)(?=.*\b11\b)"):
        _config(share_embeddings=True)


def test_parameter_count_by_hand():
    c = _config(tie_output=True)
    d, f, v_src, v_tgt = c.d_model, c.d_ff, c.src_vocab_size, c.tgt_vocab_size
    attention = 4 * d * d + 4 * d
    ffn = d * f + f + f * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    expected = (v_src + v_tgt) * d + 2 * encoder_layer + 2 * decoder_layer  # post-LN: no final norms
    assert _count(_model()) == expected


# --------------------------------------------------------------------------------------
# Causality and padding
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_future_target_tokens_do_not_change_earlier_logits(mode):
    model = _model(seed=7).train(mode == "train")
    tgt = torch.tensor([[SOS, 3, 4, 5, 6, 7], [SOS, 8, 9, 10, 3, 4]])
    with torch.set_grad_enabled(mode == "train"):
        logits = model(SRC, tgt)
        for t in range(1, 6):
            changed = tgt.clone()
            changed[:, t:] = (tgt[:, t:] + 3) % 8 + 3  # other real tokens in [3, 11)
            assert torch.all(changed[:, t:] != tgt[:, t:])
            logits_changed = model(SRC, changed)
            torch.testing.assert_close(logits_changed[:, :t], logits[:, :t], rtol=0, atol=1e-12)
            assert not torch.allclose(logits_changed[:, t:], logits[:, t:])  # later ones do change


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_appending_padding_changes_no_real_logit(mode):
    model = _model(seed=8).train(mode == "train")
    logits = model(SRC, TGT_IN)
    more_src = torch.cat([SRC, torch.full((2, 3), PAD)], dim=1)
    more_tgt = torch.cat([TGT_IN, torch.full((2, 4), PAD)], dim=1)
    for src, tgt in ((more_src, TGT_IN), (SRC, more_tgt), (more_src, more_tgt)):
        padded = model(src, tgt)
        assert torch.isfinite(padded).all()  # PAD query rows too: no fully masked NaN
        torch.testing.assert_close(padded[:, :6][TGT_REAL], logits[TGT_REAL], rtol=0, atol=1e-10)


def test_source_padding_has_no_influence_on_decoder():
    """Changing the encoder's output at source PAD positions changes nothing."""
    model = _model(seed=9).eval()
    memory, src_mask = model.encode(SRC)
    changed = memory.clone()
    changed[0, 4:] = 100.0 * _randn(2, 16, seed=10)
    torch.testing.assert_close(model.decode(TGT_IN, changed, src_mask), model.decode(TGT_IN, memory, src_mask), **TOL)


def test_cross_attention_gives_source_padding_zero_weight():
    model = _model(seed=11)
    memory, src_mask = model.encode(SRC)
    assert src_mask.shape == (2, 1, 6) and src_mask.dtype == torch.bool
    states, weights = model.decode(TGT_IN, memory, src_mask, need_weights=True)
    assert states.shape == (2, 6, 16) and len(weights) == 2
    for self_w, cross_w in weights:
        assert cross_w.shape == (2, 4, 6, 6)
        assert torch.all(cross_w[0, :, :, 4:] == 0)
        assert torch.all(cross_w[0, :, :, :4] > 0) and torch.all(cross_w[1] > 0)
        torch.testing.assert_close(cross_w.sum(-1), torch.ones(2, 4, 6, dtype=F64), rtol=0, atol=1e-12)
        # decoder self-attention: causal and no weight on target PAD keys
        assert torch.all(self_w.triu(diagonal=1) == 0)
        assert torch.all(self_w[0, :, :, 4:] == 0)
    # the weights path computes the same states as the fused one
    torch.testing.assert_close(states, model.decode(TGT_IN, memory, src_mask), **TOL)


def test_encoder_ignores_source_padding():
    """Encoder outputs at real positions do not depend on how many PAD follow."""
    model = _model(seed=12).eval()
    memory, _ = model.encode(SRC)
    more, _ = model.encode(torch.cat([SRC, torch.full((2, 2), PAD)], dim=1))
    torch.testing.assert_close(more[0, :4], memory[0, :4], rtol=0, atol=1e-10)
    torch.testing.assert_close(more[1, :6], memory[1], rtol=0, atol=1e-10)


# --------------------------------------------------------------------------------------
# shift_right
# --------------------------------------------------------------------------------------


def test_shift_right_hand_example():
    targets = torch.tensor([[5, 6, 7, EOS, PAD], [8, EOS, PAD, PAD, PAD]])
    expected = torch.tensor([[SOS, 5, 6, 7, EOS], [SOS, 8, EOS, PAD, PAD]])
    shifted = shift_right(targets, SOS)
    assert torch.equal(shifted, expected) and shifted.dtype == targets.dtype
    assert torch.equal(targets, torch.tensor([[5, 6, 7, EOS, PAD], [8, EOS, PAD, PAD, PAD]]))  # not in place


def test_shift_right_errors():
    with pytest.raises(ValueError, match=r"integer.*float32"):
        shift_right(torch.tensor([[5.0, 6.0]]), SOS)
    with pytest.raises(ValueError, match=re.escape("(3,)")):
        shift_right(torch.tensor([5, 6, 7]), SOS)
    with pytest.raises(ValueError, match="no positions"):
        shift_right(torch.zeros(2, 0, dtype=torch.long), SOS)


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


def test_error_ids_out_of_vocabulary():
    model = _model()
    with pytest.raises(ValueError, match=r"src.*" + re.escape("[3, 13]") + ".*" + re.escape("[0, 13)")):
        model(torch.tensor([[3, 13]]), TGT_IN[:1])
    with pytest.raises(ValueError, match=r"tgt_in.*" + re.escape("[0, 11)")):
        model(SRC, torch.tensor([[SOS, 11, 4, 5, 6, 7], [SOS, 1, 2, 3, 4, 5]]))
    with pytest.raises(ValueError, match=re.escape("[-1, 5]")):
        model(torch.tensor([[-1, 5]]), TGT_IN[:1])


def test_error_sequence_longer_than_max_len():
    model = _model(max_len=8)
    with pytest.raises(ValueError, match=r"(?=.*\b9\b)(?=.*max_len=8)"):
        model(torch.full((1, 9), 3), TGT_IN[:1])
    with pytest.raises(ValueError, match=r"(?=.*\b10\b)(?=.*max_len=8)"):
        model(SRC, torch.full((1, 10), 3))


def test_error_float_tokens():
    model = _model()
    with pytest.raises(ValueError, match=r"integer.*float32"):
        model(SRC.float(), TGT_IN)
    with pytest.raises(ValueError, match=r"integer.*float32"):
        model(SRC, TGT_IN.float())


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        (dict(d_model=10, n_heads=3), r"(?=.*\b10\b)(?=.*\b3\b).*divisible"),
        (dict(pad_id=11), r"TransformerConfig: pad_id must be an int in \[0, 11\), got 11"),
        (dict(pad_id=-1), r"pad_id must be an int in \[0, 11\), got -1"),
        (dict(dropout=1.0), r"dropout"),
        (dict(n_encoder_layers=0), r"n_encoder_layers"),
    ],
)
def test_error_bad_config(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        _config(**overrides)


# --------------------------------------------------------------------------------------
# Positional tables are buffers
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_positional_tables_move_with_the_model(position):
    model = Transformer(_config(position=position))
    parameters = {n for n, _ in model.named_parameters()}
    buffers = dict(model.named_buffers())
    if position == "sinusoidal":
        assert set(buffers) == {"src_positional.pe", "tgt_positional.pe"}
        assert not any("positional" in n for n in parameters)
        assert buffers["src_positional.pe"].dtype == torch.float32
        model.to(F64)
        assert model.src_positional.pe.dtype == F64 and model.tgt_positional.pe.dtype == F64
        # the fixed table is not trained
        model(SRC, TGT_IN).sum().backward()
        assert model.src_positional.pe.grad is None
    else:
        assert "src_positional.embedding.weight" in parameters
        model.to(F64)
        assert model.src_positional.embedding.weight.dtype == F64
    assert all(p.dtype == F64 for p in model.parameters())
    assert model(SRC, TGT_IN).dtype == F64


# --------------------------------------------------------------------------------------
# End to end: a tiny model learns to reverse
# --------------------------------------------------------------------------------------


def test_tiny_transformer_learns_to_reverse():
    vocab, length, n_seq = 12, 6, 5
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (n_seq, length), generator=g)  # ids 3..11 (0-2 are PAD/SOS/EOS)
    targets = torch.cat([src.flip(1), torch.full((n_seq, 1), EOS)], dim=1)
    tgt_in = shift_right(targets, SOS)
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            vocab,
            vocab,
            d_model=32,
            n_heads=4,
            d_ff=64,
            n_encoder_layers=1,
            n_decoder_layers=1,
            dropout=0.0,
            max_len=16,
            pad_id=PAD,
        )
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first_loss = loss = None
    steps = 300
    for _ in range(steps):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=PAD)
        first_loss = loss.item() if first_loss is None else first_loss
        if loss.item() < 0.05:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert first_loss > 1.5  # it started near chance (ln 12 = 2.48), so the task was learned
    assert loss.item() < 0.05, f"loss {loss.item():.3f} after {steps} steps"
    model.eval()
    with torch.no_grad():
        predicted = model(src, tgt_in).argmax(-1)
    assert torch.equal(predicted, targets)


# --------------------------------------------------------------------------------------
# Positions by name
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "position, expected", [("alibi", "adds a bias to the attention scores"), ("rotary", "rotates the queries and keys")]
)
def test_positions_in_the_attention_are_refused(position, expected):
    with pytest.raises(
        ValueError,
        match=rf"^Transformer: position '{position}' {expected}, which Transformer does "
        r"not take; choose 'learned' or 'sinusoidal'$",
    ):
        Transformer(_config(position=position))
    with pytest.raises(
        ValueError,
        match=r"^Transformer: unknown position 'rope'; Transformer takes 'learned' or "
        r"'sinusoidal'$",
    ):
        Transformer(_config(position="rope"))


class TransformerBeforeTheFactory(Transformer):
    """The Transformer's construction and embedding before the position encodings had one
    factory (reproduced from the package's history): the two position modules built in place,
    each with the model's dropout inside it."""

    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = c = config
        self.src_embedding = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embedding = (
            self.src_embedding
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        )
        for embedding in dict.fromkeys([self.src_embedding, self.tgt_embedding]):
            nn.init.normal_(embedding.weight, std=c.d_model**-0.5)
            with torch.no_grad():
                embedding.weight[c.pad_id].zero_()
        if c.position == "sinusoidal":
            self.src_positional = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout)
            self.tgt_positional = SinusoidalPositionalEncoding(c.d_model, c.max_len, c.dropout)
        else:
            self.src_positional = LearnedPositionalEmbedding(c.max_len, c.d_model, c.dropout)
            self.tgt_positional = LearnedPositionalEmbedding(c.max_len, c.d_model, c.dropout)
        layer_args = dict(d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout)
        options = dict(norm_first=c.norm_first, activation=c.activation, eps=c.eps, final_norm=c.final_norm)
        self.encoder = Encoder(c.n_encoder_layers, **layer_args, **options)
        self.decoder = Decoder(c.n_decoder_layers, **layer_args, **options)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.tie_output:
            self.output.weight = self.tgt_embedding.weight

    def _embed(self, tokens, embedding, positional, name, offset=0):
        return positional(embedding(tokens) * math.sqrt(self.config.d_model), offset)


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_a_seeded_transformer_has_the_weights_and_outputs_it_had_before_the_factory(position):
    config = _config(position=position, dropout=0.1)
    torch.manual_seed(0)
    before = TransformerBeforeTheFactory(config)
    torch.manual_seed(0)
    now = Transformer(config)
    assert list(before.state_dict()) == list(now.state_dict())  # the same keys, in the same order
    assert all(torch.equal(a, b) for a, b in zip(before.state_dict().values(), now.state_dict().values()))
    g = torch.Generator().manual_seed(3)
    src, tgt_in = torch.randint(1, 11, (3, 9), generator=g), torch.randint(1, 11, (3, 7), generator=g)
    for train in (True, False):  # dropout drawn from one seed, and none
        outputs = []
        for model in (before, now):
            torch.manual_seed(1)
            outputs.append(model.train(train)(src, tgt_in))
        assert torch.equal(*outputs)


def test_a_file_that_names_the_field_positional_loads(tmp_path):
    model = _model(position="learned").float()
    path = checkpoints.save_model(tmp_path / "translator.pt", model)
    saved = checkpoints.read_checkpoint(path)
    config = saved["config"]
    saved["config"] = {("positional" if k == "position" else k): v for k, v in config.items()}
    checkpoints.write_checkpoint(saved, path)  # as written before the rename
    loaded, _, _ = checkpoints.load_model(path)
    assert loaded.config == model.config and loaded.config.position == "learned"
    src, tgt_in = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 4))
    torch.testing.assert_close(loaded(src, tgt_in), model.eval()(src, tgt_in), rtol=0, atol=0)


def test_seeded_initialisation_is_repeatable_across_processes() -> None:
    """The same seed gives the same weights, in another process too (where any dependence on
    memory addresses, such as iterating a set of modules, would show)."""
    import subprocess
    import sys

    script = (
        "import torch, hashlib\n"
        "from transformer_book.models import Transformer, TransformerConfig\n"
        "torch.manual_seed(0)\n"
        "m = Transformer(TransformerConfig(11, 13, d_model=8, n_heads=2, d_ff=16, n_encoder_layers=1,"
        " n_decoder_layers=1, tie_output=False))\n"
        "h = hashlib.sha256()\n"
        "for name, t in sorted(m.state_dict().items()):\n"
        "    h.update(name.encode()); h.update(t.detach().numpy().tobytes())\n"
        "print(h.hexdigest())\n"
    )
    digests = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
        for _ in range(4)
    }
    assert len(digests) == 1, digests
