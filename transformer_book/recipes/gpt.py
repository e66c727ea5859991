"""Chapter 9's GPT language models as recipes: one dataclass per training run, one call that trains it.

Chapter 9 trains decoder-only Transformers (:class:`~transformer_book.models.gpt.GPT`) on a token
stream with one recipe: random windows of the stream (:class:`~transformer_book.data.RandomWindows`),
AdamW with betas (0.9, 0.99) and weight decay 0.1, a linear warm-up then a cosine decay to a
tenth of the peak rate, gradients clipped at norm 1, no label smoothing. A :class:`Recipe` holds
the model's :class:`Sizes` (:data:`TINY_SIZES`, :data:`SMALL_SIZES` and :data:`LONG_SIZES` are the
chapter's) and the training run's choices. A run on the CPU is given a time budget:
:meth:`Recipe.filling` times a few steps first and sets the step count so that the cosine
schedule ends as the budget does.

The recipe interface that chapter 7's and chapter 13's recipes share: :func:`recipe` is the
chapter's recipe for "the ten-minute GPT" on Tiny Shakespeare, :func:`train` trains a recipe,
:func:`save` writes the trained model to :func:`checkpoint_path`, and :func:`load_or_train`
reads it back (or trains and saves it when the file is missing), for a later chapter that needs
a trained language model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from transformer_book import checkpoints, checks, data, objectives, runtime, training
from transformer_book.models import GPT, GPTConfig
from transformer_book.recipes import loading

__all__ = [
    "Sizes",
    "TINY_SIZES",
    "SMALL_SIZES",
    "LONG_SIZES",
    "NANOGPT_GPU_SIZES",
    "Recipe",
    "TrainedLM",
    "recipe",
    "validation_batches",
    "train",
    "checkpoint_path",
    "save",
    "load_or_train",
]


@dataclass(frozen=True)
class Sizes:
    """The shape of a :class:`~transformer_book.models.gpt.GPT`: every
    :class:`~transformer_book.models.gpt.GPTConfig` field that chapter 9 chooses but the
    vocabulary (which the data sets): ``context`` positions, width ``d_model``, ``n_heads`` heads,
    ``n_layers`` layers and ``dropout`` (the feed-forward width is ``4 * d_model``).

    Raises:
        ValueError: sizes that make no valid model (as :class:`~transformer_book.models.gpt.GPTConfig` says).
    """

    context: int
    d_model: int
    n_heads: int
    n_layers: int
    dropout: float

    def __post_init__(self) -> None:
        self.model_config(1)  # sizes that make no GPT are refused here, not at training

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The :class:`~transformer_book.models.gpt.GPTConfig` of these sizes for ``vocab_size`` tokens."""
        return GPTConfig(
            vocab_size,
            context=self.context,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            dropout=self.dropout,
        )

    def replace(self, **changes: Any) -> Sizes:
        """A copy with ``changes`` (checked like new sizes; an unknown name is a TypeError)."""
        return dataclasses.replace(self, **changes)


