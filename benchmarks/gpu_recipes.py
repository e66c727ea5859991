"""The chapters' recipes on a GPU: chapter 7's Multi30k translator and chapter 13's BERT.

    python benchmarks/gpu_recipes.py [--output-dir book/results/cuda] [--translator-budget 140]
                                     [--bert-budget 150] [--deadline 520] [--only translator bert]

Chapter 7 trains its translator for 650 steps of 3,000 padded positions on two CPU cores (3.8
passes over Multi30k's training pairs). On a GPU the same recipe can run to convergence: this script trains
two candidates for at most ``--translator-budget`` seconds each (at most 3,000 steps of 6,000
padded positions, 93 of them a pass), the chapter's sizes and the base Transformer's width (512, 8 heads,
feed-forward 2,048, three layers each side), picks the one with the lower validation loss (the
test set is not looked at to choose) and translates the 1,000 test sentences greedily and with a
beam of 5, scored with sacreBLEU on detokenised, cased text as in chapter 7.

A larger BERT than chapter 13's, :data:`transformer_book.recipes.bert.GPU_RECIPE` (four
layers of width 256, batches of 128), for at most ``--bert-budget`` seconds; the script reports
its validation MLM loss against the unigram baseline of the same batches.

Each number is recorded as the chapters record theirs (:func:`transformer_book.results.record`),
in ``<output-dir>/<chapter>.json`` (default ``book/results/cuda``, which the Results page shows
beside the CPU numbers), with the device and the versions, as soon as it is measured, so that a
run stopped part-way keeps what it finished. ``--deadline`` bounds the whole run: the BERT gets
what time is left of it, or is skipped. Results hold for the machine, torch version and seed recorded.

The numbers in ``book/results/cuda`` came from two runs on one H200 (logs in
``benchmarks/results/cuda``): both candidates for 130 s each (the base width won, 1.742 against
1.905; that run then stopped on a decoding bug, since fixed), then
``--candidates "the base width" --translator-budget 200 --translator-steps 6000 --deadline 420``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from transformer_book import data, decoding, metrics, objectives, results, runtime, training
from transformer_book.models import Transformer
from transformer_book.recipes import bert as small_bert
from transformer_book.recipes import translator as mt
from transformer_book.tokenizers.subword import PAD_ID, SubwordTokenizer

CANDIDATES = {
    "chapter 7's sizes": mt.CHAPTER7_SIZES,
    "the base width": mt.Sizes(d_model=512, n_heads=8, d_ff=2048, n_encoder_layers=3, n_decoder_layers=3),
}
"""The translators trained: chapter 7's sizes (d_model 256, 4 heads, d_ff 1,024), and the base
Transformer's width (512, 8 heads, 2,048); three layers on each side in both."""


def _record(out: Path, chapter: str, metric: str, value: float, *, device: torch.device, **fields: Any) -> None:
    """One result, recorded as the chapters record theirs (:func:`transformer_book.results.record`),
    in ``out/<chapter>.json``, with the device and the versions."""
    path = results.record(chapter, metric, value, device=device, results_dir=out, **fields)
    if path is None:
        raise RuntimeError("gpu_recipes: nothing was recorded; run it in the full profile (TB_PROFILE unset or 'full')")
    unit = fields.get("unit", "")
    print(f"recorded {chapter} / {metric}: {value:.3f} {unit}", flush=True)


