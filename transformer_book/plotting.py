"""The book's figures: one style for all of them, panels laid out to stay legible on a phone,
and labelled heatmaps of attention weights and similarity matrices."""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from transformer_book import checks

if TYPE_CHECKING:  # matplotlib is imported lazily: importing the package stays light
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

__all__ = [
    "BOOK_COLOURS",
    "MIN_FONT_PT",
    "BOOK_WIDTH_IN",
    "use_book_style",
    "panels",
    "label_points",
    "heatmap",
    "attention_heatmap",
]

# Okabe and Ito's eight colours, told apart with each common colour-vision deficiency; their yellow,
# faint on white, comes last, for an eighth line.
BOOK_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
# No text in a figure is smaller than this. A figure BOOK_WIDTH_IN wide is drawn at 100 px per inch
# and shrunk to a 358-px phone column, about half size: 9 pt is then still about 6.5 px high.
MIN_FONT_PT = 9.0
BOOK_WIDTH_IN = 7.0


def use_book_style(*, retina: bool = True) -> None:
    """Give every later matplotlib figure the book's style.

    The colour cycle is ``BOOK_COLOURS`` (so ``"C0"``, ``"C1"``, ... name them), fonts are at
    least ``MIN_FONT_PT`` points (ticks and legends included), the default figure is
    ``BOOK_WIDTH_IN`` inches wide, and, inside IPython, figures are sent as PNGs of twice the
    pixel density (``retina``) so that they stay sharp on high-density screens and when zoomed.
    Chapters call it once, in their first cell.
    """
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(
        {
            "axes.prop_cycle": cycler(color=list(BOOK_COLOURS)),
            "figure.figsize": (BOOK_WIDTH_IN, 4.0),
            "figure.dpi": 100,
            "font.size": 11,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "xtick.labelsize": 10,
            "ytick.labelsize": 10,
            "legend.fontsize": 10,
            "legend.title_fontsize": 10,
            "figure.titlesize": 12,
            "lines.linewidth": 1.8,
            "image.cmap": "viridis",
        }
    )
    if retina:
        try:
            from IPython import get_ipython
            from matplotlib_inline.backend_inline import set_matplotlib_formats
        except ImportError:  # not in IPython: nothing to configure
            return
        if get_ipython() is not None:
            set_matplotlib_formats("retina")


