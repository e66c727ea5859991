"""Labelled heatmaps of attention weights and similarity matrices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # matplotlib is imported lazily: importing the package stays light
    from matplotlib.axes import Axes

__all__ = ["heatmap", "attention_heatmap"]


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
                ax.text(j, i, fmt.format(values[i, j]), ha="center", va="center", fontsize=7, color=colour)
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
