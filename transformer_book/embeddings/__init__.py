"""Static word vectors: window contexts, co-occurrence counts, PMI and PPMI, truncated SVD,
GloVe, word2vec, and their evaluation on word similarity and analogies.

Chapters 10 and 11 derive these; chapter 1 borrows them to give attention real word vectors.
"""

from transformer_book.embeddings import evaluation, glove
from transformer_book.embeddings.contexts import (
    EncodedCorpus,
    FlatWindows,
    cbow_windows,
    encode_corpus,
    flat_cbow_windows,
    keep_probabilities,
    skipgram_pairs,
    window_pairs,
)
from transformer_book.embeddings.cooccurrence import CONTEXT_WEIGHTINGS, cooccurrence_matrix
from transformer_book.embeddings.ppmi import pmi, ppmi
from transformer_book.embeddings.similarity import cosine_similarity_matrix, nearest_neighbours
from transformer_book.embeddings.svd import svd_embeddings, truncated_svd
from transformer_book.embeddings.word2vec import (
    AliasSampler,
    Word2VecConfig,
    Word2VecResult,
    noise_distribution,
    sgns_gradients,
    sgns_loss,
    softmax_loss,
    train_word2vec,
)

__all__ = [
    "AliasSampler",
    "CONTEXT_WEIGHTINGS",
    "EncodedCorpus",
    "FlatWindows",
    "Word2VecConfig",
    "Word2VecResult",
    "cbow_windows",
    "cooccurrence_matrix",
    "cosine_similarity_matrix",
    "encode_corpus",
    "evaluation",
    "flat_cbow_windows",
    "glove",
    "keep_probabilities",
    "nearest_neighbours",
    "noise_distribution",
    "pmi",
    "ppmi",
    "sgns_gradients",
    "sgns_loss",
    "skipgram_pairs",
    "softmax_loss",
    "svd_embeddings",
    "train_word2vec",
    "truncated_svd",
    "window_pairs",
]
