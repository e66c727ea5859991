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
Every row also carries the aim the issue that asked for it set, for the device of the run
(``AIMS``; "no aim set" where the issue gave no number), whether it is met, and for a miss (or,
with no aim, for book code slower than its baseline) the cause measured on that kind of device
(``REASONS``), or "not analysed on this device".
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
Row = dict[str, Any]


def _rows_mha(d: dict) -> list[Row]:
    by = {r["implementation"]: r for r in d["rows"]}
    base = by["torch nn.MultiheadAttention (need_weights=False)"]
    out = []
    for key, name in (
        ("mha_fused", "ours, fused (need_weights=False)"),
        ("mha_explicit", "ours, explicit (need_weights=True)"),
    ):
        out.append(
            _row(
                key,
                "multi-head attention, forward + backward",
                f"MultiHeadAttention, {name[6:]}",
                "nn.MultiheadAttention",
                by[name]["median_ms"],
                base["median_ms"],
                "ms/call",
            )
        )
    return out


def _rows_attention(d: dict) -> list[Row]:
    ours, theirs = d["rows"]
    return [
        _row(
            "sdpa_function",
            "attention function with a padding mask, forward + backward",
            "attention.scaled_dot_product_attention",
            "F.scaled_dot_product_attention",
            ours["median_ms"],
            theirs["median_ms"],
            "ms/call",
            length=d["shape"]["length"],
        )
    ]


def _rows_pair(key: str, title: str, unit: str) -> Callable[[dict], list[Row]]:
    def rows(d: dict) -> list[Row]:
        r = d["rows"]
        return [
            _row(
                key,
                title,
                "book's model",
                "nn.TransformerEncoderLayer twin",
                r["ours"]["median_ms"],
                r["torch"]["median_ms"],
                unit,
            )
        ]

    return rows


def _rows_translation(d: dict) -> list[Row]:
    by = {r["implementation"]: r for r in d["rows"]}
    ours = by["ours"]
    base = next(r for name, r in by.items() if name != "ours")
    return [
        _row(
            "translation_training",
            "translation Transformer, training step",
            "book's Transformer",
            "nn.Transformer twin",
            ours["median_ms_per_step"],
            base["median_ms_per_step"],
            "ms/step",
        )
    ]


def _rows_kv(d: dict) -> list[Row]:
    return [
        _row(
            f"kv_cache_{r['model']}",
            f"{r['model']} generation, {d['new_tokens']} new tokens",
            "with the key/value cache",
            "recomputing the prefix",
            1e3 * r["cache_s"],
            1e3 * r["recompute_s"],
            "ms/sequence",
            new_tokens=d["new_tokens"],
        )
        for r in d["rows"]
    ]


def _rows_smollm2(d: dict) -> list[Row]:
    return [
        _row(
            "smollm2_generation",
            f"SmolLM2-135M generation, {d['new_tokens']} new tokens",
            "ModernGPT + decoding.generate",
            "transformers' generate, same weights",
            1e3 * d["book_s"],
            1e3 * d["transformers_s"],
            "ms/sequence",
            new_tokens=d["new_tokens"],
            share_of_bandwidth_bound=round(d["book_share_of_bound"], 3),
            same_tokens=d["same_tokens"],
        )
    ]


def _rows_beam(d: dict) -> list[Row]:
    return [
        _row(
            "beam_search",
            f"beam search, {d['sentences']} sentences, beam {d['beam']}",
            "batched beam_search with the cache",
            "chapter 8's per-hypothesis loop",
            1e3 * d["batched_s"],
            1e3 * d["loop_s"],
            "ms/batch",
        )
    ]


