"""Tests of the recurrent encoder-decoder baselines (chapter 7): ``transformer_book.models.rnn``.

References: the attention equations computed by hand with explicit loops, ``nn.GRU`` run on
each sentence alone, and the properties the model must have whatever its weights: no
influence of padding (packed encoder, masked attention), causality of teacher forcing, a
prefix decoded alone equal to the full pass, a batch-first memory. A tiny model of each
kind memorises a reversal task.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.models import (
    BahdanauAttention,
    LuongAttention,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    shift_right,
)

F64 = torch.float64
PAD, SOS, EOS = 0, 1, 2
TOL = dict(rtol=1e-10, atol=1e-12)
ATTENTIONS = [None, "luong", "bahdanau"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(**overrides) -> RNNSeq2SeqConfig:
    options = dict(
        src_vocab_size=13,
        tgt_vocab_size=11,
        d_embedding=6,
        d_hidden=8,
        n_layers=2,
        dropout=0.0,
        attention="bahdanau",
        pad_id=PAD,
    )
    options.update(overrides)
    return RNNSeq2SeqConfig(**options)


def _model(seed=0, **overrides) -> RNNSeq2Seq:
    torch.manual_seed(seed)
    return RNNSeq2Seq(_config(**overrides)).to(F64)


def _randn(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64)


# src: sentence 0 has 2 PAD, 1 none, 2 has 4; tgt_in: SOS first, sentence 0 has 2 PAD.
SRC = torch.tensor([[3, 4, 5, 6, PAD, PAD], [7, 8, 9, 10, 11, 12], [12, 3, PAD, PAD, PAD, PAD]])
TGT_IN = torch.tensor([[SOS, 3, 4, 5, PAD, PAD], [SOS, 5, 6, 7, 8, 9], [SOS, 10, 3, 4, 5, 6]])
LENGTHS = [4, 6, 2]
TGT_REAL = TGT_IN != PAD


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------
# Shapes and attention weights
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_shapes_of_every_method(attention):
    model = _model(attention=attention)
    memory, src_mask = model.encode(SRC)
    outputs, s0 = memory
    assert outputs.shape == (3, 6, 16) and s0.shape == (3, 2, 8)
    assert src_mask.shape == (3, 1, 6) and src_mask.dtype == torch.bool
    assert torch.equal(src_mask[:, 0], SRC == PAD)
    assert torch.all(outputs[0, 4:] == 0) and torch.all(outputs[2, 2:] == 0)  # packed: nothing at PAD
    states = model.decode(TGT_IN, memory, src_mask)
    assert states.shape == (3, 6, 8) and model.d_out == 8
    logits = model.decode_logits(TGT_IN, memory, src_mask)
    assert logits.shape == (3, 6, 11) and logits.dtype == F64 and torch.isfinite(logits).all()
    torch.testing.assert_close(logits, model.output(states), **TOL)
    torch.testing.assert_close(model(SRC, TGT_IN), logits, **TOL)
    assert model(SRC[:, :4], TGT_IN[:, :2]).shape == (3, 2, 11)  # n != m


@pytest.mark.parametrize("attention", ["luong", "bahdanau"])
def test_attention_weights_are_distributions_with_zero_on_padding(attention):
    model = _model(seed=1, attention=attention)
    memory, src_mask = model.encode(SRC)
    states, weights = model.decode(TGT_IN, memory, src_mask, need_weights=True)
    assert weights.shape == (3, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6, dtype=F64), rtol=0, atol=1e-12)
    pad = src_mask.expand(-1, 6, -1)
    assert torch.all(weights[pad] == 0)  # exactly zero, not merely small
    assert torch.all(weights[~pad] > 0)
    torch.testing.assert_close(states, model.decode(TGT_IN, memory, src_mask), **TOL)


def test_tie_output_makes_the_output_width_the_embedding_width():
    model = _model(tie_output=True, d_embedding=6, d_hidden=8)
    assert model.d_out == 6 and model.output.weight is model.tgt_embedding.weight
    memory, src_mask = model.encode(SRC)
    assert model.decode(TGT_IN, memory, src_mask).shape == (3, 6, 6)
    assert model(SRC, TGT_IN).shape == (3, 6, 11)
    assert (
        _count(_model(tie_output=False, d_embedding=8, d_hidden=8))
        - _count(_model(tie_output=True, d_embedding=8, d_hidden=8))
        == 11 * 8
    )


def test_share_embeddings_shares_source_and_target():
    shared = _model(src_vocab_size=11, share_embeddings=True, tie_output=True)
    assert shared.src_embedding.weight is shared.tgt_embedding.weight is shared.output.weight
    assert _count(_model(src_vocab_size=11)) - _count(_model(src_vocab_size=11, share_embeddings=True)) == 11 * 6
    assert shared(SRC.clamp(max=10), TGT_IN).shape == (3, 6, 11)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_parameter_count_by_hand(attention):
    e, h, layers, v_src, v_tgt = 6, 8, 2, 13, 11

    def gru(d_in, directions):  # W_ih (3h x d_in), W_hh (3h x h), two biases (3h) per direction
        return directions * 3 * (d_in * h + h * h + 2 * h)

    encoder = gru(e, 2) + gru(2 * h, 2)
    bridge = layers * (2 * h * h + h)
    if attention is None:
        decoder, attend, pre_output_in = gru(e + h, 1) + gru(h, 1), 0, h + e + h
    elif attention == "luong":
        decoder, attend, pre_output_in = gru(e, 1) + gru(h, 1), 2 * h * h, 2 * h + h
    else:
        decoder, attend, pre_output_in = gru(e + 2 * h, 1) + gru(h, 1), h * h + (2 * h * h + h) + h, h + e + 2 * h
    expected = (v_src + v_tgt) * e + encoder + bridge + decoder + attend + (pre_output_in * h + h) + (h * v_tgt + v_tgt)
    assert _count(_model(attention=attention)) == expected


# --------------------------------------------------------------------------------------
# Padding, causality, incremental decoding, batch-first memory
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_appending_source_padding_changes_no_logit(attention):
    """Catches padding read by the encoder (its final states would move) or attended to."""
    model = _model(seed=2, attention=attention, dropout=0.1).eval()
    logits = model(SRC, TGT_IN)
    more_src = torch.cat([SRC, torch.full((3, 3), PAD)], dim=1)
    torch.testing.assert_close(model(more_src, TGT_IN), logits, rtol=0, atol=1e-12)
    more_tgt = torch.cat([TGT_IN, torch.full((3, 2), PAD)], dim=1)
    torch.testing.assert_close(model(more_src, more_tgt)[:, :6][TGT_REAL], logits[TGT_REAL], rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["luong", "bahdanau"])
def test_encoder_output_at_padding_has_no_influence(attention):
    model = _model(seed=3, attention=attention).eval()
    (outputs, s0), src_mask = model.encode(SRC)
    changed = outputs.clone()
    changed[0, 4:] = 100.0 * _randn(2, 16, seed=4)
    changed[2, 2:] = 100.0 * _randn(4, 16, seed=5)
    torch.testing.assert_close(
        model.decode(TGT_IN, (changed, s0), src_mask), model.decode(TGT_IN, (outputs, s0), src_mask), **TOL
    )


def test_without_attention_the_decoder_reads_only_the_fixed_summary():
    """attention=None: the encoder states h_j are not read at all; s_0 (also the context c) is."""
    model = _model(seed=6, attention=None).eval()
    (outputs, s0), src_mask = model.encode(SRC)
    states = model.decode(TGT_IN, (outputs, s0), src_mask)
    torch.testing.assert_close(model.decode(TGT_IN, (_randn(3, 6, 16, seed=7), s0), None), states, **TOL)
    top_changed = s0.clone()
    top_changed[:, -1] += 0.5  # the top layer's s_0 is the context c: every position moves
    assert torch.all((model.decode(TGT_IN, (outputs, top_changed), src_mask) - states).abs().amax(-1) > 1e-6)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_future_target_tokens_do_not_change_earlier_logits(attention, mode):
    model = _model(seed=8, attention=attention).train(mode == "train")  # dropout 0: train = eval
    tgt = torch.tensor([[SOS, 3, 4, 5, 6, 7], [SOS, 8, 9, 10, 3, 4], [SOS, 5, 5, 5, 5, 5]])
    logits = model(SRC, tgt)
    for t in range(1, 6):
        changed = tgt.clone()
        changed[:, t] = (tgt[:, t] + 3) % 8 + 3  # another real token in [3, 11)
        assert torch.all(changed[:, t] != tgt[:, t])
        logits_changed = model(SRC, changed)
        torch.testing.assert_close(logits_changed[:, :t], logits[:, :t], rtol=0, atol=0)
        assert not torch.allclose(logits_changed[:, t], logits[:, t])  # position t itself does change


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_prefix_decoded_alone_equals_the_full_pass(attention):
    """What a greedy decoder does step by step: decode_logits over tgt_in[:, :k]."""
    model = _model(seed=9, attention=attention, dropout=0.2).eval()
    memory, src_mask = model.encode(SRC)
    full = model.decode_logits(TGT_IN, memory, src_mask)
    for k in range(1, 7):
        torch.testing.assert_close(model.decode_logits(TGT_IN[:, :k], memory, src_mask), full[:, :k], **TOL)
    if attention is not None:  # the attention weights of a prefix too
        _, weights = model.decode(TGT_IN, memory, src_mask, need_weights=True)
        _, first = model.decode(TGT_IN[:, :2], memory, src_mask, need_weights=True)
        torch.testing.assert_close(first, weights[:, :2], **TOL)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_memory_is_batch_first(attention):
    """Reordering and repeating the memory along dim 0 (as beam search does) equals encoding
    the reordered batch."""
    model = _model(seed=10, attention=attention, n_layers=2).eval()
    memory, src_mask = model.encode(SRC)
    order = torch.tensor([2, 0, 0, 1, 2])
    moved = tuple(t.index_select(0, order) for t in memory)
    logits = model.decode_logits(TGT_IN[order], moved, src_mask.index_select(0, order))
    torch.testing.assert_close(logits, model(SRC[order], TGT_IN[order]), **TOL)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_dropout_acts_in_training_only(attention):
    model = _model(seed=11, attention=attention, dropout=0.3, n_layers=1)  # no nn.GRU warning with 1 layer
    model.train()
    torch.manual_seed(0)
    a = model(SRC, TGT_IN)
    b = model(SRC, TGT_IN)
    assert not torch.allclose(a, b)
    model.eval()
    torch.testing.assert_close(model(SRC, TGT_IN), model(SRC, TGT_IN), rtol=0, atol=0)


# --------------------------------------------------------------------------------------
# The encoder against nn.GRU on each sentence alone
# --------------------------------------------------------------------------------------


def test_packed_encoder_equals_each_sentence_alone():
    model = _model(seed=12, attention="luong", n_layers=2).eval()
    (outputs, s0), _ = model.encode(SRC)
    h = 8
    for b, length in enumerate(LENGTHS):
        x = model.src_embedding(SRC[b : b + 1, :length])  # (1, length, E), no PAD at all
        alone, h_n = model.encoder(x)  # plain nn.GRU call, nothing packed
        torch.testing.assert_close(outputs[b, :length], alone[0], **TOL)
        # forward direction ends at the last real token, backward at the first
        torch.testing.assert_close(alone[0, -1, :h], h_n[-2, 0], **TOL)
        torch.testing.assert_close(alone[0, 0, h:], h_n[-1, 0], **TOL)
        for layer in range(2):
            summary = torch.cat([h_n[2 * layer, 0], h_n[2 * layer + 1, 0]])  # [fwd last; bwd first]
            bridge = model.bridge[layer]
            expected = torch.tanh(bridge.weight @ summary + bridge.bias)
            torch.testing.assert_close(s0[b, layer], expected, **TOL)


def _gru_step_by_hand(gru: nn.GRU, layer: int, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """r = s(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
    h' = (1 - z) n + z h (PyTorch's GRU equations; weights stacked r, z, n)."""
    w_ih, w_hh = getattr(gru, f"weight_ih_l{layer}"), getattr(gru, f"weight_hh_l{layer}")
    b_ih, b_hh = getattr(gru, f"bias_ih_l{layer}"), getattr(gru, f"bias_hh_l{layer}")
    gi, gh = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
    h_size = h.shape[-1]
    r = torch.sigmoid(gi[:, :h_size] + gh[:, :h_size])
    z = torch.sigmoid(gi[:, h_size : 2 * h_size] + gh[:, h_size : 2 * h_size])
    n = torch.tanh(gi[:, 2 * h_size :] + r * gh[:, 2 * h_size :])
    return (1 - z) * n + z * h


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_decoder_follows_its_equations_step_by_step(attention):
    """The class docstring's equations, one time step and one layer at a time."""
    model = _model(seed=17, attention=attention, n_layers=2).eval()
    memory, src_mask = model.encode(SRC)
    outputs, s0 = memory
    s = [s0[:, 0], s0[:, 1]]  # per layer, (B, H)
    expected = []
    with torch.no_grad():
        for t in range(TGT_IN.shape[1]):
            e = model.tgt_embedding(TGT_IN[:, t])
            if attention is None:
                c = s0[:, -1]  # the fixed context: the top layer's initial state
                s[0] = _gru_step_by_hand(model.decoder, 0, torch.cat([e, c], -1), s[0])
                s[1] = _gru_step_by_hand(model.decoder, 1, s[0], s[1])
                o = torch.tanh(model.pre_output(torch.cat([s[1], e, c], -1)))
            elif attention == "luong":
                s[0] = _gru_step_by_hand(model.decoder, 0, e, s[0])
                s[1] = _gru_step_by_hand(model.decoder, 1, s[0], s[1])
                c = model.attention(s[1][:, None], outputs, src_mask)[0][:, 0]  # query: the new s_t
                o = torch.tanh(model.pre_output(torch.cat([c, s[1]], -1)))
            else:
                c = model.attention(s[1][:, None], outputs, src_mask)[0][:, 0]  # query: s_{t-1}
                s[0] = _gru_step_by_hand(model.decoder, 0, torch.cat([e, c], -1), s[0])
                s[1] = _gru_step_by_hand(model.decoder, 1, s[0], s[1])
                o = torch.tanh(model.pre_output(torch.cat([s[1], e, c], -1)))
            expected.append(o)
        torch.testing.assert_close(model.decode(TGT_IN, memory, src_mask), torch.stack(expected, 1), **TOL)


