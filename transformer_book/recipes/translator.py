"""Chapter 7's translators in one call, for the chapters that need a trained one (7, 8, 12).

Chapter 7 trains two German-to-English Transformers with the same recipe: one on Multi30k,
the image captions with published results, step by step in the chapter; and one on Tatoeba,
everyday sentences, with :func:`train`. A :class:`Recipe` holds every choice of such a run, the
model's :class:`Sizes` among them (:data:`CHAPTER7_SIZES` in the full profile).

The recipe interface that chapter 9's and chapter 13's recipes share: :func:`recipe` is the
chapter's recipe for a corpus, :func:`train` trains it, :func:`save` writes the trained
translator to :func:`checkpoint_path` with :func:`~transformer_book.checkpoints.save_model`, and
:func:`load_or_train`, for a later chapter, reuses the saved file when it is there and otherwise
trains that translator (so that the chapter still runs on its own) and saves it.

:func:`translate_with_attention` translates one sentence greedily or with beam search and
returns the decoder's cross-attention over the source as an alignment, for a reader to try
sentences of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from transformer_book import checkpoints, checks, data, decoding, objectives, runtime, training
from transformer_book.models import Transformer, TransformerConfig
from transformer_book.recipes import loading
from transformer_book.tokenizers.subword import EOS_ID, PAD_ID, SOS_ID, SubwordTokenizer

__all__ = [
    "CORPORA",
    "Sizes",
    "CHAPTER7_SIZES",
    "QUICK_SIZES",
    "RUNNING_EXAMPLE",
    "Recipe",
    "TrainedTranslator",
    "Translation",
    "recipe",
    "corpus_splits",
    "checkpoint_path",
    "train",
    "save",
    "load_or_train",
    "translate_with_attention",
]


@dataclass(frozen=True)
class Sizes:
    """The shape of chapter 7's translator: width ``d_model``, ``n_heads`` heads, feed-forward
    width ``d_ff``, ``n_encoder_layers`` and ``n_decoder_layers`` (the
    :class:`~transformer_book.models.transformer.TransformerConfig` fields that set its size; the
    vocabulary, dropout and length are the :class:`Recipe`'s).

    Raises:
        ValueError: sizes that make no valid model (as :class:`~transformer_book.models.transformer.TransformerConfig` says).
    """

    d_model: int
    n_heads: int
    d_ff: int
    n_encoder_layers: int
    n_decoder_layers: int

    def __post_init__(self) -> None:
        TransformerConfig(1, 1, **dataclasses.asdict(self))  # sizes that make no model are refused here

    def replace(self, **changes: Any) -> Sizes:
        """A copy with ``changes`` (checked like new sizes; an unknown name is a TypeError)."""
        return dataclasses.replace(self, **changes)


CHAPTER7_SIZES = Sizes(d_model=256, n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3)
"""The translator's sizes in chapter 7's full profile."""
QUICK_SIZES = Sizes(d_model=64, n_heads=4, d_ff=128, n_encoder_layers=1, n_decoder_layers=1)
"""The translator's sizes in the quick profile."""

CORPORA = ("multi30k", "tatoeba")
"""The corpora a translator can be trained on, Multi30k's image captions and Tatoeba's everyday sentences."""

RUNNING_EXAMPLE = "Ich möchte eine Flasche Wasser."
"""The book's running example, held out of the Tatoeba translator's training data."""

TATOEBA_VAL_PAIRS = 1_000
TATOEBA_TEST_PAIRS = 2_000


@dataclass(frozen=True)
class Recipe:
    """How chapter 7 trains a translator on ``corpus`` in one profile.

    The model is the post-LN encoder-decoder of chapter 6 with ``sizes`` (:class:`Sizes`),
    dropout 0.1, a joint SentencePiece vocabulary of ``vocab_size`` and one embedding matrix
    shared by the encoder, the decoder and the output layer. Batches hold at most ``max_tokens``
    padded positions; AdamW with betas (0.9, 0.98), weight decay 0.01, peak learning rate ``lr``
    reached after ``warmup_steps`` and then decaying as the inverse square root of the step,
    label smoothing 0.1, gradients clipped at norm 1. ``train_pairs`` caps the training pairs
    (the quick profile's small sample; ``None`` keeps all).

    Raises:
        TypeError: ``sizes`` that are not a :class:`Sizes` (a dict, say).
        ValueError: an unknown corpus, or a count or learning rate out of range.
    """

    corpus: str
    steps: int
    sizes: Sizes = CHAPTER7_SIZES
    vocab_size: int = 8_000
    max_tokens: int = 3_000
    lr: float = 1e-3
    warmup_steps: int = 400
    train_pairs: int | None = None
    max_len: int = 128

    def __post_init__(self) -> None:
        checks.choice("Recipe", "corpus", self.corpus, CORPORA)
        if not isinstance(self.sizes, Sizes):
            raise TypeError(
                f"Recipe: sizes must be a recipes.translator.Sizes (such as CHAPTER7_SIZES), "
                f"got {type(self.sizes).__name__}"
            )
        checks.positive_int(
            "Recipe",
            steps=self.steps,
            vocab_size=self.vocab_size,
            max_tokens=self.max_tokens,
            warmup_steps=self.warmup_steps,
            max_len=self.max_len,
        )
        if self.train_pairs is not None:
            checks.positive_int("Recipe", train_pairs=self.train_pairs)
        checks.finite_real("Recipe", "lr", self.lr, above=0)

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The :class:`~transformer_book.models.transformer.TransformerConfig` of this recipe for a
        joint vocabulary of ``vocab_size``."""
        return TransformerConfig(
            vocab_size,
            vocab_size,
            **dataclasses.asdict(self.sizes),
            dropout=0.1,
            max_len=self.max_len,
            share_embeddings=True,
        )

    def replace(self, **changes: Any) -> Recipe:
        """A copy with ``changes`` (checked like a new recipe)."""
        return dataclasses.replace(self, **changes)

    def train_config(self, steps: int | None = None) -> training.TrainConfig:
        """The :class:`~transformer_book.training.TrainConfig` of this recipe (``steps``, a positive
        int, overrides its own; a run shorter than the warm-up warms up over half its steps)."""
        if steps is not None:
            checks.positive_int("Recipe.train_config", steps=steps)
        return self._train_config(self.steps if steps is None else steps)

    def _train_config(self, steps: int) -> training.TrainConfig:
        """:meth:`train_config` for a number of steps already checked."""
        warmup = self.warmup_steps if steps > self.warmup_steps else max(1, steps // 2)
        return training.TrainConfig(
            steps=steps,
            lr=self.lr,
            betas=(0.9, 0.98),
            weight_decay=0.01,
            warmup_steps=warmup,
            schedule="inverse_sqrt",
            smoothing=0.1,
            clip_norm=1.0,
            eval_every=max(1, steps // 8),
            log_every=max(1, steps // 40),
            seed=0,
        )


def recipe(corpus: str = "multi30k", profile: str | None = None) -> Recipe:
    """Chapter 7's recipe for ``corpus`` (one of :data:`CORPORA`) in ``profile`` (default: the
    current one, :func:`~transformer_book.runtime.profile`).

    Multi30k trains for 650 steps (17 minutes on two CPU cores), Tatoeba for 960 (20 minutes on
    two CPU cores, about 1.4 passes over its training pairs: its sentences are shorter, so a
    step costs less). The quick profile trains a tiny model for 30 steps on 3,000 pairs.

    Raises:
        ValueError: an unknown corpus.
    """
    checks.choice("recipe", "corpus", corpus, CORPORA)
    return _recipe(corpus, profile)


def _recipe(corpus: str, profile: str | None) -> Recipe:
    """:func:`recipe` of a corpus already checked."""
    if (profile or runtime.profile()) == "full":
        return Recipe(corpus, steps=650 if corpus == "multi30k" else 960)
    return Recipe(
        corpus, steps=30, sizes=QUICK_SIZES, vocab_size=1_000, max_tokens=1_200, warmup_steps=5, train_pairs=3_000
    )


def corpus_splits(corpus: str = "multi30k", profile: str | None = None) -> data.TranslationSplit:
    """The training, validation and test pairs of ``corpus``.

    Multi30k has its own files (29,000 training pairs, 1,014 validation, the 1,000 of
    ``test_2016_flickr``). Tatoeba has none: :func:`~transformer_book.data.split_linked_groups`
    splits its 169,813 pairs into 1,000 validation and 2,000 test pairs (at least; groups go
    whole) and the rest for training, so that no test sentence nor any translation of it is
    trained on, and :data:`RUNNING_EXAMPLE` with every pair linked to it is held out of all three.
    The quick profile keeps every k-th training pair up to the recipe's ``train_pairs`` and 50
    test pairs.

    Raises:
        ValueError: an unknown corpus.
    """
    checks.choice("corpus_splits", "corpus", corpus, CORPORA)
    return _corpus_splits(corpus, profile)


def _corpus_splits(corpus: str, profile: str | None) -> data.TranslationSplit:
    """:func:`corpus_splits` of a corpus already checked."""
    if corpus == "multi30k":
        split = data.TranslationSplit(
            data.load_multi30k("train"), data.load_multi30k("val"), data.load_multi30k("test"), held_out=0
        )
    else:
        split = data.split_linked_groups(
            data.load_tatoeba(),
            val_size=TATOEBA_VAL_PAIRS,
            test_size=TATOEBA_TEST_PAIRS,
            seed=0,
            hold_out=[RUNNING_EXAMPLE],
        )
    cap = _recipe(corpus, profile).train_pairs
    if cap is None:
        return split
    return split._replace(
        train=split.train[:: max(1, len(split.train) // cap)][:cap],
        test=split.test[:: max(1, len(split.test) // 50)][:50],
    )


def checkpoint_path(profile: str | None = None, *, corpus: str = "multi30k") -> Path:
    """Where chapter 7 saves its translator: ``<cache>/checkpoints/07_translation-<profile>.pt``
    for Multi30k, ``07_translation_tatoeba-<profile>.pt`` for Tatoeba (one file per profile, so
    that a quick run never stands in for a full one)."""
    checks.choice("checkpoint_path", "corpus", corpus, CORPORA)
    return _checkpoint_path(profile, corpus)


def _checkpoint_path(profile: str | None, corpus: str) -> Path:
    """:func:`checkpoint_path` of a corpus already checked."""
    return loading.checkpoint_file("07_translation" if corpus == "multi30k" else f"07_translation_{corpus}", profile)


class TrainedTranslator(NamedTuple):
    """What :func:`train` returns: the model (in eval mode), its tokenizer, the training history,
    the data split it was trained and is to be tested on, and the recipe."""

    model: Transformer
    tokenizer: SubwordTokenizer
    history: training.History
    split: data.TranslationSplit
    recipe: Recipe

    @property
    def summary(self) -> dict[str, Any]:
        """What :func:`save` records of the run: the ``steps`` done, the last ``val_loss`` and
        the ``train_seconds`` they took."""
        return {
            "steps": self.history.train_loss[-1][0],
            "val_loss": self.history.val_loss[-1][1],
            "train_seconds": self.history.train_time_s[-1][1],
        }


def train(
    corpus: str = "multi30k",
    *,
    steps: int | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
) -> TrainedTranslator:
    """Train a translator on ``corpus`` with chapter 7's :func:`recipe` (:func:`save` then saves it).

    ``steps`` overrides the recipe's number of steps. The run is seeded (tokenizer, batches,
    initial weights, dropout), so it repeats exactly on the same machine.

    Raises:
        ValueError: an unknown corpus, or ``steps`` not a positive int.
    """
    checks.choice("train", "corpus", corpus, CORPORA)
    if steps is not None:
        checks.positive_int("train", steps=steps)
    return _train(corpus, steps, device, progress)


def _train(corpus: str, steps: int | None, device: torch.device | str | None, progress: bool) -> TrainedTranslator:
    """:func:`train` of a corpus and a number of steps already checked."""
    plan = _recipe(corpus, None)
    split = _corpus_splits(corpus, None)
    device = torch.device(device) if device is not None else runtime.select_device()
    tokenizer = SubwordTokenizer.train([s for pair in split.train for s in pair], vocab_size=plan.vocab_size)
    batches = data.BucketedBatches(
        data.encode_pairs(split.train, tokenizer, max_len=plan.max_len), plan.max_tokens, seed=0
    )
    val = list(
        data.BucketedBatches(
            data.encode_pairs(split.val, tokenizer, max_len=plan.max_len), 2 * plan.max_tokens, shuffle=False
        )
    )
    torch.manual_seed(0)
    model = Transformer(plan.model_config(len(tokenizer)))
    config = plan._train_config(plan.steps if steps is None else steps)
    history = training.fit(
        model,
        batches,
        objectives.seq2seq_loss(pad_id=PAD_ID, smoothing=config.smoothing),
        config,
        val_batches=lambda: val,
        device=device,
        progress=progress,
    )
    return TrainedTranslator(model.eval(), tokenizer, history, split, plan)


def save(
    model: Transformer,
    tokenizer: SubwordTokenizer,
    metadata: dict[str, Any],
    *,
    corpus: str,
    path: str | Path | None = None,
) -> Path:
    """Save a translator trained on ``corpus`` with its tokenizer to ``path`` (default
    :func:`checkpoint_path` of the corpus) for :func:`load_or_train`: with the corpus, which
    :func:`load_or_train` checks, then ``metadata`` (a :class:`TrainedTranslator`'s summary, or
    what chapter 7 measured). Returns the path.

    Raises:
        ValueError: an unknown corpus, ``metadata`` that names another corpus, or a model that is
            not an encoder-decoder :class:`~transformer_book.models.transformer.Transformer`.
    """
    checks.choice("save", "corpus", corpus, CORPORA)
    if not isinstance(model, Transformer):
        raise ValueError(f"save: model must be a models.Transformer, got {type(model).__name__}")
    if metadata.get("corpus", corpus) != corpus:
        raise ValueError(
            f"save: metadata names corpus={metadata['corpus']!r}, the translator is saved as corpus={corpus!r}"
        )
    return _save(model, tokenizer, metadata, corpus, Path(path) if path is not None else _checkpoint_path(None, corpus))


def _save(model: Transformer, tokenizer: SubwordTokenizer, metadata: dict[str, Any], corpus: str, path: Path) -> Path:
    """:func:`save` of arguments already checked."""
    return checkpoints.save_model(path, model, tokenizer=tokenizer, metadata=_metadata(corpus, metadata))


def load_or_train(
    corpus: str = "multi30k",
    *,
    steps: int | None = None,
    device: torch.device | str | None = None,
    path: str | Path | None = None,
    progress: bool = True,
) -> tuple[nn.Module, SubwordTokenizer, dict[str, Any]]:
    """Chapter 7's translator for ``corpus``: loaded from ``path`` (default
    :func:`checkpoint_path`) when the file exists, otherwise trained with :func:`train` (for
    ``steps`` steps, default the recipe's) and saved there with :func:`save`
    (:func:`~transformer_book.recipes.load_or_train`).

    Returns ``(model in eval mode, tokenizer, metadata)``; ``metadata["source"]`` says
    ``"loaded"`` or ``"trained"``.

    Raises:
        ValueError: an unknown corpus, ``steps`` not a positive int, or a file at ``path`` that
            holds another kind of model (a BERT, a GPT) or a translator trained on another corpus.
    """
    checks.choice("load_or_train", "corpus", corpus, CORPORA)
    if steps is not None:  # refused even when the file is there and nothing trains
        checks.positive_int("load_or_train", steps=steps)
    path = Path(path) if path is not None else _checkpoint_path(None, corpus)
    device = torch.device(device) if device is not None else runtime.select_device()

    def trained() -> tuple[nn.Module, SubwordTokenizer, dict[str, Any]]:
        run = _train(corpus, steps, device, progress)
        _save(run.model, run.tokenizer, run.summary, corpus, path)
        return run.model, run.tokenizer, _metadata(corpus, run.summary)

    return loading.load_or_train(
        path,
        trained,
        model_class=Transformer,
        tokenizer_class=SubwordTokenizer,
        device=device,
        where="load_or_train",
        expect={"corpus": corpus},
        unrecorded_ok=path.resolve() == _checkpoint_path(None, corpus).resolve(),
    )


class Translation(NamedTuple):
    """One sentence translated by :func:`translate_with_attention`.

    ``cross_attention`` has shape ``(n, m)``: row ``t`` is the distribution over the ``m`` source
    tokens (EOS included) with which the last decoder layer, averaged over its heads, read the
    source while predicting output token ``t`` of the ``n`` (EOS included). ``log_prob`` is
    :math:`\\log P(y \\mid x) = \\sum_t \\log P(y_t \\mid y_{<t}, x)` of the whole output.
    """

    source: str
    text: str
    source_pieces: list[str]
    target_pieces: list[str]
    cross_attention: torch.Tensor
    log_prob: float


def translate_with_attention(
    model: Transformer,
    tokenizer: SubwordTokenizer,
    sentence: str,
    *,
    beam_size: int = 1,
    max_new_tokens: int | None = None,
) -> Translation:
    """Translate one sentence with greedy decoding (``beam_size=1``) or beam search ranked by the
    mean log-probability per token (chapter 8's length normalisation), and return the output with
    its cross-attention map and log-probability (:class:`Translation`).

    At most ``max_new_tokens`` tokens are generated (default twice the source length plus 10,
    capped at the model's ``max_len``).

    Raises:
        ValueError: an empty sentence, one longer than the model's ``max_len``, a model that is
            not an encoder-decoder :class:`~transformer_book.models.transformer.Transformer`, or
            ``beam_size`` not a positive int.
    """
    if not isinstance(model, Transformer):
        raise ValueError(f"translate_with_attention: model must be a models.Transformer, got {type(model).__name__}")
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError(f"translate_with_attention: sentence must be a non-empty str, got {sentence!r}")
    checks.positive_int("translate_with_attention", beam_size=beam_size)
    if max_new_tokens is not None:  # None means the default; 0 is not "the default"
        checks.positive_int("translate_with_attention", max_new_tokens=max_new_tokens)
    limit = model.config.max_len
    ids = tokenizer.encode(sentence, add_eos=True)
    if len(ids) > limit:
        raise ValueError(
            f"translate_with_attention: the sentence has {len(ids)} tokens with EOS, more than the "
            f"model's max_len={limit}; split it into shorter sentences"
        )
    device = next(model.parameters()).device
    src = torch.tensor([ids], device=device)
    budget = min(2 * len(ids) + 10 if max_new_tokens is None else max_new_tokens, limit)
    model.eval()
    if beam_size == 1:
        output = decoding.greedy_decode(model, src, max_new_tokens=budget)[0].tolist()
    else:
        output = decoding.beam_search(model, src=src, beam_size=beam_size, max_new_tokens=budget, normalize="length")[
            0
        ][0][0]
    output = output[: output.index(EOS_ID) + 1] if EOS_ID in output else output
    tgt_in = torch.tensor([[SOS_ID] + output[:-1]], device=device)
    with torch.no_grad():
        log_probs = model(src, tgt_in).log_softmax(-1)[0]
        memory, src_mask = model.encode(src)
        _, weights = model.decode(tgt_in, memory, src_mask, need_weights=True)
    log_prob = log_probs.gather(-1, torch.tensor(output, device=device)[:, None]).sum().item()
    return Translation(
        sentence,
        tokenizer.decode(output),
        tokenizer.id_to_piece(ids),
        tokenizer.id_to_piece(output),
        weights[-1][1][0].mean(dim=0).cpu(),
        log_prob,
    )


def _metadata(corpus: str, summary: dict[str, Any]) -> dict[str, Any]:
    # What a saved translator records (save) and load_or_train returns: the corpus, then the summary.
    return {"corpus": corpus, **summary}
