"""Tests of transformer_book.models.bert, the BERT model and its pretraining loss (chapter 13)."""

import math
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import checkpoints, twins
from transformer_book.layers import LayerNorm
from transformer_book.masks import padding_mask
from transformer_book.models.bert import (
    BERT,
    IGNORE_INDEX,
    POSITIONS,
    BERTConfig,
    bert_loss,
    evaluate_pretraining,
    parameter_breakdown,
    parameter_count,
    pretraining_loss,
)
from transformer_book.models.transformer import Encoder
from transformer_book.positional import ALiBi, LearnedPositionalEmbedding, SinusoidalPositionalEncoding

pytestmark = pytest.mark.usefixtures("one_thread")

V = 23


class Batch(NamedTuple):
    tokens: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor
    is_next: torch.Tensor


def small(**changes):
    torch.manual_seed(0)
    return BERT(
        BERTConfig(**{**dict(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0), **changes})
    )


def a_batch(B=3, n=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, V, (B, n), generator=g)
    tokens[:, 0] = 2
    segments = (torch.arange(n) >= n // 2).long().expand(B, n).clone()
    targets = torch.full((B, n), IGNORE_INDEX)
    targets[:, 1:n:3] = torch.randint(5, V, (B, len(range(1, n, 3))), generator=g)
    return Batch(tokens, segments, targets, torch.tensor([1, 0, 1][:B]))


def meta_count(config):
    with torch.device("meta"):
        model = BERT(config)
    return sum(p.numel() for p in model.parameters())  # a tied matrix is one parameter, counted once


# ---- parameter count ---------------------------------------------------------------------------


def test_bert_base_and_large_match_the_published_sizes_without_allocating():
    base, large = BERTConfig.base(), BERTConfig.large()
    # bert-base-uncased and bert-large-uncased (vocabulary 30,522): the encoder models hold
    # 109,482,240 and 335,141,888 weights, which the paper rounds to 110M and 340M.
    assert parameter_count(base) == 109_482_240
    assert parameter_count(large) == 335_141_888
    assert round(parameter_count(base), -7) == 110_000_000 and round(parameter_count(large), -7) == 340_000_000
    assert meta_count(base) == parameter_count(base, heads=True)
    assert meta_count(large) == parameter_count(large, heads=True)


@pytest.mark.parametrize(
    "changes",
    [
        dict(),
        dict(d_ff=40),
        dict(norm_first=True),
        dict(n_segments=3, max_len=7),
        dict(n_layers=5, d_model=24, n_heads=3),
    ]
    + [dict(position=position) for position in POSITIONS],
)
def test_the_formula_counts_every_weight_of_a_built_model(changes):
    config = BERTConfig(**{**dict(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2), **changes})
    model = BERT(config)
    by_part = {
        "embeddings": [model.token_embedding, model.segment_embedding, model.positional, model.embedding_norm],
        "encoder": [model.encoder],
        "pooler": [model.pooler],
        "nsp_head": [model.nsp],
        "mlm_head": [model.mlm_transform, model.mlm_norm],
    }
    counted = {k: sum(p.numel() for m in ms for p in m.parameters()) for k, ms in by_part.items()}
    counted["mlm_head"] += model.mlm_bias.numel()
    assert counted == parameter_breakdown(config)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config, heads=True)


# ---- the model ----------------------------------------------------------------------------------


def test_the_encoder_is_pytorchs_post_ln_gelu_encoder():
    model = small().double().eval()
    batch = a_batch()
    x = model.embed(batch.tokens, batch.segments)
    layers = nn.ModuleList(twins.torch_encoder_layer(layer) for layer in model.encoder.layers)
    expected = x
    for layer in layers:
        expected = layer(expected)
    torch.testing.assert_close(model.encode(batch.tokens, batch.segments), expected, rtol=1e-10, atol=1e-10)
    assert all(layer.norm_first is False and layer.activation_relu_or_gelu == 2 for layer in layers)


