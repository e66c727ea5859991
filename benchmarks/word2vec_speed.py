"""word2vec against gensim, side by side, and the time of PPMI + SVD (chapters 10 and 11).

Both trainers read the same corpus (WikiText-2 train, lower-cased, one sentence per non-blank
line: 2,051,910 tokens) with the same settings: minimum count 5, ``--dim`` dimensions, window
5, 5 negatives, subsampling threshold 1e-3, ``--epochs`` epochs, the default learning rates.
gensim runs with ``workers = --threads``; the package's ``train_word2vec`` runs with torch
limited to ``--threads`` threads (CPU) or on the GPU (``--device cuda``).

Speed is corpus words per second: tokens times epochs over the wall time of ``train`` (gensim:
``Word2Vec(...)`` after its vocabulary is built; the package: ``train_word2vec``). Quality is
measured on every run: Spearman correlation on WordSim353 and SimLex-999, and 3CosAdd accuracy
on the Google analogies (gensim's own data files, evaluated by ``transformer_book.embeddings``
for both). Each round uses another seed for both contenders, so the spread over rounds shows how
much a result moves with the seed alone; the order of the contenders rotates every round.

``--ppmi`` also times the count-based pipeline (co-occurrence counts in a window of 5, PPMI with
alpha = 0.75, a rank-``--dim`` SVD) over the same rounds.

Usage::

    python benchmarks/word2vec_speed.py [--threads 2] [--rounds 3] [--architectures skipgram cbow]
        [--device cpu|cuda] [--ppmi] [--sentences N] [--output PATH]

Prints a Markdown table and writes JSON (default ``benchmarks/results/word2vec_speed.json``).
Not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from transformer_book import data
from transformer_book.embeddings import (
    Word2VecConfig,
    cooccurrence_matrix,
    encode_corpus,
    ppmi,
    svd_embeddings,
    train_word2vec,
)
from transformer_book.embeddings.evaluation import (
    analogy_accuracy,
    load_analogies,
    load_word_similarity,
    word_similarity,
)
from transformer_book.runtime import machine_description
from transformer_book.tokenizers.text import Vocab

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "word2vec_speed.json"


def _quality(vectors: np.ndarray, words: list[str], tests: dict) -> dict[str, float]:
    return {
        "wordsim353": word_similarity(vectors, words, tests["wordsim353"]).spearman,
        "simlex999": word_similarity(vectors, words, tests["simlex999"]).spearman,
        "analogy": analogy_accuracy(vectors, words, tests["analogies"]).accuracy,
    }


def _gensim(sentences, architecture: str, epochs: int, dim: int, threads: int, seed: int):
    from gensim.models import Word2Vec

    # The package's learning rates (word2vec's own defaults: 0.025 skip-gram, 0.05 CBOW, decaying to
    # 1e-4 of that), so that the quality columns compare equal settings: gensim's default is 0.025 for both.
    config = Word2VecConfig(architecture=architecture)
    model = Word2Vec(
        vector_size=dim,
        window=5,
        min_count=5,
        sg=int(architecture == "skipgram"),
        negative=5,
        sample=1e-3,
        workers=threads,
        seed=seed,
        alpha=config.initial_lr,
        min_alpha=config.initial_lr * config.min_lr_ratio,
    )
    model.build_vocab(sentences)
    start = time.perf_counter()
    model.train(sentences, total_examples=model.corpus_count, epochs=epochs)
    seconds = time.perf_counter() - start
    return model.wv.vectors, list(model.wv.index_to_key), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--architectures", nargs="+", default=["skipgram", "cbow"], choices=["skipgram", "cbow"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ppmi", action="store_true")
    parser.add_argument(
        "--sentences",
        type=int,
        default=None,
        help="only the first N sentences of the corpus (smoke runs; default: all of it)",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    if args.sentences is not None and args.sentences < 1:
        parser.error("--sentences must be at least 1")

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sentences = data.load_wikitext2("train")
    whole_corpus = args.sentences is None or args.sentences >= len(sentences)
    sentences = sentences[: args.sentences]
    n_tokens = sum(map(len, sentences))
    vocab = Vocab.build((w for s in sentences for w in s), min_count=5)
    corpus = encode_corpus(sentences, vocab)
    tests = {
        "wordsim353": load_word_similarity("wordsim353"),
        "simlex999": load_word_similarity("simlex999"),
        "analogies": load_analogies(),
    }

    runs: dict[str, list[dict]] = {}
    contenders = []
    for arch in args.architectures:
        contenders += [
            (f"gensim {arch} ({args.threads} workers)", "gensim", arch),
            (f"transformer_book {arch} ({args.device})", "ours", arch),
        ]
    for round_ in range(args.rounds):
        order = contenders[round_ % len(contenders) :] + contenders[: round_ % len(contenders)]
        for name, who, arch in order:
            if who == "gensim":
                vectors, words, seconds = _gensim(sentences, arch, args.epochs, args.dim, args.threads, seed=round_ + 1)
            else:
                config = Word2VecConfig(architecture=arch, dim=args.dim, epochs=args.epochs, seed=round_ + 1)
                result = train_word2vec(corpus, vocab.counts, config, device=device, progress=False)
                vectors, words, seconds = result.w_in, vocab.itos, result.seconds
            run = {
                "seconds": seconds,
                "words_per_second": n_tokens * args.epochs / seconds,
                **_quality(vectors, words, tests),
            }
            runs.setdefault(name, []).append(run)
            print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in run.items()), flush=True)

    ppmi_runs = []
    if args.ppmi:
        ids = np.concatenate([np.append(vocab.encode(s, unknown=-1), -1) for s in sentences])
        for _ in range(args.rounds):
            times = {}
            start = time.perf_counter()
            counts = cooccurrence_matrix(ids, len(vocab), 5)
            times["counts"] = time.perf_counter() - start
            matrix = ppmi(counts, alpha=0.75)
            times["ppmi"] = time.perf_counter() - start - times["counts"]
            vectors = svd_embeddings(matrix, args.dim, p=0.5)
            times["total"] = time.perf_counter() - start
            times["svd"] = times["total"] - times["counts"] - times["ppmi"]
            ppmi_runs.append({**times, **_quality(vectors, vocab.itos, tests)})
            print("PPMI+SVD: " + ", ".join(f"{k} {v:.4g}" for k, v in ppmi_runs[-1].items()), flush=True)

    summary = {}
    for name, values in runs.items():
        summary[name] = {
            key: {
                "median": statistics.median(r[key] for r in values),
                "min": min(r[key] for r in values),
                "max": max(r[key] for r in values),
            }
            for key in values[0]
        }
    part = "" if whole_corpus else f" (first {len(sentences):,} sentences)"
    lines = [
        f"word2vec on WikiText-2{part} ({n_tokens:,} tokens, {len(vocab):,} words), {args.epochs} epochs, d={args.dim}; "
        f"{machine_description(device)}, torch {torch.__version__}, {args.threads} threads; medians over "
        f"{args.rounds} seeds (min-max)",
        "",
        "| contender | seconds | words/s | ratio to gensim | WordSim353 | SimLex-999 | analogy (3CosAdd) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in summary.items():
        arch = name.split()[1]
        gensim_name = next(n for n in summary if n.startswith(f"gensim {arch}"))
        ratio = s["words_per_second"]["median"] / summary[gensim_name]["words_per_second"]["median"]

        def cell(k: str, f: str = "{:.3f}", s: dict = s) -> str:
            return f"{f.format(s[k]['median'])} ({f.format(s[k]['min'])}-{f.format(s[k]['max'])})"

        lines.append(
            f"| {name} | {s['seconds']['median']:.1f} | {s['words_per_second']['median']:,.0f} | "
            f"{ratio:.2f}x | {cell('wordsim353')} | {cell('simlex999')} | "
            f"{cell('analogy', '{:.2%}')} |"
        )
    if ppmi_runs:
        med = {k: statistics.median(r[k] for r in ppmi_runs) for k in ppmi_runs[0]}
        lines += [
            "",
            f"PPMI (alpha 0.75) + SVD (k={args.dim}, p=0.5): {med['total']:.1f} s median "
            f"(counts {med['counts']:.1f}, PPMI {med['ppmi']:.1f}, SVD {med['svd']:.1f}); WordSim353 "
            f"{med['wordsim353']:.3f}, SimLex-999 {med['simlex999']:.3f}, analogy {med['analogy']:.2%}",
        ]
    table = "\n".join(lines)
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "machine": machine_description(device),
                "device": str(device),
                "torch": torch.__version__,
                "threads": args.threads,
                "cpu_count": os.cpu_count(),
                "epochs": args.epochs,
                "dim": args.dim,
                "tokens": n_tokens,
                "vocab": len(vocab),
                "whole_corpus": whole_corpus,
                "runs": runs,
                "summary": summary,
                "ppmi_svd": ppmi_runs,
                "table": table,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
