"""Every chapter's GPU configuration, built and trained for two steps on the CPU, so that an error in
one cannot wait for a GPU to surface: chapter 7's translators (``benchmarks/gpu_recipes.py``'s two
candidates), chapter 9's nanoGPT recipe (:func:`transformer_book.recipes.gpt.recipe` on CUDA),
chapter 12's biLM (the CUDA branch of the chapter's own cell) and chapter 13's
:data:`transformer_book.recipes.bert.GPU_RECIPE`. The models are the GPU's, at their full sizes; the
batches are the CPU's, two or four sequences, since two steps of the GPU's batches would take minutes
here."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_book import data, objectives
from transformer_book.models import GPT, Transformer
from transformer_book.models.elmo import BiLM, BiLMConfig
from transformer_book.recipes import bert as small_bert
from transformer_book.recipes import gpt as gpt_recipes
from transformer_book.recipes import translator as mt
from transformer_book.tokenizers.subword import PAD_ID, SubwordTokenizer
from transformer_book.training import TrainConfig, fit

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("one_thread")


def _two_steps(model: torch.nn.Module, batches, loss_fn, config: TrainConfig | None = None) -> list[float]:
    """Two training steps on the CPU; the losses, after checking that they are finite and that the
    weights moved."""
    config = config or TrainConfig(steps=2, warmup_steps=1, log_every=1, eval_every=100)
    config = dataclasses.replace(config, steps=2, warmup_steps=1, log_every=1, eval_every=100, compile=False)
    before = [p.detach().clone() for p in model.parameters()]
    history = fit(model, batches, loss_fn, config, device="cpu", progress=False)
    losses = [loss for _, loss in history.train_loss]
    assert len(losses) == 2 and all(np.isfinite(losses))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    return losses


def test_chapter_9_trains_nanogpts_model_on_a_gpu():
    recipe = gpt_recipes.recipe("full", "cuda")
    model = GPT(recipe.model_config(65))
    assert sum(p.numel() for p in model.parameters()) > 10_000_000  # nanoGPT's baby GPT, not the CPU's
    ids = torch.randint(0, 65, (5_000,), generator=torch.Generator().manual_seed(0))
    windows = data.RandomWindows(ids, recipe.sizes.context, 2, seed=0)
    _two_steps(model, windows, objectives.language_model_loss(), recipe.train_config(0))


@pytest.mark.parametrize("name", ["chapter 7's sizes", "the base width"])
def test_chapter_7s_gpu_translators(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gpu_recipes import CANDIDATES
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    pairs = mt.corpus_splits("multi30k", profile="quick").train[:300]
    tokenizer = SubwordTokenizer.train([s for pair in pairs for s in pair], vocab_size=300)
    plan = mt.recipe("multi30k", profile="full").replace(sizes=CANDIDATES[name], max_tokens=400)
    model = Transformer(plan.model_config(len(tokenizer)))
    batches = data.BucketedBatches(data.encode_pairs(pairs, tokenizer, max_len=plan.max_len), plan.max_tokens, seed=0)
    _two_steps(model, batches, objectives.seq2seq_loss(pad_id=PAD_ID, smoothing=0.1), plan.train_config())


def test_chapter_13s_gpu_bert():
    documents = [[f"the {w} sat on a mat and then it slept in the sun ." for w in ("cat", "dog", "bird")]] * 12
    r = small_bert.GPU_RECIPE.replace(vocab_size=60, steps=2, batch=4)
    d = small_bert.prepare_data(r, documents, documents[:4])
    model, history = small_bert.train(r, d, device="cpu", progress=False)
    assert (
        model.config.d_model == small_bert.GPU_RECIPE.d_model
        and model.config.n_layers == small_bert.GPU_RECIPE.n_layers
    )
    losses = [loss for _, loss in history.train_loss]
    assert len(losses) == 2 and all(np.isfinite(losses))


def _cuda_branch(notebook: str, marker: str) -> dict:
    """The names the chapter's cell assigns on a GPU: the body of its ``if ... device.type == "cuda":``
    branch, run on its own (it only assigns constants)."""
    cells = json.loads((ROOT / "book" / notebook).read_text(encoding="utf-8"))["cells"]
    source = next("".join(c["source"]) for c in cells if c["cell_type"] == "code" and marker in "".join(c["source"]))
    branch = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and "device.type == 'cuda'" in ast.unparse(node.test)
    )
    namespace: dict = {}
    exec(compile(ast.Module(body=branch.body, type_ignores=[]), notebook, "exec"), namespace)
    return namespace


def test_chapter_12s_gpu_bilm():
    gpu = _cuda_branch("12_contextual_embeddings.ipynb", "LM_SIZES")
    assert gpu["LM_SIZES"]["d_hidden"] > 256  # the GPU's, not the CPU's
    V = 16_000  # above the chapter's largest adaptive-softmax cutoff
    model = BiLM(
        BiLMConfig(V, **gpu["LM_SIZES"], n_layers=2, dropout=gpu["LM_DROPOUT"], cutoffs=(1_000, 5_000, 15_000))
    )
    ids = torch.randint(0, V, (4_000,), generator=torch.Generator().manual_seed(0))
    windows = data.RandomWindows(ids, 35, 2, seed=0)

    def batch(step):
        x, y = windows(step)
        return torch.cat([x, y[:, -1:]], dim=1)

    def loss(model, tokens):
        forward, backward = model.loss(tokens)
        return (forward + backward) / 2, tokens.shape[0] * (tokens.shape[1] - 1)

    _two_steps(model, batch, loss, TrainConfig(steps=2, lr=gpu["LM_LR"], amp=False, clip_norm=1.0, smoothing=0.0))