# --------------------------------------------------------------------------------------
# The attention modules against hand computations
# --------------------------------------------------------------------------------------


def _attention_case():
    query, keys = _randn(2, 3, 4, seed=13), _randn(2, 5, 6, seed=14)
    mask = torch.zeros(2, 1, 5, dtype=torch.bool)
    mask[0, 0, 3:] = True  # sentence 0: two PAD keys
    return query, keys, mask


def _softmax_by_hand(scores: list[float], excluded: list[bool]) -> list[float]:
    exps = [0.0 if out else math.exp(s) for s, out in zip(scores, excluded)]
    total = sum(exps)
    return [x / total for x in exps]


def _check_against_hand(attention, score_by_hand):
    query, keys, mask = _attention_case()
    context, weights = attention(query, keys, mask)
    assert context.shape == (2, 3, 6) and weights.shape == (2, 3, 5)
    for b in range(2):
        for t in range(3):
            scores = [score_by_hand(query[b, t], keys[b, j]) for j in range(5)]
            alpha = _softmax_by_hand(scores, mask[b, 0].tolist())
            c = sum(alpha[j] * keys[b, j] for j in range(5))
            torch.testing.assert_close(weights[b, t], torch.tensor(alpha, dtype=F64), **TOL)
            torch.testing.assert_close(context[b, t], c, **TOL)
    assert torch.all(weights[0, :, 3:] == 0)


