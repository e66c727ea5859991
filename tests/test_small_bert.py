"""Tests of transformer_book.small_bert, chapter 13's BERT for the later chapters: the recipe
per profile and device, the optimisation settings, where the checkpoint lives, and loading a
saved model (never the pretraining branch, which the tests forbid by patching it away)."""

from __future__ import annotations

import pytest
import torch

from transformer_book import small_bert, training
from transformer_book.models import Transformer, TransformerConfig
from transformer_book.models.bert import BERT, BERTConfig
from transformer_book.small_bert import MAX_LEN, checkpoint_path, load_or_pretrain, recipe, train_config
from transformer_book.wordpiece import WordPieceTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = dict(sizes=dict(d_model=32, n_heads=2, n_layers=1), batch=16, budget_s=3.0, lr=1e-3, vocab_size=2_000,
             n_documents=150)
FULL_GPU = dict(sizes=dict(d_model=256, n_heads=4, n_layers=4), batch=128, budget_s=600.0, lr=1e-3, vocab_size=8_000,
                n_documents=None)
FULL_CPU = dict(sizes=dict(d_model=128, n_heads=2, n_layers=2), batch=32, budget_s=1200.0, lr=1e-3, vocab_size=8_000,
                n_documents=None)


def fields(r) -> dict:
    return dict(sizes=r.sizes, batch=r.batch, budget_s=r.budget_s, lr=r.lr, vocab_size=r.vocab_size,
                n_documents=r.n_documents)


@pytest.mark.parametrize("device, profile, expected", [
    ("cpu", "quick", QUICK), ("cuda", "quick", QUICK), (torch.device("cuda:0"), "quick", QUICK),
    ("cpu", "full", FULL_CPU), (torch.device("cpu"), "full", FULL_CPU),
    ("cuda", "full", FULL_GPU), (torch.device("cuda:0"), "full", FULL_GPU), ("cuda:1", "full", FULL_GPU),
])
def test_recipe_per_device_and_profile(device, profile, expected):
    r = recipe(device, profile)
    assert fields(r) == expected
    BERTConfig(r.vocab_size, max_len=MAX_LEN, **r.sizes)  # the sizes make a valid model
    assert MAX_LEN == 128


def test_recipe_defaults_to_the_current_profile(monkeypatch):
    monkeypatch.setenv("TB_PROFILE", "quick")
    assert fields(recipe("cpu")) == QUICK and fields(recipe("cuda")) == QUICK
    monkeypatch.setenv("TB_PROFILE", "full")
    assert fields(recipe("cpu")) == FULL_CPU and fields(recipe("cuda")) == FULL_GPU
    monkeypatch.delenv("TB_PROFILE")
    assert fields(recipe("cuda")) == FULL_GPU


@pytest.mark.parametrize("steps, warmup, eval_every, log_every", [
    (1000, 100, 125, 10), (5000, 300, 625, 50), (2999, 299, 374, 29), (20, 2, 2, 1), (16, 1, 2, 1), (2, 1, 1, 1),
])
def test_train_config_of_chapter_13(steps, warmup, eval_every, log_every):
    config = train_config(steps, 3e-4, 60.0)
    assert (config.steps, config.warmup_steps, config.eval_every, config.log_every) == (steps, warmup, eval_every,
                                                                                        log_every)
    assert config.lr == 3e-4 and config.time_budget_s == 60.0 and config.seed == 0
    assert config.betas == (0.9, 0.999) and config.weight_decay == 0.01 and config.clip_norm == 1.0
    assert config.schedule == "cosine"
    assert train_config(steps, 1e-3).time_budget_s is None


@pytest.mark.parametrize("steps", range(1, 13))
def test_train_config_is_valid_for_every_step_count_that_load_or_pretrain_accepts(steps):
    """``load_or_pretrain`` accepts any positive ``steps`` and passes it here: each must give a
    config that ``fit`` can run (a cosine schedule warms up over fewer steps than it has)."""
    config = train_config(steps, 1e-3)
    assert 0 <= config.warmup_steps < steps


def test_checkpoint_path_is_per_profile_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path))
    assert checkpoint_path("quick") == tmp_path / "checkpoints" / "13_bert_pretraining-quick.pt"
    assert checkpoint_path("full") == tmp_path / "checkpoints" / "13_bert_pretraining-full.pt"
    monkeypatch.setenv("TB_PROFILE", "quick")
    assert checkpoint_path() == tmp_path / "checkpoints" / "13_bert_pretraining-quick.pt"
    monkeypatch.setenv("TB_PROFILE", "full")
    assert checkpoint_path() == tmp_path / "checkpoints" / "13_bert_pretraining-full.pt"
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "other"))
    assert checkpoint_path("quick") == tmp_path / "other" / "checkpoints" / "13_bert_pretraining-quick.pt"


