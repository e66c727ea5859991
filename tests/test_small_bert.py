"""Tests of transformer_book.recipes.bert, chapter 13's BERT: the recipes (per profile and device,
the study's variants), the data and training of a tiny recipe, the stored compute study, the
optimisation settings, where the checkpoint lives, and loading a saved model (never the full
pretraining branch, which the tests forbid by patching it away)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_book import checkpoints, training
from transformer_book.models import Transformer, TransformerConfig
from transformer_book.models.bert import BERT, BERTConfig, evaluate_pretraining
from transformer_book.recipes import bert as small_bert
from transformer_book.recipes.bert import (
    FIRST_EDITION,
    GPU_RECIPE,
    INPUTS,
    MAX_LEN,
    ROUNDS,
    STARTING_POINT,
    Recipe,
    checkpoint_path,
    load_or_train,
    load_study,
    prepare_data,
    recipe,
    save,
    seconds_per_step,
    study_path,
    study_recipes,
    train,
    train_config,
    unigram_cross_entropy,
    validation_batches,
    validation_mlm,
)
from transformer_book.tokenizers.wordpiece import WordPieceTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_recipe_per_device_and_profile():
    quick = recipe("cpu", "quick")
    assert (quick.d_model, quick.n_layers, quick.vocab_size, quick.n_documents, quick.steps) == (32, 1, 2_000, 150, 20)
    assert recipe("cuda", "quick") == quick == recipe(torch.device("cuda:0"), "quick")
    assert recipe("cpu", "full") == Recipe() == recipe(torch.device("cpu"), "full")
    # on a GPU the chapters' model stays the one chapters 14, 15 and 20 were written for
    assert recipe("cuda", "full") == recipe("cuda:1", "full") == Recipe()
    gpu = GPU_RECIPE
    assert gpu.d_model == 256 and gpu.n_layers == 4 and gpu.batch == 128
    with pytest.raises(RuntimeError):
        recipe("gpu", "full")  # not a device name
    for r in (quick, Recipe(), gpu):
        BERT(r.model_config(r.vocab_size))  # every recipe makes a valid model
    assert MAX_LEN == 128


def test_recipe_defaults_to_the_current_profile(monkeypatch):
    monkeypatch.setenv("TB_PROFILE", "quick")
    assert recipe("cpu") == recipe("cpu", "quick")
    monkeypatch.setenv("TB_PROFILE", "full")
    assert recipe("cpu") == Recipe() and recipe("cuda") == recipe("cuda", "full")


def test_the_chosen_recipe_and_the_first_editions():
    chosen = Recipe()
    assert (chosen.position, chosen.norm_first, chosen.dropout, chosen.inputs, chosen.select_prob) == (
        "alibi",
        True,
        0.0,
        "text",
        0.3,
    ) and not chosen.nsp
    assert (chosen.vocab_size, chosen.lr) == (STARTING_POINT.vocab_size // 2, STARTING_POINT.lr * 2)
    assert (
        FIRST_EDITION.position,
        FIRST_EDITION.norm_first,
        FIRST_EDITION.dropout,
        FIRST_EDITION.inputs,
        FIRST_EDITION.select_prob,
    ) == ("learned", False, 0.1, "sentence pairs", 0.15) and FIRST_EDITION.nsp
    config = chosen.model_config(1234)
    assert (config.vocab_size, config.max_len, config.position, config.norm_first, config.n_heads) == (
        1234,
        MAX_LEN,
        "alibi",
        True,
        8,
    )


def test_the_study_changes_one_choice_at_a_time_then_combines_the_winners():
    recipes = study_recipes()
    assert sum(ROUNDS.values()) == len(recipes) and len(set(recipes.values())) == len(recipes)
    names = list(recipes)
    first, second = names[: ROUNDS["first"]], names[ROUNDS["first"] :]
    base = recipes["starting point"]
    assert base == STARTING_POINT and recipes["first edition"] == FIRST_EDITION

    def changed(r):
        return {f for f in dataclasses.asdict(base) if getattr(r, f) != getattr(base, f)}

    for name in first:
        if name not in ("starting point", "first edition"):
            assert changed(recipes[name]) in ({"max_len", "batch"},) or len(changed(recipes[name])) == 1, name
    for name in second:  # each change of a second-round recipe was tried alone first
        r = recipes[name]
        for field in changed(r):
            assert any(
                changed(recipes[n]) == {field} and getattr(recipes[n], field) == getattr(r, field) for n in first
            )
    assert Recipe() in [recipes[n].replace(steps=Recipe().steps) for n in names]


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(d_model=0), "d_model must be a positive int"),
        (dict(position="rope"), "position must be one of"),
        (dict(inputs="pairs"), "inputs must be one of"),
        (dict(select_prob=0.0), r"select_prob must lie in \(0, 1\)"),
        (dict(max_len=256), r"max_len must lie in \[8, 128\]"),
        (dict(lr=0.0), "Recipe: lr must be a finite real > 0, got 0.0"),
        (dict(n_documents=1), "Recipe: n_documents must be an int >= 2, got 1"),
        (dict(n_heads=3), "not divisible"),
        (dict(steps=True), "steps must be a positive int"),
    ],
)
def test_recipe_errors(changes, match):
    with pytest.raises(ValueError, match=match):
        Recipe(**changes)


def small_documents(n=12):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "and", "then", "slept", "in", "sun"]
    return [
        [" ".join(rng.choice(words, size=int(rng.integers(3, 9)))) + " ." for _ in range(int(rng.integers(3, 8)))]
        for _ in range(n)
    ]


@pytest.mark.parametrize("inputs", INPUTS)
def test_prepare_and_pretrain_a_tiny_recipe(inputs):
    r = Recipe(d_model=16, n_heads=2, n_layers=1, vocab_size=60, max_len=24, inputs=inputs, batch=4, steps=6)
    d = prepare_data(r, small_documents(), small_documents(4))
    V = len(d.tokenizer)
    assert 5 < V <= 60 and d.piece_counts.shape == (V,) and d.piece_counts[:5].sum() == 0
    assert (d.train.lengths <= 24).all() and ((d.train.first_lengths == d.train.lengths).all() == (inputs == "text"))
    valid = validation_batches(d, batch=4)
    again = validation_batches(d, batch=4)
    assert all(torch.equal(a.targets, b.targets) for a, b in zip(valid, again))  # masked once, fixed seed
    selected = sum(int((b.targets != -100).sum()) for b in valid)
    maskable = sum(int(((b.tokens > 4) | (b.targets != -100)).sum()) for b in valid)
    assert 0.05 < selected / maskable < 0.3  # BERT's 15%, whatever r says
    log = []
    model, history = train(r, d, device="cpu", val_batches=valid, eval_every=3, log=log, progress=False)
    assert isinstance(model, BERT) and history.train_loss[-1][0] == 6 and len(history.val_loss) == 2
    curve = validation_mlm(log, history)
    assert [step for step, _ in curve] == [3, 6]
    final = evaluate_pretraining(model, valid, nsp=r.nsp)
    assert curve[-1][1] == pytest.approx(final["mlm_loss"], rel=1e-5)
    assert seconds_per_step(r, d, device="cpu", steps=2, warmup=1) > 0


def test_unigram_cross_entropy_by_hand():
    r = Recipe(d_model=16, n_heads=2, n_layers=1, vocab_size=60, max_len=24, batch=4)
    d = prepare_data(r, small_documents(), small_documents(4))
    valid = validation_batches(d, batch=4)
    counts = d.piece_counts.astype(float) + 1
    counts[:5] = 0
    targets = [int(t) for b in valid for t in b.targets.flatten() if t != -100]
    expected = -sum(math.log(counts[t] / counts.sum()) for t in targets) / len(targets)
    assert unigram_cross_entropy(d, valid) == pytest.approx(expected)


def test_validation_mlm_refuses_a_log_of_another_run():
    history = training.History(val_loss=[(3, 1.0)])
    with pytest.raises(ValueError, match="the log holds 0 validations, the history 1"):
        validation_mlm([{"training": True, "mlm": 1.0, "n_predictions": 2}], history)


def test_the_study_is_written_where_it_is_read():
    """`python -m transformer_book.recipes.bert study` writes the file that chapter 13's
    load_study() reads (it once wrote beside recipes/bert.py, where nothing read it)."""
    import transformer_book

    assert study_path() == Path(transformer_book.__file__).resolve().parent / "studies" / "13_pretraining_study.json"
    assert study_path().is_file() and load_study() == load_study(study_path())


def test_the_shipped_study_is_complete_and_ranks_the_chosen_recipe_first():
    """The measurements chapter 13 plots: every recipe of the study ran for the same time on one
    machine, and the recipe the chapter trains is the one that ended furthest below the unigram."""
    study = load_study()
    runs = {run["name"]: run for run in study["runs"]}
    assert set(runs) == set(study_recipes())
    for name, run in runs.items():
        assert Recipe(**run["recipe"]).replace(steps=Recipe().steps) == study_recipes()[name].replace(
            steps=Recipe().steps
        )
        assert run["recipe"]["steps"] == max(10, int(study["budget_s"] / run["seconds_per_step"]))
        steps = [step for step, _ in run["val_mlm"]]
        assert steps == sorted(steps) and steps[-1] == run["recipe"]["steps"]
    gaps = {name: run["final_unigram_loss"] - run["final_mlm_loss"] for name, run in runs.items()}
    (chosen,) = [name for name, r in study_recipes().items() if r.replace(steps=Recipe().steps) == Recipe()]
    assert max(gaps, key=gaps.get) == chosen


@pytest.mark.parametrize(
    "steps, warmup, eval_every, log_every",
    [
        (1000, 100, 125, 10),
        (5000, 300, 625, 50),
        (2999, 299, 374, 29),
        (20, 2, 2, 1),
        (16, 1, 2, 1),
        (2, 1, 1, 1),
    ],
)
def test_train_config_of_chapter_13(steps, warmup, eval_every, log_every):
    config = train_config(steps, 3e-4, 60.0)
    assert (config.steps, config.warmup_steps, config.eval_every, config.log_every) == (
        steps,
        warmup,
        eval_every,
        log_every,
    )
    assert config.lr == 3e-4 and config.time_budget_s == 60.0 and config.seed == 0
    assert config.betas == (0.9, 0.999) and config.weight_decay == 0.01 and config.clip_norm == 1.0
    assert config.schedule == "cosine"
    assert train_config(steps, 1e-3).time_budget_s is None


@pytest.mark.parametrize("steps", range(1, 13))
def test_train_config_is_valid_for_every_step_count_that_load_or_train_accepts(steps):
    """``load_or_train`` accepts any positive ``steps`` and passes it here: each must give a
    config that ``fit`` can run (a cosine schedule warms up over fewer steps than it has)."""
    config = train_config(steps, 1e-3)
    assert 0 <= config.warmup_steps < steps


def test_train_config_refuses_a_step_count_under_its_own_name():
    for bad in (0, -5, 2.0, True):  # 0 would otherwise reach TrainConfig as a warm-up of -1 steps
        with pytest.raises(ValueError, match=f"^train_config: steps must be a positive int, got {bad!r}$"):
            train_config(bad, 1e-3)


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
        raise AssertionError("load_or_train started pretraining")

    monkeypatch.setattr(small_bert.pretraining, "wikitext2_documents", forbidden)
    monkeypatch.setattr(small_bert.training, "fit", forbidden)
    monkeypatch.setattr(small_bert.WordPieceTokenizer, "train", forbidden)


def tiny_saved_bert(path):
    tokenizer = WordPieceTokenizer.train(["the cat sat on the mat .", "a dog ran ."] * 3, vocab_size=40)
    torch.manual_seed(0)
    model = BERT(BERTConfig(len(tokenizer), max_len=16, d_model=16, n_heads=2, n_layers=1, dropout=0.0))
    checkpoints.save_model(path, model, tokenizer=tokenizer, metadata={"mlm_loss": 3.5, "steps": 7})
    return model, tokenizer


@pytest.mark.parametrize("as_str", [False, True])
def test_load_or_train_loads_an_existing_file(tmp_path, monkeypatch, as_str):
    path = tmp_path / "bert.pt"
    model, tokenizer = tiny_saved_bert(path)
    forbid_pretraining(monkeypatch)
    loaded, loaded_tokenizer, metadata = load_or_train(
        steps=5, device="cpu", path=str(path) if as_str else path, progress=False
    )
    assert type(loaded) is BERT and loaded.config == model.config and not loaded.training
    saved = model.state_dict()
    assert loaded.state_dict().keys() == saved.keys()
    assert all(torch.equal(v, saved[k]) for k, v in loaded.state_dict().items())
    assert isinstance(loaded_tokenizer, WordPieceTokenizer) and loaded_tokenizer.to_str() == tokenizer.to_str()
    assert metadata == {"mlm_loss": 3.5, "steps": 7, "source": "loaded", "path": str(path)}
    assert next(loaded.parameters()).device.type == "cpu"


def test_load_or_train_reads_the_profiles_checkpoint_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TB_PROFILE", "quick")
    path = tmp_path / "checkpoints" / "13_bert_pretraining-quick.pt"
    tiny_saved_bert(path)
    forbid_pretraining(monkeypatch)
    _, _, metadata = load_or_train(steps=1, device="cpu", progress=False)
    assert metadata["source"] == "loaded" and metadata["path"] == str(path)


def test_load_or_train_refuses_a_file_of_another_model(tmp_path, monkeypatch):
    path = tmp_path / "transformer.pt"
    tokenizer = WordPieceTokenizer.train(["the cat sat ."] * 3, vocab_size=30)
    model = Transformer(
        TransformerConfig(30, 30, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, max_len=16)
    )
    checkpoints.save_model(path, model, tokenizer=tokenizer)
    forbid_pretraining(monkeypatch)
    with pytest.raises(
        ValueError,
        match="load_or_train: .*transformer.pt holds a Transformer with a "
        "WordPieceTokenizer, not a BERT with a WordPieceTokenizer",
    ):
        load_or_train(steps=5, device="cpu", path=path, progress=False)
    # a BERT saved without its tokenizer is refused too
    bert = BERT(BERTConfig(30, max_len=16, d_model=16, n_heads=2, n_layers=1))
    checkpoints.save_model(path, bert)
    with pytest.raises(ValueError, match="holds a BERT with no tokenizer, not a BERT with a WordPieceTokenizer"):
        load_or_train(steps=5, device="cpu", path=path, progress=False)


@pytest.mark.parametrize("steps", [0, -3, True, False, 1.5, 10.0, "10"])
def test_load_or_train_rejects_bad_steps_before_anything_else(tmp_path, monkeypatch, steps):
    path = tmp_path / "absent.pt"
    forbid_pretraining(monkeypatch)
    with pytest.raises(ValueError, match=r"load_or_train: steps must be a positive int, got "):
        load_or_train(steps=steps, device="cpu", path=path, progress=False)
    assert not path.exists()


def test_continue_pretraining_trains_a_copy_on_the_task_text():
    r = Recipe(d_model=16, n_heads=2, n_layers=1, vocab_size=60, max_len=24, batch=4, steps=6)
    d = prepare_data(r, small_documents(), small_documents(4))
    torch.manual_seed(0)
    model = BERT(r.model_config(len(d.tokenizer)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    texts = ["the cat sat on a mat .", "a dog ran far and then slept in the sun ."] * 10
    adapted, history = small_bert.continue_pretraining(
        model, d.tokenizer, texts, steps=5, r=r, device="cpu", progress=False
    )
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the original is untouched
    assert any(not torch.equal(v, before[k]) for k, v in adapted.state_dict().items())
    assert history.train_loss[-1][0] == 5 and not adapted.training
    with pytest.raises(ValueError, match="steps must be a positive int"):
        small_bert.continue_pretraining(model, d.tokenizer, texts, steps=0, r=r)
    with pytest.raises(ValueError, match="texts must be a non-empty list"):
        small_bert.continue_pretraining(model, d.tokenizer, [], steps=2, r=r)


def test_run_study_times_each_recipe_and_runs_it_for_the_budget(tmp_path):
    tiny = Recipe(d_model=16, n_heads=2, n_layers=1, vocab_size=60, max_len=24, batch=4)
    documents = (small_documents(), small_documents(4))
    output = tmp_path / "study.json"
    study = small_bert.run_study(0.05, recipes={"tiny": tiny}, documents=documents, output=output, evaluations=2)
    assert load_study(output) == study and study["budget_s"] == 0.05
    (run,) = study["runs"]
    assert run["name"] == "tiny" and run["recipe"]["steps"] == max(2, int(0.05 / run["seconds_per_step"]))
    assert [step for step, _ in run["val_mlm"]][-1] == run["recipe"]["steps"]
    assert run["final_nsp_accuracy"] is None and run["parameters"] > 0
    # measure one recipe again: the others stay
    again = small_bert.run_study(
        0.05,
        recipes={"learned": tiny.replace(position="learned")},
        documents=documents,
        output=output,
        evaluations=2,
        merge=True,
    )
    assert [r["name"] for r in again["runs"]] == ["tiny", "learned"] and again["runs"][0] == run
    # a recipe whose step computes what a kept run's does is held to that run's clock
    faster = small_bert.run_study(
        0.05,
        recipes={"tiny, lr 1e-2": tiny.replace(lr=1e-2)},
        documents=documents,
        output=output,
        evaluations=2,
        merge=True,
    )
    assert faster["runs"][-1]["seconds_per_step"] == run["seconds_per_step"]
    assert faster["runs"][-1]["recipe"]["steps"] == run["recipe"]["steps"]
    assert again["runs"][1]["seconds_per_step"] != run["seconds_per_step"]  # timed anew: another model
    with pytest.raises(ValueError, match="holds runs of 0.05 s, not 0.1 s"):
        small_bert.run_study(0.1, recipes={"tiny": tiny}, documents=documents, output=output, merge=True)
    with pytest.raises(ValueError, match="unknown recipes"):
        small_bert.run_study(1.0, names=["no such recipe"], output=output)


def test_save_then_load_or_train_round_trips(tmp_path, monkeypatch):
    """What chapter 13 does: pretrain a recipe, save it with its tokenizer and recipe; what
    chapter 14 does: load it with load_or_train and rebuild the recipe from the metadata."""
    monkeypatch.setenv("TB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TB_PROFILE", "quick")
    r = Recipe(d_model=16, n_heads=2, n_layers=1, vocab_size=60, max_len=24, batch=4, steps=3)
    d = prepare_data(r, small_documents(), small_documents(4))
    model, history = train(r, d, device="cpu", progress=False)
    measured = {"steps": history.train_loss[-1][0], "mlm_loss": 3.5}
    path = save(model, d.tokenizer, measured, r=r)
    assert path == checkpoint_path() == tmp_path / "checkpoints" / "13_bert_pretraining-quick.pt"
    forbid_pretraining(monkeypatch)
    loaded, tokenizer, metadata = load_or_train(device="cpu", progress=False)
    assert metadata == {
        "steps": 3,
        "mlm_loss": 3.5,
        "recipe": dataclasses.asdict(r),
        "source": "loaded",
        "path": str(path),
    }
    assert Recipe(**metadata["recipe"]) == r and tokenizer.to_str() == d.tokenizer.to_str()
    saved = model.state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in loaded.state_dict().items())
    with pytest.raises(ValueError, match="metadata holds a 'recipe'"):
        save(model, d.tokenizer, {"recipe": {}}, r=r, path=tmp_path / "x.pt")
    with pytest.raises(ValueError, match="r must be a recipes.bert.Recipe, got dict"):
        save(model, d.tokenizer, {}, r=dataclasses.asdict(r), path=tmp_path / "x.pt")
    with pytest.raises(ValueError, match="model must be a BERT, got Transformer"):
        save(
            Transformer(
                TransformerConfig(
                    30, 30, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, max_len=16
                )
            ),
            d.tokenizer,
            {},
            r=r,
            path=tmp_path / "x.pt",
        )
    assert not (tmp_path / "x.pt").exists()
