"""Pointwise mutual information, positive and shifted (chapter 10; used in chapter 1)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from transformer_book import checks

__all__ = ["pmi", "ppmi"]


def pmi(counts: sp.spmatrix | np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """The dense matrix of pointwise mutual information, for small vocabularies and pictures.

    .. math:: \\operatorname{PMI}(w, c) = \\log \\frac{\\#(w, c)\\, D}{\\#(w)\\, \\#(c)} \\quad (\\alpha = 1)

    with the same smoothed context distribution as :func:`ppmi`; a pair never seen has PMI
    :math:`-\\infty`. Returns a ``(|V|, |V_c|)`` float64 array.

    Raises:
        ValueError: as :func:`ppmi`, and for a matrix of more than ``10**8`` entries.
    """
    if counts.shape[0] * counts.shape[1] > 10**8:
        raise ValueError(f"pmi: a dense {counts.shape} matrix is too large; use ppmi, which stays sparse")
    dense = np.asarray(counts.toarray() if sp.issparse(counts) else counts, dtype=np.float64)
    if dense.ndim != 2 or not 0.0 < alpha <= 1.0 or dense.min(initial=0.0) < 0 or dense.sum() == 0:
        raise ValueError("pmi: counts must be a non-empty, non-negative 2-D matrix and alpha must lie in (0, 1]")
    total = dense.sum()
    p_w = dense.sum(axis=1, keepdims=True) / total
    context = dense.sum(axis=0, keepdims=True) ** alpha
    p_c = context / context.sum()
    with np.errstate(divide="ignore"):
        return np.log(dense / total) - np.log(p_w) - np.log(p_c)


def _checked_counts(counts: sp.spmatrix | np.ndarray, alpha: float, shift: float) -> sp.csr_matrix:
    """The arguments of :func:`ppmi` checked, and ``counts`` as a CSR float64 matrix without stored zeros."""
    checks.probability("ppmi", "alpha", alpha, zero=False, one=True)
    if shift < 1.0:
        raise ValueError(f"ppmi: shift k must be >= 1, got {shift}")
    counts = sp.csr_matrix(counts, dtype=np.float64)
    counts.eliminate_zeros()
    if counts.nnz == 0:
        raise ValueError("ppmi: the count matrix has no non-zero entry")
    if not np.isfinite(counts.data).all():
        raise ValueError(
            f"ppmi: counts must be finite, got {int((~np.isfinite(counts.data)).sum())} NaN or inf entries"
        )
    if counts.data.min() < 0:
        raise ValueError("ppmi: counts must be non-negative")
    return counts


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
        ValueError: for negative, NaN or infinite counts, an empty matrix, ``alpha`` outside ``(0, 1]`` or ``shift < 1``.
    """
    counts = _checked_counts(counts, alpha, shift)  # CSR float64, explicit zeros dropped
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