def test_bahdanau_attention_equals_hand_computation():
    torch.manual_seed(15)
    attention = BahdanauAttention(4, 6, 7).to(F64)
    W, U, b, v = attention.w.weight, attention.u.weight, attention.u.bias, attention.v.weight[0]

    def score(q, k):  # e = v^T tanh(W q + U k + b), one key at a time
        return float(sum(v[a] * torch.tanh(W[a] @ q + U[a] @ k + b[a]) for a in range(7)))

    with torch.no_grad():
        _check_against_hand(attention, score)
        query, keys, mask = _attention_case()
        reused = attention(query, keys, mask, projected_keys=attention.project_keys(keys))
        torch.testing.assert_close(reused, attention(query, keys, mask), **TOL)


def test_luong_attention_equals_hand_computation():
    torch.manual_seed(16)
    attention = LuongAttention(4, 6).to(F64)
    W_a = attention.w_a.weight  # (d_q, d_k)

    def score(q, k):  # e = q^T W_a k
        return float(sum(q[i] * W_a[i, l] * k[l] for i in range(4) for l in range(6)))

    with torch.no_grad():
        _check_against_hand(attention, score)


@pytest.mark.parametrize("make", [lambda: BahdanauAttention(4, 6, 7), lambda: LuongAttention(4, 6)])
def test_attention_with_every_key_masked_gives_zeros_not_nan(make):
    attention = make().to(F64)
    query, keys, _ = _attention_case()
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    context, weights = attention(query, keys, mask)
    assert torch.all(context == 0) and torch.all(weights == 0)


