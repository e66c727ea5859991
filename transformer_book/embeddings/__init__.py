"""Static word vectors from counts: co-occurrence, PPMI, truncated SVD, cosine similarity.

Chapter 10 derives these; chapter 1 borrows them to give attention real word vectors.
"""

from transformer_book.embeddings.cooccurrence import cooccurrence_matrix
from transformer_book.embeddings.ppmi import ppmi
from transformer_book.embeddings.similarity import cosine_similarity_matrix, nearest_neighbours
from transformer_book.embeddings.svd import svd_embeddings

__all__ = ["cooccurrence_matrix", "ppmi", "svd_embeddings", "cosine_similarity_matrix", "nearest_neighbours"]
