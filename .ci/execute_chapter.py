"""Re-run chapters top to bottom and store their outputs, as the committed notebooks need.

    python .ci/execute_chapter.py book/07_translation.ipynb [more.ipynb ...] [--threads N]

Runs each notebook in one fresh kernel, in the full profile (``TB_PROFILE``, unless set),
with ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = N (default 1, the setting of ``.ci/run``) and
``PYTHONHASHSEED=0``, from the notebook's own folder, and writes it back in place. Unlike
``jupyter execute`` it merges each cell's stream outputs and applies their carriage returns,
so a progress bar is stored as its final line instead of one output per refresh. Cell
timings are stored in the cells' metadata (the book's status page reads them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=1, help="OMP/MKL threads of the kernel (default 1)")
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none)")
    args = parser.parse_args()
    os.environ.setdefault("TB_PROFILE", "full")
    os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads), PYTHONHASHSEED="0")
    for path in args.notebooks:
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            timeout=args.timeout,
            kernel_name="python3",
            coalesce_streams=True,
            record_timing=True,
            resources={"metadata": {"path": str(path.resolve().parent)}},
        )
        started = time.perf_counter()
        print(f"executing {path} (profile {os.environ['TB_PROFILE']}, {args.threads} threads) ...", flush=True)
        try:
            client.execute()
        except Exception:
            failed = path.with_suffix(".failed.ipynb")
            nbformat.write(notebook, failed)  # the outputs up to the failing cell, to inspect
            print(f"  failed; the partial notebook is in {failed}", flush=True)
            raise
        nbformat.write(notebook, path)
        print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