def panels(
    n: int, *, max_columns: int = 2, panel_height: float = 3.2, width: float = BOOK_WIDTH_IN, **subplots_kwargs: Any
) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` panels, at most ``max_columns`` side by side, the rest in further rows.

    Four panels become a 2 x 2 grid rather than a row of four, so that the figure keeps the book's
    width and its text stays legible when a phone shrinks it. Unused cells of the grid are removed.

    Returns:
        The figure and a flat list of its ``n`` axes, row by row.

    Raises:
        ValueError: if ``n`` or ``max_columns`` is not a positive integer.
    """
    import matplotlib.pyplot as plt

    checks.positive_int("panels", n=n, max_columns=max_columns)
    columns = min(n, max_columns)
    rows = -(-n // columns)
    fig, grid = plt.subplots(
        rows, columns, figsize=(width, panel_height * rows), squeeze=False, layout="constrained", **subplots_kwargs
    )
    axes = list(grid.ravel())
    for extra in axes[n:]:
        extra.remove()
    return fig, axes[:n]


# The eight directions a label may take from its point, the first preferred: right and up, as
# matplotlib's own annotations sit, then round the compass.
_LABEL_DIRECTIONS = ((1, 1), (1, 0), (1, -1), (0, 1), (0, -1), (-1, 1), (-1, 0), (-1, -1))


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Area shared by the boxes ``a`` and ``b``, each ``(x0, y0, x1, y1)`` in pixels."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(width, 0.0) * max(height, 0.0)


def label_points(
    ax: Axes,
    xy: np.ndarray | Sequence[Sequence[float]],
    labels: Sequence[str],
    *,
    colours: Sequence[Any] | None = None,
    fontsize: float = MIN_FONT_PT,
    radii_pt: Sequence[float] = (2.0, 8.0, 15.0, 24.0, 35.0),
    marker_pt: float = 3.0,
) -> list[Annotation]:
    """Write ``labels[i]`` beside the point ``xy[i]`` of a scatter plot without two labels overlapping.

    Each label is tried in eight directions around its point, nearest ring first (``radii_pt``, in
    points beyond the edge of the marker, whose radius is ``marker_pt``), and takes the first place
    whose box overlaps no label placed before it, no other point (a square of ``marker_pt`` around
    each), no legend, and stays inside the axes. Where no place is
    free, it takes the one of least overlap. A label set further out than the first ring is joined
    to its point by a thin line of its colour. Points in a tight cluster thus get their labels
    fanned out around the cluster instead of printed over each other.

    Call it last, after the axes' limits, legends, titles and the figure's layout are final: the
    places are computed in pixels from the figure as it then stands. The labels themselves are
    left out of the layout.

    Args:
        ax: the axes holding the points.
        xy: data coordinates, shape ``(n, 2)``.
        labels: ``n`` strings.
        colours: ``n`` colours for the leader lines (default: black).

    Returns:
        The ``n`` annotations, in the order of ``labels``.

    Raises:
        ValueError: if ``xy`` is not of shape ``(n, 2)`` or not finite, ``labels`` is one string
            or holds a non-string, the counts differ, ``fontsize`` or ``marker_pt`` is not a
            finite positive number, or ``radii_pt`` is empty, not finite, not positive or not
            increasing.
    """
    points = np.asarray(xy, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"label_points: xy must have shape (n, 2), got {points.shape}")
    if not np.isfinite(points).all():
        raise ValueError("label_points: xy has a NaN or infinite coordinate")
    if isinstance(labels, str) or not all(isinstance(label, str) for label in labels):
        raise ValueError(
            "label_points: labels must be a sequence of strings, one per point "
            f"(a single str would give each point one character), got {labels!r:.60}"
        )
    if len(labels) != len(points):
        raise ValueError(f"label_points: {len(labels)} labels for {len(points)} points")
    if colours is not None and (isinstance(colours, str) or len(colours) != len(points)):
        raise ValueError(
            f"label_points: colours must be a sequence of {len(points)} colours, one per point, got {colours!r:.60}"
        )
    checks.finite_real("label_points", "fontsize", fontsize, above=0)
    checks.finite_real("label_points", "marker_pt", marker_pt, above=0)
    if (
        isinstance(radii_pt, str)
        or not radii_pt
        or any(isinstance(r, bool) or not isinstance(r, Real) or not math.isfinite(r) or not r > 0 for r in radii_pt)
        or list(radii_pt) != sorted(radii_pt)
    ):
        raise ValueError(f"label_points: radii_pt must be finite, positive and increasing, got {tuple(radii_pt)}")
    figure = ax.figure
    figure.draw_without_rendering()  # settle the layout, so that pixels below are final
    renderer = figure.canvas.get_renderer()
    px_per_pt = figure.dpi / 72.0
    frame = ax.get_window_extent(renderer)
    centres = ax.transData.transform(points)  # (n, 2) in pixels
    half = marker_pt * px_per_pt
    gap = px_per_pt  # one point of white space kept around every label
    cluster_px = 2 * radii_pt[min(1, len(radii_pt) - 1)] * px_per_pt  # neighbours nearer than two rings
    obstacles = [np.array([x - half, y - half, x + half, y + half]) for x, y in centres]
    legend = ax.get_legend()
    if legend is not None:
        obstacles.append(np.array(legend.get_window_extent(renderer).extents))
    annotations = []
    for i, (text, (x, y)) in enumerate(zip(labels, centres)):
        probe = ax.text(0, 0, text, fontsize=fontsize)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        width, height = extent.width + 2 * gap, extent.height + 2 * gap
        # Inside a cluster, the directions pointing away from the neighbours' mean come first, so
        # that labels fan outwards and their leader lines do not cross the cluster.
        near = np.linalg.norm(centres - centres[i], axis=1) < cluster_px
        outward = centres[i] - centres[near].mean(axis=0)
        directions = sorted(_LABEL_DIRECTIONS, key=lambda u: -float(np.dot(u, outward) / np.hypot(*u)))
        best = None
        for radius in radii_pt:
            for ux, uy in directions:
                scale = (marker_pt + radius) * px_per_pt / (np.sqrt(2.0) if ux and uy else 1.0)
                ax_, ay_ = x + ux * scale, y + uy * scale  # the anchor of the label's box
                x0 = ax_ - (width if ux < 0 else width / 2 if ux == 0 else 0.0)
                y0 = ay_ - (height if uy < 0 else height / 2 if uy == 0 else 0.0)
                box = np.array([x0, y0, x0 + width, y0 + height])
                if box[0] < frame.x0 or box[2] > frame.x1 or box[1] < frame.y0 or box[3] > frame.y1:
                    continue
                covered = sum(_overlap(box, other) for k, other in enumerate(obstacles) if k != i)
                crossed = 0  # labels placed before that this one's leader line would cross
                if radius > radii_pt[0]:
                    along = np.linspace(0.0, 1.0, 12)[1:-1, None]
                    line = np.array([x, y]) + along * (np.array([ax_, ay_]) - np.array([x, y]))
                    for other in obstacles[len(centres) :]:
                        crossed += int(
                            (
                                (line[:, 0] > other[0])
                                & (line[:, 0] < other[2])
                                & (line[:, 1] > other[1])
                                & (line[:, 1] < other[3])
                            ).any()
                        )
                cost = (covered, crossed)  # covering anything is worse than crossing a label
                if best is None or cost < best[0]:
                    best = (cost, radius, ux, uy, box, scale / px_per_pt)
                if cost == (0.0, 0):
                    break
            if best is not None and best[0] == (0.0, 0):
                break
        if best is None:  # no place inside the axes at all: the preferred one
            best = ((0.0, 0), radii_pt[0], 1, 1, None, (marker_pt + radii_pt[0]) / np.sqrt(2.0))
        _, radius, ux, uy, box, scale = best  # scale: the offset along (ux, uy), in points
        colour = "black" if colours is None else colours[i]
        leader = (
            dict(arrowstyle="-", color=colour, linewidth=0.6, shrinkA=0, shrinkB=2) if radius > radii_pt[0] else None
        )
        annotation = ax.annotate(
            text,
            points[i],
            xytext=(ux * scale, uy * scale),
            textcoords="offset points",
            fontsize=fontsize,
            ha="left" if ux > 0 else "right" if ux < 0 else "center",
            va="bottom" if uy > 0 else "top" if uy < 0 else "center",
            arrowprops=leader,
        )
        annotation.set_in_layout(False)
        annotations.append(annotation)
        if box is not None:
            obstacles.append(box)
    return annotations


def heatmap(
    matrix: torch.Tensor | np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str | None = None,
    xlabel: str = "",
    ylabel: str = "",
    colorbar_label: str = "",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = True,
    fmt: str = "{:.2f}",
) -> Axes:
    """Draw a labelled matrix with a colour bar, one cell per entry.

    Args:
        matrix: 2-D array of shape ``(rows, cols)``.
        row_labels, col_labels: tick labels, one per row and column.
        annotate: write each value in its cell, in black or white by the cell's luminance.

    Returns:
        The matplotlib axes drawn on.

    Raises:
        ValueError: if the matrix is not 2-D or the labels do not match its shape.
    """
    import matplotlib.pyplot as plt

    values = (
        matrix.detach().cpu().double().numpy() if isinstance(matrix, torch.Tensor) else np.asarray(matrix, dtype=float)
    )
    if values.ndim != 2:
        raise ValueError(f"heatmap: matrix must be 2-D, got shape {values.shape}")
    if len(row_labels) != values.shape[0] or len(col_labels) != values.shape[1]:
        raise ValueError(
            f"heatmap: {len(row_labels)} row labels and {len(col_labels)} column labels "
            f"for a matrix of shape {values.shape}"
        )
    if ax is None:
        size = (0.55 * values.shape[1] + 2.5, 0.45 * values.shape[0] + 1.5)
        _, ax = plt.subplots(figsize=size)
    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    colorbar = ax.figure.colorbar(image, ax=ax)
    colorbar.set_label(colorbar_label)
    ax.set_xticks(range(values.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    ax.set_yticks(range(values.shape[0]), labels=list(row_labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if annotate:
        cells = image.cmap(image.norm(values))  # (rows, cols, 4) RGBA of each cell
        luminance = cells[..., :3] @ np.array([0.299, 0.587, 0.114])
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                colour = "black" if luminance[i, j] > 0.5 else "white"
                ax.text(j, i, fmt.format(values[i, j]), ha="center", va="center", fontsize=MIN_FONT_PT, color=colour)
    return ax


def attention_heatmap(
    weights: torch.Tensor | np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = "Attention weights",
    annotate: bool = True,
) -> Axes:
    """Heatmap of attention weights ``A`` of shape ``(n, m)``: row ``i`` is query ``i``'s
    distribution over the keys, so every row sums to 1.

    ``key_tokens`` defaults to ``query_tokens`` (self-attention).
    """
    return heatmap(
        weights,
        query_tokens,
        key_tokens if key_tokens is not None else query_tokens,
        ax=ax,
        title=title,
        xlabel="key $j$",
        ylabel="query $i$",
        colorbar_label=r"attention weight $\alpha_{ij}$",
        vmin=0.0,
        annotate=annotate,
    )
