"""Chapter 13's small BERT in one call, for the chapters that fine-tune and prompt it (14, 15).

Chapter 13 pretrains a small BERT on WikiText-2 with masked language modelling and
next-sentence prediction, and saves it with its WordPiece tokenizer by
:func:`~transformer_book.training.save_model` to :func:`checkpoint_path`. A later chapter calls
:func:`load_or_pretrain`: it reuses that file when it is there, and otherwise pretrains a model
with the same recipe (:func:`recipe`, :func:`train_config`) and saves it, so that every chapter
still runs on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer_book import data, runtime, training
from transformer_book.data import pretraining
from transformer_book.models.bert import BERT, BERTConfig, bert_loss, evaluate_pretraining
from transformer_book.wordpiece import WordPieceTokenizer

__all__ = ["MAX_LEN", "Recipe", "recipe", "train_config", "checkpoint_path", "load_or_pretrain"]

MAX_LEN = 128
"""Pieces per pair, ``[CLS]`` and both ``[SEP]`` included."""


@dataclass(frozen=True)
class Recipe:
    """Chapter 13's choices for one machine and profile: model ``sizes`` (keyword arguments of
    :class:`~transformer_book.models.bert.BERTConfig`), pairs per ``batch``, the training
    ``budget_s`` in seconds, peak learning rate ``lr``, and the WordPiece ``vocab_size``."""

    sizes: dict[str, int]
    batch: int
    budget_s: float
    lr: float
    vocab_size: int
    n_documents: int | None


def recipe(device: torch.device | str, profile: str | None = None) -> Recipe:
    """The recipe chapter 13 uses on ``device`` in ``profile`` (default: the current one).

    Full profile: on a GPU 4 layers of width 256 (4 heads), batches of 128 pairs, 10 minutes; on
    a CPU 2 layers of width 128 (2 heads), batches of 32, 20 minutes; an 8,000-piece vocabulary
    from all 600 training articles. Quick profile: 1 layer of width 32, 3 seconds, 2,000 pieces
    from the first 150 articles.
    """
    profile = profile or runtime.profile()
    if profile != "full":
        return Recipe(dict(d_model=32, n_heads=2, n_layers=1), 16, 3.0, 1e-3, 2_000, 150)
    if torch.device(device).type == "cuda":
        return Recipe(dict(d_model=256, n_heads=4, n_layers=4), 128, 600.0, 1e-3, 8_000, None)
    return Recipe(dict(d_model=128, n_heads=2, n_layers=2), 32, 1200.0, 1e-3, 8_000, None)


def train_config(steps: int, lr: float, budget_s: float | None = None) -> training.TrainConfig:
    """Chapter 13's optimisation for a run of ``steps`` steps: AdamW (betas 0.9, 0.999, weight
    decay 0.01), warm-up over a tenth of the steps (at most 300) then cosine decay, gradients
    clipped at norm 1, eight validations, stopping early after ``budget_s`` seconds of training."""
    return training.TrainConfig(steps=steps, lr=lr, betas=(0.9, 0.999), weight_decay=0.01,
                                warmup_steps=min(300, max(1, steps // 10), steps - 1), schedule="cosine", clip_norm=1.0,
                                eval_every=max(1, steps // 8), log_every=max(1, steps // 100), seed=0,
                                time_budget_s=budget_s)


def checkpoint_path(profile: str | None = None) -> Path:
    """Where chapter 13 saves its BERT: ``<cache>/checkpoints/13_bert_pretraining-<profile>.pt``
    (one file per profile, so that a quick run never stands in for a full one)."""
    return data.cache_dir() / "checkpoints" / f"13_bert_pretraining-{profile or runtime.profile()}.pt"


def load_or_pretrain(
    *,
    steps: int,
    device: torch.device | str | None = None,
    path: str | Path | None = None,
    progress: bool = True,
) -> tuple[BERT, WordPieceTokenizer, dict[str, Any]]:
    """Chapter 13's BERT: loaded from ``path`` (default :func:`checkpoint_path`) when the file
    exists, otherwise pretrained with :func:`recipe` for ``steps`` steps (or until the recipe's
    time budget runs out) and saved there.

    Returns ``(model in eval mode, tokenizer, metadata)``; ``metadata["source"]`` says
    ``"loaded"`` or ``"trained"``, and a trained model's metadata holds its validation MLM loss
    and NSP accuracy.

    Raises:
        ValueError: ``steps`` is not a positive int, or the file holds something else than a BERT
            with its WordPiece tokenizer.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"load_or_pretrain: steps must be a positive int, got {steps!r}")
    path = Path(path) if path is not None else checkpoint_path()
    device = torch.device(device) if device is not None else runtime.select_device()
    if path.exists():
        model, tokenizer, metadata = training.load_model(path, device=device)
        if not isinstance(model, BERT) or not isinstance(tokenizer, WordPieceTokenizer):
            raise ValueError(f"load_or_pretrain: {path} holds a {type(model).__name__} with "
                             f"{type(tokenizer).__name__}, not a BERT with its WordPieceTokenizer")
        return model, tokenizer, {**metadata, "source": "loaded", "path": str(path)}
    chosen = recipe(device)
    train_documents = pretraining.wikitext2_documents("train")[: chosen.n_documents]
    valid_documents = pretraining.wikitext2_documents("valid")[: None if chosen.n_documents is None else 20]
    tokenizer = WordPieceTokenizer.train((s for d in train_documents for s in d), vocab_size=chosen.vocab_size)
    encode = lambda documents, seed: pretraining.encode_sentence_pairs(  # noqa: E731
        tokenizer, pretraining.make_sentence_pairs(documents, seed=seed), max_len=MAX_LEN)
    train_batches = pretraining.PretrainingBatches(encode(train_documents, 0), chosen.batch,
                                                   vocab_size=len(tokenizer), seed=0)
    valid_batches = list(pretraining.PretrainingBatches(encode(valid_documents, 1), 64, vocab_size=len(tokenizer),
                                                        seed=1, shuffle=False))
    torch.manual_seed(0)
    model = BERT(BERTConfig(len(tokenizer), max_len=MAX_LEN, dropout=0.1, **chosen.sizes)).to(device)
    history = training.fit(model, train_batches, bert_loss(), train_config(steps, chosen.lr, chosen.budget_s),
                           val_batches=lambda: valid_batches[: max(1, 1_000 // 64)], device=device,
                           progress=progress)
    final = evaluate_pretraining(model, valid_batches, device=device)
    metadata = {"steps": history.train_loss[-1][0], "train_seconds": history.train_time_s[-1][1],
                "mlm_loss": final["mlm_loss"], "nsp_accuracy": final["nsp_accuracy"]}
    training.save_model(path, model, tokenizer=tokenizer, metadata=metadata)
    return model.eval(), tokenizer, {**metadata, "source": "trained", "path": str(path)}