def _rows_word2vec(d: dict) -> list[Row]:
    out = []
    summary = d["summary"]
    corpus = "WikiText-2" if d.get("whole_corpus", True) else f"WikiText-2 (part: {d['tokens']:,} tokens)"
    for arch in ("skipgram", "cbow"):
        ours = next((v for k, v in summary.items() if k.startswith("transformer_book") and arch in k), None)
        theirs = next((v for k, v in summary.items() if k.startswith("gensim") and arch in k), None)
        if ours and theirs:
            out.append(
                _row(
                    f"word2vec_{arch}",
                    f"word2vec {arch}, {corpus}, {d['epochs']} epochs",
                    "package",
                    f"gensim ({d['threads']} workers)",
                    1e3 * ours["seconds"]["median"],
                    1e3 * theirs["seconds"]["median"],
                    "ms/run",
                    threads=d["threads"],
                    cpu_count=d["cpu_count"],
                    whole_corpus=d.get("whole_corpus", True),
                )
            )
    for entry in d.get("ppmi_svd") or []:
        out.append(
            _row(
                "ppmi_svd",
                f"PPMI + SVD word vectors, {corpus}",
                "counts + PPMI + truncated SVD",
                "(no baseline)",
                1e3 * entry["total"],
                None,
                "ms/run",
                threads=d["threads"],
                whole_corpus=d.get("whole_corpus", True),
            )
        )
        break
    return out


def _row(
    key: str,
    comparison: str,
    book: str,
    baseline: str,
    book_value: float,
    baseline_value: float | None,
    unit: str,
    **conditions: Any,
) -> Row:
    ratio = book_value / baseline_value if baseline_value else None
    return {
        "key": key,
        "comparison": comparison,
        "book": book,
        "baseline": baseline,
        "book_median": book_value,
        "baseline_median": baseline_value,
        "unit": unit,
        "ratio": ratio,
        "conditions": conditions,
    }


# ---- aims: what the issues asked of each comparison, per device --------------------------------------------------


@dataclass(frozen=True)
class Aim:
    """One issue's aim for a row. ``max_ratio``: met when book time / baseline time <= it;
    ``max_value``: met when the book's median (in the row's unit) <= it; neither: the issue set no
    number, and ``text`` says so. Each check of ``applies`` returns why the aim does not apply to
    this row's sizes (e.g. it is stated for 256 new tokens), or None; every check must pass."""

    text: str
    source: str
    max_ratio: float | None = None
    max_value: float | None = None
    applies: tuple[Callable[[Row], str | None], ...] = ()

    @property
    def numeric(self) -> bool:
        return self.max_ratio is not None or self.max_value is not None


def _needs(name: str, value: Callable[[Row], Any], what: str) -> Callable[[Row], str | None]:
    """An ``applies`` check: the row's condition ``name`` must equal ``value(row)``."""

    def check(row: Row) -> str | None:
        wanted, got = value(row), row["conditions"].get(name)
        return None if got == wanted else f"the aim is stated for {what}; this run: {got}"

    return check


_MHA = Aim("ratio <= 1.10: at most 1.1x nn.MultiheadAttention's time", "issue 3", max_ratio=1.10)
_KV = Aim(
    "ratio <= 0.333: cached generation at least 3x faster than recomputation, 256 new tokens",
    "issue 6",
    max_ratio=1 / 3,
    applies=(_needs("new_tokens", lambda row: 256, "256 new tokens"),),
)
_WHOLE = _needs("whole_corpus", lambda row: True, "the whole WikiText-2 train split (whole_corpus True)")
_W2V_CPU = Aim(
    "ratio <= 2.0: at least 0.5x gensim's words/s on 2 CPU cores",
    "issue 7",
    max_ratio=2.0,
    applies=(_WHOLE, _needs("threads", lambda row: 2, "2 CPU cores (threads and gensim workers)")),
)
_W2V_GPU = (
    Aim(
        "ratio <= 1.0: faster than gensim using all of the machine's CPU cores",
        "issue 11",
        max_ratio=1.0,
        applies=(_WHOLE, _needs("threads", lambda row: row["conditions"].get("cpu_count"), "gensim on all CPU cores")),
    ),
    Aim("ratio <= 0.2: at least 5x gensim's words/s on a GPU", "issue 7", max_ratio=0.2, applies=(_WHOLE,)),
)
_PPMI = Aim("under 60 s (60,000 ms) on 2 CPU cores; no baseline", "issue 7", max_value=60_000.0, applies=(_WHOLE,))


