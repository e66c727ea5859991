"""One command for a GPU machine: does every chapter run on CUDA, and how fast are its GPU paths?

    python benchmarks/gpu_check.py [--output-dir DIR] [--deadline 480] [--chapters 01 07 ...]
                                   [--skip-tests] [--skip-chapters] [--skip-benchmarks]

Made for a machine that has PyTorch with CUDA and nothing else reachable (no package index, no
corpus server, no model hub): ``benchmarks/gpu_carry.py``, run beforehand where the network is,
puts the missing Python packages (as wheels), the corpora and the real checkpoints that fit into
one folder to carry there. In order, each step given what is left of ``--deadline`` seconds:

1. the unit tests that exercise the GPU paths: ``tests/test_devices.py`` with
   ``TB_TEST_DEVICE=cuda`` (every model of the shared suite against the CPU, cached decoding, the
   fused attention in mixed precision, a compiled mixed-precision ``fit``) and
   ``tests/test_gpu_paths.py``;
2. every chapter top to bottom in the quick profile on CUDA (``TB_PROFILE=quick``,
   ``TB_DEVICE=cuda``), each in a fresh interpreter, its code cells run in order as a script
   (IPython's magics left out, figures drawn off screen): whether it ran, the first error and the
   seconds, not its outputs (those are the CPU's, in the notebooks); a chapter that needs a real
   checkpoint the cache does not hold is reported as skipped, with the name of the checkpoint;
3. the GPU rows of ``benchmarks/run_all.py``: the KV cache, the GPT's training speed and MFU, and
   the real small language model's generation when its checkpoint is there.

Writes ``DIR/gpu_check.json`` (default ``benchmarks/results/cuda``): the device, versions, and each
step's results. Without CUDA (a dry run on a CPU) every CUDA step is skipped with a message that
says so, and the rest (the environment, the chapters' scripts, the carried files) is still checked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHAPTER_LIMIT_S = 150
"""The most one chapter may take in the quick profile (on two CPU cores the slowest takes about 90 s)."""
GPU_BENCHMARKS = ("kv_cache_speed", "gpt_training_speed", "smollm2_generation")
"""The scripts of ``run_all.py`` whose rows ask for a GPU."""


def chapter_script(notebook: Path) -> list[str]:
    """The code cells of ``notebook``, in order, as Python: an IPython magic or shell escape
    becomes ``pass`` (it keeps a block such as ``except ImportError: %pip install ...`` valid)."""
    sys.path.insert(0, str(ROOT / "tests"))  # the tests' reader of notebook code: one rule for magics
    try:
        from notebook_source import without_magics
    finally:
        sys.path.remove(str(ROOT / "tests"))
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [without_magics("".join(cell["source"])) for cell in cells if cell["cell_type"] == "code"]


def _without_ipython() -> None:
    """A stand-in ``IPython.display`` where IPython is not installed (chapter 2 shows a table with
    ``display(Markdown(...))``): the check asks whether the code runs, not how it looks."""
    import importlib.util

    if importlib.util.find_spec("IPython") is None:
        import types

        display = types.ModuleType("IPython.display")
        display.display = lambda *objects, **kwargs: None
        display.Markdown = display.HTML = str
        package = types.ModuleType("IPython")
        package.display = display
        sys.modules.update({"IPython": package, "IPython.display": display})


def run_chapter(notebook: Path) -> None:
    """Run one chapter's code cells in this interpreter (the child process of :func:`check_chapters`),
    from the chapter's folder; one JSON line per cell on standard output."""
    import matplotlib

    matplotlib.use("Agg")
    _without_ipython()
    notebook = notebook.resolve()
    os.chdir(notebook.parent)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    for index, source in enumerate(chapter_script(notebook)):
        start = time.perf_counter()
        exec(compile(source, f"{notebook.name}, code cell {index}", "exec"), namespace)
        print(json.dumps({"cell": index, "seconds": round(time.perf_counter() - start, 3)}), flush=True)
        import matplotlib.pyplot as plt

        plt.close("all")


def _missing_checkpoints(notebook: Path) -> list[str]:
    """The real checkpoints the chapter loads that the cache does not hold (the machine cannot
    fetch them)."""
    from transformer_book.pretrained import catalogue

    text = notebook.read_text(encoding="utf-8")
    loaders = {"load_encoder(": "all-MiniLM-L6-v2", "load_language_model(": "SmolLM2-135M-Instruct"}
    missing = []
    for name in sorted({name for call, name in loaders.items() if call in text}):
        try:
            catalogue.fetch_checkpoint(name, download=False)  # the cache only: verified, or refused
        except catalogue.CheckpointError:
            missing.append(name)
    return missing


