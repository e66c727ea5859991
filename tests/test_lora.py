"""Low-rank adaptation (transformer_book.lora): the adapted layer against a hand computation in
NumPy, merging and unmerging, which parameters train, the parameter count by formula, LoRA on
the book's BERT and GPT (tied output weight included), the adapter file, and bad input."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.attention import MultiHeadAttention
from transformer_book.lora import LoRALinear, apply_lora, lora_state_dict, merge_lora, trainable_parameters
from transformer_book.models.bert import BERT, BERTConfig
from transformer_book.models.finetuning import SequenceClassifier, freeze_encoder
from transformer_book.models.gpt import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def _randomise(model: nn.Module, std: float = 0.1) -> nn.Module:
    """Give every B (zero at initialisation) random entries, as training would."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_b.normal_(0.0, std)
    return model


def _bert_classifier(seed: int = 0, **changes) -> SequenceClassifier:
    torch.manual_seed(seed)
    config = BERTConfig(
        **{**dict(vocab_size=40, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0), **changes}
    )
    return SequenceClassifier(BERT(config), 3, dropout=0.0)


def _gpt(seed: int = 0, **changes) -> GPT:
    torch.manual_seed(seed)
    return GPT(
        GPTConfig(**{**dict(vocab_size=24, context=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0), **changes})
    )


def _tokens(seed: int, shape=(3, 9), vocab: int = 40) -> torch.Tensor:
    return torch.randint(1, vocab, shape, generator=torch.Generator().manual_seed(seed))


def _hand_forward(x: np.ndarray, W: np.ndarray, b: np.ndarray, A: np.ndarray, B: np.ndarray, scale: float):
    """x W^T + b + scale (x A^T) B^T, one output at a time in float64 NumPy."""
    out = np.empty((x.shape[0], W.shape[0]))
    for i in range(x.shape[0]):
        low = np.array([sum(A[k, j] * x[i, j] for j in range(x.shape[1])) for k in range(A.shape[0])])
        for o in range(W.shape[0]):
            out[i, o] = W[o] @ x[i] + b[o] + scale * sum(B[o, k] * low[k] for k in range(A.shape[0]))
    return out


# --- one layer -------------------------------------------------------------------------------


def test_at_initialisation_the_layer_is_the_base_layer_exactly() -> None:
    torch.manual_seed(0)
    base = nn.Linear(12, 7)
    reference = copy.deepcopy(base)
    layer = LoRALinear(base, r=4, alpha=8)
    x = torch.randn(5, 3, 12)
    assert torch.equal(layer(x), reference(x))
    assert torch.equal(layer.lora_b, torch.zeros(7, 4))
    bound = 1 / math.sqrt(12)  # Kaiming-uniform with a = sqrt(5): U(-1/sqrt(d_in), 1/sqrt(d_in))
    assert layer.lora_a.shape == (4, 12) and layer.lora_a.abs().max() <= bound and layer.lora_a.std() > bound / 4
    assert layer.base is base and not base.weight.requires_grad and not base.bias.requires_grad
    assert layer.lora_a.requires_grad and layer.lora_b.requires_grad
    assert layer.scaling == 2.0 and layer.r == 4 and layer.alpha == 8.0 and not layer.merged


