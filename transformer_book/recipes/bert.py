"""Chapter 13's small BERT: its recipe, the compute study that chose it, and one call for the
chapters that fine-tune and prompt it (14, 15).

A :class:`Recipe` holds every choice of a pretraining run: the model's shape, how it knows
positions, its normalisation and dropout, the WordPiece vocabulary, what the training sequences
are (pairs of sentences or of multi-sentence segments with next-sentence prediction, or plain
text without it), the masking rate, the batch, the learning rate and the number of steps;
:data:`FIRST_EDITION`, :data:`STARTING_POINT` and :data:`GPU_RECIPE` are recipes of their own.
:func:`prepare_data` turns WikiText-2's articles into the recipe's sequences, :func:`train`
pretrains a model with :func:`~transformer_book.training.fit`, and :func:`run_study` compares
recipes at equal training time (``python -m transformer_book.recipes.bert study``), writing the
curves that chapter 13 plots (:func:`load_study`).

The recipe interface that chapter 7's and chapter 9's recipes share: :func:`recipe` is the
recipe chapter 13 trains, :func:`train` pretrains a recipe, :func:`save` writes the model with
its tokenizer to :func:`checkpoint_path`, and :func:`load_or_train`, for a later chapter, reuses
that file when it is there and otherwise pretrains a model with :func:`recipe` and saves it, so
that every chapter still runs on its own.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from transformer_book import checkpoints, checks, runtime, training
from transformer_book.atomic import write_atomically
from transformer_book.data import pretraining
from transformer_book.models.bert import BERT, POSITIONS, BERTConfig, bert_loss, evaluate_pretraining
from transformer_book.recipes import loading
from transformer_book.tokenizers.wordpiece import SPECIAL_TOKENS, WordPieceTokenizer

__all__ = [
    "MAX_LEN",
    "INPUTS",
    "Recipe",
    "FIRST_EDITION",
    "STARTING_POINT",
    "recipe",
    "study_recipes",
    "ROUNDS",
    "train_config",
    "PretrainingData",
    "prepare_data",
    "training_batches",
    "validation_batches",
    "unigram_cross_entropy",
    "new_model",
    "train",
    "seconds_per_step",
    "validation_mlm",
    "continue_pretraining",
    "run_study",
    "load_study",
    "study_path",
    "STUDY_FILE",
    "GPU_RECIPE",
    "checkpoint_path",
    "save",
    "load_or_train",
]

MAX_LEN = 128
"""Pieces per training sequence, ``[CLS]`` and the ``[SEP]`` included."""

INPUTS = ("sentence pairs", "segment pairs", "text")
"""What a training sequence holds, one of three layouts. ``[CLS] sentence [SEP] sentence
[SEP]`` with next-sentence prediction
(:func:`~transformer_book.data.pretraining.make_sentence_pairs`); two segments of several
sentences filling the length, with next-sentence prediction (BERT's own data); or a run of
sentences filling the length, masked-language modelling alone (RoBERTa's) -- the last two by
:func:`~transformer_book.data.pretraining.pack_documents`."""


@dataclass(frozen=True)
class Recipe:
    """Every choice of one pretraining run.

    Model: ``d_model``, ``n_heads``, ``n_layers``, ``position`` (one of
    :data:`~transformer_book.models.bert.POSITIONS`, the names BERT takes from the factory), ``norm_first`` (pre-LN) and
    ``dropout``. Data: a WordPiece vocabulary of ``vocab_size`` pieces trained on the first
    ``n_documents`` training articles (all of them with ``None``), sequences of at most
    ``max_len`` pieces made as ``inputs`` says (one of :data:`INPUTS`), and ``select_prob``, the
    share of pieces selected for the MLM loss (then 80% ``[MASK]``, 10% random, 10% kept).
    Optimisation: ``batch`` sequences a step, peak learning rate ``lr``, ``steps`` steps
    (:func:`train_config` gives the rest).
    """

    d_model: int = 128
    n_heads: int = 8
    n_layers: int = 2
    position: str = "alibi"
    norm_first: bool = True
    dropout: float = 0.0
    vocab_size: int = 4_000
    n_documents: int | None = None
    max_len: int = MAX_LEN
    inputs: str = "text"
    select_prob: float = 0.3
    batch: int = 32
    lr: float = 4e-3
    steps: int = 7_000

    def __post_init__(self) -> None:
        checks.positive_int(
            "Recipe",
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            vocab_size=self.vocab_size,
            max_len=self.max_len,
            batch=self.batch,
            steps=self.steps,
        )
        if self.n_documents is not None:
            checks.integer("Recipe", "n_documents", self.n_documents, minimum=2)
        checks.choice("Recipe", "position", self.position, POSITIONS)
        checks.choice("Recipe", "inputs", self.inputs, INPUTS)
        if self.max_len > MAX_LEN or self.max_len < 8:
            raise ValueError(f"Recipe: max_len must lie in [8, {MAX_LEN}], got {self.max_len}")
        checks.probability("Recipe", "select_prob", self.select_prob, zero=False)
        checks.finite_real("Recipe", "lr", self.lr, above=0)
        BERTConfig(
            self.vocab_size,
            max_len=MAX_LEN,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            dropout=self.dropout,
            norm_first=self.norm_first,
            position=self.position,
        )

    @property
    def nsp(self) -> bool:
        """Whether the recipe trains next-sentence prediction (every input but plain text)."""
        return self.inputs != "text"

    def model_config(self, vocab_size: int) -> BERTConfig:
        """The model of the recipe for a tokenizer of ``vocab_size`` pieces (``MAX_LEN`` positions,
        whatever length it trains on, so that every model reads the same validation text)."""
        return BERTConfig(
            vocab_size,
            max_len=MAX_LEN,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            dropout=self.dropout,
            norm_first=self.norm_first,
            position=self.position,
            eps=1e-12,
        )

    def replace(self, **changes: Any) -> Recipe:
        """A copy with ``changes`` (checked like a new recipe)."""
        return dataclasses.replace(self, **changes)


FIRST_EDITION = Recipe(
    d_model=128,
    n_heads=2,
    n_layers=2,
    position="learned",
    norm_first=False,
    dropout=0.1,
    vocab_size=8_000,
    inputs="sentence pairs",
    select_prob=0.15,
    batch=32,
    lr=1e-3,
)
"""The recipe of chapter 13's first edition, BERT's own choices scaled down (learned positions,
post-LN, dropout 0.1, 15% masking, next-sentence prediction on pairs of single sentences)."""


GPU_RECIPE = Recipe(d_model=256, n_heads=8, n_layers=4, batch=128, lr=1e-3, steps=6_000)
"""A larger BERT for one GPU (four layers of width 256, batches of 128 at :math:`10^{-3}`), which
``benchmarks/gpu_recipes.py`` pretrains; the chapters keep :func:`recipe`'s model on every device."""


STARTING_POINT = Recipe(vocab_size=8_000, lr=2e-3)
"""Where chapter 13's compute study starts. Its first round changes one choice of this recipe at
a time; the second combines the changes that won."""


def recipe(device: torch.device | str | None = None, profile: str | None = None) -> Recipe:
    """The recipe chapter 13 trains on ``device`` in ``profile`` (defaults: the current ones).

    Full profile, on every device: the winner of the compute study (:func:`load_study`): 2 layers
    of width 128 with 8 heads, ALiBi, pre-LN without dropout, a 4,000-piece vocabulary, plain text
    of 128 pieces with 30% of the pieces masked and no next-sentence prediction, batches of 32 at
    a peak learning rate of :math:`4 \\cdot 10^{-3}`, 7,000 steps (about 16 minutes on two cores).
    A GPU trains the same model, only faster: chapters 14, 15 and 20 load it and were written for
    it. (:data:`GPU_RECIPE`, a larger model, is what ``benchmarks/gpu_recipes.py`` measures.)
    Quick profile: 1 layer of width 32, 2,000 pieces from the first 150 articles, 20 steps.
    ``device`` is accepted for the callers that pass it; the recipe does not depend on it.
    """
    profile = profile or runtime.profile()
    if device is not None:
        torch.device(device)  # a bad device name is still an error
    if profile != "full":
        return Recipe(d_model=32, n_heads=2, n_layers=1, vocab_size=2_000, n_documents=150, batch=16, steps=20)
    return Recipe()


def study_recipes(base: Recipe | None = None) -> dict[str, Recipe]:
    """The recipes of chapter 13's compute study. First round: ``base`` (default
    :data:`STARTING_POINT`), the first edition's, and ``base`` with one choice changed at a time.
    Second round: ``base`` with the two changes that ended furthest below the unigram in the first
    (half the vocabulary and twice the learning rate)."""
    base = base or STARTING_POINT
    combined = base.replace(vocab_size=base.vocab_size // 2, lr=base.lr * 2)
    return {
        "starting point": base,
        "first edition": FIRST_EDITION,
        "learned positions": base.replace(position="learned"),
        "2 heads": base.replace(n_heads=2),
        "post-LN": base.replace(norm_first=False),
        "dropout 0.1": base.replace(dropout=0.1),
        "segment pairs + NSP": base.replace(inputs="segment pairs"),
        "sentence pairs + NSP": base.replace(inputs="sentence pairs"),
        "15% masked": base.replace(select_prob=0.15),
        "45% masked": base.replace(select_prob=0.45),
        "length 64, batch 64": base.replace(max_len=64, batch=2 * base.batch),
        "4 layers": base.replace(n_layers=2 * base.n_layers),
        "width 256": base.replace(d_model=2 * base.d_model),
        "4,000 pieces": base.replace(vocab_size=base.vocab_size // 2),
        "16,000 pieces": base.replace(vocab_size=base.vocab_size * 2),
        "lr 1e-3": base.replace(lr=base.lr / 2),
        "lr 4e-3": base.replace(lr=base.lr * 2),
        "batch 64": base.replace(batch=2 * base.batch),
        "4,000 pieces, lr 4e-3": combined,
    }


ROUNDS = {"first": 18, "second": 1}
"""How many of :func:`study_recipes`, in order, belong to each round of the study."""


def train_config(steps: int, lr: float, budget_s: float | None = None) -> training.TrainConfig:
    """Chapter 13's optimisation for a run of ``steps`` steps: AdamW (betas 0.9, 0.999, weight
    decay 0.01), warm-up over a tenth of the steps (at most 300) then cosine decay, gradients
    clipped at norm 1, eight validations, stopping early after ``budget_s`` seconds of training.

    Raises:
        ValueError: ``steps`` is not a positive int (and, from the
            :class:`~transformer_book.training.TrainConfig`, ``lr`` or ``budget_s`` not positive).
    """
    checks.positive_int("train_config", steps=steps)
    return _train_config(steps, lr, budget_s)


def _train_config(steps: int, lr: float, budget_s: float | None = None) -> training.TrainConfig:
    """:func:`train_config` of a number of steps already checked (a recipe's, or the one
    :func:`continue_pretraining` was given)."""
    return training.TrainConfig(
        steps=steps,
        lr=lr,
        betas=(0.9, 0.999),
        weight_decay=0.01,
        warmup_steps=min(300, max(1, steps // 10), steps - 1),
        schedule="cosine",
        clip_norm=1.0,
        eval_every=max(1, steps // 8),
        log_every=max(1, steps // 100),
        seed=0,
        time_budget_s=budget_s,
    )


class PretrainingData(NamedTuple):
    """A recipe's data: its ``tokenizer``, the ``train`` and ``valid`` sequences, and
    ``piece_counts``, how often every piece occurs in the training text (``(vocab_size,)``)."""

    tokenizer: WordPieceTokenizer
    train: pretraining.EncodedPairs
    valid: pretraining.EncodedPairs
    piece_counts: np.ndarray


def _sequences(
    r: Recipe, tokenizer: WordPieceTokenizer, documents: Sequence[Sequence[str]], seed: int
) -> pretraining.EncodedPairs:
    if r.inputs == "sentence pairs":
        return pretraining.encode_sentence_pairs(
            tokenizer, pretraining.make_sentence_pairs(documents, seed=seed), max_len=r.max_len
        )
    return pretraining.pack_documents(tokenizer, documents, r.max_len, nsp=r.nsp, seed=seed)


def prepare_data(
    r: Recipe,
    train_documents: Sequence[Sequence[str]] | None = None,
    valid_documents: Sequence[Sequence[str]] | None = None,
    *,
    tokenizer: WordPieceTokenizer | None = None,
) -> PretrainingData:
    """The recipe's tokenizer and sequences from WikiText-2's articles (default: the training
    and validation articles, the first ``r.n_documents`` of the training ones and, when that is
    set, the first 20 validation ones). A ``tokenizer`` (trained as the recipe says) is reused
    instead of trained again. The validation sequences are made with a fixed seed: every recipe of the same
    inputs and length reads the same ones."""
    if train_documents is None:
        train_documents = pretraining.wikitext2_documents("train")[: r.n_documents]
    if valid_documents is None:
        valid_documents = pretraining.wikitext2_documents("valid")[: None if r.n_documents is None else 20]
    sentences = [s for d in train_documents for s in d]
    if tokenizer is None:
        tokenizer = WordPieceTokenizer.train(sentences, vocab_size=r.vocab_size)
    counts = np.bincount(
        np.concatenate([np.asarray(x, dtype=np.int64) for x in tokenizer.encode_batch(sentences)]),
        minlength=len(tokenizer),
    )
    return PretrainingData(
        tokenizer, _sequences(r, tokenizer, train_documents, 0), _sequences(r, tokenizer, valid_documents, 1), counts
    )


def training_batches(r: Recipe, d: PretrainingData, *, seed: int = 0) -> pretraining.PretrainingBatches:
    """Batches of ``r.batch`` training sequences, ``r.select_prob`` of their pieces selected."""
    return pretraining.PretrainingBatches(
        d.train, r.batch, vocab_size=len(d.tokenizer), seed=seed, select_prob=r.select_prob
    )


def validation_batches(
    d: PretrainingData, *, batch: int = 64, limit: int | None = None
) -> list[pretraining.PretrainingBatch]:
    """The validation sequences in a fixed order, masked once with a fixed seed at BERT's 15%
    (whatever rate the recipe trains with, so that every recipe answers the same kind of
    question); the first ``limit`` batches only, when given."""
    batches = pretraining.PretrainingBatches(d.valid, batch, vocab_size=len(d.tokenizer), seed=1, shuffle=False)
    return [batches(i) for i in range(len(batches) if limit is None else min(limit, len(batches)))]


def unigram_cross_entropy(d: PretrainingData, batches: Sequence[pretraining.PretrainingBatch]) -> float:
    r"""The loss of a model that ignores the context: :math:`-\frac{1}{|S|}\sum_{t \in S} \log p(x_t)`
    over the selected pieces of ``batches``, with :math:`p` the training text's piece frequencies
    (add-one smoothed; special pieces are never targets)."""
    counts = d.piece_counts.astype(np.float64) + 1.0
    counts[: len(SPECIAL_TOKENS)] = 0.0
    p = counts / counts.sum()
    targets = torch.cat([b.targets[b.targets != pretraining.IGNORE_INDEX] for b in batches]).numpy()
    if len(targets) == 0:
        raise ValueError("unigram_cross_entropy: the batches select no piece")
    return float(-np.log(p[targets]).mean())


def new_model(r: Recipe, d: PretrainingData, *, seed: int = 0) -> BERT:
    """A freshly initialised BERT of the recipe (seeded)."""
    torch.manual_seed(seed)
    return BERT(r.model_config(len(d.tokenizer)))


def train(
    r: Recipe,
    d: PretrainingData,
    *,
    device: torch.device | str | None = None,
    val_batches: Sequence[pretraining.PretrainingBatch] | None = None,
    eval_every: int | None = None,
    log: list[dict[str, Any]] | None = None,
    progress: bool = True,
    seed: int = 0,
    budget_s: float | None = None,
) -> tuple[BERT, training.History]:
    """Pretrain a new BERT of the recipe for ``r.steps`` steps (or ``budget_s`` seconds of training);
    :func:`save` saves it.

    ``val_batches`` are evaluated every ``eval_every`` steps (default: eight times) into the
    history's ``val_loss`` (the MLM loss, weighted by selected pieces, plus the NSP loss for a
    recipe that trains it); ``log`` receives every call's losses (see
    :func:`~transformer_book.models.bert.bert_loss`).
    """
    device = torch.device(device) if device is not None else runtime.select_device()
    model = new_model(r, d, seed=seed).to(device)
    config = _train_config(r.steps, r.lr, budget_s)
    if eval_every is not None:
        config = dataclasses.replace(config, eval_every=eval_every)
    history = training.fit(
        model,
        training_batches(r, d, seed=seed),
        bert_loss(log, nsp=r.nsp),
        config,
        val_batches=(lambda: val_batches) if val_batches is not None else None,
        device=device,
        progress=progress,
    )
    return model, history


def seconds_per_step(
    r: Recipe, d: PretrainingData, *, device: torch.device | str | None = None, steps: int = 12, warmup: int = 3
) -> float:
    """The median time of one training step of the recipe (forward, backward, AdamW), measured on
    ``steps`` steps of real batches after ``warmup`` untimed ones
    (:func:`~transformer_book.training.seconds_per_step` on a fresh model)."""
    device = torch.device(device) if device is not None else runtime.select_device()
    compiled = training.compiles(train_config(r.steps, r.lr), device)  # the step train() will take
    return training.seconds_per_step(
        new_model(r, d),
        training_batches(r, d),
        bert_loss(nsp=r.nsp),
        device=device,
        steps=steps,
        warmup=max(warmup, 1) if compiled else warmup,
        compile=compiled,
    )


def continue_pretraining(
    model: BERT,
    tokenizer: WordPieceTokenizer,
    texts: Sequence[str],
    *,
    steps: int,
    r: Recipe | None = None,
    lr: float | None = None,
    device: torch.device | str | None = None,
    seed: int = 0,
    progress: bool = True,
) -> tuple[BERT, training.History]:
    """Task-adaptive pretraining (Gururangan et al., 2020): a copy of ``model`` trained ``steps``
    more steps with its recipe's masked-language modelling on ``texts``, a task's own unlabelled
    text (its training inputs, without their labels).

    The texts are packed in order into sequences of ``r.max_len`` pieces
    (:func:`~transformer_book.data.pretraining.pack_documents`, plain text), batches of
    ``r.batch`` with ``r.select_prob`` of the pieces masked, and trained with :func:`train_config`
    at peak learning rate ``lr`` (default ``r.lr``). ``r`` defaults to :class:`Recipe`. The
    original ``model`` is left as it was.

    Raises:
        ValueError: no text, or ``steps`` not a positive int.
    """
    checks.positive_int("continue_pretraining", steps=steps)
    if isinstance(texts, str) or len(texts) == 0:
        raise ValueError("continue_pretraining: texts must be a non-empty list of strings")
    r = r or Recipe()
    sequences = pretraining.pack_documents(tokenizer, [list(texts)], r.max_len, nsp=False)
    batches = pretraining.PretrainingBatches(
        sequences, r.batch, vocab_size=len(tokenizer), seed=seed, select_prob=r.select_prob
    )
    adapted = copy.deepcopy(model)
    history = training.fit(
        adapted,
        batches,
        bert_loss(nsp=False),
        _train_config(steps, lr if lr is not None else r.lr),
        device=device,
        progress=progress,
    )
    return adapted.eval(), history


# ----------------------------------------------------------------------------- the compute study

STUDY_FILE = "13_pretraining_study.json"
"""The file (in the package's ``studies/`` folder) that :func:`run_study` writes and :func:`load_study` reads."""


def study_path() -> Path:
    """The package's study file, which :func:`run_study` writes by default and :func:`load_study`
    reads by default: ``transformer_book/studies/13_pretraining_study.json``."""
    return Path(str(resources.files("transformer_book").joinpath("studies", STUDY_FILE)))


def validation_mlm(log: Sequence[dict[str, Any]], history: training.History) -> list[tuple[int, float]]:
    """``(step, validation MLM loss)`` at every validation of a run, from the ``log`` that its
    :func:`~transformer_book.models.bert.bert_loss` filled: the MLM loss alone, weighted by
    selected pieces, even for a recipe whose training loss adds next-sentence prediction."""
    groups: list[list[dict[str, Any]]] = []
    for previous, entry in zip([{"training": True}, *log], log):
        if not entry["training"]:
            if previous["training"]:
                groups.append([])
            groups[-1].append(entry)
    if len(groups) != len(history.val_loss):
        raise ValueError(
            f"validation_mlm: the log holds {len(groups)} validations, the history "
            f"{len(history.val_loss)}: not the log of this run"
        )
    return [
        (step, sum(e["mlm"] * e["n_predictions"] for e in group) / sum(e["n_predictions"] for e in group))
        for (step, _), group in zip(history.val_loss, groups)
    ]


def _study_run(
    name: str, r: Recipe, budget_s: float, per_step: float, evaluations: int, documents: tuple[Any, Any], device: str
) -> dict[str, Any]:
    """One recipe of the study, run for ``budget_s / per_step`` steps in this process."""
    d = prepare_data(r, *documents)
    valid = validation_batches(d)
    steps = max(evaluations, int(budget_s / per_step))
    log: list[dict[str, Any]] = []
    model, history = train(
        r.replace(steps=steps),
        d,
        device=device,
        val_batches=valid[:8],
        eval_every=max(1, steps // evaluations),
        log=log,
        progress=False,
    )
    final = evaluate_pretraining(model, valid, device=device, nsp=r.nsp)
    return {
        "name": name,
        "recipe": dataclasses.asdict(r.replace(steps=steps)),
        "seconds_per_step": per_step,
        "parameters": sum(p.numel() for p in model.parameters()),
        "unigram_loss": unigram_cross_entropy(d, valid[:8]),
        "val_mlm": validation_mlm(log, history),
        "final_mlm_loss": final["mlm_loss"],
        "final_unigram_loss": unigram_cross_entropy(d, valid),
        "final_nsp_accuracy": final.get("nsp_accuracy"),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _same_step(a: Recipe, b: Recipe) -> bool:
    """Whether a training step of ``a`` computes what one of ``b`` does, values aside: recipes that
    differ in the learning rate (and the number of steps) alone."""
    return a.replace(lr=b.lr, steps=b.steps) == b


def run_study(
    budget_s: float = 300.0,
    *,
    names: Sequence[str] | None = None,
    recipes: dict[str, Recipe] | None = None,
    documents: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
    output: str | Path | None = None,
    jobs: int = 1,
    device: torch.device | str = "cpu",
    evaluations: int = 10,
    merge: bool = False,
) -> dict[str, Any]:
    """Chapter 13's compute study: every recipe of :func:`study_recipes` (or those ``names``, or
    the given ``recipes``) trained for the same ``budget_s`` seconds of training on this machine.

    Equal time is set by measurement, not by the clock of each run: first every recipe's step
    is timed alone (:func:`seconds_per_step`, with the machine's threads), then each recipe runs
    ``budget_s / seconds_per_step`` steps (at least ``evaluations``) with its own warm-up and
    cosine decay, ``jobs`` runs at a time with one thread each (so runs that share the machine
    do not distort each other's curves). Every run records its validation MLM loss at
    ``evaluations`` points, on the first 8 validation batches (BERT's 15% masking), beside the
    unigram cross-entropy of the same targets, and at the end on all of them. ``documents`` are
    ``(train, valid)`` articles (default: WikiText-2's). Written to ``output`` (default: the
    package's own study file). With ``merge``, the runs already in ``output`` that were not run
    again are kept (the budget must be the same), so that one recipe can be measured again, and a
    new recipe whose step computes what a kept run's does (they differ in the learning rate alone)
    takes that run's step time instead of a timing of its own, so that a later round is held to
    the clock of the first even on a busier machine.
    """
    path = Path(output) if output is not None else study_path()
    kept: list[dict[str, Any]] = []
    if merge and path.exists():
        earlier = json.loads(path.read_text())
        if earlier["budget_s"] != budget_s:
            raise ValueError(
                f"run_study: {path} holds runs of {earlier['budget_s']} s, not {budget_s} s; "
                f"merge only runs of the same budget"
            )
        kept = earlier["runs"]
    if recipes is None:
        every = study_recipes()
        names = list(every) if names is None else list(names)
        unknown = [n for n in names if n not in every]
        if unknown:
            raise ValueError(f"run_study: unknown recipes {unknown}; known: {list(every)}")
        recipes = {n: every[n] for n in names}
    if not recipes or not all(isinstance(r, Recipe) for r in recipes.values()):
        raise ValueError("run_study: recipes must be a non-empty dict of names to Recipe")
    checks.finite_real("run_study", "budget_s", budget_s, above=0)
    if documents is None:
        documents = (pretraining.wikitext2_documents("train"), pretraining.wikitext2_documents("valid"))
    timings = {}
    for name, r in recipes.items():
        same_step = [run for run in kept if _same_step(Recipe(**run["recipe"]), r)]
        timings[name] = (
            same_step[0]["seconds_per_step"]
            if same_step
            else seconds_per_step(r, prepare_data(r, *documents), device=device)
        )
    arguments = [(name, r, budget_s, timings[name], evaluations, documents, str(device)) for name, r in recipes.items()]
    if jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs, initializer=torch.set_num_threads, initargs=(1,)) as pool:
            runs = pool.starmap(_study_run, arguments)
    else:
        runs = [_study_run(*a) for a in arguments]
    new = {run["name"] for run in runs}
    runs = [run for run in kept if run["name"] not in new] + runs
    order = list(study_recipes())
    runs.sort(key=lambda run: order.index(run["name"]) if run["name"] in order else len(order))
    study = {
        "budget_s": budget_s,
        "device": runtime.device_description(torch.device(device)),
        "threads_for_timing": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
    }
    text = json.dumps(study, indent=1) + "\n"
    write_atomically(path, text)
    return json.loads(text)  # as load_study reads it back


def load_study(path: str | Path | None = None) -> dict[str, Any]:
    """The stored compute study (default: the one shipped with the package)."""
    return json.loads(Path(study_path() if path is None else path).read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- chapters 14 and 15


def checkpoint_path(profile: str | None = None) -> Path:
    """Where chapter 13 saves its BERT: ``<cache>/checkpoints/13_bert_pretraining-<profile>.pt``
    (one file per profile, so that a quick run never stands in for a full one)."""
    return loading.checkpoint_file("13_bert_pretraining", profile)


def save(
    model: BERT, tokenizer: WordPieceTokenizer, metadata: dict[str, Any], *, r: Recipe, path: str | Path | None = None
) -> Path:
    """Save a BERT pretrained with the recipe ``r`` and its tokenizer to ``path`` (default
    :func:`checkpoint_path`) for :func:`load_or_train`: with ``metadata`` (chapter 13 records the
    ``steps``, ``train_seconds``, ``mlm_loss`` and ``unigram_loss``) and then the recipe, as a dict
    that ``Recipe(**metadata["recipe"])`` rebuilds (chapter 14 continues pretraining with it).
    Returns the path.

    Raises:
        ValueError: ``model`` is not a :class:`~transformer_book.models.bert.BERT`, ``r`` not a
            :class:`Recipe`, or ``metadata`` already holds a ``"recipe"``.
    """
    if not isinstance(model, BERT):
        raise ValueError(f"save: model must be a BERT, got {type(model).__name__}")
    if not isinstance(r, Recipe):
        raise ValueError(f"save: r must be a recipes.bert.Recipe, got {type(r).__name__}")
    if "recipe" in metadata:
        raise ValueError("save: metadata holds a 'recipe'; the recipe is recorded from r")
    return checkpoints.save_model(
        Path(path) if path is not None else checkpoint_path(),
        model,
        tokenizer=tokenizer,
        metadata=_metadata(r, metadata),
    )


def load_or_train(
    *,
    steps: int | None = None,
    device: torch.device | str | None = None,
    path: str | Path | None = None,
    progress: bool = True,
) -> tuple[BERT, WordPieceTokenizer, dict[str, Any]]:
    """Chapter 13's BERT: loaded from ``path`` (default :func:`checkpoint_path`) when the file
    exists, otherwise pretrained with :func:`recipe` (for ``steps`` steps instead of the
    recipe's, when given) and saved there with :func:`save`
    (:func:`~transformer_book.recipes.load_or_train`).

    Returns ``(model in eval mode, tokenizer, metadata)``; ``metadata["source"]`` says
    ``"loaded"`` or ``"trained"``, and a trained model's metadata holds its validation MLM loss.

    Raises:
        ValueError: ``steps`` is not a positive int, or the file holds something else than a BERT
            with its WordPiece tokenizer.
    """
    if steps is not None:
        checks.positive_int("load_or_train", steps=steps)
    path = Path(path) if path is not None else checkpoint_path()
    device = torch.device(device) if device is not None else runtime.select_device()

    def pretrained() -> tuple[BERT, WordPieceTokenizer, dict[str, Any]]:
        chosen = recipe(device)
        if steps is not None:
            chosen = chosen.replace(steps=steps)
        d = prepare_data(chosen)
        valid = validation_batches(d)
        model, history = train(chosen, d, device=device, val_batches=valid[: max(1, 1_000 // 64)], progress=progress)
        final = evaluate_pretraining(model, valid, device=device, nsp=chosen.nsp)
        metadata = {
            "steps": history.train_loss[-1][0],
            "train_seconds": history.train_time_s[-1][1],
            "mlm_loss": final["mlm_loss"],
            "unigram_loss": unigram_cross_entropy(d, valid),
        }
        save(model, d.tokenizer, metadata, r=chosen, path=path)
        return model, d.tokenizer, _metadata(chosen, metadata)

    return loading.load_or_train(
        path, pretrained, model_class=BERT, tokenizer_class=WordPieceTokenizer, device=device, where="load_or_train"
    )


def _metadata(r: Recipe, metadata: dict[str, Any]) -> dict[str, Any]:
    # What a saved BERT records (save) and load_or_train returns: the metadata, then the recipe.
    return {**metadata, "recipe": dataclasses.asdict(r)}


def _main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_book.recipes.bert", description="Chapter 13's compute study of pretraining recipes."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    study = sub.add_parser("study", help="train every recipe for the same time and write the curves")
    study.add_argument("--budget", type=float, default=300.0, help="seconds of training per recipe (default 300)")
    study.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="runs at a time")
    study.add_argument("--only", nargs="+", help="these recipes only (names as in study_recipes)")
    study.add_argument("--output", help="where to write the study (default: the package's study file)")
    study.add_argument("--merge", action="store_true", help="keep the runs of the file that are not run again")
    args = parser.parse_args(argv)
    result = run_study(args.budget, names=args.only, output=args.output, jobs=args.jobs, merge=args.merge)
    for run in result["runs"]:
        print(
            f"{run['name']:<24} {run['recipe']['steps']:>6,} steps  MLM {run['final_mlm_loss']:.3f}  "
            f"unigram {run['final_unigram_loss']:.3f}  below unigram {run['final_unigram_loss'] - run['final_mlm_loss']:.3f}"
        )


if __name__ == "__main__":
    _main()
