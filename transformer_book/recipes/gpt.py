"""Chapter 9's GPT language models as recipes: one dataclass per training run, one call that trains it.

Chapter 9 trains decoder-only Transformers (:class:`~transformer_book.models.gpt.GPT`) on a token
stream with one recipe: random windows of the stream (:class:`~transformer_book.data.RandomWindows`),
AdamW with betas (0.9, 0.99) and weight decay 0.1, a linear warm-up then a cosine decay to a
tenth of the peak rate, gradients clipped at norm 1, no label smoothing. A run on the CPU is
given a time budget: :meth:`GPTRecipe.filling` times a few steps first and sets the step count
so that the cosine schedule ends as the budget does.

:func:`load_or_train` returns the chapter's longest character-level model, "the ten-minute GPT"
on Tiny Shakespeare, from the file chapter 9 saved, or trains it, for a later chapter that needs
a trained language model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from transformer_book import checkpoints, checks, data, objectives, runtime, training
from transformer_book.models import GPT, GPTConfig
from transformer_book.recipes import loading

__all__ = ["GPTRecipe", "TrainedLM", "TINY_SIZES", "SMALL_SIZES", "LONG_SIZES", "shakespeare_recipe",
           "validation_batches", "train", "checkpoint_path", "save_shakespeare", "load_or_train"]

TINY_SIZES = dict(context=32, d_model=32, n_heads=2, n_layers=1, dropout=0.0)
"""One layer of width 32, the quick profile's model."""
SMALL_SIZES = dict(context=64, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
"""4 layers, 4 heads, width 128, context 64 (nanoGPT's CPU example), chapter 9's two-minute model."""
LONG_SIZES = dict(context=256, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
"""The two-minute model with four times the context, chapter 9's ten-minute model."""


@dataclass(frozen=True)
class GPTRecipe:
    """How chapter 9 trains a :class:`~transformer_book.models.gpt.GPT`.

    ``sizes`` are the :class:`~transformer_book.models.gpt.GPTConfig` fields but the vocabulary
    (``context``, ``d_model``, ``n_heads``, ``n_layers``, ``dropout``). Batches hold ``batch``
    random windows of ``context`` tokens; the learning rate warms up linearly to ``lr`` over
    ``warmup_steps`` and decays by a cosine to ``lr / 10`` at step ``steps``; ``budget_s``, when
    given, stops the run after that many seconds of training.
    """

    sizes: dict[str, Any] = field(default_factory=lambda: dict(SMALL_SIZES))
    batch: int = 16
    lr: float = 2e-3
    steps: int = 2_000
    warmup_steps: int = 100
    budget_s: float | None = None

    def __post_init__(self) -> None:
        checks.positive_int("GPTRecipe", batch=self.batch, steps=self.steps)
        checks.non_negative_int("GPTRecipe", warmup_steps=self.warmup_steps)
        checks.finite_real("GPTRecipe", "lr", self.lr, above=0)
        if self.budget_s is not None:
            checks.finite_real("GPTRecipe", "budget_s", self.budget_s, above=0)
        self.model_config(1)  # the sizes are a valid GPTConfig

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The :class:`~transformer_book.models.gpt.GPTConfig` of this recipe for ``vocab_size`` tokens."""
        return GPTConfig(vocab_size, **self.sizes)

    def train_config(self, seed: int = 0) -> training.TrainConfig:
        """The :class:`~transformer_book.training.TrainConfig` of this recipe: ten evaluations
        and fifty logged losses over the run."""
        return training.TrainConfig(steps=self.steps, lr=self.lr, betas=(0.9, 0.99), weight_decay=0.1,
                                    warmup_steps=self.warmup_steps, schedule="cosine", min_lr_ratio=0.1,
                                    smoothing=0.0, clip_norm=1.0, eval_every=max(1, self.steps // 10),
                                    log_every=max(1, self.steps // 50), seed=seed, time_budget_s=self.budget_s)

    def filling(self, budget_s: float, vocab_size: int, *, device: torch.device | str,
                model: nn.Module | None = None) -> GPTRecipe:
        """This recipe with the number of steps that fills 97% of ``budget_s`` seconds on
        ``device`` (timed on a throwaway model: a GPT of the recipe's sizes, or ``model``, a
        language model of another architecture to be trained with this recipe;
        :func:`~transformer_book.training.seconds_per_step`), a warm-up of a tenth of them (at
        most 100) and ``budget_s`` as its time budget."""
        checks.finite_real("GPTRecipe.filling", "budget_s", budget_s, above=0)
        model = GPT(self.model_config(vocab_size)) if model is None else model
        x = torch.randint(0, vocab_size, (self.batch, self.sizes["context"] + 1))
        step_s = training.seconds_per_step(model, lambda step: (x[:, :-1], x[:, 1:]), objectives.language_model_loss(),
                                           device=device)
        steps = training.steps_in_budget(budget_s, step_s)
        return dataclasses.replace(self, steps=steps, warmup_steps=min(100, steps // 10), budget_s=budget_s)


def shakespeare_recipe(profile: str | None = None) -> GPTRecipe:
    """The recipe of chapter 9's ten-minute GPT on Tiny Shakespeare's characters in ``profile``
    (default: the current one) before :meth:`GPTRecipe.filling` sets its steps: :data:`LONG_SIZES`,
    batch 16, peak rate 2e-3, ten minutes of CPU (the quick profile: :data:`TINY_SIZES`, 2 seconds)."""
    if (profile or runtime.profile()) == "full":
        return GPTRecipe(dict(LONG_SIZES), batch=16, lr=2e-3, budget_s=600.0)
    return GPTRecipe(dict(TINY_SIZES), batch=16, lr=2e-3, steps=20, warmup_steps=2, budget_s=2.0)


def validation_batches(ids: torch.Tensor, context: int, *, n_batches: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n_batches`` fixed batches of ``batch`` random windows of ``ids`` (seed 1234), the same
    for every model of one context, so that validation losses compare."""
    windows = data.RandomWindows(ids, context, batch, seed=1234)
    return [windows(i) for i in range(n_batches)]


class TrainedLM(NamedTuple):
    """A model :func:`train` trained, its :class:`~transformer_book.training.History`, and a
    summary: ``name``, ``parameters``, ``steps`` done, ``seconds`` they took, the last
    ``val_loss`` and training ``tokens_per_s``."""

    model: nn.Module
    history: training.History
    summary: dict[str, Any]


def train(
    recipe: GPTRecipe,
    train_ids: torch.Tensor,
    val_batches: list[tuple[torch.Tensor, torch.Tensor]],
    vocab_size: int,
    *,
    device: torch.device | str,
    name: str = "GPT",
    seed: int = 0,
    build: Callable[[], nn.Module] | None = None,
    progress: bool = True,
) -> TrainedLM:
    """Train a fresh GPT (initialised from ``torch.manual_seed(seed)``) on random windows of
    ``train_ids`` with ``recipe``, evaluating on ``val_batches`` (see :func:`validation_batches`);
    returns it in eval mode with its history and summary. ``build``, when given, makes the model
    instead (another language model of the same interface, such as chapter 18's ModernGPT), called
    after the seed is set. ``progress=False`` trains without the progress bar and summary line
    (for many short runs whose results are tabulated instead)."""
    checks.id_tensor("recipes.gpt.train", "train_ids", train_ids, "(N)")
    if train_ids.numel() and not 0 <= int(train_ids.min()) <= int(train_ids.max()) < vocab_size:
        raise ValueError(f"recipes.gpt.train: train_ids hold ids outside the vocabulary [0, {vocab_size})")
    torch.manual_seed(seed)
    model = GPT(recipe.model_config(vocab_size)) if build is None else build()
    history = training.fit(model, data.RandomWindows(train_ids, recipe.sizes["context"], recipe.batch, seed=seed),
                           objectives.language_model_loss(), recipe.train_config(seed),
                           val_batches=lambda: val_batches, device=device, progress=progress)
    done = history.train_loss[-1][0]
    seconds = history.time_at(done)
    summary = dict(name=name, parameters=sum(p.numel() for p in model.parameters()), steps=done, seconds=seconds,
                   val_loss=history.val_loss[-1][1], tokens_per_s=done * recipe.batch * recipe.sizes["context"] / seconds)
    return TrainedLM(model.eval(), history, summary)


def checkpoint_path(profile: str | None = None) -> Path:
    """Where chapter 9 saves its ten-minute Tiny Shakespeare GPT (one file per profile)."""
    return loading.checkpoint_file("09_language_model", profile)


def save_shakespeare(model: GPT, corpus: data.CharCorpus, summary: dict[str, Any], path: str | Path | None = None) -> Path:
    """Save a GPT trained on ``corpus``'s characters (default: to :func:`checkpoint_path`) with
    ``summary`` and the corpus's characters, for :func:`load_or_train`."""
    return checkpoints.save_model(Path(path) if path is not None else checkpoint_path(), model,
                                  metadata={"chars": "".join(corpus.chars), **summary})


def load_or_train(
    *, device: torch.device | str | None = None, path: str | Path | None = None,
) -> tuple[GPT, data.CharCorpus, dict[str, Any]]:
    """Chapter 9's ten-minute GPT on Tiny Shakespeare's characters with its corpus (whose
    ``encode``/``decode`` map text to the model's ids): loaded from ``path`` (default
    :func:`checkpoint_path`) when the file exists, else trained with :func:`shakespeare_recipe`
    and saved there. ``metadata["source"]`` says ``"loaded"`` or ``"trained"``.

    Raises:
        ValueError: the file holds another kind of model, or a model of another character
            vocabulary than the corpus's.
    """
    path = Path(path) if path is not None else checkpoint_path()
    device = torch.device(device) if device is not None else runtime.select_device()
    corpus = data.load_tiny_shakespeare()

    def trained() -> tuple[nn.Module, None, dict[str, Any]]:
        full = runtime.profile() == "full"
        recipe = shakespeare_recipe()
        recipe = recipe.filling(recipe.budget_s, corpus.vocab_size, device=device)
        val = validation_batches(corpus.val_ids, recipe.sizes["context"], n_batches=20 if full else 2, batch=20 if full else 4)
        run = train(recipe, corpus.train_ids, val, corpus.vocab_size, device=device, name="ten minutes")
        save_shakespeare(run.model, corpus, run.summary, path)
        return run.model, None, {"chars": "".join(corpus.chars), **run.summary}

    model, _, metadata = loading.load_or_train(path, trained, model_class=GPT, tokenizer_class=None,
                                               device=device, where="recipes.gpt.load_or_train")
    if metadata.get("chars") != "".join(corpus.chars):
        raise ValueError(f"recipes.gpt.load_or_train: {path} holds a GPT of another character vocabulary "
                         f"than Tiny Shakespeare's {corpus.vocab_size} characters")
    return model, corpus, metadata