# With the fused LayerNorm a model's step should cost no more than its torch.nn twin's (issue 22).
_TWIN_CPU = Aim(
    "ratio <= 1.0: a training step at most as long as its torch.nn twin's on CPU", "issue 22", max_ratio=1.0
)


def _both(*aims: Aim) -> dict[str, tuple[Aim, ...]]:
    return {"cpu": aims, "cuda": aims}


AIMS: dict[str, dict[str, tuple[Aim, ...]]] = {
    "mha_fused": _both(_MHA),
    "mha_explicit": _both(
        Aim(
            "no aim set (issue 3's 1.1x is for the fused path); slower expected: it builds and returns the weights",
            "issue 3",
        )
    ),
    "sdpa_function": _both(
        Aim(
            "no aim set (issue 11 asks for the comparison, no number); slower expected: the "
            "equation written out against a fused kernel",
            "issue 11",
        )
    ),
    "gpt_training": {
        "cpu": (_TWIN_CPU,),
        "cuda": (Aim("no aim set (issue 6 asks for the side-by-side measurement only); parity expected", "issue 6"),),
    },
    "bert_pretraining": {
        "cpu": (_TWIN_CPU,),
        "cuda": (Aim("no aim set (issue 8 asks for the throughput benchmark only); parity expected", "issue 8"),),
    },
    "translation_training": {
        "cpu": (
            Aim(
                "ratio <= 1.053: at least 0.95x nn.Transformer's training throughput on CPU",
                "issue 5",
                max_ratio=1 / 0.95,
            ),
            _TWIN_CPU,
        ),
        "cuda": (
            Aim("ratio <= 1.0: at least 1.0x nn.Transformer's training throughput on a GPU", "issue 5", max_ratio=1.0),
        ),
    },
    "kv_cache_gpt": _both(_KV),
    "kv_cache_translator": _both(_KV),
    "beam_search": _both(
        Aim("no aim set (issue 11 asks for the comparison, no number); batched expected faster", "issue 11")
    ),
    "smollm2_generation": _both(
        Aim(
            "ratio <= 1.0: at least transformers' tokens/s on the same weights, 256 new tokens "
            "(issue 39 also asks for half the memory-bandwidth bound: see the row's conditions)",
            "issue 39",
            max_ratio=1.0,
            applies=(_needs("new_tokens", lambda row: 256, "256 new tokens"),),
        )
    ),
    "word2vec_skipgram": {"cpu": (_W2V_CPU,), "cuda": _W2V_GPU},
    "word2vec_cbow": {"cpu": (_W2V_CPU,), "cuda": _W2V_GPU},
    "ppmi_svd": _both(_PPMI),
}


# ---- why a row misses its aim (or, with no aim, is slower than its baseline): measured, per device -------------


@dataclass(frozen=True)
class Reason:
    """A cause found by measurement on one kind of device; ``evidence`` names the machine and numbers."""

    text: str
    evidence: str