@pytest.mark.parametrize("bias", [True, False])
def test_forward_equals_the_hand_computation(bias: bool) -> None:
    torch.manual_seed(1)
    layer = _randomise(LoRALinear(nn.Linear(6, 5, bias=bias).double(), r=3, alpha=5.0), std=0.5)
    x = torch.randn(4, 6, dtype=torch.float64)
    W, A, B = (t.detach().numpy() for t in (layer.base.weight, layer.lora_a, layer.lora_b))
    b = layer.base.bias.detach().numpy() if bias else np.zeros(5)
    expected = _hand_forward(x.numpy(), W, b, A, B, 5.0 / 3)
    np.testing.assert_allclose(layer(x).detach().numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        layer.delta_weight().detach().numpy(), 5.0 / 3 * np.einsum("ok,ki->oi", B, A), rtol=0, atol=1e-14
    )
    assert np.linalg.matrix_rank(layer.delta_weight().detach().numpy()) == 3
    np.testing.assert_allclose(layer.weight.detach().numpy(), W + 5.0 / 3 * B @ A, rtol=0, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_merge_gives_the_same_outputs_and_unmerge_restores_the_weight(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    layer = _randomise(LoRALinear(nn.Linear(16, 8).to(dtype), r=4, alpha=4.0))
    original = layer.base.weight.detach().clone()
    x = torch.randn(10, 16, dtype=dtype)
    with torch.no_grad():
        adapted = layer(x)
        merged = layer.merge()(x)
        assert layer.merged and "merged=True" in repr(layer)
        torch.testing.assert_close(merged, adapted, rtol=0, atol=ATOL[dtype])
        torch.testing.assert_close(layer.base.weight, original + layer.delta_weight(), rtol=0, atol=ATOL[dtype])
        # the merged forward reads W alone: zeroing B now changes nothing
        saved_b = layer.lora_b.clone()
        layer.lora_b.zero_()
        assert torch.equal(layer(x), merged)
        layer.lora_b.copy_(saved_b)
        layer.merge()  # merging twice adds nothing
        torch.testing.assert_close(layer(x), adapted, rtol=0, atol=ATOL[dtype])
        layer.unmerge()
        assert not layer.merged
        torch.testing.assert_close(layer.base.weight, original, rtol=0, atol=ATOL[dtype] / 10)
        torch.testing.assert_close(layer(x), adapted, rtol=0, atol=ATOL[dtype])


def test_dropout_acts_on_the_branch_only() -> None:
    torch.manual_seed(3)
    layer = _randomise(LoRALinear(nn.Linear(8, 8), r=2, alpha=2.0, dropout=0.5))
    x = torch.randn(64, 8)
    torch.manual_seed(7)
    out = layer(x)
    torch.manual_seed(7)
    kept = F.dropout(x, 0.5, training=True)  # the same draw by hand
    torch.testing.assert_close(out, layer.base(x) + F.linear(F.linear(kept, layer.lora_a), layer.lora_b))
    layer.eval()
    torch.testing.assert_close(layer(x), layer.base(x) + (x @ layer.lora_a.T) @ layer.lora_b.T)
    assert "dropout=0.5" in repr(layer) and "r=2" in repr(layer) and "alpha=2" in repr(layer)


def test_at_initialisation_only_b_gets_a_gradient() -> None:
    """With B = 0 the gradient with respect to A is exactly zero (Hu et al.'s initialisation)."""
    torch.manual_seed(4)
    layer = LoRALinear(nn.Linear(8, 6), r=2)
    layer(torch.randn(5, 8)).pow(2).sum().backward()
    assert torch.equal(layer.lora_a.grad, torch.zeros(2, 8))
    assert layer.lora_b.grad.abs().sum() > 0
    assert layer.base.weight.grad is None and layer.base.bias.grad is None


# --- whole models ----------------------------------------------------------------------------


def test_bert_classifier_starts_as_the_base_and_equals_hand_merged_weights() -> None:
    model = _bert_classifier().eval()
    base = copy.deepcopy(model)
    tokens = _tokens(0)
    apply_lora(model, r=4, alpha=8, train=("classifier",))
    assert torch.equal(model(tokens), base(tokens))  # B = 0: exactly the pretrained model
    _randomise(model)
    # the reference: the base model with W + (alpha / r) B A written into its projections by hand
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, LoRALinear):
                W, A, B = (t.double().numpy() for t in (module.base.weight, module.lora_a, module.lora_b))
                target = base.get_submodule(name)
                target.weight.copy_(torch.from_numpy(W + 2.0 * B @ A))
        torch.testing.assert_close(model(tokens), base(tokens), rtol=0, atol=1e-6)
        wrapped = sorted(name for name, m in model.named_modules() if isinstance(m, LoRALinear))
        assert wrapped == [f"bert.encoder.layers.{i}.self_attn.{p}" for i in range(2) for p in ("w_q", "w_v")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_merge_lora_leaves_plain_linears_with_the_same_outputs(dtype: torch.dtype) -> None:
    model = _randomise(
        apply_lora(_bert_classifier().to(dtype), targets=("w_q", "w_k", "w_v", "w_o", "linear1"), r=3, alpha=6)
    ).eval()
    tokens = _tokens(1)
    with torch.no_grad():
        adapted = model(tokens)
        merged = merge_lora(model)
        assert merged is model
        assert not any(isinstance(m, LoRALinear) for m in model.modules())
        assert all(
            type(model.bert.encoder.layers[0].self_attn.get_submodule(p)) is nn.Linear
            for p in ("w_q", "w_k", "w_v", "w_o")
        )
        assert not any(k.endswith(("lora_a", "lora_b", "base.weight")) for k in model.state_dict())
        torch.testing.assert_close(model(tokens), adapted, rtol=0, atol=ATOL[dtype])


def test_only_lora_and_train_modules_learn_the_rest_stays_bit_identical() -> None:
    model = apply_lora(_bert_classifier(), r=2, alpha=4, train=("classifier",))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    learners = {name for name in before if name.endswith(("lora_a", "lora_b")) or name.startswith("classifier.")}
    assert {name for name, p in model.named_parameters() if p.requires_grad} == learners
    optimiser = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=1e-2, weight_decay=0.0)
    targets = torch.tensor([0, 2, 1])
    for step in range(2):
        optimiser.zero_grad()
        F.cross_entropy(model(_tokens(step)), targets).backward()
        assert {name for name, p in model.named_parameters() if p.grad is not None} == learners
        optimiser.step()
        changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
        if step == 0:  # B was zero, so A's gradient was zero: B and the head moved, A did not
            assert changed == {name for name in learners if not name.endswith("lora_a")}
    assert changed == learners
    for name, p in model.named_parameters():
        if name not in learners:
            assert torch.equal(p, before[name]), name


def test_a_lora_layer_inside_a_train_module_keeps_its_base_frozen() -> None:
    model = apply_lora(_bert_classifier(), r=2, train=("bert.encoder.layers.1", "classifier"))
    layer = model.bert.encoder.layers[1]
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert not layer.self_attn.w_q.base.weight.requires_grad and not layer.self_attn.w_v.base.bias.requires_grad
    assert layer.self_attn.w_k.weight.requires_grad and layer.ffn.linear1.weight.requires_grad
    assert not model.bert.encoder.layers[0].self_attn.w_k.weight.requires_grad
    assert {n for n in trainable if not n.startswith(("bert.encoder.layers.1.", "classifier."))} == {
        f"bert.encoder.layers.0.self_attn.{p}.lora_{f}" for p in ("w_q", "w_v") for f in "ab"
    }


def test_freeze_encoder_after_apply_lora_keeps_the_adapters_training_and_the_bases_fixed() -> None:
    """The two ways of choosing what trains compose: freezing the encoder does not freeze the
    adapters, and training its top layer does not unfreeze a LoRA layer's base weight."""
    model = apply_lora(_bert_classifier(), targets=("w_q", "w_v"), r=2, train=("classifier",))
    adapters = {n for n, _ in model.named_parameters() if n.endswith((".lora_a", ".lora_b"))}
    bases = {n for n, _ in model.named_parameters() if ".base." in n}
    for k in (0, 1):
        freeze_encoder(model, trainable_layers=k)
        trained = {n for n, p in model.named_parameters() if p.requires_grad}
        assert adapters <= trained and not bases & trained, k
        top = f"bert.encoder.layers.{model.bert.config.n_layers - 1}."
        others_on_top = {n for n in trained if n.startswith(top)} - adapters
        assert bool(others_on_top) == (k == 1), (k, others_on_top)  # the top layer's own weights train with k = 1
        assert any(n.startswith("classifier") for n in trained)


def test_trainable_count_is_the_formula() -> None:
    d, r, L = 16, 4, 2
    model = _bert_classifier()
    total_base = sum(p.numel() for p in model.parameters())
    apply_lora(model, r=r, train=("classifier",))
    per_layer = r * (d + d)  # A (r, d_in) + B (d_out, r)
    head = d * 3 + 3
    assert trainable_parameters(model) == (L * 2 * per_layer + head, total_base + L * 2 * per_layer)
    assert sum(t.numel() for t in lora_state_dict(model).values()) == L * 2 * per_layer + head
    # the feed-forward layers: linear1 is (d_ff, d) with d_ff = 4d
    model = apply_lora(_bert_classifier(), targets=("linear1",), r=r)
    assert trainable_parameters(model)[0] == L * r * (d + 4 * d)


def test_gpt_tied_output_weight_is_untouched_and_still_tied() -> None:
    model = _gpt()
    base = copy.deepcopy(model).eval()
    tokens = _tokens(2, vocab=24)
    apply_lora(model, targets=("w_q", "w_k", "w_v", "w_o"), r=2)
    assert model.output.weight is model.embedding.weight and isinstance(model.output, nn.Linear)
    assert not model.embedding.weight.requires_grad
    assert torch.equal(model.eval()(tokens), base(tokens))
    embedding = model.embedding.weight.detach().clone()
    optimiser = torch.optim.SGD((p for p in model.parameters() if p.requires_grad), lr=0.1)
    model.train()
    for _ in range(2):
        optimiser.zero_grad()
        F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
        optimiser.step()
    assert torch.equal(model.embedding.weight, embedding) and model.output.weight is model.embedding.weight
    # the KV cache still gives forward's logits
    with torch.no_grad():
        model.eval()
        _, caches = model.decode_step(tokens[:, :5])
        step, _ = model.decode_step(tokens[:, 5:6], caches)
        torch.testing.assert_close(step[:, 0], model(tokens[:, :6])[:, -1], rtol=1e-5, atol=1e-5)


def test_gpt_refuses_to_adapt_or_train_a_tied_weight() -> None:
    model = _gpt()
    with pytest.raises(ValueError, match="tied"):
        apply_lora(model, targets=("output",), r=2)
    with pytest.raises(ValueError, match="tied"):
        apply_lora(model, train=("output",), r=2)
    with pytest.raises(ValueError, match="tied"):
        apply_lora(model, train=("embedding",), r=2)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())  # a refused call changes nothing
    both = apply_lora(model, train=("embedding", "output"), r=2)  # all of a tied weight's modules: allowed
    assert both.embedding.weight.requires_grad and both.output.weight is both.embedding.weight
    untied = apply_lora(_gpt(tie_output=False), targets=("output",), r=2)
    assert isinstance(untied.output, LoRALinear) and not untied.embedding.weight.requires_grad


