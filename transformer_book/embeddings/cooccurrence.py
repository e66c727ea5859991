"""Window contexts and sparse co-occurrence counts (chapter 10; used in chapter 1)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from transformer_book import checks

__all__ = ["CONTEXT_WEIGHTINGS", "cooccurrence_matrix"]

#: How a context at distance ``d`` of a window of ``L`` words is counted.
CONTEXT_WEIGHTINGS = {
    "uniform": lambda d, L: 1.0,  # every context counts 1
    "linear": lambda d, L: (L - d + 1) / L,  # word2vec's reduced window, in expectation
    "harmonic": lambda d, L: 1.0 / d,  # GloVe
}


def _checked_ids(ids: np.ndarray, vocab_size: int, window: int, weighting: str) -> np.ndarray:
    """The arguments of :func:`cooccurrence_matrix` checked, and ``ids`` as an int64 array."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"cooccurrence_matrix: ids must be a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
    checks.positive_int("cooccurrence_matrix", window=window)
    checks.integer("cooccurrence_matrix", "vocab_size", vocab_size, minimum=1, kinds=(int, np.integer))
    if weighting not in CONTEXT_WEIGHTINGS:
        raise ValueError(
            f"cooccurrence_matrix: unknown weighting {weighting!r}; known: {', '.join(CONTEXT_WEIGHTINGS)}"
        )
    if ids.size and (ids.min() < -1 or ids.max() >= vocab_size):
        raise ValueError(
            f"cooccurrence_matrix: ids must lie in [-1, {vocab_size}), got range [{ids.min()}, {ids.max()}]"
        )
    return ids.astype(np.int64, copy=False)


def cooccurrence_matrix(ids: np.ndarray, vocab_size: int, window: int, weighting: str = "uniform") -> sp.csr_matrix:
    """Count how often word ``w`` has word ``c`` within ``window`` positions of it.

    .. math:: \\#(w, c) = \\sum_t \\sum_{0 < |\\delta| \\le L} \\omega(|\\delta|)\\, [x_t = w][x_{t+\\delta} = c]

    with :math:`\\omega = 1` (``"uniform"``), :math:`\\omega(d) = (L - d + 1) / L` (``"linear"``:
    what word2vec's window, drawn uniformly from ``1..L``, counts in expectation) or
    :math:`\\omega(d) = 1/d` (``"harmonic"``, as in GloVe). The count is symmetric,
    ``#(w, c) = #(c, w)``. Ids of ``-1`` mark dropped words or sentence breaks: they keep their
    place, so they still separate their neighbours, but no pair involving them is counted.

    Runs in ``O(N L)`` vectorised work and ``O(N)`` extra memory: one distance at a time is
    counted and added to the sparse total (2M tokens, ``L = 5``: a few seconds).

    Args:
        ids: 1-D integer array of word ids in ``[-1, vocab_size)``.
        vocab_size: ``|V|``.
        window: ``L``, the number of words on each side, at least 1.
        weighting: ``"uniform"``, ``"linear"`` or ``"harmonic"``.

    Returns:
        ``(|V|, |V|)`` float64 CSR matrix of counts.

    Raises:
        ValueError: for a non-1-D or non-integer ``ids``, ids out of range, ``window < 1`` or
            an unknown weighting.
    """
    ids = _checked_ids(ids, vocab_size, window, weighting)  # (N,) int64, -1 between sentences
    shape = (vocab_size, vocab_size)
    forward = sp.csr_matrix(shape, dtype=np.float64)  # (x_t, x_{t+delta}) for delta > 0
    for delta in range(1, window + 1):
        left, right = ids[:-delta], ids[delta:]
        keep = (left >= 0) & (right >= 0)
        weight = np.full(int(keep.sum()), CONTEXT_WEIGHTINGS[weighting](delta, window))
        forward = forward + sp.csr_matrix((weight, (left[keep], right[keep])), shape=shape)  # duplicates summed
    counts = (forward + forward.T).tocsr()  # and the other direction: (x_{t+delta}, x_t)
    counts.sort_indices()
    return counts
