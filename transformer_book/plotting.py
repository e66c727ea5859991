"""The book's figures: one style for all of them, panels laid out to stay legible on a phone,
and labelled heatmaps of attention weights and similarity matrices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:  # matplotlib is imported lazily: importing the package stays light
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["BOOK_COLOURS", "MIN_FONT_PT", "BOOK_WIDTH_IN", "use_book_style", "panels", "heatmap", "attention_heatmap"]

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

    mpl.rcParams.update({
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
    })
    if retina:
        try:
            from IPython import get_ipython
            from matplotlib_inline.backend_inline import set_matplotlib_formats
        except ImportError:  # not in IPython: nothing to configure
            return
        if get_ipython() is not None:
            set_matplotlib_formats("retina")


def panels(n: int, *, max_columns: int = 2, panel_height: float = 3.2, width: float = BOOK_WIDTH_IN,
           **subplots_kwargs: Any) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` panels, at most ``max_columns`` side by side, the rest in further rows.

    Four panels become a 2 x 2 grid rather than a row of four, so that the figure keeps the book's
    width and its text stays legible when a phone shrinks it. Unused cells of the grid are removed.

    Returns:
        The figure and a flat list of its ``n`` axes, row by row.

    Raises:
        ValueError: if ``n`` or ``max_columns`` is not a positive integer.
    """
    import matplotlib.pyplot as plt

    for name, value in (("n", n), ("max_columns", max_columns)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"panels: {name} must be a positive integer, got {value!r}")
    columns = min(n, max_columns)
    rows = -(-n // columns)
    fig, grid = plt.subplots(rows, columns, figsize=(width, panel_height * rows), squeeze=False,
                             layout="constrained", **subplots_kwargs)
    axes = list(grid.ravel())
    for extra in axes[n:]:
        extra.remove()
    return fig, axes[:n]


def heatmap(
    matrix: torch.Tensor | np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    *,
    ax: "Axes | None" = None,
    title: str | None = None,
    xlabel: str = "",
    ylabel: str = "",
    colorbar_label: str = "",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = True,
    fmt: str = "{:.2f}",
) -> "Axes":
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

    values = matrix.detach().cpu().double().numpy() if isinstance(matrix, torch.Tensor) else np.asarray(matrix, dtype=float)
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
    ax: "Axes | None" = None,
    title: str | None = "Attention weights",
    annotate: bool = True,
) -> "Axes":
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
