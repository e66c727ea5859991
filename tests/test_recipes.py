"""The three recipe modules (chapter 7's translator, chapter 9's GPT, chapter 13's BERT) share one
small interface: a frozen ``Recipe`` dataclass whose ``model_config(vocab_size)`` is the model's
typed configuration, sizes that are typed (an unknown or misspelt size is an error), and the same
five verbs, ``recipe``, ``train``, ``checkpoint_path``, ``save`` and ``load_or_train``. (Each
module's own test file round-trips ``save`` and ``load_or_train`` on a tiny model.)"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from transformer_book.models import BERTConfig, GPTConfig, TransformerConfig
from transformer_book.recipes import bert, gpt, translator

MODULES = {translator: TransformerConfig, gpt: GPTConfig, bert: BERTConfig}
VERBS = ("recipe", "train", "checkpoint_path", "save", "load_or_train")


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_recipe_module_has_the_same_interface(module, tmp_path, monkeypatch):
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path))
    for verb in VERBS:
        assert callable(getattr(module, verb)) and verb in module.__all__, verb
    assert "Recipe" in module.__all__ and dataclasses.is_dataclass(module.Recipe)
    assert module.Recipe.__dataclass_params__.frozen
    chosen = module.recipe(profile="quick")
    assert type(chosen) is module.Recipe
    assert list(inspect.signature(module.Recipe.model_config).parameters) == ["self", "vocab_size"]
    config = chosen.model_config(500)
    assert (
        type(config) is MODULES[module]
        and getattr(config, "vocab_size", getattr(config, "src_vocab_size", None)) == 500
    )
    assert chosen.replace() == chosen
    assert next(iter(inspect.signature(module.checkpoint_path).parameters)) == "profile"
    assert module.checkpoint_path("quick").parent == tmp_path / "checkpoints"
    assert module.checkpoint_path("quick").name.endswith("-quick.pt")
    assert module.checkpoint_path("full").name.endswith("-full.pt")
    assert "path" in inspect.signature(module.save).parameters
    assert "path" in inspect.signature(module.load_or_train).parameters


def test_the_old_names_are_gone():
    assert not hasattr(translator, "TranslatorRecipe") and not hasattr(gpt, "GPTRecipe")
    assert not hasattr(gpt, "shakespeare_recipe") and not hasattr(gpt, "save_shakespeare")
    assert not hasattr(bert, "load_or_pretrain") and not hasattr(bert, "pretrain")
    assert not hasattr(bert.Recipe, "bert_config")


def test_the_checkpoint_files_keep_their_names(tmp_path, monkeypatch):
    """Files trained before the recipes shared one interface still load: the names are the same."""
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path))
    assert translator.checkpoint_path("full").name == "07_translation-full.pt"
    assert translator.checkpoint_path("full", corpus="tatoeba").name == "07_translation_tatoeba-full.pt"
    assert gpt.checkpoint_path("full").name == "09_language_model-full.pt"
    assert bert.checkpoint_path("full").name == "13_bert_pretraining-full.pt"


def test_the_gpt_presets_are_typed_sizes():
    assert (gpt.TINY_SIZES.context, gpt.TINY_SIZES.d_model, gpt.TINY_SIZES.n_heads, gpt.TINY_SIZES.n_layers) == (
        32,
        32,
        2,
        1,
    )
    assert (gpt.SMALL_SIZES.context, gpt.SMALL_SIZES.d_model, gpt.SMALL_SIZES.n_heads, gpt.SMALL_SIZES.n_layers) == (
        64,
        128,
        4,
        4,
    )
    assert gpt.LONG_SIZES == gpt.SMALL_SIZES.replace(context=256)
    assert all(s.dropout == 0.0 for s in (gpt.TINY_SIZES, gpt.SMALL_SIZES, gpt.LONG_SIZES))
    assert gpt.SMALL_SIZES.model_config(65) == GPTConfig(
        65, context=64, d_model=128, n_heads=4, n_layers=4, dropout=0.0
    )
    assert gpt.Recipe().sizes == gpt.SMALL_SIZES and gpt.Recipe().model_config(65) == gpt.SMALL_SIZES.model_config(65)
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpt.SMALL_SIZES.context = 128  # a preset cannot be changed in place
    with pytest.raises(TypeError, match="contxt"):
        gpt.Sizes(contxt=64, d_model=128, n_heads=4, n_layers=4, dropout=0.0)
    with pytest.raises(TypeError, match="dropout"):
        gpt.Sizes(context=64, d_model=128, n_heads=4, n_layers=4)  # every size is given
    with pytest.raises(TypeError, match=r"sizes must be a recipes.gpt.Sizes .*, got dict"):
        gpt.Recipe(dict(context=64, d_model=128, n_heads=4, n_layers=4, dropout=0.0))


def test_the_translator_presets_are_typed_sizes():
    full, quick = translator.recipe("multi30k", "full"), translator.recipe("tatoeba", "quick")
    assert full.sizes == translator.CHAPTER7_SIZES and quick.sizes == translator.QUICK_SIZES
    assert full.model_config(8_000) == TransformerConfig(
        8_000,
        8_000,
        d_model=256,
        n_heads=4,
        d_ff=1024,
        n_encoder_layers=3,
        n_decoder_layers=3,
        dropout=0.1,
        max_len=128,
        share_embeddings=True,
    )
    assert (quick.sizes.d_model, quick.sizes.d_ff, quick.sizes.n_encoder_layers, quick.steps) == (64, 128, 1, 30)
    with pytest.raises(dataclasses.FrozenInstanceError):
        translator.CHAPTER7_SIZES.d_model = 512
    with pytest.raises(TypeError, match="n_layers"):
        translator.CHAPTER7_SIZES.replace(n_layers=6)  # the translator counts each side's layers
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        translator.CHAPTER7_SIZES.replace(n_heads=3)
    with pytest.raises(TypeError, match=r"sizes must be a recipes.translator.Sizes .*, got dict"):
        translator.Recipe(
            "multi30k", 10, sizes=dict(d_model=64, n_heads=4, d_ff=128, n_encoder_layers=1, n_decoder_layers=1)
        )


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(corpus="wmt"), "Recipe: corpus must be one of 'multi30k' or 'tatoeba', got 'wmt'"),
        (dict(steps=0), "steps must be a positive int"),
        (dict(vocab_size=2.5), "vocab_size must be a positive int"),
        (dict(train_pairs=0), "train_pairs"),
        (dict(lr=0.0), "lr"),
    ],
)
def test_a_bad_translator_recipe_is_refused_when_made(changes, message):
    with pytest.raises(ValueError, match=message):
        translator.recipe("multi30k", "quick").replace(**changes)


def test_the_translator_recipe_checks_the_steps_its_train_config_takes():
    r = translator.recipe("multi30k", "quick")
    assert r.train_config() == r.train_config(r.steps)
    assert r.warmup_steps == 5 and r.train_config(4).warmup_steps == 2  # shorter than the warm-up
    for bad in (0, -1, 2.5, True):  # 0 is not "the recipe's"
        with pytest.raises(ValueError, match=f"Recipe.train_config: steps must be a positive int, got {bad!r}"):
            r.train_config(bad)


def test_the_translator_functions_name_themselves_in_their_errors():
    """Each public function checks the corpus and steps it is given, under its own name, before
    any work (and its private path checks nothing again)."""
    corpus = "corpus must be one of 'multi30k' or 'tatoeba', got 'wmt'"
    for where, call in (
        ("train", lambda: translator.train("wmt")),
        ("load_or_train", lambda: translator.load_or_train("wmt")),
        ("recipe", lambda: translator.recipe("wmt")),
        ("corpus_splits", lambda: translator.corpus_splits("wmt")),
        ("checkpoint_path", lambda: translator.checkpoint_path(corpus="wmt")),
    ):
        with pytest.raises(ValueError, match=f"^{where}: {corpus}$"):
            call()
    for where, call in (
        ("train", lambda: translator.train(steps=0)),
        ("load_or_train", lambda: translator.load_or_train(steps=0)),
    ):
        with pytest.raises(ValueError, match=f"^{where}: steps must be a positive int, got 0$"):
            call()


def test_the_bert_recipe_keeps_its_sizes_as_typed_fields():
    """BERT's recipe holds its sizes as fields of its own (they are recorded flat in the saved
    files and the stored study); a misspelt one is an error there too."""
    assert bert.Recipe().model_config(4_000) == BERTConfig(
        4_000,
        max_len=128,
        d_model=128,
        n_heads=8,
        n_layers=2,
        dropout=0.0,
        norm_first=True,
        position="alibi",
        eps=1e-12,
    )
    with pytest.raises(TypeError, match="n_layer"):
        bert.Recipe().replace(n_layer=4)
