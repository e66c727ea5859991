"""Pinned, checksummed corpora for the book: the catalogue, fetching with a cache, and loaders.

Importing this package touches neither the network nor the file system.
"""

from __future__ import annotations

from transformer_book.data.corpora import ODYSSEY_CLEAN_SHA256, load_odyssey, strip_gutenberg
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

__all__ = [
    "CORPORA",
    "ChecksumMismatchError",
    "Corpus",
    "DataError",
    "DataUnavailableError",
    "ODYSSEY_CLEAN_SHA256",
    "RemoteFile",
    "UnknownCorpusError",
    "UnknownFileError",
    "cache_dir",
    "data_dir",
    "fetch",
    "get_corpus",
    "load_odyssey",
    "sha256_of",
    "strip_gutenberg",
]
