"""transformer_book.recipes.gpt: chapter 9's GPT recipe, its time budget, and its one load-or-train."""

import dataclasses

import pytest
import torch

from transformer_book import checkpoints, data, training
from transformer_book.models import BERT, GPT, BERTConfig
from transformer_book.recipes import gpt

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "to be or not to be, that is the question; whether 'tis nobler in the mind to suffer\n" * 40
TINY = gpt.Sizes(context=16, d_model=16, n_heads=2, n_layers=1, dropout=0.0)


def test_the_recipe_is_chapter_9s_optimiser_and_schedule():
    recipe = gpt.Recipe(TINY, batch=4, lr=1e-3, steps=200, warmup_steps=20, budget_s=5.0)
    config = recipe.train_config(seed=3)
    assert (config.schedule, config.min_lr_ratio, config.betas, config.weight_decay) == (
        "cosine",
        0.1,
        (0.9, 0.99),
        0.1,
    )
    assert (config.steps, config.warmup_steps, config.lr, config.time_budget_s, config.seed) == (200, 20, 1e-3, 5.0, 3)
    assert (config.eval_every, config.log_every, config.smoothing, config.clip_norm) == (20, 4, 0.0, 1.0)
    assert recipe.model_config(30) == gpt.GPTConfig(30, context=16, d_model=16, n_heads=2, n_layers=1, dropout=0.0)
    assert gpt.recipe("full").sizes == gpt.LONG_SIZES and gpt.recipe("full").budget_s == 600.0


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(batch=0), "batch must be a positive int"),
        (dict(steps=2.5), "steps must be a positive int"),
        (dict(warmup_steps=-1), "warmup_steps must be a non-negative int"),
        (dict(lr=float("nan")), "lr"),
        (dict(budget_s=0.0), "budget_s"),
    ],
)
def test_a_bad_recipe_is_refused_when_made(change, message):
    with pytest.raises(ValueError, match=message):
        gpt.Recipe(**{**dict(sizes=TINY), **change})


def test_sizes_are_typed_and_checked_when_made():
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        TINY.replace(n_heads=3)
    with pytest.raises(ValueError, match="dropout must lie in"):
        TINY.replace(dropout=1.5)
    with pytest.raises(TypeError, match="n_layer"):
        TINY.replace(n_layer=2)  # a misspelt size is an error, not ignored
    with pytest.raises(TypeError, match="sizes must be a recipes.gpt.Sizes"):
        gpt.Recipe(dict(context=16, d_model=16, n_heads=2, n_layers=1, dropout=0.0))


def test_filling_sets_the_steps_that_fill_the_budget(monkeypatch):
    monkeypatch.setattr(training, "seconds_per_step", lambda *args, **kwargs: 1 / 64)
    filled = gpt.Recipe(TINY, batch=4).filling(30.0, 20, device="cpu")
    assert (filled.steps, filled.warmup_steps, filled.budget_s) == (1862, 100, 30.0)  # 97% of 30 s at 64 steps a second
    short = gpt.Recipe(TINY, batch=4).filling(0.5, 20, device="cpu")
    assert (short.steps, short.warmup_steps) == (31, 3)
    assert dataclasses.replace(filled, steps=2_000, warmup_steps=100, budget_s=None) == gpt.Recipe(TINY, batch=4)


def test_filling_times_a_real_step():
    filled = gpt.Recipe(TINY, batch=4).filling(1.0, 20, device="cpu")
    assert filled.steps >= 20 and filled.budget_s == 1.0