def translator(
    out: Path,
    device: torch.device,
    budget_s: float,
    steps: int,
    max_tokens: int,
    smoke: bool = False,
    candidates: Sequence[str] = tuple(CANDIDATES),
) -> None:
    """Train the candidates on Multi30k, pick by validation loss, score the pick on the test set."""
    split = mt.corpus_splits("multi30k", profile="full")
    test = split.test
    if smoke:
        split = split._replace(train=split.train[:2_000], val=split.val[:100])
        test = split.test[:40]
    base = mt.recipe("multi30k", profile="full")
    started = time.perf_counter()
    tokenizer = SubwordTokenizer.train([s for pair in split.train for s in pair], vocab_size=base.vocab_size)
    encoded = data.encode_pairs(split.train, tokenizer, max_len=base.max_len)
    val = list(
        data.BucketedBatches(
            data.encode_pairs(split.val, tokenizer, max_len=base.max_len), 2 * max_tokens, shuffle=False
        )
    )
    runs = {}
    for name, sizes in ((n, CANDIDATES[n]) for n in candidates):
        plan = base.replace(sizes=sizes, steps=steps, max_tokens=max_tokens)
        torch.manual_seed(0)
        model = Transformer(plan.model_config(len(tokenizer)))
        config = dataclasses.replace(
            plan.train_config(), time_budget_s=budget_s, eval_every=max(1, steps // 10), compile=False
        )  # batches of many lengths: compiling would recompile
        history = training.fit(
            model,
            data.BucketedBatches(encoded, max_tokens, seed=0),
            objectives.seq2seq_loss(pad_id=PAD_ID, smoothing=config.smoothing),
            config,
            val_batches=lambda: val,
            device=device,
        )
        runs[name] = (model.eval(), history, plan, sum(p.numel() for p in model.parameters()))
        print(
            f"{name}: {history.train_loss[-1][0]:,} steps in {history.train_time_s[-1][1]:.0f} s, "
            f"validation loss {history.val_loss[-1][1]:.3f}",
            flush=True,
        )
    chosen = min(runs, key=lambda n: runs[n][1].val_loss[-1][1])
    model, history, plan, n_params = runs[chosen]
    sources, references = [de for de, _ in test], [en for _, en in test]
    greedy = decoding.translate(model, sources, tokenizer, device=device)
    beam = decoding.translate(model, sources, tokenizer, device=device, beam_size=5, normalize="length", batch_size=50)
    wall = time.perf_counter() - started
    steps_done = history.train_loss[-1][0]
    seconds = history.train_time_s[-1][1]
    others = " and ".join(
        f"{n} {r[1].val_loss[-1][1]:.3f} after {r[1].train_loss[-1][0]:,} steps" for n, r in runs.items()
    )
    sizes = plan.sizes
    picked = f"the better of {len(runs)} translators by validation loss ({others}); " if len(runs) > 1 else ""
    notes = (
        f"{picked}{chosen}: d_model {sizes.d_model}, "
        f"{sizes.n_heads} heads, d_ff {sizes.d_ff:,}, {n_params:,} parameters, "
        f"{steps_done:,} steps of up to {max_tokens:,} padded positions in {seconds:.0f} s of training; "
        f"chapter 7's recipe otherwise (joint SentencePiece BPE of {base.vocab_size:,}, label smoothing 0.1, "
        f"inverse-square-root schedule, peak lr {base.lr:g})"
    )
    greedy_split = f"test_2016_flickr ({len(test):,} pairs), greedy decoding, sacreBLEU on detokenised text"
    beam_split = f"test_2016_flickr ({len(test):,} pairs), beam 5 (length-normalised), sacreBLEU on detokenised text"
    common = dict(device=device, dataset="Multi30k (German to English)", notes=notes, wall_time_s=wall)
    _record(
        out,
        "07_translation",
        "BLEU, Transformer",
        metrics.corpus_bleu(greedy, references),
        split=greedy_split,
        higher_is_better=True,
        **common,
    )
    _record(
        out,
        "07_translation",
        "chrF, Transformer",
        metrics.corpus_chrf(greedy, references),
        split=greedy_split,
        higher_is_better=True,
        **common,
    )
    _record(
        out,
        "07_translation",
        "BLEU, Transformer, beam 5",
        metrics.corpus_bleu(beam, references),
        split=beam_split,
        higher_is_better=True,
        **common,
    )


def bert(out: Path, device: torch.device, budget_s: float, smoke: bool = False) -> None:
    """Pretrain chapter 13's GPU recipe for at most ``budget_s`` seconds; MLM loss against the unigram."""
    started = time.perf_counter()
    print(f"BERT: {budget_s:.0f} s of training", flush=True)
    chosen = small_bert.GPU_RECIPE
    if smoke:
        chosen = chosen.replace(n_documents=40, steps=20)
    d = small_bert.prepare_data(chosen)
    valid = small_bert.validation_batches(d)
    model, history = small_bert.train(
        chosen, d, device=device, val_batches=valid[: max(1, 1_000 // 64)], budget_s=budget_s
    )
    final = small_bert.evaluate_pretraining(model, valid, device=device, nsp=chosen.nsp)
    unigram = small_bert.unigram_cross_entropy(d, valid)
    steps_done, seconds = history.train_loss[-1][0], history.train_time_s[-1][1]
    notes = (
        f"chapter 13's GPU recipe ({chosen.n_layers} layers of width {chosen.d_model}, {chosen.n_heads} heads, "
        f"batches of {chosen.batch} sequences of {chosen.max_len} pieces, peak lr {chosen.lr:g}, "
        f"{chosen.vocab_size:,} pieces, no next-sentence prediction); {steps_done:,} of {chosen.steps:,} steps in "
        f"{seconds:.0f} s of training; unigram baseline on the same selected pieces {unigram:.3f}"
    )
    n_sequences = sum(len(b.tokens) for b in valid)
    split = f"validation articles: {n_sequences:,} sequences, 15% of the pieces masked once with a fixed seed"
    print(
        f"BERT: {steps_done:,} steps in {seconds:.0f} s, validation MLM {final['mlm_loss']:.3f} "
        f"(unigram {unigram:.3f})",
        flush=True,
    )
    _record(
        out,
        "13_bert_pretraining",
        "validation MLM loss",
        final["mlm_loss"],
        unit="nats/piece",
        higher_is_better=False,
        device=device,
        dataset="WikiText-2 (BERT pretraining)",
        split=split,
        notes=notes,
        wall_time_s=time.perf_counter() - started,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=Path("book/results/cuda"))
    parser.add_argument("--only", nargs="+", choices=["translator", "bert"], default=["translator", "bert"])
    parser.add_argument("--translator-budget", type=float, default=140.0, help="seconds of training per candidate")
    parser.add_argument("--translator-steps", type=int, default=3_000)
    parser.add_argument(
        "--candidates",
        nargs="+",
        choices=list(CANDIDATES),
        default=list(CANDIDATES),
        help="the translators to train (default both; the better by validation loss is tested)",
    )
    parser.add_argument("--max-tokens", type=int, default=6_000)
    parser.add_argument("--bert-budget", type=float, default=150.0, help="seconds of BERT training at most")
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds for the whole run: the BERT trains for what is left (less 90 s), or is skipped",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny data, to check the script (numbers mean nothing)")
    args = parser.parse_args()
    runtime.seed_everything(0, deterministic=False)
    device = runtime.select_device()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    print(runtime.environment_summary(device), flush=True)
    parts = {
        "translator": lambda: translator(
            args.output_dir,
            device,
            args.translator_budget,
            args.translator_steps,
            args.max_tokens,
            args.smoke,
            args.candidates,
        ),
        "bert": lambda: bert(args.output_dir, device, args.bert_budget, args.smoke),
    }
    started = time.perf_counter()
    for name in args.only:
        if name == "bert" and args.deadline is not None:
            left = args.deadline - (time.perf_counter() - started) - 90.0
            if left < 30.0:
                print(f"BERT skipped: {left + 90.0:.0f} s left of the {args.deadline:.0f} s deadline", flush=True)
                continue
            args.bert_budget = min(args.bert_budget, left)
        parts[name]()


if __name__ == "__main__":
    main()
