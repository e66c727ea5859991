"""Window contexts and sparse co-occurrence counts (chapter 10; used in chapter 1)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["cooccurrence_matrix"]


def cooccurrence_matrix(ids: np.ndarray, vocab_size: int, window: int) -> sp.csr_matrix:
    """Count how often word ``w`` has word ``c`` within ``window`` positions of it.

    .. math:: \\#(w, c) = \\sum_t \\sum_{0 < |\\delta| \\le L} [x_t = w][x_{t+\\delta} = c]

    The count is symmetric, ``#(w, c) = #(c, w)``. Ids of ``-1`` mark dropped
    (out-of-vocabulary) words: they keep their place, so they still separate their
    neighbours, but no pair involving them is counted. Runs in ``O(N L)`` vectorised work.

    Args:
        ids: 1-D integer array of word ids in ``[-1, vocab_size)``.
        vocab_size: ``|V|``.
        window: ``L``, the number of words on each side, at least 1.

    Returns:
        ``(|V|, |V|)`` float64 CSR matrix of counts.

    Raises:
        ValueError: for a non-1-D or non-integer ``ids``, ids out of range, or ``window < 1``.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"cooccurrence_matrix: ids must be a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"cooccurrence_matrix: window must be a positive int, got {window!r}")
    if vocab_size < 1:
        raise ValueError(f"cooccurrence_matrix: vocab_size must be positive, got {vocab_size}")
    if ids.size and (ids.min() < -1 or ids.max() >= vocab_size):
        raise ValueError(
            f"cooccurrence_matrix: ids must lie in [-1, {vocab_size}), got range [{ids.min()}, {ids.max()}]"
        )
    rows, cols = [], []
    for delta in range(1, window + 1):
        left, right = ids[:-delta], ids[delta:]
        keep = (left >= 0) & (right >= 0)
        rows += [left[keep], right[keep]]  # both directions: (w, c) and (c, w)
        cols += [right[keep], left[keep]]
    row = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    col = np.concatenate(cols) if cols else np.empty(0, dtype=np.int64)
    counts = sp.coo_matrix(
        (np.ones(row.size, dtype=np.float64), (row, col)), shape=(vocab_size, vocab_size)
    )
    return counts.tocsr()  # duplicates are summed