def test_train_is_seeded_and_learns():
    corpus = data.char_corpus(TEXT)
    val = gpt.validation_batches(corpus.val_ids, TINY.context, n_batches=2, batch=4)
    recipe = gpt.Recipe(TINY, batch=8, lr=3e-3, steps=60, warmup_steps=5)
    first = gpt.train(recipe, corpus.train_ids, val, corpus.vocab_size, device="cpu", name="tiny")
    again = gpt.train(recipe, corpus.train_ids, val, corpus.vocab_size, device="cpu", name="tiny")
    assert first.summary["val_loss"] == again.summary["val_loss"] and first.summary["steps"] == 60
    assert first.history.val_loss[0][1] > first.summary["val_loss"] + 0.5  # it learned the repeated line
    assert first.summary["parameters"] == sum(p.numel() for p in first.model.parameters()) and not first.model.training
    assert first.summary["tokens_per_s"] == pytest.approx(60 * 8 * 16 / first.summary["seconds"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        gpt.train(recipe, corpus.train_ids, val, corpus.vocab_size - 1, device="cpu")
    with pytest.raises(
        ValueError, match=r"train_ids must be a \(N\) integer tensor, got shape .*, dtype torch.float32"
    ):
        gpt.train(recipe, corpus.train_ids.float(), val, corpus.vocab_size, device="cpu")


def test_train_and_filling_take_another_model():
    corpus = data.char_corpus(TEXT)
    val = gpt.validation_batches(corpus.val_ids, TINY.context, n_batches=2, batch=4)
    recipe = gpt.Recipe(TINY, batch=8, lr=3e-3, steps=5, warmup_steps=1)
    built = []

    def build():
        built.append(torch.rand(1).item())  # drawn after the seed: the same each run
        return GPT(TINY.replace(n_layers=2).model_config(corpus.vocab_size))

    first = gpt.train(recipe, corpus.train_ids, val, corpus.vocab_size, device="cpu", build=build)
    again = gpt.train(recipe, corpus.train_ids, val, corpus.vocab_size, device="cpu", build=build)
    assert len(first.model.blocks.layers) == 2 and built[0] == built[1]
    assert first.summary["val_loss"] == again.summary["val_loss"]
    filled = recipe.filling(0.5, corpus.vocab_size, device="cpu", model=first.model)
    assert filled.steps >= 20


@pytest.fixture
def small_shakespeare(monkeypatch, tmp_path):
    monkeypatch.setenv("TB_PROFILE", "quick")
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data, "load_tiny_shakespeare", lambda **kwargs: data.char_corpus(TEXT))
    monkeypatch.setattr(gpt, "recipe", lambda profile=None: gpt.Recipe(TINY, batch=4, budget_s=0.3))


def test_trains_once_then_loads(small_shakespeare, tmp_path):
    path = gpt.checkpoint_path()
    assert path == tmp_path / "cache" / "checkpoints" / "09_language_model-quick.pt"
    model, corpus, info = gpt.load_or_train(device="cpu")
    assert info["source"] == "trained" and path.exists() and isinstance(model, GPT) and not model.training
    again, corpus2, info2 = gpt.load_or_train(device="cpu")
    assert info2["source"] == "loaded" and info2["val_loss"] == info["val_loss"] and corpus2.chars == corpus.chars
    x = corpus.encode("to be or not")[None]
    torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)


def test_load_or_train_refuses_another_model_or_vocabulary(small_shakespeare, tmp_path):
    bert = checkpoints.save_model(
        tmp_path / "bert.pt", BERT(BERTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16))
    )
    with pytest.raises(ValueError, match=r"bert.pt holds a BERT with no tokenizer, not a GPT with no tokenizer"):
        gpt.load_or_train(path=bert, device="cpu")
    other = data.char_corpus("abcdefghij" * 100)
    model = GPT(TINY.model_config(other.vocab_size))
    path = checkpoints.save_model(tmp_path / "other.pt", model, metadata={"chars": "".join(other.chars)})
    with pytest.raises(ValueError, match="another character vocabulary"):
        gpt.load_or_train(path=path, device="cpu")


def test_save_then_load_or_train_round_trips(small_shakespeare, tmp_path):
    """What chapter 9 does: train, save with gpt.save, and a later chapter's load_or_train reads it back."""
    corpus = data.char_corpus(TEXT)
    val = gpt.validation_batches(corpus.val_ids, TINY.context, n_batches=2, batch=4)
    run = gpt.train(
        gpt.Recipe(TINY, batch=4, lr=3e-3, steps=3, warmup_steps=1),
        corpus.train_ids,
        val,
        corpus.vocab_size,
        device="cpu",
        progress=False,
    )
    path = gpt.save(run.model, corpus, run.summary)
    assert path == gpt.checkpoint_path() == tmp_path / "cache" / "checkpoints" / "09_language_model-quick.pt"
    model, loaded_corpus, info = gpt.load_or_train(device="cpu")
    assert info == {"chars": "".join(corpus.chars), **run.summary, "source": "loaded", "path": str(path)}
    assert model.config == run.model.config and loaded_corpus.chars == corpus.chars
    saved = run.model.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    elsewhere = gpt.save(run.model, corpus, run.summary, path=tmp_path / "elsewhere.pt")
    assert gpt.load_or_train(path=elsewhere, device="cpu")[2]["source"] == "loaded"
    with pytest.raises(ValueError, match="model must be a GPT, got BERT"):
        gpt.save(BERT(BERTConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=16)), corpus, {})
    with pytest.raises(ValueError, match="the corpus has 10 characters"):
        gpt.save(run.model, data.char_corpus("abcdefghij" * 100), run.summary, path=tmp_path / "other.pt")


def test_the_gpu_recipe_is_nanogpts_and_the_cpu_keeps_its_ten_minutes():
    # chapter 9 asks recipe(device=...) for its longer run: on CUDA (full profile) nanoGPT's baby GPT
    # for a fixed 5,000 steps, on the CPU ten minutes of the chapter's own sizes; quick is quick anywhere
    on_gpu = gpt.recipe("full", "cuda")
    assert on_gpu.sizes == gpt.NANOGPT_GPU_SIZES and (on_gpu.batch, on_gpu.lr, on_gpu.steps) == (64, 1e-3, 5_000)
    assert on_gpu.budget_s is None
    assert gpt.recipe("full", "cpu") == gpt.recipe("full") and gpt.recipe("full").budget_s == 600.0
    assert gpt.recipe("quick", "cuda") == gpt.recipe("quick") and gpt.recipe("quick").sizes == gpt.TINY_SIZES
    config = on_gpu.model_config(65)
    assert (config.n_layers, config.d_model, config.n_heads, config.context) == (6, 384, 6, 256)