def test_lora_state_dict_round_trip_on_a_fresh_base() -> None:
    pristine = _bert_classifier().eval()
    model = apply_lora(copy.deepcopy(pristine), r=2, alpha=4, train=("classifier",))
    _randomise(model)
    with torch.no_grad():
        model.classifier.weight.normal_()  # as if the head had trained too
    tokens = _tokens(3)
    expected = model(tokens)
    adapter = {k: v.clone() for k, v in lora_state_dict(model).items()}
    assert all(k.endswith(("lora_a", "lora_b")) or k.startswith("classifier.") for k in adapter)
    assert len(adapter) == 2 * 2 * 2 + 2
    torch.manual_seed(123)  # a different A at initialisation
    fresh = apply_lora(copy.deepcopy(pristine), r=2, alpha=4, train=("classifier",)).eval()
    assert not torch.equal(fresh(tokens), expected)
    missing, unexpected = fresh.load_state_dict(adapter, strict=False)
    assert unexpected == [] and not any(k in adapter for k in missing)
    assert torch.equal(fresh(tokens), expected)


def test_a_short_lora_run_lowers_the_loss_of_a_frozen_model() -> None:
    """A frozen GPT learns to continue a cycle 0, 1, ..., 11, 0, ... through LoRA on its attention
    alone. (Its random weights are first rescaled to the size of trained ones, N(0, 1) embeddings
    and N(0, 1/d) matrices: GPT's N(0, 0.02^2) start gives logits too small for any low loss.)"""
    model = _gpt(seed=0, vocab_size=12)
    with torch.no_grad():
        model.embedding.weight.normal_(0.0, 1.0)
        for p in model.blocks.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1 / 4)
    apply_lora(model, targets=("w_q", "w_k", "w_v", "w_o"), r=4, alpha=8)
    starts = torch.randint(0, 12, (16, 1), generator=torch.Generator().manual_seed(0))
    sequences = (starts + torch.arange(13)) % 12

    def loss() -> torch.Tensor:
        return F.cross_entropy(model(sequences[:, :-1]).flatten(0, 1), sequences[:, 1:].flatten())

    optimiser = torch.optim.Adam((p for p in model.parameters() if p.requires_grad), lr=1e-2)
    first = loss().item()
    for _ in range(60):
        optimiser.zero_grad()
        loss().backward()
        optimiser.step()
    assert first > math.log(12) and loss().item() < 0.05 * first


