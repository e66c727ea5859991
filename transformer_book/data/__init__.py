"""Pinned, checksummed corpora for the book: the catalogue, fetching with a cache, and loaders.

Importing this package touches neither the network nor the file system.
"""

from __future__ import annotations

from transformer_book.data.batching import (
    BucketedBatches,
    RandomWindows,
    Seq2SeqBatch,
    collate_pairs,
    encode_pairs,
    pad_sequences,
)
from transformer_book.data.corpora import (
    ODYSSEY_CLEAN_SHA256,
    CharCorpus,
    char_corpus,
    load_odyssey,
    load_tiny_shakespeare,
    strip_gutenberg,
)
from transformer_book.data.download import (
    ChecksumMismatchError,
    DataError,
    DataUnavailableError,
    cache_dir,
    data_dir,
    fetch,
    sha256_of,
)
from transformer_book.data.registry import (
    CORPORA,
    Corpus,
    RemoteFile,
    UnknownCorpusError,
    UnknownFileError,
    get_corpus,
)
from transformer_book.data.sst2 import load_sst2
from transformer_book.data.translation import (
    MULTI30K_SPLITS,
    TATOEBA_ATTRIBUTION,
    DataWarning,
    TranslationSplit,
    load_multi30k,
    load_tatoeba,
    split_linked_groups,
)
from transformer_book.data.wikitext import WIKITEXT2_SPLITS, load_wikitext2, load_wikitext2_stream

__all__ = [
    "BucketedBatches",
    "CORPORA",
    "ChecksumMismatchError",
    "Corpus",
    "DataError",
    "DataWarning",
    "DataUnavailableError",
    "MULTI30K_SPLITS",
    "ODYSSEY_CLEAN_SHA256",
    "RandomWindows",
    "RemoteFile",
    "Seq2SeqBatch",
    "TATOEBA_ATTRIBUTION",
    "TranslationSplit",
    "UnknownCorpusError",
    "UnknownFileError",
    "WIKITEXT2_SPLITS",
    "cache_dir",
    "collate_pairs",
    "data_dir",
    "encode_pairs",
    "fetch",
    "get_corpus",
    "load_multi30k",
    "load_odyssey",
    "load_tiny_shakespeare",
    "char_corpus",
    "CharCorpus",
    "load_sst2",
    "load_tatoeba",
    "load_wikitext2",
    "load_wikitext2_stream",
    "pad_sequences",
    "sha256_of",
    "split_linked_groups",
    "strip_gutenberg",
]
