"""Tests of GloVe: the weighting, the loss, and training (chapter 10).

Expected values come from plain loops and formulas written here, and training is checked
against a replay of the documented procedure with autograd and ``torch.optim``, never
against the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from transformer_book.embeddings.glove import GloVeConfig, GloVeResult, glove_loss, glove_weight, train_glove

# --------------------------------------------------------------------------------------
# glove_weight, glove_loss
# --------------------------------------------------------------------------------------


def _f(x, x_max=100.0, alpha=0.75):
    return (x / x_max) ** alpha if x < x_max else 1.0


@pytest.mark.parametrize("x_max, alpha", [(100.0, 0.75), (10.0, 0.5), (3.0, 1.0)])
def test_glove_weight_by_hand(x_max, alpha):
    x = [0.0, 0.5, 1.0, 2.0, 9.99, 10.0, 50.0, 99.9, 100.0, 1e6]
    result = glove_weight(torch.tensor(x, dtype=torch.float64), x_max, alpha)
    np.testing.assert_allclose(result.numpy(), [_f(v, x_max, alpha) for v in x], rtol=1e-12, atol=0)


def test_glove_weight_values():
    w = glove_weight(torch.tensor([0.0, 1.0, 100.0, 200.0], dtype=torch.float64))
    assert w.tolist() == pytest.approx([0.0, 0.01**0.75, 1.0, 1.0])
    assert w[1].item() == pytest.approx(0.0316227766)  # 100^(-3/4)
    assert torch.equal(glove_weight(torch.ones(2, 3) * 500), torch.ones(2, 3))  # shape kept


@pytest.mark.parametrize("kwargs, match", [({"x_max": 0.0}, "x_max"), ({"alpha": -1.0}, "alpha")])
def test_glove_weight_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        glove_weight(torch.ones(3), **kwargs)


def _random_parameters(n_words=7, dim=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(shape, generator=g, dtype=torch.float64)
        for shape in ((n_words, dim), (n_words, dim), (n_words,), (n_words,))
    ]


def test_glove_loss_equals_a_loop():
    w, wt, b, bt = _random_parameters()
    rows = torch.tensor([0, 1, 1, 4, 6, 2, 0])
    cols = torch.tensor([3, 1, 5, 4, 0, 2, 3])  # (0, 3) twice: both enter the sum
    counts = torch.tensor([1.0, 3.0, 250.0, 7.5, 100.0, 42.0, 2.0], dtype=torch.float64)
    expected = 0.0
    for i, j, x in zip(rows.tolist(), cols.tolist(), counts.tolist()):
        dot = sum(w[i, k].item() * wt[j, k].item() for k in range(3))
        expected += _f(x) * (dot + b[i].item() + bt[j].item() - math.log(x)) ** 2
    loss = glove_loss(w, wt, b, bt, rows, cols, counts)
    assert loss.shape == () and loss.item() == pytest.approx(expected, rel=1e-12)
    # a sum, not a mean: the two halves add up
    half = glove_loss(w, wt, b, bt, rows[:3], cols[:3], counts[:3])
    other = glove_loss(w, wt, b, bt, rows[3:], cols[3:], counts[3:])
    assert (half + other).item() == pytest.approx(expected, rel=1e-12)
    # x_max and alpha are passed on to f
    custom = glove_loss(w, wt, b, bt, rows, cols, counts, x_max=5.0, alpha=0.5)
    manual = sum(
        _f(x, 5.0, 0.5) * (torch.dot(w[i], wt[j]) + b[i] + bt[j] - math.log(x)).item() ** 2
        for i, j, x in zip(rows.tolist(), cols.tolist(), counts.tolist())
    )
    assert custom.item() == pytest.approx(manual, rel=1e-12)


def test_glove_loss_is_zero_for_an_exact_fit_and_differentiable():
    w, wt, b, bt = _random_parameters()
    rows, cols = torch.tensor([0, 2, 5]), torch.tensor([1, 2, 6])
    counts = torch.exp((w[rows] * wt[cols]).sum(1) + b[rows] + bt[cols])
    assert glove_loss(w, wt, b, bt, rows, cols, counts).item() == pytest.approx(0.0, abs=1e-20)
    w.requires_grad_(True)
    glove_loss(w, wt, b, bt, rows, cols, counts * 2).backward()
    assert w.grad is not None and w.grad[[1, 3, 4, 6]].abs().sum() == 0  # untouched rows


def test_glove_loss_rejects_non_positive_counts():
    w, wt, b, bt = _random_parameters()
    with pytest.raises(ValueError, match="positive"):
        glove_loss(w, wt, b, bt, torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([3.0, 0.0]))


# --------------------------------------------------------------------------------------
# GloVeConfig
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("dim", 0),
        ("dim", 2.5),
        ("dim", True),
        ("epochs", 0),
        ("batch_size", -1),
        ("batch_size", 1.0),
        ("x_max", 0.0),
        ("x_max", math.inf),
        ("alpha", -0.75),
        ("alpha", math.nan),
        ("lr", 0.0),
        ("lr", "0.1"),
        ("optimizer", "sgd"),
        ("seed", 1.5),
        ("seed", None),
    ],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        GloVeConfig(**{field: value})


def test_config_defaults_are_the_papers():
    config = GloVeConfig()
    assert (config.dim, config.x_max, config.alpha, config.epochs, config.lr, config.optimizer) == (
        100,
        100.0,
        0.75,
        25,
        0.05,
        "adagrad",
    )


# --------------------------------------------------------------------------------------
# train_glove against a replay with autograd and torch.optim
# --------------------------------------------------------------------------------------


def _small_counts(seed=0, n_words=12, density=0.4):
    rng = np.random.default_rng(seed)
    dense = rng.integers(1, 300, size=(n_words, n_words)).astype(float)
    dense[rng.random((n_words, n_words)) > density] = 0.0
    dense[-1, :] = dense[:, -1] = 0.0  # the last word never occurs
    return dense


def _replay(dense, config):
    """The documented procedure, re-implemented: autograd on a loss written here, torch.optim updates."""
    csr = sp.csr_matrix(dense)
    coo = csr.tocoo()  # row-major order
    rows, cols = torch.from_numpy(coo.row.astype(np.int64)), torch.from_numpy(coo.col.astype(np.int64))
    x = torch.from_numpy(coo.data)
    f = torch.where(x < config.x_max, (x / config.x_max) ** config.alpha, torch.ones_like(x)).float()
    log_x = torch.log(x).float()
    n, d = dense.shape[0], config.dim
    g = torch.Generator().manual_seed(config.seed)
    params = [
        ((torch.rand(shape, generator=g) - 0.5) / d).requires_grad_(True) for shape in ((n, d), (n, d), (n,), (n,))
    ]
    w, wt, b, bt = params
    if config.optimizer == "adagrad":
        optimizer = torch.optim.Adagrad(params, lr=config.lr)
    else:
        optimizer = torch.optim.SparseAdam(params, lr=config.lr)
    losses = []
    for _ in range(config.epochs):
        order = torch.randperm(len(x), generator=g)
        total = 0.0
        for first in range(0, len(x), config.batch_size):
            o = order[first : first + config.batch_size]
            i, j = rows[o], cols[o]
            residual = (w[i] * wt[j]).sum(1) + b[i] + bt[j] - log_x[o]
            loss = (f[o] * residual**2).sum()
            optimizer.zero_grad()
            loss.backward()
            if config.optimizer == "adam":  # SparseAdam wants the gradient of the touched rows, sparse
                for p, touched in zip(params, (i.unique(), j.unique(), i.unique(), j.unique())):
                    p.grad = torch.sparse_coo_tensor(touched[None], p.grad[touched], p.shape, check_invariants=True)
            with torch.sparse.check_sparse_tensor_invariants():
                optimizer.step()
            total += loss.item()
        losses.append(total / len(x))
    return [p.detach().numpy() for p in params], losses


@pytest.mark.parametrize(
    "optimizer, lr, batch_size", [("adagrad", 0.05, 16), ("adagrad", 0.2, 1000), ("adam", 0.02, 10)]
)
def test_training_equals_autograd_and_torch_optim_replay(one_thread, optimizer, lr, batch_size):
    dense = _small_counts()
    config = GloVeConfig(dim=4, epochs=4, lr=lr, optimizer=optimizer, batch_size=batch_size, seed=3)
    result = train_glove(sp.csr_matrix(dense), config, progress=False)
    (w, wt, b, bt), losses = _replay(dense, config)
    np.testing.assert_allclose(result.w, w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.w_tilde, wt, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.b, b, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.b_tilde, bt, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.losses, losses, rtol=1e-4)
    # training moved the vectors of every word that occurs, and only those
    init, _ = _replay(dense, GloVeConfig(dim=4, epochs=1, lr=1e-30, optimizer=optimizer, batch_size=batch_size, seed=3))
    assert not np.allclose(result.w[:-1], init[0][:-1], atol=1e-3)
    np.testing.assert_array_equal(result.w[-1], init[0][-1])


def test_result_shapes_dtypes_and_vectors(one_thread):
    dense = _small_counts(seed=1)
    result = train_glove(sp.csr_matrix(dense), GloVeConfig(dim=5, epochs=3, batch_size=8), progress=False)
    assert isinstance(result, GloVeResult)
    for array, shape in ((result.w, (12, 5)), (result.w_tilde, (12, 5)), (result.b, (12,)), (result.b_tilde, (12,))):
        assert array.shape == shape and array.dtype == np.float32
    assert result.losses.shape == (3,) and np.all(np.isfinite(result.losses))
    assert result.seconds > 0
    np.testing.assert_array_equal(result.vectors, result.w + result.w_tilde)


def test_exactly_low_rank_log_counts_are_fitted(one_thread):
    """log X = W* W~*^T + b* + b~* (rank 3) on the observed entries: GloVe fits them to near zero loss."""
    rng = np.random.default_rng(0)
    n, rank = 30, 3
    log_x = (
        rng.normal(size=(n, rank)) @ rng.normal(size=(rank, n)) * 0.5
        + rng.uniform(1, 3, n)[:, None]
        + rng.uniform(1, 3, n)[None, :]
    )
    observed = rng.random((n, n)) < 0.6
    counts = np.where(observed, np.exp(log_x), 0.0)
    f = np.array([[_f(x) for x in row] for row in counts])[observed]
    for optimizer, lr in (("adagrad", 1.0), ("adam", 0.1)):
        config = GloVeConfig(dim=6, epochs=300, lr=lr, optimizer=optimizer, batch_size=256)
        result = train_glove(sp.csr_matrix(counts), config, progress=False)
        error = (result.w @ result.w_tilde.T + result.b[:, None] + result.b_tilde[None, :] - log_x)[observed]
        assert result.losses[-1] < 1e-4 * result.losses[0]
        assert np.sqrt((f * error**2).sum() / f.sum()) < 0.03  # weighted RMS error of log X
        assert np.median(np.abs(error)) < 0.02


def test_seeded_runs_are_identical_bit_for_bit(one_thread):
    counts = sp.csr_matrix(_small_counts(seed=2, n_words=40))
    config = GloVeConfig(dim=6, epochs=3, batch_size=64, optimizer="adam", lr=0.01)
    first, second = train_glove(counts, config, progress=False), train_glove(counts, config, progress=False)
    for name in ("w", "w_tilde", "b", "b_tilde", "losses"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
    other = train_glove(
        counts, GloVeConfig(dim=6, epochs=3, batch_size=64, optimizer="adam", lr=0.01, seed=1), progress=False
    )
    assert not np.array_equal(first.w, other.w)


def test_dense_input_and_duplicate_entries_mean_the_same_matrix(one_thread):
    dense = _small_counts(seed=4)
    config = GloVeConfig(dim=3, epochs=2, batch_size=16)
    reference = train_glove(sp.csr_matrix(dense), config, progress=False)
    coo = sp.coo_matrix(dense)
    split = sp.coo_matrix(
        (
            np.concatenate([coo.data / 2, coo.data / 2]),  # every count in two halves
            (np.concatenate([coo.row, coo.row]), np.concatenate([coo.col, coo.col])),
        ),
        shape=dense.shape,
    )
    for same in (dense, split, sp.csc_matrix(dense)):
        np.testing.assert_array_equal(train_glove(same, config, progress=False).w, reference.w)
    assert split.nnz == 2 * coo.nnz  # the caller's matrix is left as it was


def test_no_print_output_and_progress_bar_on_stderr(one_thread, capsys):
    counts = sp.csr_matrix(_small_counts())
    train_glove(counts, GloVeConfig(dim=2, epochs=2), progress=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    train_glove(counts, GloVeConfig(dim=2, epochs=2), progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "GloVe" in captured.err


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


def _with(value, at=(0, 1)):
    dense = _small_counts()
    dense[at] = value
    return sp.csr_matrix(dense)


@pytest.mark.parametrize(
    "counts, match",
    [
        (_with(-2.0), "non-negative"),
        (_with(np.nan), "NaN"),
        (_with(np.inf), "infinite"),
        (sp.csr_matrix((5, 5)), "no non-zero entry"),
        (sp.csr_matrix(np.ones((3, 4))), "square"),
        (np.ones(4), "2-D"),
        (np.ones((2, 2, 2)), "2-D"),
    ],
)
def test_bad_counts_raise(counts, match):
    with pytest.raises(ValueError, match=match):
        train_glove(counts, GloVeConfig(dim=2, epochs=1), progress=False)


def test_diverging_training_names_the_epoch(one_thread):
    counts = sp.csr_matrix(_small_counts())
    with pytest.raises(RuntimeError, match="epoch 1 of 3"):
        train_glove(counts, GloVeConfig(dim=2, epochs=3, lr=1e30, batch_size=8), progress=False)
