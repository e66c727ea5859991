"""Write each notebook's code cells to a Python file, beside a copy of the package, so that the
``duplicates`` tool (which does not read notebooks) can compare chapters with each other and with
the package.

Usage::

    python .ci/notebook_code.py OUT_DIR && duplicates --repo OUT_DIR --most 60

``OUT_DIR/book/NN_name.py`` holds chapter NN's code cells in order, each headed by a comment
with its cell number; ``OUT_DIR/transformer_book`` is a copy of the package.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from notebook_source import without_magics  # the tests' one rule for magics


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    (out / "book").mkdir(parents=True)
    for notebook in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        parts = []
        for index, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            # IPython magics and shell escapes are not Python: kept as comments after a `pass`
            source = without_magics("".join(cell["source"]))
            parts.append(f"# cell {index}\n{source}\n")
        (out / "book" / f"{notebook.stem}.py").write_text("\n".join(parts))
    shutil.copytree(ROOT / "transformer_book", out / "transformer_book", ignore=shutil.ignore_patterns("__pycache__"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