_CPU = "a 2-core AMD EPYC VM, torch 2.13.0+cpu, 1 thread, 2026-11-23 (benchmarks/README.md, 'Why the misses')"
_CPU_NOW = "a 2-core VM, torch 2.13.0+cpu, 2026-11-25 (benchmarks/README.md, 'Why the misses')"
# The written-out LayerNorm was the cause of these rows' misses until the models ran F.layer_norm (issue 22).
_NOISE = (
    "no systematic cost found since the models run the fused LayerNorm: paired runs of the same code land "
    "on both sides of 1, so a miss of a few per cent points to a disturbed run"
)
_TWIN_EVIDENCE = (
    f"{_CPU_NOW}: throughput ratio book / twin, translation over 11 interleaved rounds 1.037 and "
    "1.002 in two runs (0.93 in a run of 5 rounds); BERT over 5 rounds of 5 steps 1.08, 0.97, 0.97 "
    "and 1.02 in four runs of the same code; before the fused LayerNorm, step time ratios 1.16 "
    "(translation), 1.09 (GPT, BERT)"
)
REASONS: dict[str, dict[str, Reason]] = {
    "mha_fused": {
        "cpu": Reason(
            "no systematic cost found: the three Q/K/V projections cost what the packed one does, so a miss points to a "
            "disturbed run",
            f"{_CPU}: fused path 114.3 vs 125.3 ms (ratio 0.91); three Linear 47.5 vs one packed 46.3 ms forward + "
            "backward at 2560 x 256",
        )
    },
    "mha_explicit": {
        "cpu": Reason(
            "returning the weights forces the written-out attention: scale, mask, softmax and their gradients run as "
            "separate passes over the (B, h, n, n) weights, which the fused kernel never builds",
            f"{_CPU}: explicit path 158.0 vs fused 114.3 ms; the attention function's profile is in its row",
        )
    },
    "sdpa_function": {
        "cpu": Reason(
            "the equation written out makes about ten element-wise passes (scale, mask, max, exp, sum, divide and "
            "their gradients) over the materialised 32 x 8 x 128 x 128 scores, where F.scaled_dot_product_attention's "
            "flash kernel fuses them into its matrix products",
            f"{_CPU}: profile, book 100.2 ms of op time per call (bmm 36.2, div 14.4, mul 14.0, masked_fill 10.6, "
            "neg 7.7, exp 7.2) against 37.3 ms for the whole fused kernel, forward and backward",
        )
    },
    "gpt_training": {"cpu": Reason(_NOISE, _TWIN_EVIDENCE)},
    "bert_pretraining": {"cpu": Reason(_NOISE, _TWIN_EVIDENCE)},
    "translation_training": {"cpu": Reason(_NOISE, _TWIN_EVIDENCE)},
    "word2vec_skipgram": {
        "cpu": Reason(
            "gathering the batch's rows into tensors and scattering the updates back (index_add_, index_select, index) "
            "takes over half the op time, where gensim's C loop updates each row in place",
            f"{_CPU.replace('1 thread', '2 threads')}: profile on 512k tokens of WikiText-2, index_add_ 33%, "
            "index_select 14%, index 7% of op time; 296k words/s against gensim's 679k (0.44x)",
        )
    },
    "word2vec_cbow": {
        "cpu": Reason(
            "no systematic cost left beyond gensim's own speed: since the windows are built flat and the input vectors' "
            "update is summed per word by a sparse product, the remaining op time is spread over the scatters into the "
            "output vectors (index_add_ 22%), the sparse product and its sort, and the gathers; gensim's time moves "
            "between 4.8 and 6.1 s from run to run, so a miss close to 0.5x points to a disturbed run",
            f"{_CPU_NOW.replace('2026-11-25', '2 threads, 2026-11-25')}: one epoch of WikiText-2 3.1 s -> 1.7 s "
            "(0.69 -> 0.33 s of it making the epoch's windows); 3 seeds, 8.4 s against gensim's 4.8 s (0.57x), before "
            "the change 14.5 s against 6.1 s (0.42x), quality equal",
        )
    },
}

