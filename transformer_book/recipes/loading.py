"""Load a chapter's trained model from its file, or train it: the one load-or-train of the recipes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book import checkpoints, data, runtime

__all__ = ["checkpoint_file", "load_or_train"]


def checkpoint_file(stem: str, profile: str | None = None) -> Path:
    """``<cache>/checkpoints/<stem>-<profile>.pt``: one file per chapter model and profile (the
    current one by default), so that a quick run never stands in for a full one."""
    return data.cache_dir() / "checkpoints" / f"{stem}-{profile or runtime.profile()}.pt"


def load_or_train(
    path: Path,
    train: Callable[[], tuple[nn.Module, Any, dict[str, Any]]],
    *,
    model_class: type[nn.Module],
    tokenizer_class: type | None,
    device: torch.device,
    where: str,
    expect: dict[str, Any] | None = None,
    unrecorded_ok: bool = False,
) -> tuple[nn.Module, Any, dict[str, Any]]:
    """``(model in eval mode, tokenizer, metadata)`` read from ``path`` when the file exists, else
    ``train()``'s (which trains, saves to ``path`` and returns the same three).
    ``metadata["source"]`` says ``"loaded"`` or ``"trained"``, ``metadata["path"]`` where.
    ``tokenizer_class=None`` is a model saved without a tokenizer (chapter 9's character GPT).

    ``expect`` names metadata a loaded file must record with these values (the corpus a
    translator was trained on, say): a file trained for something else is refused, not returned.
    A file that records no value for a key is refused too, unless ``unrecorded_ok`` (its path
    alone says what it holds: chapter 7 saves its translator itself, at the corpus's own path).

    Raises:
        ValueError: the file holds something other than a ``model_class`` with its
            ``tokenizer_class`` (a BERT where a translator was asked for, say), records other
            values than ``expect`` (or none), or is damaged.
    """
    if path.exists():
        model, tokenizer, metadata = checkpoints.load_model(path, device=device)
        wanted = type(None) if tokenizer_class is None else tokenizer_class
        if not isinstance(model, model_class) or not isinstance(tokenizer, wanted):
            held = "no tokenizer" if tokenizer is None else f"a {type(tokenizer).__name__}"
            asked = "no tokenizer" if tokenizer_class is None else f"a {tokenizer_class.__name__}"
            raise ValueError(
                f"{where}: {path} holds a {type(model).__name__} with {held}, not a {model_class.__name__} with {asked}"
            )
        for key, value in (expect or {}).items():
            if (key not in metadata and not unrecorded_ok) or (key in metadata and metadata[key] != value):
                held = f"{key}={metadata[key]!r}" if key in metadata else f"no {key}"
                raise ValueError(
                    f"{where}: {path} holds a model trained with {held}, not {key}={value!r}; "
                    f"give another path, or remove the file to train one"
                )
        return model, tokenizer, {**metadata, "source": "loaded", "path": str(path)}
    model, tokenizer, metadata = train()
    return model.eval(), tokenizer, {**metadata, "source": "trained", "path": str(path)}