@pytest.mark.parametrize("make", [lambda: BahdanauAttention(4, 6, 7), lambda: LuongAttention(4, 6)])
def test_attention_errors(make):
    attention = make().to(F64)
    query, keys, mask = _attention_case()
    with pytest.raises(ValueError, match=re.escape("query") + r".*\(B, length, 4\).*" + re.escape("(2, 3, 5)")):
        attention(_randn(2, 3, 5), keys, mask)
    with pytest.raises(ValueError, match=r"keys.*\(B, length, 6\)"):
        attention(query, keys[..., :5], mask)
    with pytest.raises(
        ValueError, match=r"batch sizes differ.*" + re.escape("(2, 3, 4)") + ".*" + re.escape("(1, 5, 6)")
    ):
        attention(query, keys[:1], mask)
    with pytest.raises(ValueError, match=r"mask.*boolean"):
        attention(query, keys, mask.long())
    with pytest.raises(ValueError, match=r"mask.*" + re.escape("(2, 1, 5)") + ".*" + re.escape("(2, 1, 4)")):
        attention(query, keys, mask[..., :4])


# --------------------------------------------------------------------------------------
# A tiny model learns
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_tiny_model_learns_to_reverse(attention):
    vocab, length, n_seq = 12, 6, 8
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (n_seq, length), generator=g)  # ids 3..11 (0-2 are PAD/SOS/EOS)
    targets = torch.cat([src.flip(1), torch.full((n_seq, 1), EOS)], dim=1)
    tgt_in = shift_right(targets, SOS)
    torch.manual_seed(0)
    model = RNNSeq2Seq(RNNSeq2SeqConfig(vocab, vocab, d_embedding=16, d_hidden=32, dropout=0.0, attention=attention))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first_loss = loss = None
    steps = 300
    for _ in range(steps):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), ignore_index=PAD)
        first_loss = loss.item() if first_loss is None else first_loss
        if loss.item() < 0.02:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert first_loss > 2.0  # started near chance (ln 12 = 2.48), so the task was learned
    assert loss.item() < 0.02, f"loss {loss.item():.3f} after {steps} steps"
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(src, tgt_in).argmax(-1), targets)