def check_chapters(chapters: list[Path], deadline: float, cuda: bool) -> list[dict[str, Any]]:
    """Each chapter in a fresh interpreter, in the quick profile on CUDA: its status (``ran``,
    ``failed`` with the error's last line, ``timeout``, or ``skipped`` with why) and seconds."""
    rows = []
    for notebook in chapters:
        name = notebook.stem
        try:  # a chapter whose code does not even parse fails here, on any machine
            for index, source in enumerate(chapter_script(notebook)):
                compile(source, f"{notebook.name}, code cell {index}", "exec")
        except SyntaxError as err:
            rows.append({"chapter": name, "status": "failed", "error": f"SyntaxError: {err}"})
            continue
        if not cuda:
            rows.append({"chapter": name, "status": "skipped", "why": "no CUDA device here (a dry run)"})
            continue
        missing = _missing_checkpoints(notebook)
        if missing:
            rows.append({"chapter": name, "status": "skipped", "why": f"not in the cache: {', '.join(missing)}"})
            continue
        left = deadline - time.monotonic()
        if left < 20:
            rows.append({"chapter": name, "status": "skipped", "why": "the deadline was reached"})
            continue
        env = {**os.environ, "TB_PROFILE": "quick", "TB_DEVICE": "cuda", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
        start = time.perf_counter()
        try:
            result = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--run-chapter", str(notebook)],
                capture_output=True,
                text=True,
                env=env,
                timeout=min(CHAPTER_LIMIT_S, left),
            )
        except subprocess.TimeoutExpired:
            rows.append({"chapter": name, "status": "timeout", "seconds": round(time.perf_counter() - start, 1)})
            continue
        seconds = round(time.perf_counter() - start, 1)
        cells = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"cell"')]
        row = {"chapter": name, "seconds": seconds, "cells": len(cells)}
        if result.returncode == 0:
            row["status"] = "ran"
        else:
            row["status"] = "failed"
            row["error"] = (result.stderr.strip().splitlines() or ["no error message"])[-1]
        rows.append(row)
        print(f"  {name}: {row['status']} in {seconds:.0f} s {row.get('error', '')}", file=sys.stderr, flush=True)
    return rows


def check_tests(deadline: float, cuda: bool) -> dict[str, Any]:
    """The GPU paths' unit tests, by pytest: its exit status and the last line of its report."""
    if not cuda:
        return {"status": "skipped", "why": "no CUDA device here (a dry run)"}
    files = [str(ROOT / "tests" / name) for name in ("test_devices.py", "test_gpu_paths.py")]
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "TB_TEST_DEVICE": "cuda"},
            timeout=max(10.0, deadline - time.monotonic()),
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": round(time.perf_counter() - start, 1)}
    lines = result.stdout.strip().splitlines() or ["no output"]
    return {
        "status": "passed" if result.returncode == 0 else "failed",
        "summary": lines[-1],
        "failures": [line for line in lines if line.startswith("FAILED")][:20],
        "seconds": round(time.perf_counter() - start, 1),
    }


def check_benchmarks(out: Path, deadline: float, cuda: bool) -> dict[str, Any]:
    """The GPU rows of ``run_all.py`` (written to ``out/benchmarks``)."""
    if not cuda:
        return {"status": "skipped", "why": "no CUDA device here (a dry run)"}
    left = deadline - time.monotonic()
    if left < 30:
        return {"status": "skipped", "why": "the deadline was reached"}
    target = out / "benchmarks"
    command = [sys.executable, str(HERE / "run_all.py"), "--device", "cuda", "--output-dir", str(target)]
    start = time.perf_counter()
    try:
        result = subprocess.run(
            [*command, "--only", *GPU_BENCHMARKS], capture_output=True, text=True, cwd=ROOT, timeout=left
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": round(time.perf_counter() - start, 1)}
    summary = target / "summary.json"
    rows = json.loads(summary.read_text())["rows"] if summary.exists() else []
    return {
        "status": "ran" if result.returncode == 0 else "failed",
        "rows": [{k: row.get(k) for k in ("key", "comparison", "book_median", "ratio", "unit", "met")} for row in rows],
        "stderr": result.stderr.strip().splitlines()[-5:],
        "seconds": round(time.perf_counter() - start, 1),
    }


def environment(cuda: bool) -> dict[str, Any]:
    import torch

    from transformer_book import training

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": "cpu",
        "data": "a local copy, from $TB_DATA_DIR" if os.environ.get("TB_DATA_DIR") else "the cache",
    }
    if cuda:
        facts.update(
            device="cuda",
            gpu=torch.cuda.get_device_name(0),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            mixed_precision=str(training.mixed_precision("cuda")),
        )
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, default=HERE / "results" / "cuda")
    parser.add_argument("--deadline", type=float, default=480.0, help="seconds for the whole check (default 480)")
    parser.add_argument("--chapters", nargs="*", default=None, help="chapter numbers (default: all)")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-chapters", action="store_true")
    parser.add_argument("--skip-benchmarks", action="store_true")
    parser.add_argument("--run-chapter", type=Path, help=argparse.SUPPRESS)  # the child process of one chapter
    args = parser.parse_args(argv)
    if args.run_chapter is not None:
        run_chapter(args.run_chapter)
        return 0

    import torch

    deadline = time.monotonic() + args.deadline
    cuda = torch.cuda.is_available()
    if not cuda:
        print("gpu_check: no CUDA device here: a dry run; the CUDA steps are skipped", file=sys.stderr)
    chapters = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        chapters = [path for path in chapters if path.name[:2] in {c.zfill(2) for c in args.chapters}]
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report["environment"] = environment(cuda)
    report["tests"] = {"status": "skipped", "why": "--skip-tests"} if args.skip_tests else check_tests(deadline, cuda)
    print(f"gpu_check: tests {report['tests']['status']}", file=sys.stderr, flush=True)
    report["chapters"] = [] if args.skip_chapters else check_chapters(chapters, deadline, cuda)
    report["benchmarks"] = (
        {"status": "skipped", "why": "--skip-benchmarks"}
        if args.skip_benchmarks
        else check_benchmarks(args.output_dir, deadline, cuda)
    )
    report["seconds"] = round(args.deadline - (deadline - time.monotonic()), 1)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    ran = sum(row["status"] == "ran" for row in report["chapters"])
    print(
        f"gpu_check: device {report['environment']['device']}; tests {report['tests']['status']}; "
        f"chapters ran {ran} of {len(report['chapters'])}; benchmarks {report['benchmarks']['status']}; "
        f"{report['seconds']:.0f} s; {args.output_dir / 'gpu_check.json'}",
        file=sys.stderr,
    )
    failed = report["tests"]["status"] == "failed" or any(row["status"] == "failed" for row in report["chapters"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
