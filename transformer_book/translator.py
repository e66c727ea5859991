"""The chapter 7 translator in one call, for the chapters that need a trained one (8, 12).

Chapter 7 trains a German-to-English Transformer on Multi30k step by step and saves it with
:func:`~transformer_book.training.save_model` to :func:`checkpoint_path`. A later chapter calls
:func:`load_or_train`: it reuses that file when it is there, and otherwise trains a translator
with chapter 7's recipe (fewer steps, so that the chapter still runs on its own) and saves it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book import data, runtime, training
from transformer_book.models import Transformer, TransformerConfig
from transformer_book.subword import PAD_ID, SubwordTokenizer

__all__ = ["checkpoint_path", "load_or_train", "CHAPTER7_SIZES"]

CHAPTER7_SIZES = dict(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3)
"""The translator's sizes in chapter 7's full profile."""
_QUICK_SIZES = dict(d_model=64, n_heads=4, d_ff=128, n_encoder_layers=1, n_decoder_layers=1)


def checkpoint_path(profile: str | None = None) -> Path:
    """Where chapter 7 saves its translator: ``<cache>/checkpoints/07_translation-<profile>.pt``
    (one file per profile, so that a quick run never stands in for a full one)."""
    return data.cache_dir() / "checkpoints" / f"07_translation-{profile or runtime.profile()}.pt"


def load_or_train(
    *,
    steps: int,
    device: torch.device | str | None = None,
    path: str | Path | None = None,
    progress: bool = True,
) -> tuple[nn.Module, SubwordTokenizer, dict[str, Any]]:
    """Chapter 7's translator: loaded from ``path`` (default :func:`checkpoint_path`) when the
    file exists, otherwise trained for ``steps`` steps with chapter 7's recipe and saved there.

    Returns ``(model in eval mode, tokenizer, metadata)``; ``metadata["source"]`` says
    ``"loaded"`` or ``"trained"``. The quick profile trains a tiny model on 3,000 pairs.

    Raises:
        ValueError: ``steps`` is not a positive int.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"load_or_train: steps must be a positive int, got {steps!r}")
    path = Path(path) if path is not None else checkpoint_path()
    device = torch.device(device) if device is not None else runtime.select_device()
    if path.exists():
        model, tokenizer, metadata = training.load_model(path, device=device)
        return model, tokenizer, {**metadata, "source": "loaded", "path": str(path)}
    full = runtime.profile() == "full"
    train_pairs = data.load_multi30k("train")[: None if full else 3_000]
    tokenizer = SubwordTokenizer.train([s for pair in train_pairs for s in pair], vocab_size=8_000 if full else 1_000)
    max_tokens = 3_000 if full else 1_200
    batches = data.BucketedBatches(data.encode_pairs(train_pairs, tokenizer, max_len=128), max_tokens, seed=0)
    val = list(data.BucketedBatches(data.encode_pairs(data.load_multi30k("val"), tokenizer, max_len=128),
                                    2 * max_tokens, shuffle=False))
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(len(tokenizer), len(tokenizer), **(CHAPTER7_SIZES if full else _QUICK_SIZES),
                                          dropout=0.1, max_len=128, share_embeddings=True))
    config = training.TrainConfig(steps=steps, lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01,
                                  warmup_steps=min(400, max(1, steps // 2)), schedule="inverse_sqrt", smoothing=0.1,
                                  clip_norm=1.0, eval_every=max(1, steps // 4), log_every=max(1, steps // 20), seed=0)
    history = training.fit(model, batches, training.seq2seq_loss(pad_id=PAD_ID, smoothing=0.1), config,
                           val_batches=lambda: val, device=device, progress=progress)
    metadata = {"steps": steps, "val_loss": history.val_loss[-1][1], "train_seconds": history.train_time_s[-1][1]}
    training.save_model(path, model, tokenizer=tokenizer, metadata=metadata)
    return model.eval(), tokenizer, {**metadata, "source": "trained", "path": str(path)}