TINY_SIZES = Sizes(context=32, d_model=32, n_heads=2, n_layers=1, dropout=0.0)
"""One layer of width 32, the quick profile's model."""
SMALL_SIZES = Sizes(context=64, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
"""4 layers, 4 heads, width 128, context 64 (nanoGPT's CPU example), chapter 9's two-minute model."""
LONG_SIZES = Sizes(context=256, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
"""The two-minute model with four times the context, chapter 9's ten-minute model."""


@dataclass(frozen=True)
class Recipe:
    """How chapter 9 trains a :class:`~transformer_book.models.gpt.GPT`.

    The model has ``sizes`` (:class:`Sizes`). Batches hold ``batch`` random windows of
    ``sizes.context`` tokens; the learning rate warms up linearly to ``lr`` over
    ``warmup_steps`` and decays by a cosine to ``lr / 10`` at step ``steps``; ``budget_s``, when
    given, stops the run after that many seconds of training.

    Raises:
        TypeError: ``sizes`` that are not a :class:`Sizes` (a dict, say).
        ValueError: a batch, step count, warm-up, learning rate or budget out of range.
    """

    sizes: Sizes = SMALL_SIZES
    batch: int = 16
    lr: float = 2e-3
    steps: int = 2_000
    warmup_steps: int = 100
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.sizes, Sizes):
            raise TypeError(
                f"Recipe: sizes must be a recipes.gpt.Sizes (such as SMALL_SIZES), got {type(self.sizes).__name__}"
            )
        checks.positive_int("Recipe", batch=self.batch, steps=self.steps)
        checks.non_negative_int("Recipe", warmup_steps=self.warmup_steps)
        checks.finite_real("Recipe", "lr", self.lr, above=0)
        if self.budget_s is not None:
            checks.finite_real("Recipe", "budget_s", self.budget_s, above=0)

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The :class:`~transformer_book.models.gpt.GPTConfig` of this recipe for ``vocab_size`` tokens."""
        return self.sizes.model_config(vocab_size)

    def replace(self, **changes: Any) -> Recipe:
        """A copy with ``changes`` (checked like a new recipe)."""
        return dataclasses.replace(self, **changes)

    def train_config(self, seed: int = 0) -> training.TrainConfig:
        """The :class:`~transformer_book.training.TrainConfig` of this recipe: ten evaluations
        and fifty logged losses over the run."""
        return training.TrainConfig(
            steps=self.steps,
            lr=self.lr,
            betas=(0.9, 0.99),
            weight_decay=0.1,
            warmup_steps=self.warmup_steps,
            schedule="cosine",
            min_lr_ratio=0.1,
            smoothing=0.0,
            clip_norm=1.0,
            eval_every=max(1, self.steps // 10),
            log_every=max(1, self.steps // 50),
            seed=seed,
            time_budget_s=self.budget_s,
        )

    def filling(
        self, budget_s: float, vocab_size: int, *, device: torch.device | str, model: nn.Module | None = None
    ) -> Recipe:
        """This recipe with the number of steps that fills 97% of ``budget_s`` seconds on
        ``device`` (timed on a throwaway model: a GPT of the recipe's sizes, or ``model``, a
        language model of another architecture to be trained with this recipe;
        :func:`~transformer_book.training.seconds_per_step`), a warm-up of a tenth of them (at
        most 100) and ``budget_s`` as its time budget."""
        checks.finite_real("Recipe.filling", "budget_s", budget_s, above=0)
        model = GPT(self.model_config(vocab_size)) if model is None else model
        x = torch.randint(0, vocab_size, (self.batch, self.sizes.context + 1))
        on_gpu = torch.device(device).type == "cuda"  # a budget fills thousands of steps there: fit compiles them
        step_s = training.seconds_per_step(
            model, lambda step: (x[:, :-1], x[:, 1:]), objectives.language_model_loss(), device=device, compile=on_gpu
        )
        steps = training.steps_in_budget(budget_s, step_s)
        return dataclasses.replace(self, steps=steps, warmup_steps=min(100, steps // 10), budget_s=budget_s)


NANOGPT_GPU_SIZES = Sizes(context=256, d_model=384, n_heads=6, n_layers=6, dropout=0.2)
"""The sizes of nanoGPT's baby GPT, its Shakespeare-character configuration (6 layers, 6 heads, width
384, context 256, dropout 0.2), which chapter 9 trains on a GPU."""


def recipe(profile: str | None = None, device: torch.device | str | None = None) -> Recipe:
    """The recipe of chapter 9's longer GPT on Tiny Shakespeare's characters in ``profile``
    (default: the current one) on ``device`` (default: the CPU). On the CPU, ten minutes of
    :data:`LONG_SIZES`, batch 16, peak rate 2e-3, whose steps :meth:`Recipe.filling` sets (the
    quick profile: :data:`TINY_SIZES`, 2 seconds); on CUDA in the full profile, nanoGPT's own
    recipe for :data:`NANOGPT_GPU_SIZES`: 5,000 steps of 64 windows at 1e-3, no time budget."""
    full = (profile or runtime.profile()) == "full"
    if full and device is not None and torch.device(device).type == "cuda":
        return Recipe(NANOGPT_GPU_SIZES, batch=64, lr=1e-3, steps=5_000, warmup_steps=100)
    if full:
        return Recipe(LONG_SIZES, batch=16, lr=2e-3, budget_s=600.0)
    return Recipe(TINY_SIZES, batch=16, lr=2e-3, steps=20, warmup_steps=2, budget_s=2.0)


def validation_batches(
    ids: torch.Tensor, context: int, *, n_batches: int, batch: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
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
    recipe: Recipe,
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
    context = recipe.sizes.context
    torch.manual_seed(seed)
    model = GPT(recipe.model_config(vocab_size)) if build is None else build()
    history = training.fit(
        model,
        data.RandomWindows(train_ids, context, recipe.batch, seed=seed),
        objectives.language_model_loss(),
        recipe.train_config(seed),
        val_batches=lambda: val_batches,
        device=device,
        progress=progress,
    )
    done = history.train_loss[-1][0]
    seconds = history.time_at(done)
    summary = dict(
        name=name,
        parameters=sum(p.numel() for p in model.parameters()),
        steps=done,
        seconds=seconds,
        val_loss=history.val_loss[-1][1],
        tokens_per_s=done * recipe.batch * context / seconds,
    )
    return TrainedLM(model.eval(), history, summary)


def checkpoint_path(profile: str | None = None) -> Path:
    """Where chapter 9 saves its ten-minute Tiny Shakespeare GPT:
    ``<cache>/checkpoints/09_language_model-<profile>.pt`` (one file per profile, so that a quick
    run never stands in for a full one)."""
    return loading.checkpoint_file("09_language_model", profile)


def save(model: GPT, corpus: data.CharCorpus, metadata: dict[str, Any], *, path: str | Path | None = None) -> Path:
    """Save a GPT trained on ``corpus``'s characters to ``path`` (default :func:`checkpoint_path`)
    for :func:`load_or_train`: with ``metadata`` (a :class:`TrainedLM`'s summary) and the
    corpus's characters, which :func:`load_or_train` checks. Returns the path.

    Raises:
        ValueError: ``model`` is not a :class:`~transformer_book.models.gpt.GPT`, or its
            vocabulary is not the corpus's characters.
    """
    if not isinstance(model, GPT):
        raise ValueError(f"recipes.gpt.save: model must be a GPT, got {type(model).__name__}")
    if model.config.vocab_size != corpus.vocab_size:
        raise ValueError(
            f"recipes.gpt.save: the model reads {model.config.vocab_size} ids, the corpus has "
            f"{corpus.vocab_size} characters"
        )
    return checkpoints.save_model(
        Path(path) if path is not None else checkpoint_path(), model, metadata=_metadata(corpus, metadata)
    )


def load_or_train(
    *,
    device: torch.device | str | None = None,
    path: str | Path | None = None,
) -> tuple[GPT, data.CharCorpus, dict[str, Any]]:
    """Chapter 9's ten-minute GPT on Tiny Shakespeare's characters with its corpus (whose
    ``encode``/``decode`` map text to the model's ids): loaded from ``path`` (default
    :func:`checkpoint_path`) when the file exists, else trained with :func:`recipe` and saved
    there with :func:`save` (:func:`~transformer_book.recipes.load_or_train`).
    ``metadata["source"]`` says ``"loaded"`` or ``"trained"``.

    Raises:
        ValueError: the file holds another kind of model, or a model of another character
            vocabulary than the corpus's.
    """
    path = Path(path) if path is not None else checkpoint_path()
    device = torch.device(device) if device is not None else runtime.select_device()
    corpus = data.load_tiny_shakespeare()

    def trained() -> tuple[nn.Module, None, dict[str, Any]]:
        full = runtime.profile() == "full"
        chosen = recipe()
        chosen = chosen.filling(chosen.budget_s, corpus.vocab_size, device=device)
        val = validation_batches(
            corpus.val_ids, chosen.sizes.context, n_batches=20 if full else 2, batch=20 if full else 4
        )
        run = train(chosen, corpus.train_ids, val, corpus.vocab_size, device=device, name="ten minutes")
        save(run.model, corpus, run.summary, path=path)
        return run.model, None, _metadata(corpus, run.summary)

    model, _, metadata = loading.load_or_train(
        path, trained, model_class=GPT, tokenizer_class=None, device=device, where="recipes.gpt.load_or_train"
    )
    if metadata.get("chars") != "".join(corpus.chars):
        raise ValueError(
            f"recipes.gpt.load_or_train: {path} holds a GPT of another character vocabulary "
            f"than Tiny Shakespeare's {corpus.vocab_size} characters"
        )
    return model, corpus, metadata


def _metadata(corpus: data.CharCorpus, summary: dict[str, Any]) -> dict[str, Any]:
    # What a saved GPT records (save) and load_or_train returns: the corpus's characters, then the summary.
    return {"chars": "".join(corpus.chars), **summary}
