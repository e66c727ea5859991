"""Tests of transformer_book.models.elmo: the LSTM written out, the scalar mix and ELMo's biLM (chapter 12)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.models.elmo import BiLM, BiLMConfig, LSTMCell, LSTMLayer, ScalarMix

pytestmark = pytest.mark.usefixtures("one_thread")

EXACT = dict(rtol=0, atol=1e-12)


# --- LSTMCell --------------------------------------------------------------------------------


def test_cell_matches_torch_lstmcell_forward_and_gradients():
    torch.manual_seed(0)
    ours, theirs = LSTMCell(5, 4).double(), nn.LSTMCell(5, 4).double()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, dtype=torch.float64)
    h0, c0 = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    for state in (None, (h0, c0)):
        inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]
        ours_state = None if state is None else (inputs[1], inputs[2])
        theirs_inputs = [t.clone().requires_grad_() for t in (x, h0, c0)]
        theirs_state = None if state is None else (theirs_inputs[1], theirs_inputs[2])
        h, c = ours(inputs[0], ours_state)
        h_ref, c_ref = theirs(theirs_inputs[0], theirs_state)
        torch.testing.assert_close(h, h_ref, **EXACT)
        torch.testing.assert_close(c, c_ref, **EXACT)
        ours.zero_grad()
        theirs.zero_grad()
        ((h * torch.arange(4.0, dtype=torch.float64)).sum() + c.pow(2).sum()).backward()
        ((h_ref * torch.arange(4.0, dtype=torch.float64)).sum() + c_ref.pow(2).sum()).backward()
        used = 1 if state is None else 3
        for a, b in zip(inputs[:used], theirs_inputs[:used]):
            torch.testing.assert_close(a.grad, b.grad, **EXACT)
        for (name, p), (name_ref, p_ref) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert name == name_ref
            torch.testing.assert_close(p.grad, p_ref.grad, **EXACT)


def test_cell_seeded_initialisation_is_pytorchs():
    torch.manual_seed(3)
    ours = LSTMCell(6, 9)
    torch.manual_seed(3)
    theirs = nn.LSTMCell(6, 9)
    for p, p_ref in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(p, p_ref, rtol=0, atol=0)
    bound = 1 / math.sqrt(9)
    assert all(p.abs().max() <= bound for p in ours.parameters())
    assert ours.weight_ih.shape == (36, 6) and ours.weight_hh.shape == (36, 9) and ours.bias_hh.shape == (36,)


def test_cell_gate_equations_by_hand():
    torch.manual_seed(1)
    cell = LSTMCell(2, 3).double()
    x = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    h = torch.tensor([[0.1, 0.2, -0.3]], dtype=torch.float64)
    c = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    W_i, W_h, b_i, b_h = (p.detach() for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))
    x1, h1 = x[0], h[0]

    def pre(k):  # gate k in PyTorch's order i, f, g, o: rows 3k .. 3k+2
        rows = slice(3 * k, 3 * k + 3)
        return W_i[rows] @ x1 + b_i[rows] + W_h[rows] @ h1 + b_h[rows]

    i, f, g, o = torch.sigmoid(pre(0)), torch.sigmoid(pre(1)), torch.tanh(pre(2)), torch.sigmoid(pre(3))
    c_expected = f * c[0] + i * g
    h_expected = o * torch.tanh(c_expected)
    h_new, c_new = cell(x, (h, c))
    torch.testing.assert_close(c_new[0], c_expected, **EXACT)
    torch.testing.assert_close(h_new[0], h_expected, **EXACT)


# --- LSTMLayer -------------------------------------------------------------------------------


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("load", ["torch_into_book", "book_into_torch"])
def test_layer_matches_nn_lstm(with_state, load):
    torch.manual_seed(0)
    ours, theirs = LSTMLayer(5, 4).double(), nn.LSTM(5, 4, batch_first=True).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    if load == "torch_into_book":
        ours.load_state_dict(theirs.state_dict())
    else:
        theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    state = (torch.randn(1, 3, 4, dtype=torch.float64), torch.randn(1, 3, 4, dtype=torch.float64))
    results = []
    for model in (ours, theirs):
        xi = x.clone().requires_grad_()
        s = tuple(t.clone().requires_grad_() for t in state) if with_state else None
        out, (h_n, c_n) = model(xi, s)
        weight = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
        ((out * weight).sum() + h_n.sum() + 2 * c_n.sum()).backward()
        grads = [xi.grad] + ([t.grad for t in s] if with_state else [])
        results.append((out, h_n, c_n, grads, {k: p.grad for k, p in model.named_parameters()}))
    (out, h_n, c_n, grads, pgrads), (out_r, h_r, c_r, grads_r, pgrads_r) = results
    assert out.shape == (3, 6, 4) and h_n.shape == c_n.shape == (1, 3, 4)
    torch.testing.assert_close(out, out_r, **EXACT)
    torch.testing.assert_close(h_n, h_r, **EXACT)
    torch.testing.assert_close(c_n, c_r, **EXACT)
    torch.testing.assert_close(h_n[0], out[:, -1], rtol=0, atol=0)
    for g, g_r in zip(grads, grads_r):
        torch.testing.assert_close(g, g_r, **EXACT)
    assert pgrads.keys() == pgrads_r.keys()
    for name in pgrads:
        torch.testing.assert_close(pgrads[name], pgrads_r[name], **EXACT)


def test_layer_is_the_cell_unrolled():
    torch.manual_seed(0)
    layer, cell = LSTMLayer(3, 2).double(), LSTMCell(3, 2).double()
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in layer.state_dict().items()})
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    out, (h_n, c_n) = layer(x)
    state = None
    for t in range(5):
        state = cell(x[:, t], state)
        torch.testing.assert_close(out[:, t], state[0], **EXACT)
    torch.testing.assert_close(c_n[0], state[1], **EXACT)


def test_lstm_bad_input():
    cell, layer = LSTMCell(3, 2), LSTMLayer(3, 2)
    with pytest.raises(
        ValueError, match=r"LSTMCell: x must be a torch.float32 tensor of shape \(\*, 3\), got shape \(2, 4\)"
    ):
        cell(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="LSTMCell: x .* dtype torch.float64"):
        cell(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"LSTMCell: state c must be .* \(2, 2\), got shape \(1, 2\)"):
        cell(torch.zeros(2, 3), (torch.zeros(2, 2), torch.zeros(1, 2)))
    with pytest.raises(ValueError, match="LSTMCell: state must be a pair"):
        cell(torch.zeros(2, 3), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"LSTMLayer: x must be .* \(\*, \*, 3\), got shape \(2, 3\)"):
        layer(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"LSTMLayer: state h_0 must be .* \(1, 2, 2\), got shape \(2, 2\)"):
        layer(torch.zeros(2, 4, 3), (torch.zeros(2, 2), torch.zeros(1, 2, 2)))
    with pytest.raises(ValueError, match=r"LSTMLayer: x .* got shape \(2, 0, 3\)"):
        layer(torch.zeros(2, 0, 3))
    with pytest.raises(ValueError, match="LSTMCell: d_hidden must be a positive int, got 0"):
        LSTMCell(3, 0)
    with pytest.raises(ValueError, match="LSTMLayer: d_input must be a positive int, got 2.0"):
        LSTMLayer(2.0, 3)


# --- ScalarMix -------------------------------------------------------------------------------


def test_scalar_mix_equals_a_loop_and_starts_uniform():
    torch.manual_seed(0)
    mix = ScalarMix(3).double()
    torch.testing.assert_close(mix.weights, torch.full((3,), 1 / 3, dtype=torch.float64), **EXACT)
    with torch.no_grad():
        mix.w.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.7)
    layers = [torch.randn(2, 4, 5, dtype=torch.float64) for _ in range(3)]
    e = [math.exp(v) for v in (0.5, -1.0, 2.0)]
    s = [v / sum(e) for v in e]
    expected = 1.7 * (s[0] * layers[0] + s[1] * layers[1] + s[2] * layers[2])
    torch.testing.assert_close(mix(layers), expected, **EXACT)
    torch.testing.assert_close(mix(torch.stack(layers)), expected, **EXACT)
    torch.testing.assert_close(mix.weights, torch.tensor(s, dtype=torch.float64), **EXACT)
    assert not mix.weights.requires_grad


def test_scalar_mix_gradient_reaches_w_and_gamma():
    torch.manual_seed(0)
    mix = ScalarMix(2)
    layers = torch.randn(2, 3, 4)
    mix(layers).sum().backward()
    assert mix.gamma.grad is not None and mix.gamma.grad.abs() > 0
    # at w = 0 the gradient of sum(mix) w.r.t. w_j is gamma * s_j * (S_j - mean_k S_k), S_j = layers[j].sum()
    sums = layers.sum(dim=(1, 2))
    torch.testing.assert_close(mix.w.grad, 0.5 * (sums - sums.mean()), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mix.gamma.grad, layers.mean(0).sum(), rtol=1e-5, atol=1e-5)


def test_scalar_mix_bad_input():
    mix = ScalarMix(3)
    with pytest.raises(ValueError, match="ScalarMix: expected 3 layers, got 2"):
        mix([torch.zeros(2, 4), torch.zeros(2, 4)])
    with pytest.raises(ValueError, match=r"ScalarMix: .* layer 0 has shape \(2, 4\), layer 2 has \(2, 5\)"):
        mix([torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 5)])
    with pytest.raises(ValueError, match=r"ScalarMix: layers must be a \(3, \.\.\., d\) tensor, got shape \(2, 5, 4\)"):
        mix(torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="ScalarMix: layers have dtype torch.float64"):
        mix(torch.zeros(3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="ScalarMix: n_layers must be a positive int"):
        ScalarMix(0)


# --- BiLM ------------------------------------------------------------------------------------


def tiny(**changes):
    torch.manual_seed(0)
    return BiLM(
        BiLMConfig(
            **{
                **dict(vocab_size=23, d_embed=8, d_hidden=12, n_layers=2, cutoffs=(5, 12), div_value=2.0, dropout=0.0),
                **changes,
            }
        )
    )


def test_shapes_names_and_seeded_construction():
    model = tiny()
    tokens = torch.randint(0, 23, (3, 7))
    reps = model.layer_representations(tokens)
    assert reps.shape == (3, 3, 7, 16)
    assert isinstance(model.forward_layers[0], nn.LSTM) and isinstance(
        tiny(engine="book").backward_layers[1], LSTMLayer
    )
    assert isinstance(model.output, nn.AdaptiveLogSoftmaxWithLoss)
    assert isinstance(tiny(cutoffs=()).output, nn.Linear)
    # layer 0 is the embedding, twice
    emb = model.embedding(tokens)
    torch.testing.assert_close(reps[0], torch.cat([emb, emb], dim=-1), rtol=0, atol=0)
    again = tiny()
    for (k, v), (k2, v2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2
        torch.testing.assert_close(v, v2, rtol=0, atol=0)
    assert model.state_dict().keys() == tiny(engine="book").state_dict().keys()
    assert "engine='torch'" in repr(model)


def test_engines_agree_after_copying_weights():
    torch_model = tiny(cutoffs=(5,)).double().eval()
    book_model = tiny(cutoffs=(5,), engine="book").double().eval()
    book_model.load_state_dict(torch_model.state_dict())
    tokens = torch.randint(0, 23, (2, 6))
    torch.testing.assert_close(
        book_model.layer_representations(tokens), torch_model.layer_representations(tokens), **EXACT
    )
    for a, b in zip(book_model.loss(tokens), torch_model.loss(tokens)):
        torch.testing.assert_close(a, b, **EXACT)
    lengths = torch.tensor([4, 6])
    torch.testing.assert_close(
        book_model.layer_representations(tokens, lengths), torch_model.layer_representations(tokens, lengths), **EXACT
    )


def test_forward_half_ignores_the_future_and_backward_half_the_past():
    model = tiny().eval()
    tokens = torch.randint(0, 23, (2, 9))
    t, d = 4, 8
    later, earlier = tokens.clone(), tokens.clone()
    later[:, t + 1 :] = (later[:, t + 1 :] + 1) % 23
    earlier[:, :t] = (earlier[:, :t] + 1) % 23
    base, a, b = (model.layer_representations(x) for x in (tokens, later, earlier))
    for j in range(1, 3):
        torch.testing.assert_close(a[j, :, : t + 1, :d], base[j, :, : t + 1, :d], rtol=0, atol=0)
        assert not torch.allclose(a[j, :, : t + 1, d:], base[j, :, : t + 1, d:])  # the backward half does see it
        torch.testing.assert_close(b[j, :, t:, d:], base[j, :, t:, d:], rtol=0, atol=0)
        assert not torch.allclose(b[j, :, t:, :d], base[j, :, t:, :d])


def test_padding_never_reaches_the_real_positions():
    model = tiny().double().eval()
    torch.manual_seed(1)
    rows = [torch.randint(0, 23, (n,)) for n in (7, 3, 5)]
    batch = torch.randint(0, 23, (3, 7))  # arbitrary ids in the padding
    for b, row in enumerate(rows):
        batch[b, : len(row)] = row
    lengths = torch.tensor([len(r) for r in rows])
    reps = model.layer_representations(batch, lengths)
    for b, row in enumerate(rows):
        alone = model.layer_representations(row[None])
        torch.testing.assert_close(reps[:, b, : len(row)], alone[:, 0], **EXACT)
    # without lengths the backward direction of the short rows reads the padding first
    unaware = model.layer_representations(batch)
    assert not torch.allclose(unaware[1:, 1, :3], reps[1:, 1, :3])


def _hand_nll(model, tokens):
    fwd = model.log_probs(tokens, "forward")
    bwd = model.log_probs(tokens, "backward")
    assert fwd.shape == bwd.shape == (tokens.shape[0], tokens.shape[1] - 1, model.config.vocab_size)
    fwd_targets, bwd_targets = [], []
    for row in tokens.tolist():
        fwd_targets.append([row[t + 1] for t in range(len(row) - 1)])  # position t predicts token t+1
        bwd_targets.append([row[t] for t in range(len(row) - 1)])  # position t+1 predicts token t
    V = model.config.vocab_size
    return (
        F.nll_loss(fwd.reshape(-1, V), torch.tensor(fwd_targets).reshape(-1)),
        F.nll_loss(bwd.reshape(-1, V), torch.tensor(bwd_targets).reshape(-1)),
    )


@pytest.mark.parametrize("cutoffs", [(5, 12), ()])
def test_loss_is_the_nll_of_log_probs(cutoffs):
    model = tiny(cutoffs=cutoffs).double().eval()
    tokens = torch.randint(0, 23, (3, 6))
    lp = model.log_probs(tokens, "forward")
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(3, 5, dtype=torch.float64), **EXACT)
    expected = _hand_nll(model, tokens)
    for got, want in zip(model.loss(tokens), expected):
        torch.testing.assert_close(got, want, **EXACT)


def test_backward_log_probs_see_only_the_later_tokens():
    model = tiny().eval()
    tokens = torch.randint(0, 23, (1, 6))
    changed = tokens.clone()
    changed[0, :3] = (changed[0, :3] + 1) % 23
    # backward entry t predicts token t from tokens t+1 ..: entries 2.. are untouched by tokens 0..2
    a, b = model.log_probs(tokens, "backward"), model.log_probs(changed, "backward")
    torch.testing.assert_close(a[:, 2:], b[:, 2:], rtol=0, atol=0)
    assert not torch.allclose(a[:, :2], b[:, :2])


def test_untrained_full_softmax_loss_is_near_log_v():
    torch.manual_seed(0)
    model = BiLM(BiLMConfig(vocab_size=500, d_embed=32, d_hidden=32, cutoffs=(), dropout=0.0))
    tokens = torch.randint(0, 500, (4, 20))
    for loss in model.loss(tokens):
        assert abs(loss.item() - math.log(500)) < 0.1


def test_dropout_only_in_train_mode():
    model = tiny(dropout=0.5)
    tokens = torch.randint(0, 23, (2, 5))
    model.eval()
    torch.testing.assert_close(model.layer_representations(tokens), model.layer_representations(tokens), rtol=0, atol=0)
    model.train()
    assert not torch.equal(model.layer_representations(tokens), model.layer_representations(tokens))


def test_a_tiny_bilm_learns_a_repeated_sequence():
    model = tiny(vocab_size=10, d_embed=16, d_hidden=32, cutoffs=(4,))
    pattern = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        start = torch.randint(0, 16, (8,))
        windows = torch.stack([pattern[s : s + 12] for s in start])
        loss_fwd, loss_bwd = model.loss(windows)
        optimizer.zero_grad()
        (loss_fwd + loss_bwd).backward()
        optimizer.step()
    # not 0: after a window's first token 1 comes 4 or 5 (and before a last token 1, 3 or 4)
    assert loss_fwd.item() < 0.2 and loss_bwd.item() < 0.2


def test_bilm_bad_input():
    model = tiny()
    with pytest.raises(
        ValueError,
        match=r"BiLM.loss: tokens must be a \(B, n\) integer tensor, got shape \(2, 3\), "
        "dtype torch.float32",
    ):
        model.loss(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"BiLM.layer_representations: tokens must be .* got shape \(5,\)"):
        model.layer_representations(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"BiLM.loss: tokens hold ids in \[-1, 4\], outside the vocabulary \[0, 23\)"):
        model.loss(torch.tensor([[-1, 4]]))
    with pytest.raises(ValueError, match=r"ids in \[0, 23\], outside"):
        model.layer_representations(torch.tensor([[0, 23]]))
    with pytest.raises(ValueError, match=r"BiLM.loss: tokens have shape \(2, 1\); .* at least 2 tokens"):
        model.loss(torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"BiLM.log_probs: tokens have shape \(2, 1\)"):
        model.log_probs(torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="BiLM.log_probs: direction must be 'forward' or 'backward', got 'left'"):
        model.log_probs(torch.zeros(2, 3, dtype=torch.long), "left")
    tokens = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, n=4\], got values in \[0, 3\]"):
        model.layer_representations(tokens, torch.tensor([3, 0]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, n=4\], got values in \[2, 5\]"):
        model.layer_representations(tokens, torch.tensor([5, 2]))
    with pytest.raises(ValueError, match=r"lengths must be a \(2,\) integer tensor, got shape \(3,\)"):
        model.layer_representations(tokens, torch.tensor([1, 2, 3]))
    with pytest.raises(
        ValueError, match=r"lengths must be a \(2,\) integer tensor, got shape \(2,\), dtype torch.float32"
    ):
        model.layer_representations(tokens, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="BiLM: config must be a BiLMConfig, got dict"):
        BiLM({"vocab_size": 10})


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(vocab_size=0), "BiLMConfig: vocab_size must be a positive int, got 0"),
        (dict(d_embed=True), "BiLMConfig: d_embed must be a positive int, got True"),
        (dict(n_layers=1.5), "BiLMConfig: n_layers must be a positive int, got 1.5"),
        (dict(dropout=1.0), r"BiLMConfig: dropout must lie in \[0, 1\), got 1.0"),
        (dict(cutoffs=(12, 5)), r"BiLMConfig: cutoffs must increase strictly .* got \(12, 5\)"),
        (dict(cutoffs=(5, 5)), r"cutoffs must increase strictly .* got \(5, 5\)"),
        (dict(cutoffs=(5, 23)), r"lie in \[1, vocab_size=23\), got \(5, 23\); use cutoffs=\(\)"),
        (dict(cutoffs=(0, 5)), r"got \(0, 5\)"),
        (dict(cutoffs=(5.0,)), r"BiLMConfig: cutoffs must be a tuple of ints, got \(5.0,\)"),
        (dict(div_value=0.5), "BiLMConfig: div_value must be a finite real >= 1, got 0.5"),
        (dict(div_value=16.0), "BiLMConfig: div_value=16.0 leaves the last of 2 tail clusters"),
        (dict(engine="cudnn"), r"BiLMConfig: engine must be one of \('torch', 'book'\), got 'cudnn'"),
    ],
)
def test_config_errors_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        BiLMConfig(**{**dict(vocab_size=23, d_embed=8, cutoffs=(5, 12), div_value=2.0), **changes})


def test_config_defaults_and_list_cutoffs():
    c = BiLMConfig(vocab_size=33278)
    assert (c.d_embed, c.d_hidden, c.n_layers, c.cutoffs, c.div_value, c.engine) == (
        256,
        1024,
        2,
        (2000, 10000),
        4.0,
        "torch",
    )
    assert BiLMConfig(vocab_size=23, cutoffs=[5, 12]).cutoffs == (5, 12)
    with pytest.raises(ValueError, match="below|lie in"):
        BiLMConfig(vocab_size=100)  # the default cutoffs need a large vocabulary