def test_lora_recovers_a_low_rank_change_of_the_weight() -> None:
    """LoRA's premise: when the change of W is of rank r, a rank-r LoRA can learn it exactly."""
    torch.manual_seed(0)
    base = nn.Linear(10, 6)
    true_delta = 0.3 * torch.randn(6, 2) @ torch.randn(2, 10)  # rank 2
    x = torch.randn(256, 10)
    with torch.no_grad():
        y = x @ (base.weight + true_delta).T + base.bias
    layer = LoRALinear(base, r=2, alpha=2)
    optimiser = torch.optim.Adam([layer.lora_a, layer.lora_b], lr=3e-2)
    for _ in range(300):
        optimiser.zero_grad()
        F.mse_loss(layer(x), y).backward()
        optimiser.step()
    assert F.mse_loss(layer(x), y).item() < 1e-8
    torch.testing.assert_close(layer.delta_weight(), true_delta, rtol=0, atol=1e-4)


def test_seeded_adaptation_repeats() -> None:
    torch.manual_seed(9)
    one = apply_lora(_bert_classifier(), r=2)
    torch.manual_seed(9)
    two = apply_lora(_bert_classifier(), r=2)
    for (name, p), (_, q) in zip(one.named_parameters(), two.named_parameters()):
        assert torch.equal(p, q), name


