"""A smoke run of the benchmark harness: every comparison the chapters ask for produces a row with
finite times and a ratio, in one run, and the Markdown table names the machine. Tiny sizes, one
round: this checks the harness, not the speed (the timings of a busy CI machine mean nothing)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

EXPECTED = {
    "multi-head attention, forward + backward": 2,
    "GPT (chapter 9), training step": 1,
    "BERT (chapter 13), pretraining step": 1,
    "translation Transformer, training step": 1,
    "gpt generation, 8 new tokens": 1,
    "translator generation, 8 new tokens": 1,
    "beam search, 4 sentences, beam 5": 1,
}


def test_the_harness_runs_every_comparison_side_by_side(tmp_path):
    with_corpus = bool(os.environ.get("TB_DATA_DIR"))                 # word2vec reads WikiText-2
    only = [] if with_corpus else ["--only", "mha_speed", "gpt_training_speed", "bert_pretraining_speed",
                                   "translation_training_speed", "kv_cache_speed", "beam_search_speed"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--smoke", "--output-dir",
                             str(tmp_path), *only], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads((tmp_path / "summary.json").read_text())
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
        assert any(c.startswith("word2vec skipgram") for c in counts) and "PPMI + SVD word vectors, WikiText-2" in counts
    table = (tmp_path / "summary.md").read_text()
    assert "smoke sizes" in table and document["machine"]["torch"] in table
    assert table.count("\n| ") == len(document["rows"]) + 1                  # header + one line per row
