"""Word vectors from a truncated SVD of a PPMI matrix (chapter 10; used in chapter 1)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from transformer_book import checks

__all__ = ["svd_embeddings", "truncated_svd"]


def _check_rank(matrix: sp.spmatrix | np.ndarray, k: int) -> None:
    """A 2-D matrix and a rank ``k`` in ``[1, min(shape))``."""
    if matrix.ndim != 2:
        raise ValueError(f"truncated_svd: matrix must be 2-D, got {matrix.ndim}-D")
    smallest = min(matrix.shape)
    checks.integer("truncated_svd", "k", k, minimum=1, below=smallest)


def truncated_svd(matrix: sp.spmatrix | np.ndarray, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest singular values of ``matrix`` and their left singular vectors.

    .. math:: M \\approx U_k \\Sigma_k V_k^\\top, \\qquad
        \\lVert M - U_k \\Sigma_k V_k^\\top \\rVert_F^2 = \\sum_{i > k} \\sigma_i^2 \\text{ is the least for rank } k

    (Eckart-Young). The result is deterministic: the iterative solver starts from a seeded
    vector, the components are sorted by decreasing singular value, and each column's sign is
    fixed so that its entry of largest magnitude is positive.

    Args:
        matrix: ``(|V|, |V_c|)`` sparse or dense matrix.
        k: number of components, ``1 <= k < min(|V|, |V_c|)``.
        seed: seed of the solver's start vector.

    Returns:
        ``U_k`` ``(|V|, k)`` and ``sigma`` ``(k,)``, both float64, ``sigma`` decreasing.

    Raises:
        ValueError: for ``k`` out of range or a non-2-D matrix.
    """
    _check_rank(matrix, k)
    smallest = min(matrix.shape)
    start = np.random.default_rng(seed).standard_normal(smallest)
    u, s, _ = spla.svds(sp.csr_matrix(matrix, dtype=np.float64), k=k, v0=start)
    order = np.argsort(-s)
    u, s = u[:, order], s[order]
    signs = np.sign(u[np.abs(u).argmax(axis=0), np.arange(k)])
    return u * signs, s


def svd_embeddings(matrix: sp.spmatrix | np.ndarray, k: int, p: float = 0.5, seed: int = 0) -> np.ndarray:
    """Rank-``k`` word vectors :math:`W = U_k \\Sigma_k^{\\,p}` from :func:`truncated_svd`.

    ``p = 1`` keeps the singular values, ``p = 0`` drops them, and ``p = 0.5`` splits them
    symmetrically between words and contexts (Levy et al., 2015, found ``p = 1``, the choice of
    the classic latent semantic analysis, the worst of the three on word similarity).

    Args:
        matrix: ``(|V|, |V_c|)`` sparse or dense matrix.
        k: number of dimensions, ``1 <= k < min(|V|, |V_c|)``.
        p: eigenvalue weighting exponent.
        seed: seed of the solver's start vector.

    Returns:
        ``(|V|, k)`` float64 array.

    Raises:
        ValueError: for ``k`` out of range or a non-2-D matrix.
    """
    try:
        u, s = truncated_svd(matrix, k, seed)
    except ValueError as err:
        raise ValueError(str(err).replace("truncated_svd", "svd_embeddings")) from None
    return u * s**p
