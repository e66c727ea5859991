"""A smoke run of the benchmark harness: every comparison the chapters ask for produces a row with
finite times, a ratio, the issue's aim and whether it is met, in one run, and the Markdown table
names the machine. Tiny sizes, one round: this checks the harness, not the speed (the timings of a
busy CI machine mean nothing). Also the shared timing loop and the judging of aims per device."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

EXPECTED = {
    "multi-head attention, forward + backward": 2,
    "attention function with a padding mask, forward + backward": 1,
    "GPT (chapter 9), training step": 1,
    "BERT (chapter 13), pretraining step": 1,
    "translation Transformer, training step": 1,
    "gpt generation, 8 new tokens": 1,
    "translator generation, 8 new tokens": 1,
    "beam search, 4 sentences, beam 5": 1,
    "SmolLM2-135M generation, 8 new tokens": 1,
}
NO_NUMERIC_AIM = {"mha_explicit", "sdpa_function", "beam_search"}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    sys.path.insert(0, str(BENCHMARKS))  # run_all's siblings import `timing`
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    with_corpus = bool(os.environ.get("TB_DATA_DIR"))  # word2vec reads WikiText-2
    only = (
        []
        if with_corpus
        else [
            "--only",
            "mha_speed",
            "attention_speed",
            "gpt_training_speed",
            "bert_pretraining_speed",
            "translation_training_speed",
            "kv_cache_speed",
            "beam_search_speed",
            "smollm2_generation",
        ]
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(BENCHMARKS / "run_all.py"), "--smoke", "--output-dir", str(out), *only]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((out / "summary.json").read_text()), (out / "summary.md").read_text(), with_corpus


def test_the_harness_runs_every_comparison_side_by_side(smoke):
    document, table, with_corpus = smoke
    assert document["smoke"] is True and document["failed"] == {}
    counts = {}
    for row in document["rows"]:
        counts[row["comparison"]] = counts.get(row["comparison"], 0) + 1
        assert math.isfinite(row["book_median"]) and row["book_median"] > 0
        if row["baseline_median"] is not None:
            assert row["ratio"] == pytest.approx(row["book_median"] / row["baseline_median"])
    for comparison, n in EXPECTED.items():
        assert counts.get(comparison) == n, (comparison, counts)
    if with_corpus:
        assert any(c.startswith("word2vec skipgram") for c in counts)
        assert any(c.startswith("PPMI + SVD word vectors, WikiText-2") for c in counts)
    assert "smoke sizes" in table and document["machine"]["torch"] in table
    assert table.count("\n| ") == len(document["rows"]) + 1  # header + one line per row


def test_every_row_carries_its_aim_and_whether_it_is_met(smoke):
    document, table, _ = smoke
    assert document["device"] == "cpu"
    by_key = {}
    for row in document["rows"]:
        by_key[row["key"]] = row
        assert row["aim"] and row["aim_source"].startswith("issue"), row
        assert row["met"] in (True, False, None), row
        assert row["aim"] in table
        if row["met"] is False:  # a miss always says why
            assert row["why"], row
        if row["key"] in NO_NUMERIC_AIM:  # the issue set no number, and the row says so
            assert row["aim"].startswith("no aim set") and row["met"] is None, row
    # numeric aims judged against the ratio the row reports
    assert by_key["mha_fused"]["met"] == (by_key["mha_fused"]["ratio"] <= 1.10)
    assert "issue 3" in by_key["mha_fused"]["aim_source"]
    translation = by_key["translation_training"]
    assert translation["met"] == (translation["ratio"] <= 1.0) and translation["aim_source"] == "issue 5, issue 22"
    for key in ("gpt_training", "bert_pretraining"):  # a step no longer than the torch.nn twin's
        assert by_key[key]["met"] == (by_key[key]["ratio"] <= 1.0) and by_key[key]["aim_source"] == "issue 22"
    # the KV-cache and SmolLM2 aims are stated for 256 new tokens: the smoke run's 8 are not judged against them
    assert by_key["smollm2_generation"]["conditions"]["same_tokens"] is True
    for key in ("kv_cache_gpt", "kv_cache_translator", "smollm2_generation"):
        assert by_key[key]["met"] is None and "256 new tokens" in by_key[key]["why"]
    # the word2vec and PPMI aims are stated for the whole corpus: the smoke run's part is not judged against them
    if "word2vec_skipgram" in by_key:
        for key in ("word2vec_skipgram", "ppmi_svd"):
            assert by_key[key]["aim_source"] == "issue 7" and by_key[key]["met"] is None
            assert "whole WikiText-2" in by_key[key]["why"] and "part" in by_key[key]["comparison"]


def test_a_reason_belongs_to_the_device_it_was_measured_on():
    run_all = _load("run_all")
    assert set(run_all.AIMS) >= {"mha_fused", "translation_training", "kv_cache_gpt", "word2vec_cbow", "ppmi_svd"}
    for key, per_device in run_all.AIMS.items():
        assert set(per_device) == {"cpu", "cuda"}, key

    def row(ratio: float, **conditions):
        return {
            "key": "word2vec_cbow",
            "ratio": ratio,
            "book_median": 4.0 * ratio,
            "conditions": {"whole_corpus": True, **conditions},
        }

    cpu = run_all.assess(row(4.4, threads=2, cpu_count=2), "cpu")
    assert cpu["met"] is False and cpu["why"] == run_all.REASONS["word2vec_cbow"]["cpu"].text
    assert cpu["why_evidence"]
    fine = run_all.assess(row(1.5, threads=2, cpu_count=2), "cpu")
    assert fine["met"] is True and fine["why"] is None
    # on a GPU: gensim on all 16 cores (issue 11) and at least 5x (issue 7); no CPU profile is reused
    gpu = run_all.assess(row(0.5, threads=16, cpu_count=16), "cuda:0")
    assert gpu["met"] is False and gpu["why"] == run_all.REASONS["word2vec_cbow"]["cuda"].text
    assert gpu["why"] != run_all.REASONS["word2vec_cbow"]["cpu"].text and "H100" in gpu["why_evidence"]
    # a row whose cause was measured on the CPU only says so on a GPU, reusing nothing
    sdpa = run_all.assess({"key": "sdpa_function", "ratio": 4.0, "book_median": 4.0, "conditions": {}}, "cuda")
    assert "cpu" in run_all.REASONS["sdpa_function"] and "cuda" not in run_all.REASONS["sdpa_function"]
    assert sdpa["why"] == run_all.NOT_ANALYSED and sdpa["why_evidence"] is None
    assert "issue 7" in gpu["aim_source"] and "issue 11" in gpu["aim_source"]
    assert run_all.assess(row(0.1, threads=16, cpu_count=16), "cuda")["met"] is True
    # gensim on fewer cores than the machine has: issue 11's aim does not apply, so nothing is claimed
    partial = run_all.assess(row(0.1, threads=2, cpu_count=16), "cuda")
    assert partial["met"] is None and "all CPU cores" in partial["why"]
    # ... while a miss of an aim that does apply is still a miss
    assert run_all.assess(row(0.5, threads=2, cpu_count=16), "cuda")["met"] is False
    # the PPMI aim is a time, not a ratio
    ppmi = {"key": "ppmi_svd", "ratio": None, "conditions": {"whole_corpus": True}}
    assert run_all.assess({**ppmi, "book_median": 8_000.0}, "cpu")["met"] is True
    late = run_all.assess({**ppmi, "book_median": 75_000.0}, "cpu")
    assert late["met"] is False and late["why"] == run_all.NOT_ANALYSED


def test_the_shared_timing_loop_warms_up_then_rotates_the_order():
    timing = _load("timing")
    import torch

    calls: list[str] = []
    contenders = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    result = timing.interleaved(contenders, torch.device("cpu"), 4, warmup=2)
    assert calls[:6] == list("aabbcc")  # the warm-up, untimed
    assert calls[6:] == list("abcbcacababc")  # one call a block, order rotating
    assert result.calls_per_block == 1
    assert all(len(s) == 4 and min(s) >= 0 for s in result.samples.values())
    assert result.best("a") <= result.median("a") <= result.worst("a")
    # a block lasts at least min_block_s: a 1 ms call needs several calls to fill 5 ms
    import time

    slow = timing.interleaved({"x": lambda: time.sleep(0.001)}, torch.device("cpu"), 2, warmup=0, min_block_s=0.005)
    assert 2 <= slow.calls_per_block <= 5 and slow.best("x") >= 0.001
    with pytest.raises(ValueError):
        timing.interleaved(contenders, torch.device("cpu"), 0)


# ---- the GPU runs: their scripts at smoke sizes on the CPU, and their stored results -------------


def test_the_speedrun_script_trains_validates_and_reports(tmp_path):
    """gpt_speedrun.py --smoke: two complete runs through fit, a validation curve over every window,
    the step that reached the target, and the same numbers in its JSON and Markdown."""
    output = tmp_path / "speedrun.json"
    command = [
        sys.executable,
        str(BENCHMARKS / "gpt_speedrun.py"),
        "--smoke",
        "--device",
        "cpu",
        "--steps",
        "8",
        "12",
        "--eval-every",
        "4",
        "--log-every",
        "2",
        "--target",
        "9.0",
        "--quiet",
        "--output",
        str(output),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads(output.read_text())
    assert [r["steps"] for r in document["runs"]] == [8, 12]
    for run in document["runs"]:
        assert [s for s, _, _ in run["val_curve"]] == list(range(4, run["steps"] + 1, 4))
        assert all(math.isfinite(v) and v > 0 for _, _, v in run["val_curve"])
        assert run["target_step"] == 4  # a loss below 9 nats is reached at the first validation
        assert run["target_train_s"] == pytest.approx(run["val_curve"][0][1])
        assert run["mfu"] is None  # no datasheet peak for a CPU
    assert document["validation_windows"] == (2_000 - 1) // 32
    assert output.with_suffix(".md").read_text().count("\n| ") == 1 + 2  # the header and two runs


def test_the_stored_gpu_tables_are_rendered_from_their_results():
    """The Markdown the Performance page includes is what the scripts render from the stored JSON."""
    for script, name in (("gpt_speedrun", "gpt_speedrun_cuda"), ("gpt_mfu", "gpt_mfu_cuda")):
        module = _load(script)
        stored = BENCHMARKS / "results" / f"{name}.json"
        assert module.markdown(json.loads(stored.read_text())) == stored.with_suffix(".md").read_text(), name


def test_the_stored_gpu_results_support_the_pages_claims():
    """The numbers the Performance page and README state, read back from the stored H100 results."""
    speedrun = json.loads((BENCHMARKS / "results" / "gpt_speedrun_cuda.json").read_text())
    hits = [r for r in speedrun["runs"] if r["target_step"] is not None and r.get("compile_mode") == "reduce-overhead"]
    assert hits and all(r["target_train_s"] <= 45 and r["target_train_s_without_compile"] <= 21 for r in hits)
    mfu = json.loads((BENCHMARKS / "results" / "gpt_mfu_cuda.json").read_text())
    best = max(r["mfu"] for r in mfu["runs"])
    assert 0.40 <= best < 0.50  # the aim of 50% is missed, and the page says so
    ceiling = mfu["product_ceiling"]["batch 32"]["ceiling_tflops"] * 1e12 / (mfu["datasheet_peak_tflops"] * 1e12)
    assert 0.49 < ceiling < 0.51


def test_the_mfu_script_runs_and_reports_without_a_datasheet_peak(tmp_path):
    """gpt_mfu.py at smoke sizes on the CPU: one run through fit for each setting of the grid
    (here Q/K/V stacked and separate), its tokens/s, and no MFU (the CPU has no datasheet peak),
    in its JSON and its Markdown; both runs start from the same weights and see the same
    batches, so their losses agree to rounding."""
    output = tmp_path / "mfu.json"
    command = [
        sys.executable,
        str(BENCHMARKS / "gpt_mfu.py"),
        "--device",
        "cpu",
        "--config",
        "smoke",
        "--batch",
        "4",
        "--steps",
        "20",
        "--log-every",
        "5",
        "--compile",
        "off",
        "--stack-qkv",
        "on",
        "off",
        "--quiet",
        "--output",
        str(output),
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-2000:]
    stacked, separate = json.loads(output.read_text())["runs"]
    assert (stacked["stacked_qkv"], separate["stacked_qkv"]) == (True, False)
    for run in (stacked, separate):
        assert run["mfu"] is None and run["tokens_per_s"] > 0 and math.isfinite(run["final_train_loss"])
    assert stacked["final_train_loss"] == pytest.approx(separate["final_train_loss"], rel=1e-4)
    table = output.with_suffix(".md").read_text()
    assert "| smoke | off | 4 | - | stacked |" in table and "| smoke | off | 4 | - | separate |" in table


def test_the_mfu_ceiling_adds_up_each_products_time(monkeypatch):
    """gpt_mfu.py's ceiling with made-up product times (1..7 ms, in the order the products are
    timed): the ideal step is forward + two backward products per weight plus attention per layer,
    once with Q, K, V, O separate and flash attention, once with Q, K, V stacked and the faster
    attention kernel; the ceiling rate is the step's FLOPs over that time."""
    module = _load("gpt_mfu")
    times = iter([1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 7e-3, 6e-3])  # d x d, d x 3d, ffn in, ffn out, output, flash, cudnn
    monkeypatch.setattr(module, "event_median", lambda fn, device, repeats=20: next(times))
    config = module.GPTConfig(dropout=0.0, **module.CONFIGS["smoke"])
    c = module.product_ceiling(config, 2, module.torch.device("cpu"))
    L, tokens, d, f, V = config.n_layers, 2 * config.context, config.d_model, config.ff_width, config.vocab_size
    separate_s = 3 * (4 * L * 1e-3 + L * 3e-3 + L * 4e-3 + 5e-3) + L * 7e-3
    stacked_s = 3 * (L * 1e-3 + L * 2e-3 + L * 3e-3 + L * 4e-3 + 5e-3) + L * 6e-3
    weight_flops = 3 * 2 * tokens * (L * (4 * d * d + 2 * d * f) + d * V)
    attention_flops = L * 12 * 2 * config.context**2 * d
    assert c["ideal_step_ms"] == pytest.approx(1e3 * separate_s)
    assert c["ceiling_tflops"] == pytest.approx((weight_flops + attention_flops) / separate_s / 1e12)
    stacked = c["stacked_qkv_fastest_attention"]
    assert stacked["attention"].startswith("attention fwd+bwd, cudnn")
    assert stacked["ideal_step_ms"] == pytest.approx(1e3 * stacked_s)
    assert stacked["ceiling_tflops"] == pytest.approx((weight_flops + attention_flops) / stacked_s / 1e12)
    assert c["tflops_by_product"]["Q, K, V stacked"] == pytest.approx(2 * tokens * d * 3 * d / 2e-3 / 1e12)
