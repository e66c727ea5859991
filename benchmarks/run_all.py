"""Every side-by-side comparison the chapters ask for, in one run and one table.

Runs each benchmark of this folder in turn, in a subprocess of its own, on the same machine and
in the same session, reads the JSON each one writes, and puts one row per comparison in a single
table: the book's code, its baseline, both medians, and their ratio. Writes
``results/summary.json`` and ``results/summary.md`` (or into ``--output-dir``).

    python benchmarks/run_all.py                  # the sizes the chapters use (about ten minutes on 2 CPU cores)
    python benchmarks/run_all.py --device cuda    # on a GPU, where each benchmark supports it
    python benchmarks/run_all.py --smoke          # tiny sizes, one round: checks the harness, not the speed

A ratio is "book time / baseline time" (below 1: the book's code is faster). Each benchmark
first checks that both sides compute the same thing; see ``README.md`` for each one's method.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
Row = dict[str, Any]


def _rows_mha(d: dict) -> list[Row]:
    by = {r["implementation"]: r for r in d["rows"]}
    base = by["torch nn.MultiheadAttention (need_weights=False)"]
    out = []
    for name in ("ours, fused (need_weights=False)", "ours, explicit (need_weights=True)"):
        out.append(_row("multi-head attention, forward + backward", f"MultiHeadAttention, {name[6:]}",
                        "nn.MultiheadAttention", by[name]["median_ms"], base["median_ms"], "ms/call"))
    return out


def _rows_pair(title: str, unit: str) -> Callable[[dict], list[Row]]:
    def rows(d: dict) -> list[Row]:
        r = d["rows"]
        return [_row(title, "book's model", "nn.TransformerEncoderLayer twin", r["ours"]["median_ms"], r["torch"]["median_ms"],
                     unit)]
    return rows


def _rows_translation(d: dict) -> list[Row]:
    by = {r["implementation"]: r for r in d["rows"]}
    ours = by["ours"]
    base = next(r for name, r in by.items() if name != "ours")
    return [_row("translation Transformer, training step", "book's Transformer", "nn.Transformer twin",
                 ours["median_ms_per_step"], base["median_ms_per_step"], "ms/step")]


def _rows_kv(d: dict) -> list[Row]:
    return [_row(f"{r['model']} generation, {d['new_tokens']} new tokens", "with the key/value cache",
                 "recomputing the prefix", 1e3 * r["cache_s"], 1e3 * r["recompute_s"], "ms/sequence")
            for r in d["rows"]]


def _rows_beam(d: dict) -> list[Row]:
    return [_row(f"beam search, {d['sentences']} sentences, beam {d['beam']}", "batched beam_search with the cache",
                 "chapter 8's per-hypothesis loop", 1e3 * d["batched_s"], 1e3 * d["loop_s"], "ms/batch")]


def _rows_word2vec(d: dict) -> list[Row]:
    out = []
    summary = d["summary"]
    for arch in ("skipgram", "cbow"):
        ours = next((v for k, v in summary.items() if k.startswith("transformer_book") and arch in k), None)
        theirs = next((v for k, v in summary.items() if k.startswith("gensim") and arch in k), None)
        if ours and theirs:
            out.append(_row(f"word2vec {arch}, WikiText-2, {d['epochs']} epochs", "package", "gensim",
                            1e3 * ours["seconds"]["median"], 1e3 * theirs["seconds"]["median"], "ms/run"))
    for entry in d.get("ppmi_svd") or []:
        out.append(_row("PPMI + SVD word vectors, WikiText-2", "counts + PPMI + truncated SVD", "(no baseline)",
                        1e3 * entry["total"], None, "ms/run"))
        break
    return out


def _row(comparison: str, book: str, baseline: str, book_value: float, baseline_value: float | None,
         unit: str) -> Row:
    ratio = book_value / baseline_value if baseline_value else None
    return {"comparison": comparison, "book": book, "baseline": baseline, "book_median": book_value,
            "baseline_median": baseline_value, "unit": unit, "ratio": ratio}


def benchmarks(device: str, smoke: bool) -> list[tuple[str, list[str], Callable[[dict], list[Row]]]]:
    """``(script, arguments, adapter)`` for every benchmark: full sizes, or tiny ones with ``smoke``."""
    quick = smoke
    return [
        ("mha_speed.py", ["--device", device] + (["--repeats", "1", "--warmup", "1", "--min-block-s", "0.01"] if quick
                                                  else ["--repeats", "7"]), _rows_mha),
        ("gpt_training_speed.py", ["--device", device, "--config", "cpu"]
         + (["--steps", "1", "--repeats", "1"] if quick else ["--steps", "10", "--repeats", "5"]),
         _rows_pair("GPT (chapter 9), training step", "ms/step")),
        ("bert_pretraining_speed.py", ["--device", device, "--config", "chapter"]
         + (["--steps", "1", "--repeats", "1"] if quick else ["--steps", "5", "--repeats", "5"]),
         _rows_pair("BERT (chapter 13), pretraining step", "ms/step")),
        ("translation_training_speed.py", ["--device", device] + (["--smoke"] if quick else ["--repeats", "5"]),
         _rows_translation),
        ("kv_cache_speed.py", ["--device", device] + (["--new-tokens", "8", "--prompt", "4", "--repeats", "1"] if quick
                                                      else ["--new-tokens", "128", "--repeats", "3"]), _rows_kv),
        ("beam_search_speed.py", ["--device", device] + (["--small", "--sentences", "4", "--max-new", "8", "--repeats", "1"]
                                                         if quick else ["--sentences", "16", "--max-new", "20", "--repeats", "3"]),
         _rows_beam),
        ("word2vec_speed.py", ["--device", device, "--ppmi"] + (["--epochs", "1", "--rounds", "1", "--architectures",
                                                                 "skipgram"] if quick else ["--rounds", "1"]),
         _rows_word2vec),
    ]


def machine() -> dict[str, Any]:
    import torch

    return {"machine": platform.processor() or platform.machine(), "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def markdown(document: dict[str, Any]) -> str:
    m = document["machine"]
    lines = [f"Measured {document['finished']} on {m['cuda'] or m['machine']} ({m['system']}, {m['cpu_count']} CPU cores), "
             f"Python {m['python']}, torch {m['torch']}, device {document['device']}"
             + (" (smoke sizes: not a measurement of speed)" if document["smoke"] else "") + ".",
             "",
             "| comparison | book's code | baseline | book | baseline | unit | ratio |",
             "|---|---|---|---:|---:|---|---:|"]
    for r in document["rows"]:
        base = f"{r['baseline_median']:,.1f}" if r["baseline_median"] is not None else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(f"| {r['comparison']} | {r['book']} | {r['baseline']} | {r['book_median']:,.1f} | {base} | "
                     f"{r['unit']} | {ratio} |")
    lines += ["", "Ratio: the book's median time over the baseline's (below 1: the book's code is faster)."]
    for name, error in document["failed"].items():
        lines.append(f"\n**{name} failed**: {error}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and one round, to check the harness")
    parser.add_argument("--only", nargs="*", default=None, help="run only these scripts (names without .py)")
    parser.add_argument("--output-dir", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    rows, failed = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for script, script_args, adapter in benchmarks(args.device, args.smoke):
            name = script[:-3]
            if args.only is not None and name not in args.only:
                continue
            output = Path(scratch) / f"{name}.json"
            start = time.perf_counter()
            result = subprocess.run([sys.executable, str(HERE / script), *script_args, "--output", str(output)],
                                    capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if result.returncode != 0 or not output.exists():
                failed[name] = (result.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{name}: FAILED ({failed[name]})", file=sys.stderr)
                continue
            produced = adapter(json.loads(output.read_text()))
            for row in produced:
                row["benchmark"] = name
            rows.extend(produced)
            print(f"{name}: {len(produced)} comparisons in {seconds:.0f} s", file=sys.stderr)
    document = {"device": args.device, "smoke": args.smoke, "machine": machine(),
                "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows, "failed": failed}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "summary.json").write_text(json.dumps(document, indent=2) + "\n")
    (args.output_dir / "summary.md").write_text(markdown(document))
    print(markdown(document))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
