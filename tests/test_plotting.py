"""Tests of the labelled heatmaps (drawn off-screen with the Agg backend)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported anywhere: no display needed

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from transformer_book.plotting import attention_heatmap, heatmap  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _labels(texts):
    return [t.get_text() for t in texts]


def test_heatmap_labels_title_colorbar_and_annotations():
    matrix = np.array([[0.1, 0.5, 0.9], [0.3, 0.25, 0.0]])
    ax = heatmap(
        matrix,
        ["r0", "r1"],
        ["c0", "c1", "c2"],
        title="My title",
        xlabel="columns",
        ylabel="rows",
        colorbar_label="value",
    )
    assert isinstance(ax, Axes)
    assert _labels(ax.get_xticklabels()) == ["c0", "c1", "c2"]
    assert _labels(ax.get_yticklabels()) == ["r0", "r1"]
    assert ax.get_title() == "My title"
    assert ax.get_xlabel() == "columns" and ax.get_ylabel() == "rows"

    # one image with a colour bar, which lives in a second axes of the same figure
    assert len(ax.images) == 1
    np.testing.assert_array_equal(ax.images[0].get_array(), matrix)
    colorbar = ax.images[0].colorbar
    assert colorbar is not None and colorbar.ax in ax.figure.axes
    assert len(ax.figure.axes) == 2
    assert colorbar.ax.get_ylabel() == "value"

    # one annotation per cell, formatted, placed at (column, row)
    assert len(ax.texts) == 2 * 3
    by_position = {t.get_position(): t.get_text() for t in ax.texts}
    assert by_position[(1, 0)] == "0.50"
    assert by_position[(1, 1)] == "0.25"
    assert by_position[(2, 1)] == "0.00"


def test_heatmap_accepts_a_tensor_and_an_existing_axes():
    fig, given = plt.subplots()
    weights = torch.tensor([[1.0, 0.0], [0.5, 0.5]], requires_grad=True)
    ax = heatmap(weights, ["a", "b"], ["x", "y"], ax=given, annotate=False, fmt="{:.1f}")
    assert ax is given
    assert len(ax.texts) == 0
    assert ax.get_title() == ""
    np.testing.assert_array_equal(ax.images[0].get_array(), [[1.0, 0.0], [0.5, 0.5]])


def test_heatmap_custom_format():
    ax = heatmap(np.array([[1 / 3]]), ["r"], ["c"], fmt="{:.3f}")
    assert [t.get_text() for t in ax.texts] == ["0.333"]


@pytest.mark.parametrize(
    "rows, cols, match",
    [
        (["r0"], ["c0", "c1", "c2"], "1 row labels and 3 column labels.*(2, 3)"),
        (["r0", "r1"], ["c0", "c1"], "2 row labels and 2 column labels.*(2, 3)"),
    ],
)
def test_heatmap_label_count_mismatch(rows, cols, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        heatmap(np.zeros((2, 3)), rows, cols)


def test_heatmap_rejects_non_2d():
    with pytest.raises(ValueError, match=r"2-D.*\(2, 2, 2\)"):
        heatmap(np.zeros((2, 2, 2)), ["a", "b"], ["c", "d"])
    with pytest.raises(ValueError, match="2-D"):
        heatmap(np.zeros(3), ["a", "b", "c"], ["x"])


def test_attention_heatmap_defaults_key_labels_to_query_labels():
    tokens = ["I", "must", "go"]
    weights = torch.softmax(torch.randn(3, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    ax = attention_heatmap(weights, tokens)
    assert _labels(ax.get_xticklabels()) == tokens
    assert _labels(ax.get_yticklabels()) == tokens
    assert ax.get_title() == "Attention weights"
    assert len(ax.texts) == 9
    assert ax.images[0].get_clim()[0] == 0.0  # weights are drawn from 0


def test_attention_heatmap_cross_attention_labels():
    weights = np.full((2, 4), 0.25)
    ax = attention_heatmap(weights, ["q0", "q1"], ["k0", "k1", "k2", "k3"], title=None, annotate=False)
    assert _labels(ax.get_xticklabels()) == ["k0", "k1", "k2", "k3"]
    assert _labels(ax.get_yticklabels()) == ["q0", "q1"]
    assert ax.get_title() == ""
    assert len(ax.texts) == 0
    with pytest.raises(ValueError, match="2 row labels and 2 column labels"):
        attention_heatmap(weights, ["q0", "q1"])  # default key labels do not fit 4 keys