def test_pre_ln_variant_is_pytorchs_pre_ln_encoder_with_a_final_norm():
    model = small(norm_first=True).double().eval()
    batch = a_batch()
    expected = model.embed(batch.tokens, batch.segments)
    for layer in model.encoder.layers:
        expected = twins.torch_encoder_layer(layer)(expected)
    expected = F.layer_norm(expected, (16,), model.encoder.norm.gamma, model.encoder.norm.beta, eps=1e-12)
    torch.testing.assert_close(model.encode(batch.tokens, batch.segments), expected, rtol=1e-10, atol=1e-10)


def test_embeddings_are_the_sum_of_token_segment_and_position_then_layernorm():
    model = small().double().eval()
    assert isinstance(model.positional, LearnedPositionalEmbedding)  # BERT's own, the default
    tokens, segments = a_batch().tokens, a_batch().segments
    e = (
        model.token_embedding.weight[tokens]
        + model.segment_embedding.weight[segments]
        + model.positional.embedding.weight[: tokens.shape[1]]
    )
    expected = F.layer_norm(e, (16,), model.embedding_norm.gamma, model.embedding_norm.beta, eps=1e-12)
    torch.testing.assert_close(model.embed(tokens, segments), expected)
    other = segments.clone()
    other[:, -1] = 0
    assert not torch.allclose(model.encode(tokens, segments)[:, 0], model.encode(tokens, other)[:, 0])


def test_padding_does_not_reach_the_real_positions():
    model = small(dropout=0.1).eval()
    batch = a_batch(n=7)
    padded = F.pad(batch.tokens, (0, 4), value=0)
    seg = F.pad(batch.segments, (0, 4), value=0)
    torch.testing.assert_close(
        model.encode(padded, seg)[:, :7], model.encode(batch.tokens, batch.segments), rtol=1e-5, atol=1e-5
    )


def test_mlm_head_is_tied_to_the_token_embedding():
    model = small().double()
    h = torch.randn(4, 16, dtype=torch.float64)
    t = model.mlm_norm(F.gelu(model.mlm_transform(h)))
    torch.testing.assert_close(model.mlm_logits(h), t @ model.token_embedding.weight.T + model.mlm_bias)
    assert not any(p.shape == (V, 16) for name, p in model.named_parameters() if "token_embedding" not in name)


def test_nsp_reads_the_pooled_cls_state_only():
    model = small().double().eval()
    batch = a_batch()
    hidden = model.encode(batch.tokens, batch.segments)
    expected = model.nsp(torch.tanh(model.pooler(hidden[:, 0])))
    out = model(batch.tokens, batch.segments)
    torch.testing.assert_close(out.nsp_logits, expected)
    assert out.mlm_logits.shape == (3, 9, V) and out.hidden.shape == (3, 9, 16)


# ---- the loss ------------------------------------------------------------------------------------


def test_mlm_loss_is_the_mean_over_selected_positions_only():
    model = small().double().eval()
    batch = a_batch()
    result = pretraining_loss(model, batch)
    out = model(batch.tokens, batch.segments)
    nll, count = 0.0, 0
    for b in range(3):
        for t in range(9):
            if batch.targets[b, t] != IGNORE_INDEX:
                nll -= torch.log_softmax(out.mlm_logits[b, t], -1)[batch.targets[b, t]]
                count += 1
    # the counts stay tensors on the model's device: reading one back is the caller's choice
    assert isinstance(result.n_predictions, torch.Tensor) and result.n_predictions.dim() == 0
    assert int(result.n_predictions) == count == 9
    torch.testing.assert_close(result.mlm, nll / count)
    nsp = -sum(torch.log_softmax(out.nsp_logits[b], -1)[batch.is_next[b]] for b in range(3)) / 3
    torch.testing.assert_close(result.nsp, nsp)
    torch.testing.assert_close(result.total, result.mlm + result.nsp)
    assert int(result.nsp_correct) == int((out.nsp_logits.argmax(-1) == batch.is_next).sum())