_H100 = (
    "one NVIDIA H100 80GB HBM3 (16 CPU cores), torch 2.11.0+cu130, 2026-11-23: benchmarks/diagnose.py, "
    "results in benchmarks/results/diagnose_cuda.json"
)
_LAUNCH_BOUND = (
    "at batch 1 a decoding step costs its kernel launches and Python, not its arithmetic: a cached step "
    "and a whole forward pass over 256 positions take the same time, so the cache has nothing to save"
)
_CUDA_REASONS: dict[str, Reason] = {
    "gpt_training": Reason(
        "at this size (4 layers, width 128, 12 x 64 tokens) a step is bound by kernel launches: the written-out "
        "LayerNorm adds kernels to every call, and GPT's check that the ids lie in the vocabulary waits for the GPU "
        "once a step; compiling (fit's default on CUDA) fuses the LayerNorm but keeps the wait",
        f"{_H100}: a step eager 10.49 ms vs twin 7.31; with F.layer_norm in the book's LayerNorm 8.62; both "
        "compiled 8.85 vs 5.74",
    ),
    "bert_pretraining": Reason(
        "the written-out LayerNorm: with F.layer_norm swapped in, the book's BERT is faster than its twin",
        f"{_H100}: time ratio 1.18 -> 0.90 with F.layer_norm (3 rounds of 5 steps)",
    ),
    "translation_training": Reason(
        "mostly the written-out LayerNorm (17 calls a step, each several small kernels on a launch-bound step); "
        "what remains with F.layer_norm (ratio 1.18) was not traced",
        f"{_H100}: time ratio 1.72 -> 1.18 with F.layer_norm (3 rounds; this table's own run measured 1.37)",
    ),
    "kv_cache_gpt": Reason(
        _LAUNCH_BOUND,
        f"{_H100}: GPT (6 layers, width 384) cached step 2.88 ms at prefixes of 8 and of 256; "
        "forward pass 2.68 ms over 8 positions, 2.98 ms over 256",
    ),
    "kv_cache_translator": Reason(
        _LAUNCH_BOUND + " (measured on the GPT; the translator's steps were not timed separately)",
        f"{_H100}: GPT (6 layers, width 384) cached step 2.88 ms at prefixes of 8 and of "
        "256; forward pass 2.68 ms over 8 positions, 2.98 ms over 256",
    ),
    "word2vec_skipgram": Reason(
        "in the version measured, each epoch's examples were made on one CPU core (0.49 s an epoch, overlapped "
        "with the GPU's training of the epoch before) and the GPU's gathers and scatters took the rest (the "
        "package now makes the examples on the GPU; not yet timed there)",
        f"{_H100}: 0.49 s an epoch to make and shuffle the examples; 0.75 s an epoch of training in all",
    ),
    "word2vec_cbow": Reason(
        "in the version measured, bound by making the examples on one CPU core: 0.46 s of each epoch's 0.50 s; "
        "the GPU waits for them (the package now makes them on the GPU; not yet timed there)",
        f"{_H100}: 0.46 s an epoch to make and shuffle the windows; 0.50 s an epoch of training in all",
    ),
}
for _key, _reason in _CUDA_REASONS.items():
    REASONS.setdefault(_key, {})["cuda"] = _reason


NOT_ANALYSED = "not analysed on this device"


def assess(row: Row, device: str) -> Row:
    """Add ``aim``, ``aim_source``, ``met`` (True, False, or None where no numeric aim applies) and ``why``."""
    kind = device.split(":")[0]
    aims = AIMS.get(row["key"], {}).get(kind, ())
    row["aim"] = "; ".join(a.text for a in aims) if aims else f"no aim set for {kind}"
    row["aim_source"] = ", ".join(dict.fromkeys(a.source for a in aims)) or "-"
    verdicts, notes = [], []
    for aim in aims:
        if not aim.numeric:
            continue
        skip = next((why for why in (check(row) for check in aim.applies) if why), None)
        if skip:
            notes.append(skip)
        elif aim.max_ratio is not None:
            verdicts.append(row["ratio"] is not None and row["ratio"] <= aim.max_ratio)
        else:
            verdicts.append(row["book_median"] <= aim.max_value)
    if not all(verdicts):
        row["met"] = False  # one applicable aim missed
    elif verdicts and not notes:
        row["met"] = True  # every aim applies, and every one is met
    else:
        row["met"] = None  # no numeric aim, or one that does not apply to these sizes
    reason = REASONS.get(row["key"], {}).get(kind)
    slower = row["ratio"] is not None and row["ratio"] > 1.0
    if row["met"] is False or (row["met"] is None and not notes and slower):
        row["why"] = reason.text if reason else NOT_ANALYSED
        row["why_evidence"] = reason.evidence if reason else None
    else:
        row["why"] = "; ".join(dict.fromkeys(notes)) or None
        row["why_evidence"] = None
    return row