def forbid_pretraining(monkeypatch):
    """From here on, any attempt to pretrain fails the test at once."""
    def forbidden(*args, **kwargs):
        raise AssertionError("load_or_pretrain started pretraining")

    monkeypatch.setattr(small_bert.pretraining, "wikitext2_documents", forbidden)
    monkeypatch.setattr(small_bert.training, "fit", forbidden)
    monkeypatch.setattr(small_bert.WordPieceTokenizer, "train", forbidden)


def tiny_saved_bert(path):
    tokenizer = WordPieceTokenizer.train(["the cat sat on the mat .", "a dog ran ."] * 3, vocab_size=40)
    torch.manual_seed(0)
    model = BERT(BERTConfig(len(tokenizer), max_len=16, d_model=16, n_heads=2, n_layers=1, dropout=0.0))
    training.save_model(path, model, tokenizer=tokenizer, metadata={"mlm_loss": 3.5, "steps": 7})
    return model, tokenizer


@pytest.mark.parametrize("as_str", [False, True])
def test_load_or_pretrain_loads_an_existing_file(tmp_path, monkeypatch, as_str):
    path = tmp_path / "bert.pt"
    model, tokenizer = tiny_saved_bert(path)
    forbid_pretraining(monkeypatch)
    loaded, loaded_tokenizer, metadata = load_or_pretrain(steps=5, device="cpu", path=str(path) if as_str else path,
                                                          progress=False)
    assert type(loaded) is BERT and loaded.config == model.config and not loaded.training
    saved = model.state_dict()
    assert loaded.state_dict().keys() == saved.keys()
    assert all(torch.equal(v, saved[k]) for k, v in loaded.state_dict().items())
    assert isinstance(loaded_tokenizer, WordPieceTokenizer) and loaded_tokenizer.to_str() == tokenizer.to_str()
    assert metadata == {"mlm_loss": 3.5, "steps": 7, "source": "loaded", "path": str(path)}
    assert next(loaded.parameters()).device.type == "cpu"


def test_load_or_pretrain_reads_the_profiles_checkpoint_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TB_PROFILE", "quick")
    path = tmp_path / "checkpoints" / "13_bert_pretraining-quick.pt"
    tiny_saved_bert(path)
    forbid_pretraining(monkeypatch)
    _, _, metadata = load_or_pretrain(steps=1, device="cpu", progress=False)
    assert metadata["source"] == "loaded" and metadata["path"] == str(path)


def test_load_or_pretrain_refuses_a_file_of_another_model(tmp_path, monkeypatch):
    path = tmp_path / "transformer.pt"
    tokenizer = WordPieceTokenizer.train(["the cat sat ."] * 3, vocab_size=30)
    model = Transformer(TransformerConfig(30, 30, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                          n_decoder_layers=1, max_len=16))
    training.save_model(path, model, tokenizer=tokenizer)
    forbid_pretraining(monkeypatch)
    with pytest.raises(ValueError, match="load_or_pretrain: .*transformer.pt holds a Transformer with "
                                         "WordPieceTokenizer, not a BERT with its WordPieceTokenizer"):
        load_or_pretrain(steps=5, device="cpu", path=path, progress=False)
    # a BERT saved without its tokenizer is refused too
    bert = BERT(BERTConfig(30, max_len=16, d_model=16, n_heads=2, n_layers=1))
    training.save_model(path, bert)
    with pytest.raises(ValueError, match="holds a BERT with NoneType, not a BERT with its WordPieceTokenizer"):
        load_or_pretrain(steps=5, device="cpu", path=path, progress=False)


@pytest.mark.parametrize("steps", [0, -3, True, False, 1.5, 10.0, "10", None])
def test_load_or_pretrain_rejects_bad_steps_before_anything_else(tmp_path, monkeypatch, steps):
    path = tmp_path / "absent.pt"
    forbid_pretraining(monkeypatch)
    with pytest.raises(ValueError, match=r"load_or_pretrain: steps must be a positive int, got "):
        load_or_pretrain(steps=steps, device="cpu", path=path, progress=False)
    assert not path.exists()