def test_padding_changes_neither_loss():
    """The trap of peers' code: an MLM loss averaged over padding falls as padding grows."""
    model = small().eval()
    batch = a_batch(n=7)
    padded = Batch(
        F.pad(batch.tokens, (0, 5), value=0),
        F.pad(batch.segments, (0, 5), value=0),
        F.pad(batch.targets, (0, 5), value=IGNORE_INDEX),
        batch.is_next,
    )
    a, b = pretraining_loss(model, batch), pretraining_loss(model, padded)
    torch.testing.assert_close(a.mlm, b.mlm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a.nsp, b.nsp, rtol=1e-5, atol=1e-6)


def test_evaluation_weights_batches_by_predictions_and_pairs():
    model = small().eval()
    batches = [a_batch(B=3, seed=1), a_batch(B=2, n=5, seed=2)]
    with torch.no_grad():
        parts = [pretraining_loss(model, b) for b in batches]
    result = evaluate_pretraining(model, batches)
    counts = [int(p.n_predictions) for p in parts]
    mlm = sum(float(p.mlm) * n for p, n in zip(parts, counts, strict=True)) / sum(counts)
    assert result["mlm_loss"] == pytest.approx(mlm)
    assert result["nsp_loss"] == pytest.approx((float(parts[0].nsp) * 3 + float(parts[1].nsp) * 2) / 5)
    assert result["nsp_accuracy"] == pytest.approx(sum(int(p.nsp_correct) for p in parts) / 5)
    assert result["n_predictions"] == sum(counts) and isinstance(result["n_predictions"], int)


def test_a_small_bert_learns_a_fixed_batch():
    model = small()
    batch = a_batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = pretraining_loss(model, batch).total.item()
    for _ in range(150):
        optimizer.zero_grad()
        pretraining_loss(model, batch).total.backward()
        optimizer.step()
    with torch.no_grad():
        last = pretraining_loss(model.eval(), batch)
    assert first > 2.5 and float(last.mlm) < 0.1 and int(last.nsp_correct) == 3


def test_an_untrained_model_scores_about_log_v():
    model = small()
    with torch.no_grad():
        mlm = float(pretraining_loss(model.eval(), a_batch()).mlm)
    assert mlm == pytest.approx(torch.log(torch.tensor(V)).item(), abs=0.3)


def test_seeded_construction_repeats():
    a, b = small(), small()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# ---- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(vocab_size=0), "vocab_size"),
        (dict(n_heads=3), "divisible"),
        (dict(dropout=1.0), "dropout"),
        (dict(d_ff=0), "d_ff"),
        (dict(norm_first=1), "norm_first"),
        (dict(pad_id=V), "pad_id"),
        (dict(eps=0.0), "eps"),
        (dict(n_segments=True), "n_segments"),
    ],
)
def test_config_errors(changes, match):
    with pytest.raises(ValueError, match=match):
        BERTConfig(**{**dict(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2), **changes})