# --------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------


_DIGEST_SCRIPT = """
import hashlib, torch
from transformer_book.models import RNNSeq2Seq, RNNSeq2SeqConfig
torch.manual_seed(0)
m = RNNSeq2Seq(RNNSeq2SeqConfig(11, 11, d_embedding=6, d_hidden=8, n_layers=2, share_embeddings=True, tie_output=True))
h = hashlib.sha256()
for name, t in sorted(m.state_dict().items()):
    h.update(name.encode()); h.update(t.detach().numpy().tobytes())
print(h.hexdigest())
"""


def test_initialisation_is_uniform_seeded_and_repeatable_in_another_process():
    model = _model(src_vocab_size=11, share_embeddings=True, tie_output=True)
    for name, p in model.named_parameters():
        assert p.abs().max() <= 0.1, name
    assert torch.all(model.src_embedding.weight[PAD] == 0)
    namespace: dict = {}
    exec(_DIGEST_SCRIPT.replace("print(h.hexdigest())", "digest = h.hexdigest()"), namespace)
    other = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == namespace["digest"]


# --------------------------------------------------------------------------------------
# Bad input and bad configurations
# --------------------------------------------------------------------------------------


def test_error_float_or_one_dimensional_tokens():
    model = _model()
    with pytest.raises(ValueError, match=r"src.*integer.*float32"):
        model(SRC.float(), TGT_IN)
    with pytest.raises(ValueError, match=r"tgt_in.*integer.*float32"):
        model(SRC, TGT_IN.float())
    with pytest.raises(ValueError, match=r"src.*" + re.escape("(6,)")):
        model.encode(SRC[0])
    with pytest.raises(ValueError, match=r"tgt_in.*" + re.escape("(6,)")):
        model(SRC, TGT_IN[0])
    with pytest.raises(ValueError, match=r"src.*empty"):
        model.encode(SRC[:, :0])


def test_forward_checks_its_tokens_once(monkeypatch):
    """forward is the boundary: it checks src and tgt_in (a pass over each for the ids' range),
    then encodes and decodes without checking them, or the memory it made, again."""
    from transformer_book.models import rnn

    checked = []
    real = rnn._check_tokens
    monkeypatch.setattr(
        rnn, "_check_tokens", lambda tokens, name, size: checked.append(name) or real(tokens, name, size)
    )
    model = _model()
    logits = model(SRC, TGT_IN)
    assert checked == ["src", "tgt_in"]
    memory, src_mask = model.encode(SRC)  # the public methods still check theirs
    torch.testing.assert_close(logits, model.decode_logits(TGT_IN, memory, src_mask), **TOL)
    assert checked == ["src", "tgt_in", "src", "tgt_in"]


