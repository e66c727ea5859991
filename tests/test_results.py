"""Tests of transformer_book.results (recording the chapters' headline numbers) and of the
committed results files that the book's Results page is built from."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest
import torch
from notebook_source import without_magics

import transformer_book
from transformer_book import results
from transformer_book.results import default_results_dir, load_references, load_results, record

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "book" / "results"
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))

ENTRY = dict(
    dataset="Tiny Shakespeare (characters)", split="validation: last 10%", unit="nats/char", higher_is_better=False
)


@pytest.fixture
def full(monkeypatch, tmp_path):
    """The full profile, with TB_RESULTS_DIR pointing into a temporary folder."""
    monkeypatch.setenv("TB_PROFILE", "full")
    monkeypatch.setenv("TB_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("TB_DEVICE", raising=False)
    return tmp_path / "results"


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------
# record
# --------------------------------------------------------------------------------------


def test_record_writes_a_complete_entry_in_the_full_profile(full):
    path = record("02_masks", "validation loss", 2.0, wall_time_s=12.5, notes="256 windows", device="cpu", **ENTRY)
    assert path == full / "02_masks.json"
    document = _read(path)
    assert document["schema_version"] == results.SCHEMA_VERSION
    (entry,) = document["entries"]
    assert set(entry) == set(results.REQUIRED_KEYS)
    assert entry["value"] == 2.0 and isinstance(entry["value"], float)
    assert entry["profile"] == "full" and entry["device"] == "cpu"
    assert entry["torch_version"] == torch.__version__
    assert entry["package_version"] == transformer_book.__version__
    assert entry["wall_time_s"] == 12.5 and entry["notes"] == "256 windows"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", entry["recorded_at"])
    assert load_results(full) == [entry]


def test_record_writes_nothing_in_the_quick_profile(full):
    full.parent.joinpath("marker").write_text("")  # the temporary folder, before
    before = sorted(p.name for p in full.parent.iterdir())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TB_PROFILE", "quick")
        assert record("02_masks", "validation loss", 2.0, **ENTRY) is None
    assert sorted(p.name for p in full.parent.iterdir()) == before
    assert not full.exists()


def test_record_still_checks_its_arguments_in_the_quick_profile(full, monkeypatch):
    monkeypatch.setenv("TB_PROFILE", "quick")
    with pytest.raises(ValueError, match="finite"):
        record("02_masks", "validation loss", float("nan"), **ENTRY)


def test_record_replaces_the_entry_with_the_same_metric_and_keeps_the_others(full):
    record("03_heads", "loss, 1 head", 2.2, **ENTRY)
    record("03_heads", "loss, 4 heads", 2.0, **ENTRY)
    record("03_heads", "loss, 1 head", 2.1, **ENTRY)  # re-run: replaced in place
    entries = load_results(full)
    assert [(e["metric"], e["value"]) for e in entries] == [("loss, 1 head", 2.1), ("loss, 4 heads", 2.0)]
    record("04_positions", "loss", 1.9, **ENTRY)  # another chapter: another file
    assert sorted(p.name for p in full.iterdir()) == ["03_heads.json", "04_positions.json"]
    assert [e["chapter"] for e in load_results(full)] == ["03_heads", "03_heads", "04_positions"]


def test_record_writes_atomically_and_leaves_no_temporary_file(full, monkeypatch):
    record("02_masks", "loss", 2.0, **ENTRY)
    assert [p.name for p in full.iterdir()] == ["02_masks.json"]
    assert (full / "02_masks.json").stat().st_mode & 0o777 == 0o644

    def broken_replace(source, target):  # the process dies between writing and renaming
        raise OSError("disk gone")

    monkeypatch.setattr(results.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        record("02_masks", "loss", 3.0, **ENTRY)
    assert [p.name for p in full.iterdir()] == ["02_masks.json"]  # no temporary file left behind
    assert load_results(full)[0]["value"] == 2.0  # the old file, whole


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), torch.tensor(float("nan"))])
def test_record_rejects_a_non_finite_value(full, value):
    with pytest.raises(ValueError, match="finite"):
        record("02_masks", "loss", value, **ENTRY)
    assert not full.exists()


def test_record_accepts_a_one_element_tensor_and_rejects_bad_arguments(full):
    record("02_masks", "loss", torch.tensor(1.5), **ENTRY)
    assert load_results(full)[0]["value"] == 1.5
    with pytest.raises(ValueError, match="number"):
        record("02_masks", "loss", "1.5", **ENTRY)
    with pytest.raises(ValueError, match="number"):
        record("02_masks", "loss", True, **ENTRY)
    with pytest.raises(ValueError, match="single number"):
        record("02_masks", "loss", torch.ones(2), **ENTRY)
    with pytest.raises(ValueError, match="wall_time_s"):
        record("02_masks", "loss", 1.0, wall_time_s=-1.0, **ENTRY)
    with pytest.raises(ValueError, match="chapter"):
        record("../escape", "loss", 1.0, **ENTRY)
    with pytest.raises(ValueError, match="chapter"):
        record("references", "loss", 1.0, **ENTRY)  # the name of the reference numbers' file
    with pytest.raises(ValueError, match="metric"):
        record("02_masks", " ", 1.0, **ENTRY)


def test_default_results_dir_is_found_from_the_repository_or_nowhere(monkeypatch, tmp_path):
    monkeypatch.delenv("TB_RESULTS_DIR", raising=False)
    assert default_results_dir(ROOT) == ROOT / "book" / "results"
    assert default_results_dir(ROOT / "book") == ROOT / "book" / "results"  # notebooks run in book/
    assert default_results_dir(tmp_path) is None  # as on Colab: not in a clone of the repository
    monkeypatch.setenv("TB_RESULTS_DIR", str(tmp_path / "elsewhere"))
    assert default_results_dir(ROOT) == tmp_path / "elsewhere"


def test_record_outside_the_repository_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("TB_PROFILE", "full")
    monkeypatch.delenv("TB_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert record("02_masks", "loss", 2.0, **ENTRY) is None
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------
# load_results and load_references
# --------------------------------------------------------------------------------------


def _valid_entry(**changes) -> dict:
    entry = {key: "text" for key, kind in results.REQUIRED_KEYS.items() if kind is str}
    entry.update(chapter="02_masks", metric="loss", value=2.0, higher_is_better=False, profile="full", wall_time_s=None)
    entry.update(changes)
    return entry


def _write(folder: Path, name: str, document) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("{not json", "not a readable JSON file"),
        ([], "expected an object"),
        ({"schema_version": 2, "entries": []}, "schema_version"),
        ({"schema_version": 1, "entries": [_valid_entry(value=None)]}, "value has type NoneType"),
        ({"schema_version": 1, "entries": [_valid_entry(value="2.0")]}, "value has type str"),
        ({"schema_version": 1, "entries": [_valid_entry(higher_is_better=0)]}, "higher_is_better has type int"),
        ({"schema_version": 1, "entries": [_valid_entry(chapter="03_other")]}, "differs from the file name"),
        ({"schema_version": 1, "entries": [_valid_entry(profile="fast")]}, "unknown profile"),
        ({"schema_version": 1, "entries": [_valid_entry(), _valid_entry()]}, "appears twice"),
        (
            {"schema_version": 1, "entries": [{k: v for k, v in _valid_entry().items() if k != "device"}]},
            "missing keys",
        ),
        ('{"schema_version": 1, "entries": [' + json.dumps(_valid_entry()).replace("2.0", "NaN") + "]}", "not finite"),
    ],
)
def test_load_results_rejects_a_malformed_file_naming_it(tmp_path, document, problem):
    path = _write(tmp_path, "02_masks.json", document)
    with pytest.raises(ValueError, match=re.escape(problem)) as error:
        load_results(tmp_path)
    assert str(path) in str(error.value)


def test_load_results_accepts_integers_for_floats_and_skips_the_references(tmp_path):
    _write(tmp_path, "02_masks.json", {"schema_version": 1, "entries": [_valid_entry(value=2, wall_time_s=3)]})
    _write(tmp_path, results.REFERENCES_FILE, {"schema_version": 1, "references": []})
    (entry,) = load_results(tmp_path)
    assert entry["value"] == 2.0 and isinstance(entry["value"], float) and isinstance(entry["wall_time_s"], float)
    assert load_results(tmp_path / "missing") == []


def test_load_references_rejects_a_malformed_file_naming_it(tmp_path):
    reference = {key: "text" for key, kind in results.REFERENCE_KEYS.items() if kind is str}
    reference.update(value=1.5, higher_is_better=False)
    _write(tmp_path, results.REFERENCES_FILE, {"schema_version": 1, "references": [reference]})
    assert load_references(tmp_path)[0]["value"] == 1.5
    path = _write(tmp_path, results.REFERENCES_FILE, {"schema_version": 1, "references": [reference, reference]})
    with pytest.raises(ValueError, match="appears twice") as error:
        load_references(tmp_path)
    assert str(path) in str(error.value)
    _write(tmp_path, results.REFERENCES_FILE, {"schema_version": 1, "references": [{**reference, "value": "1.5"}]})
    with pytest.raises(ValueError, match="value has type str"):
        load_references(tmp_path)


def test_a_reference_applies_by_dataset_and_metric_pattern(tmp_path):
    from transformer_book.results import reference_applies

    reference = {key: "text" for key, kind in results.REFERENCE_KEYS.items() if kind is str}
    reference.update(dataset="Multi30k", value=36.5, higher_is_better=True)
    bleu, chrf = (
        {"dataset": "Multi30k", "metric": "BLEU, Transformer"},
        {"dataset": "Multi30k", "metric": "chrF, Transformer"},
    )
    assert reference_applies(reference, bleu) and reference_applies(reference, chrf)  # no pattern: every metric
    assert not reference_applies(reference, {**bleu, "dataset": "Tatoeba"})
    reference["metric_pattern"] = "^BLEU"
    assert reference_applies(reference, bleu) and not reference_applies(reference, chrf)
    _write(tmp_path, results.REFERENCES_FILE, {"schema_version": 1, "references": [reference]})
    assert load_references(tmp_path)[0]["metric_pattern"] == "^BLEU"
    _write(
        tmp_path, results.REFERENCES_FILE, {"schema_version": 1, "references": [{**reference, "metric_pattern": "(["}]}
    )
    with pytest.raises(ValueError, match="metric_pattern must be a regular expression"):
        load_references(tmp_path)


# --------------------------------------------------------------------------------------
# the committed files
# --------------------------------------------------------------------------------------


def _code(path: Path) -> str:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")


def test_committed_results_load_and_come_from_full_profile_runs():
    entries = load_results(RESULTS_DIR)
    assert entries, "book/results holds no results: run the chapters in the full profile"
    for entry in entries:
        assert entry["profile"] == "full", f"{entry['chapter']}: {entry['metric']!r} was recorded in {entry['profile']}"
        assert math.isfinite(entry["value"])


def _recording_notebooks() -> list[Path]:
    return [p for p in NOTEBOOKS if "results.record(" in _code(p)]


def test_some_chapters_record_results():
    assert _recording_notebooks(), "no chapter calls results.record"


@pytest.mark.parametrize("path", _recording_notebooks(), ids=lambda p: p.name)
def test_every_chapter_that_records_has_its_results_file(path: Path):
    source = _code(path)
    results_file = RESULTS_DIR / f"{path.stem}.json"
    assert results_file.exists(), (
        f"{path.name} calls results.record but {results_file.name} is missing: run it (full profile)"
    )
    assert f'"{path.stem}"' in source, f"{path.name} must record under its own name {path.stem!r}"


def _recorded_metric_templates(path: Path) -> list[re.Pattern]:
    """The metric names a chapter passes to ``record(chapter, metric, ...)`` as f-strings, as
    patterns: the literal parts as they are, every ``{...}`` field one or more characters."""
    tree = ast.parse(without_magics(_code(path)))  # IPython magics are not Python
    # the argument that names the metric: record's second; and a chapter's own helper's argument that it
    # passes on to record as the metric (def record_sst(metric, ...): ... record(chapter, metric, ...))
    metric_argument = {"record": 1}
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        parameters = [a.arg for a in function.args.args]
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            if (
                callee == "record"
                and len(call.args) >= 2
                and isinstance(call.args[1], ast.Name)
                and call.args[1].id in parameters
            ):
                metric_argument[function.name] = parameters.index(call.args[1].id)
    patterns = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        index = metric_argument.get(name)
        if index is not None and len(node.args) > index and isinstance(node.args[index], ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in node.args[index].values]
            patterns.append(re.compile("".join(parts)))
    return patterns


def test_every_committed_result_is_still_recorded_by_its_chapter():
    """A metric renamed or dropped in a chapter leaves a stale entry behind: catch it. A metric
    counts as recorded when its name stands in the chapter's code as a string, or matches an
    f-string that the chapter passes to ``record`` as the metric."""
    for entry in load_results(RESULTS_DIR):
        notebook = ROOT / "book" / f"{entry['chapter']}.ipynb"
        assert notebook.exists(), f"results for {entry['chapter']!r}, which is not a chapter notebook"
        recorded = json.dumps(entry["metric"]) in _code(notebook) or any(
            pattern.fullmatch(entry["metric"]) for pattern in _recorded_metric_templates(notebook)
        )
        assert recorded, (
            f"{entry['chapter']}: {entry['metric']!r} is no longer recorded; delete it from {entry['chapter']}.json"
        )


def test_the_gpu_results_come_from_the_gpu_script_and_sit_beside_the_cpu_ones():
    """``book/results/cuda`` holds what ``benchmarks/gpu_recipes.py`` measured on a GPU: every
    entry was computed on CUDA in the full profile, names a chapter of the book, is a metric the
    script still records, and, where the chapter records the same metric on its CPU run, keeps
    the same direction and unit so that the Results page can set the two side by side."""
    gpu = load_results(RESULTS_DIR / "cuda")
    assert gpu, "book/results/cuda holds no results: run benchmarks/gpu_recipes.py on a GPU"
    script = (ROOT / "benchmarks" / "gpu_recipes.py").read_text(encoding="utf-8")
    cpu = {(e["chapter"], e["metric"]): e for e in load_results(RESULTS_DIR)}
    for entry in gpu:
        assert entry["device"].startswith("cuda") and entry["profile"] == "full", entry
        assert (ROOT / "book" / f"{entry['chapter']}.ipynb").exists(), entry["chapter"]
        assert json.dumps(entry["metric"]) in script, f"{entry['metric']!r} is no longer recorded by gpu_recipes.py"
        twin = cpu.get((entry["chapter"], entry["metric"]))
        if twin is not None:
            assert (twin["unit"], twin["higher_is_better"]) == (entry["unit"], entry["higher_is_better"]), entry


def test_a_metric_made_by_an_f_string_is_recognised_and_a_stale_one_is_not(tmp_path):
    cell = {
        "cell_type": "code",
        "metadata": {},
        "outputs": [],
        "execution_count": None,
        "source": [
            "%matplotlib inline\n",
            "for label in ('a', 'b'):\n",
            "    results.record('09_x', f'accuracy at {n:,} labels, {label}', 0.5)\n",
            "record('09_x', 'plain', 1.0)\n",
            "other('09_x', f'not a metric {label}')\n",
        ],
    }
    path = tmp_path / "09_x.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (pattern,) = _recorded_metric_templates(path)
    assert pattern.fullmatch("accuracy at 1,000 labels, a")
    assert not pattern.fullmatch("accuracy at 1,000 labels") and not pattern.fullmatch("accuracy, a")


def test_committed_references_parse_and_cite_the_bibliography():
    references = load_references(RESULTS_DIR)
    assert references, "book/results/references.json is missing or empty"
    datasets = {entry["dataset"] for entry in load_results(RESULTS_DIR)}
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    keys = set(re.findall(r"^\s*@\w+\s*\{\s*([^,\s]+)\s*,", bib, re.MULTILINE))
    for reference in references:
        assert reference["dataset"] in datasets, f"{reference['id']}: no result is measured on {reference['dataset']!r}"
        assert reference["value"] is not None or reference["comparability"], (
            f"{reference['id']}: say why there is no number"
        )
        assert reference["citation"] in keys, (
            f"{reference['id']} cites {reference['citation']!r}, which is not in book/references.bib; add:\n"
            + reference.get("bibtex", "(its BibTeX entry)")
        )
