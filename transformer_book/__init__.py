"""transformer_book: the companion package of the executable Transformer textbook.

Modules, one idea each (import what a chapter needs)::

    transformer_book.attention    scaled dot-product attention, stable softmax   (ch. 1)
    transformer_book.masks        padding and causal masks (True = excluded)     (ch. 1-2)
    transformer_book.runtime      device, seeds, profiles, environment, sources
    transformer_book.plotting     attention heatmaps
    transformer_book.text         word tokenisation and vocabularies
    transformer_book.embeddings   co-occurrence counts, PPMI, SVD word vectors   (ch. 1, 10)
    transformer_book.data         pinned, checksummed corpora and their loaders

Importing the package downloads nothing and changes no global state.
"""

__version__ = "0.1.0"