def test_error_ids_out_of_vocabulary():
    model = _model()
    with pytest.raises(ValueError, match=r"src.*" + re.escape("[3, 13]") + ".*" + re.escape("[0, 13)")):
        model(torch.tensor([[3, 13]]), TGT_IN[:1])
    with pytest.raises(ValueError, match=r"tgt_in.*" + re.escape("[0, 11)")):
        model(SRC[:1], torch.tensor([[SOS, 11, 4]]))
    with pytest.raises(ValueError, match=r"src.*" + re.escape("[-1, 5]")):
        model(torch.tensor([[-1, 5]]), TGT_IN[:1])


def test_error_batch_sizes_differ():
    model = _model()
    with pytest.raises(
        ValueError, match=r"batch sizes differ.*src " + re.escape("(3, 6)") + r".*tgt_in " + re.escape("(2, 6)")
    ):
        model(SRC, TGT_IN[:2])
    memory, src_mask = model.encode(SRC)
    with pytest.raises(
        ValueError, match=r"memory outputs.*" + re.escape("(2, m, 16)") + ".*" + re.escape("(3, 6, 16)")
    ):
        model.decode(TGT_IN[:2], memory, src_mask)
    with pytest.raises(
        ValueError, match=r"memory initial state.*" + re.escape("(3, 2, 8)") + ".*" + re.escape("(3, 8, 2)")
    ):
        model.decode(TGT_IN, (memory[0], memory[1].transpose(1, 2)), src_mask)
    with pytest.raises(ValueError, match=r"src_mask.*" + re.escape("(3, 1, 6)") + ".*" + re.escape("(2, 1, 6)")):
        model.decode(TGT_IN, memory, src_mask[:2])
    with pytest.raises(ValueError, match=r"memory.*pair"):
        model.decode(TGT_IN, memory[0], src_mask)


def test_error_source_without_real_token_or_padded_on_the_left():
    model = _model()
    with pytest.raises(ValueError, match=r"src sentences \[1\] have no real token"):
        model.encode(torch.tensor([[3, 4], [PAD, PAD]]))
    with pytest.raises(ValueError, match=r"right-padded.*\[0\]"):
        model.encode(torch.tensor([[PAD, 4], [3, 4]]))


def test_error_need_weights_without_attention():
    model = _model(attention=None)
    memory, src_mask = model.encode(SRC)
    with pytest.raises(ValueError, match=r"need_weights.*attention=None"):
        model.decode(TGT_IN, memory, src_mask, need_weights=True)


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        (dict(attention="dot"), r"attention.*'dot'"),
        (dict(attention="Luong"), r"attention.*'Luong'"),
        (dict(d_hidden=0), r"d_hidden must be a positive int, got 0"),
        (dict(d_embedding=-3), r"d_embedding must be a positive int, got -3"),
        (dict(n_layers=0), r"n_layers"),
        (dict(n_layers=1.5), r"n_layers"),
        (dict(src_vocab_size=True), r"src_vocab_size"),
        (dict(dropout=1.0), r"dropout.*\[0, 1\).*1\.0"),
        (dict(dropout=-0.1), r"dropout.*-0\.1"),
        (dict(pad_id=11), r"RNNSeq2SeqConfig: pad_id must be an int in \[0, 11\), got 11"),
        (dict(pad_id=-1), r"pad_id must be an int in \[0, 11\), got -1"),
        (dict(share_embeddings=True), r"share_embeddings(?=.*\b13\b)(?=.*\b11\b)"),
    ],
)
def test_error_bad_config(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        _config(**overrides)


@pytest.mark.parametrize(
    "make,pattern",
    [
        (lambda: BahdanauAttention(4, 0, 7), r"BahdanauAttention: d_key"),
        (lambda: BahdanauAttention(4, 6, 0), r"BahdanauAttention: d_attention"),
        (lambda: LuongAttention(0, 6), r"LuongAttention: d_query"),
        (lambda: RNNSeq2Seq(dict(src_vocab_size=5, tgt_vocab_size=5)), r"config.*RNNSeq2SeqConfig.*dict"),
    ],
)
def test_error_bad_constructor_arguments(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()
