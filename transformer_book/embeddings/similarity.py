"""Cosine similarity and nearest neighbours of word vectors."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transformer_book import checks

__all__ = ["cosine_similarity_matrix", "nearest_neighbours"]


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"expected a 2-D array of row vectors, got shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("cosine similarity is undefined for a zero vector")
    return vectors / norms


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """:math:`S_{ij} = x_i \\cdot x_j / (\\lVert x_i \\rVert \\lVert x_j \\rVert)` for the rows of
    ``vectors`` ``(n, d)``; returns ``(n, n)``."""
    unit = _unit_rows(vectors)
    return unit @ unit.T


def nearest_neighbours(
    query: np.ndarray, vectors: np.ndarray, words: Sequence[str], k: int = 5, exclude: Sequence[str] = ()
) -> list[tuple[str, float]]:
    """The ``k`` rows of ``vectors`` most cosine-similar to ``query`` ``(d,)``, as
    ``(word, similarity)`` pairs, best first, skipping the words in ``exclude``."""
    if len(words) != len(vectors):
        raise ValueError(f"nearest_neighbours: {len(words)} words for {len(vectors)} vectors")
    query, vectors = np.asarray(query, dtype=np.float64), np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2 or query.shape != vectors.shape[1:]:
        raise ValueError(
            f"nearest_neighbours: query of shape {query.shape} against vectors of shape {vectors.shape}: "
            f"the query must be one vector (d,) of the vectors' width"
        )
    checks.integer("nearest_neighbours", "k", k, minimum=1, kinds=(int, np.integer))
    if isinstance(exclude, str):
        raise ValueError("nearest_neighbours: exclude must be a sequence of words, not one str")
    similarity = _unit_rows(vectors) @ _unit_rows(query[None, :])[0]
    skip = set(exclude)
    ranked = (i for i in np.argsort(-similarity, kind="stable") if words[i] not in skip)
    return [(words[i], float(similarity[i])) for _, i in zip(range(k), ranked)]