def test_input_errors_name_the_problem():
    model = small()
    tokens = torch.randint(5, V, (2, 5))
    with pytest.raises(ValueError, match="exceed max_len=16"):
        model(torch.randint(5, V, (1, 17)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((1, 3), V))
    with pytest.raises(ValueError, match="integer tensor"):
        model(tokens.float())
    with pytest.raises(ValueError, match="integer tensor"):
        model(tokens[0])
    with pytest.raises(ValueError, match="at least one"):
        model(tokens[:0])
    with pytest.raises(ValueError, match="segments hold ids"):
        model(tokens, torch.full_like(tokens, 2))
    with pytest.raises(ValueError, match="segments must be"):
        model(tokens, torch.zeros(2, 4, dtype=torch.long))
    batch = a_batch()
    with pytest.raises(ValueError, match="no position is selected"):
        pretraining_loss(model, batch._replace(targets=torch.full_like(batch.targets, IGNORE_INDEX)))
    with pytest.raises(ValueError, match="is_next"):
        pretraining_loss(model, batch._replace(is_next=torch.zeros(2, dtype=torch.long)))
    with pytest.raises(ValueError, match="PretrainingBatch"):
        pretraining_loss(model, (batch.tokens, batch.targets))
    with pytest.raises(ValueError, match="BERTConfig"):
        BERT(dict(vocab_size=V))


def test_bert_loss_for_fit_returns_the_total_and_logs_both_parts():
    model = small()
    log = []
    loss, n = bert_loss(log)(model, a_batch())
    expected = pretraining_loss(model, a_batch())
    assert n == 9 and loss.item() == pytest.approx(expected.total.item())
    assert log == [
        {
            "training": True,
            "mlm": pytest.approx(expected.mlm.item()),
            "nsp": pytest.approx(expected.nsp.item()),
            "nsp_correct": int(expected.nsp_correct),
            "n_predictions": 9,
            "n_pairs": 3,
        }
    ]
    with pytest.raises(ValueError, match="log must be a list"):
        bert_loss(log=())


# ---- ALiBi instead of learned positions; pretraining without NSP ----------------------------------


def test_alibi_bert_counts_no_position_vectors():
    config = BERTConfig(vocab_size=V, max_len=16, d_model=16, n_heads=4, n_layers=2, position="alibi")
    model = BERT(config)
    assert isinstance(model.positional, ALiBi) and model.positional.bidirectional
    assert not any(name.startswith("positional.") for name, _ in model.named_parameters())
    assert "positional.slopes" not in model.state_dict()  # a constant, rebuilt from the config
    learned = BERTConfig(vocab_size=V, max_len=16, d_model=16, n_heads=4, n_layers=2)
    assert parameter_breakdown(learned)["embeddings"] - parameter_breakdown(config)["embeddings"] == 16 * 16
    assert sum(p.numel() for p in model.parameters()) == parameter_count(config, heads=True)
    assert meta_count(config) == parameter_count(config, heads=True)


def test_alibi_bert_is_pytorchs_encoder_with_the_distance_penalty_as_a_float_mask():
    model = small(position="alibi", n_heads=2, norm_first=True).double().eval()
    batch = a_batch()
    n = batch.tokens.shape[1]
    e = model.token_embedding.weight[batch.tokens] + model.segment_embedding.weight[batch.segments]
    expected = F.layer_norm(e, (16,), model.embedding_norm.gamma, model.embedding_norm.beta, eps=1e-12)
    torch.testing.assert_close(model.embed(batch.tokens, batch.segments), expected)
    slopes = torch.tensor([2.0**-4, 2.0**-8], dtype=torch.float64)  # 2 heads: 2^(-8k/2), k = 1, 2
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().double()
    penalty = (-slopes[:, None, None] * distance).repeat(batch.tokens.shape[0], 1, 1)  # (B * h, n, n)
    for layer in model.encoder.layers:
        expected = twins.torch_encoder_layer(layer)(expected, src_mask=penalty)
    expected = F.layer_norm(expected, (16,), model.encoder.norm.gamma, model.encoder.norm.beta, eps=1e-12)
    torch.testing.assert_close(model.encode(batch.tokens, batch.segments), expected, rtol=1e-10, atol=1e-10)


def test_alibi_bert_reads_a_reversed_sentence_reversed_and_learned_positions_do_not():
    """|i - j| does not change when a sequence is read backwards: without position vectors the
    encoder is equivariant to reversal (with one segment and no padding); with them it is not."""
    tokens = torch.randint(5, V, (2, 11), generator=torch.Generator().manual_seed(3))
    for position, equivariant in (("alibi", True), ("learned", False)):
        model = small(position=position).double().eval()
        forward, backward = model.encode(tokens), model.encode(tokens.flip(1)).flip(1)
        assert torch.allclose(forward, backward, atol=1e-10) is equivariant


def test_alibi_attention_prefers_near_keys_before_any_training():
    model = small(position="alibi", n_heads=2).eval()
    x = model.embed(torch.randint(5, V, (4, 16)))
    _, weights = model.encoder.layers[0].self_attn(
        x, x, x, bias=model.positional.attention_bias(16, 16), need_weights=True
    )
    by_distance = torch.stack(
        [weights.diagonal(offset=k, dim1=-2, dim2=-1).mean(dim=(0, 2)) for k in range(1, 12)], dim=1
    )  # (heads, distance 1..11)
    assert (by_distance[:, :-1] > by_distance[:, 1:]).all()  # every head: the nearer, the heavier


def test_pretraining_without_nsp_is_the_mlm_loss_alone():
    model = small()
    batch = a_batch()
    with_nsp = pretraining_loss(model, batch)
    without = pretraining_loss(model, batch._replace(is_next=torch.zeros(7)), nsp=False)  # is_next is not read
    assert without.total.item() == pytest.approx(with_nsp.mlm.item())
    assert without.nsp is None and without.nsp_correct is None
    assert int(without.n_predictions) == int(with_nsp.n_predictions)
    log = []
    loss, n = bert_loss(log, nsp=False)(model, batch)
    assert loss.item() == pytest.approx(with_nsp.mlm.item()) and int(n) == int(with_nsp.n_predictions)
    assert log[0]["nsp"] is None and log[0]["nsp_correct"] is None
    scores = evaluate_pretraining(model, [batch, a_batch(seed=1)], nsp=False)
    assert set(scores) == {"mlm_loss", "mlm_perplexity", "n_predictions", "n_pairs"}
    assert scores["mlm_loss"] == pytest.approx(evaluate_pretraining(model, [batch, a_batch(seed=1)])["mlm_loss"])
    with pytest.raises(ValueError, match="nsp must be a bool"):
        bert_loss(nsp=1)


def test_position_names_an_encoding_bert_takes():
    assert POSITIONS == ("learned", "sinusoidal", "alibi")
    with pytest.raises(
        ValueError,
        match=r"^BERT: unknown position 'rope'; BERT takes 'learned', 'sinusoidal' or "
        r"'alibi'$",
    ):
        BERT(BERTConfig(vocab_size=V, position="rope"))
    with pytest.raises(
        ValueError,
        match=r"^BERT: position 'rotary' rotates the queries and keys, which BERT does "
        r"not take; choose 'learned', 'sinusoidal' or 'alibi'$",
    ):
        BERT(BERTConfig(vocab_size=V, position="rotary"))


def test_sinusoidal_bert_adds_the_fixed_table_and_learns_no_positions():
    model = small(position="sinusoidal").double().eval()
    assert isinstance(model.positional, SinusoidalPositionalEncoding)
    assert not any(name.startswith("positional.") for name, _ in model.named_parameters())
    tokens, segments = a_batch().tokens, a_batch().segments
    n = tokens.shape[1]
    table = torch.tensor(
        [
            [
                math.sin(p / 10000 ** (2 * (j // 2) / 16)) if j % 2 == 0 else math.cos(p / 10000 ** (2 * (j // 2) / 16))
                for j in range(16)
            ]
            for p in range(n)
        ],
        dtype=torch.float64,
    )
    e = model.token_embedding.weight[tokens] + model.segment_embedding.weight[segments] + table
    expected = F.layer_norm(e, (16,), model.embedding_norm.gamma, model.embedding_norm.beta, eps=1e-12)
    torch.testing.assert_close(model.embed(tokens, segments), expected)


# ---- the numbers of the model as it was built before position_encoding ---------------------------------


class BERTBeforeTheFactory(BERT):
    """BERT's construction and forward pass before the position encodings had one factory
    (reproduced from the package's history): an ``nn.Embedding`` named ``position_embedding`` or
    an :class:`ALiBi` named ``alibi``, each built in place."""

    def __init__(self, config):
        nn.Module.__init__(self)
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.segment_embedding = nn.Embedding(c.n_segments, c.d_model)
        self.position_embedding = nn.Embedding(c.max_len, c.d_model) if c.position == "learned" else None
        self.alibi = ALiBi(c.n_heads) if c.position == "alibi" else None
        self.embedding_norm = LayerNorm(c.d_model, c.eps)
        self.embedding_dropout = nn.Dropout(c.dropout)
        self.encoder = Encoder(
            c.n_layers,
            c.d_model,
            c.n_heads,
            c.ff_width,
            c.dropout,
            norm_first=c.norm_first,
            activation="gelu",
            eps=c.eps,
        )
        self.pooler = nn.Linear(c.d_model, c.d_model)
        self.mlm_transform = nn.Linear(c.d_model, c.d_model)
        self.mlm_norm = LayerNorm(c.d_model, c.eps)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.nsp = nn.Linear(c.d_model, 2)
        self.reset_parameters()

    def embed(self, tokens, segments=None):
        segments = self._check(tokens, segments)
        x = self.token_embedding(tokens) + self.segment_embedding(segments)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(tokens.shape[1], device=tokens.device))
        return self.embedding_dropout(self.embedding_norm(x))

    def encode(self, tokens, segments=None):
        x = self.embed(tokens, segments)
        bias = self.alibi(tokens.shape[1]) if self.alibi is not None else None
        return self.encoder(x, padding_mask(tokens, self.config.pad_id), bias=bias)


@pytest.mark.parametrize("changes", [dict(), dict(position="alibi", norm_first=True)])
def test_a_seeded_bert_has_the_weights_and_outputs_it_had_before_the_factory(changes):
    config = BERTConfig(**{**dict(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.1), **changes})
    torch.manual_seed(0)
    before = BERTBeforeTheFactory(config)
    torch.manual_seed(0)
    now = BERT(config)
    old = {BERT.renamed_keys.get(k, k): v for k, v in before.state_dict().items()}
    assert list(old) == list(now.state_dict())  # the same parameters, in the same order
    assert all(torch.equal(old[k], v) for k, v in now.state_dict().items())
    batch = a_batch()
    for train in (True, False):  # with dropout drawn from one seed, and without
        outputs = []
        for model in (before, now):
            torch.manual_seed(1)
            outputs.append(model.train(train)(batch.tokens, batch.segments))
        assert all(torch.equal(a, b) for a, b in zip(*outputs, strict=True))


def test_a_file_with_the_old_name_of_the_learned_table_loads(tmp_path):
    torch.manual_seed(1)
    before = BERTBeforeTheFactory(BERTConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2))
    old_state = before.state_dict()
    assert "position_embedding.weight" in old_state
    model = small()  # seed 0: other weights
    assert not torch.equal(model.positional.embedding.weight, old_state["position_embedding.weight"])
    model.load_state_dict(old_state)  # strict: every key is taken
    assert torch.equal(model.positional.embedding.weight, old_state["position_embedding.weight"])
    assert all(torch.equal(model.state_dict()[BERT.renamed_keys.get(k, k)], v) for k, v in old_state.items())
    # and through load_model, as a file that save_model wrote before the rename
    path = checkpoints.save_model(tmp_path / "bert.pt", model)
    saved = checkpoints.read_checkpoint(path)
    saved["model"] = {
        ("position_embedding.weight" if k == "positional.embedding.weight" else k): v for k, v in saved["model"].items()
    }
    checkpoints.write_checkpoint(saved, path)
    loaded, _, _ = checkpoints.load_model(path)
    assert torch.equal(loaded.positional.embedding.weight, old_state["position_embedding.weight"])
