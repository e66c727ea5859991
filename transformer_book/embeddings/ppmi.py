"""Pointwise mutual information, positive and shifted (chapter 10; used in chapter 1)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["ppmi"]


def ppmi(counts: sp.spmatrix, alpha: float = 0.75, shift: float = 1.0) -> sp.csr_matrix:
    """Positive pointwise mutual information with context-distribution smoothing.

    .. math::

        \\operatorname{PMI}(w, c) = \\log \\frac{P(w, c)}{P(w)\\, P_\\alpha(c)}, \\qquad
        P_\\alpha(c) = \\frac{\\#(c)^\\alpha}{\\sum_{c'} \\#(c')^\\alpha}, \\qquad
        \\operatorname{PPMI}(w, c) = \\max\\bigl(\\operatorname{PMI}(w, c) - \\log k,\\; 0\\bigr)

    with :math:`P(w, c) = \\#(w, c) / D`, :math:`P(w) = \\#(w) / D`, ``D`` the total count
    and ``k`` the ``shift`` (``k = 1``: plain PPMI). Pairs never seen have PMI
    :math:`-\\infty` and PPMI 0, so the result is as sparse as the counts.

    Args:
        counts: ``(|V|, |V_c|)`` sparse non-negative co-occurrence counts.
        alpha: smoothing exponent for the context distribution, in ``(0, 1]``.
        shift: ``k >= 1``; subtracts ``log k`` (shifted PPMI, as in SGNS with k negatives).

    Returns:
        ``(|V|, |V_c|)`` float64 CSR matrix of PPMI values.

    Raises:
        ValueError: for negative counts, an empty matrix, ``alpha`` outside ``(0, 1]`` or ``shift < 1``.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"ppmi: alpha must lie in (0, 1], got {alpha}")
    if shift < 1.0:
        raise ValueError(f"ppmi: shift k must be >= 1, got {shift}")
    counts = sp.csr_matrix(counts, dtype=np.float64)
    counts.eliminate_zeros()
    if counts.nnz == 0:
        raise ValueError("ppmi: the count matrix has no non-zero entry")
    if counts.data.min() < 0:
        raise ValueError("ppmi: counts must be non-negative")
    total = counts.data.sum()
    word = np.asarray(counts.sum(axis=1)).ravel()  # #(w)
    context = np.asarray(counts.sum(axis=0)).ravel() ** alpha  # #(c)^alpha
    coo = counts.tocoo()
    p_wc = coo.data / total
    p_w = word[coo.row] / total
    p_c = context[coo.col] / context.sum()
    values = np.log(p_wc / (p_w * p_c)) - np.log(shift)
    keep = values > 0
    return sp.csr_matrix((values[keep], (coo.row[keep], coo.col[keep])), shape=counts.shape)