def benchmarks(device: str, smoke: bool) -> list[tuple[str, list[str], Callable[[dict], list[Row]]]]:
    """``(script, arguments, adapter)`` for every benchmark: full sizes, or tiny ones with ``smoke``."""
    quick = smoke
    # word2vec: 2 threads and 2 gensim workers on a CPU (issue 7's "2 CPU cores"); on a GPU machine gensim gets
    # all of the machine's cores (issue 11)
    w2v_threads = str(os.cpu_count() or 1) if device.startswith("cuda") else "2"
    return [
        (
            "mha_speed.py",
            ["--device", device]
            + (["--repeats", "1", "--warmup", "1", "--min-block-s", "0.01"] if quick else ["--repeats", "7"]),
            _rows_mha,
        ),
        (
            "attention_speed.py",
            ["--device", device]
            + (
                ["--repeats", "1", "--warmup", "1", "--min-block-s", "0.01", "--length", "16"]
                if quick
                else ["--repeats", "7"]
            ),
            _rows_attention,
        ),
        (
            "gpt_training_speed.py",
            ["--device", device, "--config", "cpu"]
            + (["--steps", "1", "--repeats", "1"] if quick else ["--steps", "10", "--repeats", "5"]),
            _rows_pair("gpt_training", "GPT (chapter 9), training step", "ms/step"),
        ),
        (
            "bert_pretraining_speed.py",
            ["--device", device, "--config", "chapter"]
            + (["--steps", "1", "--repeats", "1"] if quick else ["--steps", "5", "--repeats", "5"]),
            _rows_pair("bert_pretraining", "BERT (chapter 13), pretraining step", "ms/step"),
        ),
        (
            "translation_training_speed.py",
            ["--device", device] + (["--smoke"] if quick else ["--repeats", "11"]),
            _rows_translation,
        ),
        # 256 new tokens: the length issue 6's aim is stated for
        (
            "kv_cache_speed.py",
            ["--device", device]
            + (
                ["--new-tokens", "8", "--prompt", "4", "--repeats", "1"]
                if quick
                else ["--new-tokens", "256", "--repeats", "3"]
            ),
            _rows_kv,
        ),
        (
            "smollm2_generation.py",
            ["--device", device]
            + (["--new-tokens", "8", "--repeats", "1"] if quick else ["--new-tokens", "256", "--repeats", "3"]),
            _rows_smollm2,
        ),
        (
            "beam_search_speed.py",
            ["--device", device]
            + (
                ["--small", "--sentences", "4", "--max-new", "8", "--repeats", "1"]
                if quick
                else ["--sentences", "16", "--max-new", "20", "--repeats", "3"]
            ),
            _rows_beam,
        ),
        (
            "word2vec_speed.py",
            ["--device", device, "--ppmi", "--threads", w2v_threads]
            + (
                ["--epochs", "1", "--rounds", "1", "--architectures", "skipgram", "--sentences", "3000"]
                if quick
                else ["--rounds", "1"]
            ),
            _rows_word2vec,
        ),
    ]


