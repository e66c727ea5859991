"""Tests of the labelled heatmaps (drawn off-screen with the Agg backend)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported anywhere: no display needed

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes

from transformer_book.plotting import attention_heatmap, heatmap


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


# ----------------------------------------------------------------------------- the book's style

from transformer_book.plotting import BOOK_COLOURS, BOOK_WIDTH_IN, MIN_FONT_PT, panels, use_book_style

# Machado, Oliveira and Fernandes (2009): full-severity simulation of the two red-green
# deficiencies, as matrices on linear RGB.
DEUTERANOPIA = np.array(
    [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
)
PROTANOPIA = np.array(
    [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
)


def _lab(hex_colour, simulate=None):
    """CIELAB (D65) of an sRGB colour, as seen with the deficiency ``simulate`` (or normal vision)."""
    from matplotlib.colors import to_rgb

    srgb = np.array(to_rgb(hex_colour))
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    if simulate is not None:
        linear = np.clip(simulate @ linear, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _closest_pair(colours, simulate):
    labs = [_lab(c, simulate) for c in colours]
    return min(np.linalg.norm(a - b) for i, a in enumerate(labs) for b in labs[i + 1 :])


@pytest.mark.parametrize("simulate", [None, DEUTERANOPIA, PROTANOPIA], ids=["normal", "deuteranopia", "protanopia"])
def test_the_first_five_book_colours_stay_apart_with_red_green_deficiencies(simulate):
    assert _closest_pair(BOOK_COLOURS[:5], simulate) > 15  # CIELAB distance; 2.3 is just noticeable


def test_the_colour_check_would_catch_green_against_red():
    # matplotlib's default green and red: far apart with normal vision, close with deuteranopia
    assert _closest_pair(["tab:green", "tab:red"], None) > 50
    assert _closest_pair(["tab:green", "tab:red"], DEUTERANOPIA) < 15


def test_use_book_style_sets_colours_fonts_and_width():
    import matplotlib as mpl

    with mpl.rc_context():
        use_book_style()
        assert mpl.rcParams["axes.prop_cycle"].by_key()["color"] == list(BOOK_COLOURS)
        fig, ax = plt.subplots()
        assert fig.get_size_inches()[0] == BOOK_WIDTH_IN
        ax.plot([0, 1], label="a")
        ax.set(title="t", xlabel="x", ylabel="y")
        legend = ax.legend()
        texts = [
            ax.title,
            ax.xaxis.label,
            ax.yaxis.label,
            *ax.get_xticklabels(),
            *ax.get_yticklabels(),
            *legend.get_texts(),
        ]
        assert min(t.get_fontsize() for t in texts) >= MIN_FONT_PT
    # outside the context the defaults are back: the style is only rcParams
    assert mpl.rcParams["axes.prop_cycle"].by_key()["color"][0] != BOOK_COLOURS[0]


def test_use_book_style_sends_retina_pngs_inside_ipython(monkeypatch):
    import base64

    import IPython
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    import matplotlib as mpl

    with mpl.rc_context():
        use_book_style()
        fig, _ = plt.subplots(figsize=(4, 3))
        data, metadata = shell.display_formatter.format(fig)
    # a retina PNG has twice the pixels of the size it asks to be shown at (the figure's, cropped
    # to what was drawn)
    png = data["image/png"]
    png = base64.b64decode(png) if isinstance(png, str) else png
    pixels = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")  # the IHDR chunk
    shown = metadata["image/png"]["width"], metadata["image/png"]["height"]
    assert 300 < shown[0] <= 400 and 200 < shown[1] <= 300
    assert shown == (pixels[0] // 2, pixels[1] // 2)
    use_book_style(retina=False)  # outside IPython, or when not asked: nothing but rcParams


def test_heatmap_annotations_are_not_smaller_than_the_minimum():
    ax = heatmap(np.eye(2), ["a", "b"], ["c", "d"])
    assert min(t.get_fontsize() for t in ax.texts) >= MIN_FONT_PT


@pytest.mark.parametrize("n, shape", [(1, (1, 1)), (2, (1, 2)), (3, (2, 2)), (4, (2, 2)), (5, (3, 2))])
def test_panels_puts_at_most_two_side_by_side(n, shape):
    fig, axes = panels(n)
    assert len(axes) == n == len(fig.axes)  # unused cells removed
    rows = {round(ax.get_subplotspec().rowspan.start) for ax in axes}
    columns = {round(ax.get_subplotspec().colspan.start) for ax in axes}
    assert (len(rows), len(columns)) == (shape[0], shape[1] if n > 1 else 1)
    assert fig.get_size_inches()[0] == BOOK_WIDTH_IN
    assert fig.get_size_inches()[1] == pytest.approx(3.2 * shape[0])


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "2"])
def test_panels_rejects_a_count_that_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match="panels: n must be a positive int"):
        panels(bad)


# ----------------------------------------------------------------------------- labelled points

from transformer_book.plotting import label_points


def _boxes(annotations):
    """The labels' text boxes in pixels (an Annotation's own extent would include its leader line)."""
    from matplotlib.text import Text

    renderer = annotations[0].figure.canvas.get_renderer()
    return [Text.get_window_extent(a, renderer) for a in annotations]


def _a_tight_cluster_beside_a_legend():
    """Eight points within a few pixels of each other (as months in a word-vector plot) and a legend."""
    fig, (ax,) = panels(1)
    rng = np.random.default_rng(0)
    cluster = np.array([0.2, 0.7]) + rng.normal(0.0, 0.005, size=(8, 2))
    ax.scatter(cluster[:, 0], cluster[:, 1], label="months")
    ax.scatter([0.9], [0.1], label="an isolated point")
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.legend(loc="upper right")
    words = ["january", "march", "april", "june", "august", "october", "december", "may"]
    return fig, ax, np.vstack([cluster, [[0.9, 0.1]]]), words + ["alone"]


def test_label_points_never_overlaps_two_labels_in_a_tight_cluster():
    fig, ax, xy, words = _a_tight_cluster_beside_a_legend()
    annotations = label_points(ax, xy, words)
    fig.draw_without_rendering()
    boxes = _boxes(annotations)
    assert [a.get_text() for a in annotations] == words
    for i in range(len(boxes)):
        for j in range(i):
            assert not boxes[i].overlaps(boxes[j]), f"{words[i]!r} overlaps {words[j]!r}"


def test_label_points_keeps_each_label_off_its_own_marker():
    fig, (ax,) = panels(1)
    ax.scatter([0.5], [0.5], s=36)  # a marker of radius 3 pt, the default marker_pt
    ax.set(xlim=(0, 1), ylim=(0, 1))
    (annotation,) = label_points(ax, [[0.5, 0.5]], ["a label"])
    fig.draw_without_rendering()
    (box,) = _boxes([annotation])
    x, y = ax.transData.transform((0.5, 0.5))
    radius = 3.0 * fig.dpi / 72
    assert (
        box.x0 >= x + radius - 1e-6
        or box.x1 <= x - radius + 1e-6
        or box.y0 >= y + radius - 1e-6
        or box.y1 <= y - radius + 1e-6
    )


def test_label_points_keeps_labels_inside_the_axes_and_off_the_legend():
    fig, ax, xy, words = _a_tight_cluster_beside_a_legend()
    annotations = label_points(ax, xy, words)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    frame, legend = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    for word, box in zip(words, _boxes(annotations)):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, word
        assert not box.overlaps(legend), word
        assert min(a.get_fontsize() for a in annotations) >= MIN_FONT_PT


def test_label_points_joins_moved_labels_to_their_points_and_leaves_the_isolated_one_beside_its_own():
    fig, ax, xy, words = _a_tight_cluster_beside_a_legend()
    colours = ["C0"] * 8 + ["C1"]
    annotations = label_points(ax, xy, words, colours=colours)
    alone = annotations[-1]
    first_ring = 3.0 + 2.0  # the marker's radius and the first ring beyond it
    assert alone.arrow_patch is None  # free space at the first ring: no leader line
    assert np.hypot(*alone.xyann) == pytest.approx(first_ring)
    moved = [a for a in annotations[:-1] if a.arrow_patch is not None]
    assert moved, "eight labels cannot all sit on the first ring of a cluster a few pixels wide"
    for a in moved:
        assert np.hypot(*a.xyann) > first_ring  # further out, and joined by a line in the point's colour
        assert matplotlib.colors.same_color(a.arrow_patch.get_edgecolor(), "C0")
    for a, point in zip(annotations, xy):
        assert a.xy == pytest.approx(tuple(point))  # each label still points at its own point


@pytest.mark.parametrize(
    "xy, labels, match",
    [
        (np.zeros((3, 3)), ["a", "b", "c"], r"shape \(n, 2\)"),
        (np.array([[0.0, np.nan]]), ["a"], "NaN or infinite"),
        (np.zeros((2, 2)), ["a"], "1 labels for 2 points"),
    ],
)
def test_label_points_rejects_bad_input(xy, labels, match):
    _, (ax,) = panels(1)
    with pytest.raises(ValueError, match=match):
        label_points(ax, xy, labels)


@pytest.mark.parametrize("radii", [(), (0.0, 5.0), (8.0, 2.0)])
def test_label_points_rejects_rings_that_are_not_positive_and_increasing(radii):
    _, (ax,) = panels(1)
    with pytest.raises(ValueError, match="radii_pt must be finite, positive and increasing"):
        label_points(ax, np.zeros((1, 2)), ["a"], radii_pt=radii)


def test_label_points_rejects_a_colour_count_that_does_not_match():
    _, (ax,) = panels(1)
    with pytest.raises(ValueError, match="colours must be a sequence of 2 colours, one per point"):
        label_points(ax, np.zeros((2, 2)), ["a", "b"], colours=["C0"])