def test_packed_projections_see_the_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """MultiHeadAttention's packed path reads w_q.weight...: the adapted weight, so it agrees; with
    dropout on the branch, apply_lora keeps those attentions unpacked, and merge_lora undoes that."""
    model = _randomise(apply_lora(_bert_classifier(), targets=("w_q", "w_k", "w_v"), r=2)).eval()
    tokens = _tokens(4)
    with torch.no_grad():
        separate = model(tokens)
        monkeypatch.setattr(MultiHeadAttention, "pack_projections", True)
        torch.testing.assert_close(model(tokens), separate, rtol=1e-5, atol=1e-6)
    with_dropout = apply_lora(_bert_classifier(), r=2, dropout=0.1)
    attention = with_dropout.bert.encoder.layers[0].self_attn
    assert attention.pack_projections is False and MultiHeadAttention.pack_projections is True
    merge_lora(with_dropout)
    assert attention.pack_projections is True and "pack_projections" not in vars(attention)


def test_merge_lora_and_lora_state_dict_of_a_single_layer() -> None:
    torch.manual_seed(6)
    layer = _randomise(LoRALinear(nn.Linear(5, 4), r=2))
    x = torch.randn(3, 5)
    expected = layer(x)
    assert set(lora_state_dict(layer)) == {"lora_a", "lora_b"}
    plain = merge_lora(layer)
    assert type(plain) is nn.Linear
    torch.testing.assert_close(plain(x), expected, rtol=0, atol=1e-6)


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(r=0), "r must be a positive int"),
        (dict(r=-2), "r must be a positive int"),
        (dict(r=2.0), "r must be a positive int"),
        (dict(r=True), "r must be a positive int"),
        (dict(r=17), r"exceeds min\(d_in, d_out\)"),
        (dict(alpha=0), "alpha must be a finite real > 0"),
        (dict(alpha=-1.0), "alpha must be a finite real > 0"),
        (dict(alpha=float("nan")), "alpha must be a finite real > 0"),
        (dict(alpha=float("inf")), "alpha must be a finite real > 0"),
        (dict(alpha="16"), "alpha must be a finite real > 0"),
        (dict(dropout=1.0), r"dropout must lie in \[0, 1\)"),
        (dict(targets=("w_x",)), r"no nn.Linear is named \['w_x'\].*'w_q'"),
        (dict(targets="w_q"), "targets must be a sequence of module names"),
        (dict(targets=()), "targets is empty"),
        (dict(train="classifier"), "train must be a sequence of module names"),
        (dict(train=("",)), "train must be a sequence of module names"),
        (dict(train=("head",)), "train names 'head'"),
    ],
)
def test_apply_lora_refuses_bad_arguments_and_changes_nothing(kwargs: dict, message: str) -> None:
    model = _bert_classifier()
    before = copy.deepcopy(model.state_dict())
    grads = [p.requires_grad for p in model.parameters()]
    with pytest.raises(ValueError, match=f"apply_lora.*{message}"):
        apply_lora(model, **kwargs)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert [p.requires_grad for p in model.parameters()] == grads
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_rank_is_checked_against_each_target() -> None:
    model = _bert_classifier()  # linear1 is (64, 16): r = 16 fits it, r = 17 does not
    apply_lora(model, targets=("linear1",), r=16)
    with pytest.raises(ValueError, match="r=17 exceeds"):
        apply_lora(_bert_classifier(), targets=("linear1",), r=17)