def machine() -> dict[str, Any]:
    import torch

    return {
        "machine": platform.processor() or platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _met(value: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[value]


def markdown(document: dict[str, Any]) -> str:
    m = document["machine"]
    lines = [
        f"Measured {document['finished']} on {m['cuda'] or m['machine']} ({m['system']}, {m['cpu_count']} CPU cores), "
        f"Python {m['python']}, torch {m['torch']}, device {document['device']}"
        + (" (smoke sizes: not a measurement of speed)" if document["smoke"] else "")
        + ".",
        "",
        "| comparison | book's code | baseline | book | baseline | unit | ratio | aim (source) | met "
        "| why (where missed) |",
        "|---|---|---|---:|---:|---|---:|---|---|---|",
    ]
    evidence: list[str] = []
    for r in document["rows"]:
        base = f"{r['baseline_median']:,.1f}" if r["baseline_median"] is not None else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        why = r["why"] or ""
        if r.get("why_evidence"):
            if r["why_evidence"] not in evidence:
                evidence.append(r["why_evidence"])
            why += f" [{evidence.index(r['why_evidence']) + 1}]"
        lines.append(
            f"| {r['comparison']} | {r['book']} | {r['baseline']} | {r['book_median']:,.1f} | {base} | "
            f"{r['unit']} | {ratio} | {r['aim']} ({r['aim_source']}) | {_met(r['met'])} | {why} |"
        )
    lines += [
        "",
        "Ratio: the book's median time over the baseline's (below 1: the book's code is faster). "
        "Met: whether the ratio (or the time) is within the issue's aim; '-' where the issue set no number, "
        "or where this run's sizes are not those the aim is stated for. Why: the cause measured on this kind of "
        "device, for a missed aim or, with no aim, for book code slower than its baseline.",
    ]
    lines += [f"[{i}] Measured on {text}." for i, text in enumerate(evidence, 1)]
    for name, error in document["failed"].items():
        lines.append(f"\n**{name} failed**: {error}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and one round, to check the harness")
    parser.add_argument("--only", nargs="*", default=None, help="run only these scripts (names without .py)")
    parser.add_argument(
        "--output-dir", type=Path, default=None, help="default: results/ for the CPU, results/cuda/ for a GPU"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the stored summary's rows of the scripts not run now (with --only): refresh some "
        "rows without running everything; each row keeps the date it was measured",
    )
    parser.add_argument(
        "--reassess",
        type=Path,
        default=None,
        metavar="SUMMARY_JSON",
        help="re-apply the current aims and measured causes to a stored summary.json (and rewrite "
        "its summary.md) without running anything",
    )
    args = parser.parse_args(argv)
    if args.reassess is not None:
        document = json.loads(args.reassess.read_text())
        for row in document["rows"]:
            assess(row, document["device"])
        args.reassess.write_text(json.dumps(document, indent=2) + "\n")
        args.reassess.with_suffix(".md").write_text(markdown(document))
        print(markdown(document))
        return 0
    if args.output_dir is None:
        args.output_dir = HERE / "results" / ("cuda" if args.device.startswith("cuda") else "")
    rows, failed = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for script, script_args, adapter in benchmarks(args.device, args.smoke):
            name = script[:-3]
            if args.only is not None and name not in args.only:
                continue
            output = Path(scratch) / f"{name}.json"
            start = time.perf_counter()
            result = subprocess.run(
                [sys.executable, str(HERE / script), *script_args, "--output", str(output)],
                capture_output=True,
                text=True,
            )
            seconds = time.perf_counter() - start
            if result.returncode != 0 or not output.exists():
                failed[name] = (result.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{name}: FAILED ({failed[name]})", file=sys.stderr)
                continue
            produced = adapter(json.loads(output.read_text()))
            for row in produced:
                row["benchmark"] = name
                assess(row, args.device)
            rows.extend(produced)
            print(f"{name}: {len(produced)} comparisons in {seconds:.0f} s", file=sys.stderr)
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for row in rows:
        row["measured"] = finished
    stored = args.output_dir / "summary.json"
    if args.merge and stored.exists():
        earlier = json.loads(stored.read_text())
        if (earlier["device"], earlier["smoke"]) != (args.device, args.smoke):
            raise SystemExit(
                f"--merge: {stored} holds a {earlier['device']} run (smoke {earlier['smoke']}), "
                f"not {args.device} (smoke {args.smoke})"
            )
        ran = {row["benchmark"] for row in rows} | set(failed)
        kept = [
            dict(row, measured=row.get("measured", earlier["finished"]))
            for row in earlier["rows"]
            if row.get("benchmark") not in ran
        ]
        order = [row.get("benchmark") for row in earlier["rows"]]
        rows = sorted(
            kept + rows, key=lambda row: order.index(row["benchmark"]) if row["benchmark"] in order else len(order)
        )
        failed = {**{k: v for k, v in earlier.get("failed", {}).items() if k not in ran}, **failed}
    document = {
        "device": args.device,
        "smoke": args.smoke,
        "machine": machine(),
        "finished": finished,
        "rows": rows,
        "failed": failed,
    }
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "summary.json").write_text(json.dumps(document, indent=2) + "\n")
    (args.output_dir / "summary.md").write_text(markdown(document))
    print(markdown(document))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
