"""Make the folder that ``benchmarks/gpu_check.py`` needs on a GPU machine with no network.

    python benchmarks/gpu_carry.py [--into .gpu_carry] [--data DIR]

Run it where the package index and the corpora are reachable (or ``$TB_DATA_DIR`` holds them).
It writes, into ``--into`` (git ignores ``.gpu_carry/``):

* ``data/``: the corpora the chapters read, copied from ``--data`` (default ``$TB_DATA_DIR``) with
  their checksums checked against the pinned ones (``transformer_book.data``);
* ``wheels/``: the package's runtime dependencies that a PyTorch GPU image usually lacks
  (:data:`NOT_ON_GPU_IMAGES`), as wheels for CPython 3.12 on x86-64 Linux;
* ``cache/``: the real checkpoints of the cache that fit in what is left of :data:`LIMIT_MIB`
  (the device tool's limit on what travels, the working tree included); a chapter whose
  checkpoint stays behind is reported as skipped there;
* ``run.sh``: the command to run there, from the repository's root: it installs the wheels into
  ``/tmp/site``, points the package at the carried data and cache, and runs ``gpu_check.py``
  with ``$OUT`` (or ``benchmarks/results/cuda``) as its output folder.

It prints what travels and its size. The folder is the device tool's ``carry`` entry.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_MIB = 64
"""What one call of the device tool carries: the working tree and the carried folders together."""
NOT_ON_GPU_IMAGES = ("gguf==0.19.0",)
"""Runtime dependencies missing from the GPU image this was made for (its package list lacks
them); gensim is left out: its wheel alone (27 MB) would crowd out the corpora, and the chapters that
read its word lists (10, 11) are reported as skipped there."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
RUN = """#!/bin/bash
# Run from the repository's root on the GPU machine (made by benchmarks/gpu_carry.py).
set -e
carry="$(cd "$(dirname "$0")" && pwd)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$carry"/wheels/*.whl
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" TB_DATA_DIR="$carry/data" TB_CACHE_DIR="$carry/cache"
export PYTHONUNBUFFERED=1
python3 benchmarks/gpu_check.py --output-dir "${OUT:-benchmarks/results/cuda}" "$@"
"""


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _tracked_size() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / f.decode()).stat().st_size for f in files if f and (ROOT / f.decode()).is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--into", type=Path, default=ROOT / ".gpu_carry")
    parser.add_argument("--data", type=Path, default=os.environ.get("TB_DATA_DIR"))
    args = parser.parse_args(argv)
    if args.data is None or not Path(args.data).is_dir():
        sys.exit("gpu_carry: give --data DIR (or set TB_DATA_DIR): the folder of the corpora to carry")
    if args.into.exists():
        shutil.rmtree(args.into)
    args.into.mkdir(parents=True)

    from transformer_book import data
    from transformer_book.pretrained import catalogue

    # the corpora the registry pins, each file checked against its pinned checksum as it is copied
    cache = data.cache_dir()
    os.environ["TB_DATA_DIR"] = str(args.data)
    for corpus in data.CORPORA.values():
        for remote in corpus.files:
            try:
                source = data.fetch(corpus, remote.name, download=False)
            except data.DataError as err:
                print(f"  {corpus.name}/{remote.name}: not here ({type(err).__name__}), stays behind")
                continue
            target = args.into / "data" / corpus.name / remote.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)

    wheels = args.into / "wheels"
    platforms = [flag for p in PLATFORMS for flag in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
         "3.12", "--implementation", "cp", *platforms, "-d", str(wheels), *NOT_ON_GPU_IMAGES],
        check=True,
    )  # fmt: skip

    budget = LIMIT_MIB * 2**20 - _tracked_size() - _size(args.into) - 2**20  # a MiB to spare
    for name in catalogue.CATALOGUE:
        try:
            fetched = catalogue.fetch_checkpoint(name, download=False)
        except catalogue.CheckpointError:
            print(f"  {name}: not in the cache here, stays behind")
            continue
        size = sum(Path(p).stat().st_size for p in fetched.paths.values())
        if size > budget:
            print(
                f"  {name}: {size / 2**20:.0f} MiB, more than the {max(budget, 0) / 2**20:.0f} MiB left: stays behind"
            )
            continue
        inside = fetched.folder.resolve().is_relative_to(cache.resolve())
        where = fetched.folder.resolve().relative_to(cache.resolve()) if inside else Path("checkpoints", name)
        folder = args.into / "cache" / where
        folder.mkdir(parents=True, exist_ok=True)
        for path in fetched.paths.values():
            shutil.copy2(path, folder)
        budget -= size
        print(f"  {name}: {size / 2**20:.0f} MiB, carried")

    (args.into / "run.sh").write_text(RUN)
    (args.into / "run.sh").chmod(0o755)
    total = _tracked_size() + _size(args.into)
    print(
        f"gpu_carry: {args.into} holds {_size(args.into) / 2**20:.1f} MiB; with the working tree "
        f"{total / 2**20:.1f} MiB of the {LIMIT_MIB} MiB a call carries"
    )
    print(f'on the GPU machine: bash {args.into.relative_to(ROOT)}/run.sh   (carry: ["{args.into.relative_to(ROOT)}"])')
    return 0 if total <= LIMIT_MIB * 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