def test_applying_twice_and_other_misuse_raise() -> None:
    model = apply_lora(_bert_classifier(), r=2)
    with pytest.raises(ValueError, match="apply_lora: the model has LoRA layers already"):
        apply_lora(model, targets=("w_k",), r=2)
    with pytest.raises(ValueError, match="apply_lora: model must be an nn.Module"):
        apply_lora("bert")
    with pytest.raises(ValueError, match="LoRALinear: expected an nn.Linear"):
        LoRALinear(nn.Conv1d(3, 3, 1))
    with pytest.raises(ValueError, match="LoRALinear: expected an nn.Linear"):
        LoRALinear(model.bert.encoder.layers[0].self_attn.w_q)  # a LoRALinear is not wrapped again
    with pytest.raises(ValueError, match="LoRALinear: r=5 exceeds"):
        LoRALinear(nn.Linear(4, 8), r=5)
    plain = _bert_classifier()
    with pytest.raises(ValueError, match="merge_lora: SequenceClassifier has no LoRA layer"):
        merge_lora(plain)
    with pytest.raises(ValueError, match="lora_state_dict: SequenceClassifier has no LoRA layer"):
        lora_state_dict(plain)
    with pytest.raises(ValueError, match="trainable_parameters: model must be an nn.Module"):
        trainable_parameters([1, 2])
    shared = nn.Sequential()
    shared.add_module("w_q", nn.Linear(4, 4))
    shared.add_module("again", shared.w_q)
    with pytest.raises(ValueError, match="shared"):
        apply_lora(shared, targets=("w_q",), r=2)
