"""The parts of the front pages that can be computed, computed from their sources.

The README's chapter list comes from ``_toc.yml`` (parts and order) and each notebook's title
(its first heading); its table of run times from the timings that ``jupyter execute`` stores in
every code cell (the same reading as the book's status page); the models a chapter loads from
another chapter's file, or fetches, from the calls in its code. Each generated block sits between
two markers in ``README.md``::

    <!-- BEGIN generated: NAME (python .ci/front_pages.py) -->
    ...
    <!-- END generated: NAME -->

``python .ci/front_pages.py`` rewrites the blocks; ``--check`` exits with status 1 and a diff when
one is stale (``tests/test_front_pages.py`` runs the same check).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- BEGIN generated: (?P<name>[\w-]+) \(python \.ci/front_pages\.py\) -->\n)(?P<body>.*?)"
                   r"(<!-- END generated: (?P=name) -->)", re.DOTALL)
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}

# What a chapter's code calls -> what it needs that another chapter (or the package index) provides.
NEEDS = [
    (re.compile(r"translator\.load_or_train\("), "chapter 7's translators"),
    (re.compile(r"gpt(_recipes)?\.load_or_train\("), "chapter 9's GPT"),
    (re.compile(r"\.load_or_pretrain\("), "chapter 13's BERT"),
    (re.compile(r"\bload_encoder\("), "all-MiniLM-L6-v2 (package index)"),
    (re.compile(r"\bload_language_model\(|\btokenizer_from_gguf\("), "SmolLM2-135M-Instruct (package index)"),
]


def _book_tables():
    """book/_ext/book_tables.py, the status page's reader of execution timings."""
    if "book_tables" not in sys.modules:
        spec = importlib.util.spec_from_file_location("book_tables", ROOT / "book" / "_ext" / "book_tables.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["book_tables"] = module   # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["book_tables"]


def chapters() -> list[tuple[str, list[Path]]]:
    """``[(part caption, [notebook path, ...]), ...]`` of the numbered parts, in ``_toc.yml``'s order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    out = []
    for part in toc["parts"]:
        if part.get("numbered"):
            out.append((part["caption"], [ROOT / f"{entry['file']}.ipynb" for entry in part["chapters"]]))
    return out


def title(path: Path) -> str:
    """A notebook's first heading."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError(f"{path.name}: no '# ' heading")


def needs(path: Path) -> list[str]:
    """What the chapter's code loads from another chapter's file or from the package index."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    found = [name for pattern, name in NEEDS if pattern.search(code)]
    own = f"chapter {int(path.name[:2])}'s"
    return [name for name in found if not name.startswith(own)]


def chapter_list() -> str:
    parts = chapters()
    total = sum(len(paths) for _, paths in parts)
    lines = [f"It has {total} chapters in {NUMBER_WORDS.get(len(parts), len(parts))} parts:", ""]
    for caption, paths in parts:
        names = "; ".join(f"{int(p.name[:2])}. {title(p)}" for p in paths)
        lines.append(f"- **{caption}**: {names}.")
    return "\n".join(lines) + "\n"


def run_times() -> str:
    status = _book_tables().notebook_status
    lines = ["| Chapter | Full profile, last stored run | Threads | Loads or fetches |", "| --- | --- | --- | --- |"]
    for _, paths in chapters():
        for path in paths:
            s = status(path)
            if s["started"] and s["finished"]:
                minutes = (s["finished"] - s["started"]).total_seconds() / 60
                when = f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
            else:
                when = "not recorded"
            threads = s["summary"].get("torch threads", "–")
            lines.append(f"| {int(path.name[:2])}. {title(path)} | {when} | {threads} | "
                         f"{', '.join(needs(path)) or '–'} |")
    return "\n".join(lines) + "\n"


GENERATORS = {"chapters": chapter_list, "run-times": run_times}


def render(text: str) -> str:
    """``text`` with every generated block recomputed.

    Raises:
        ValueError: a block with an unknown name, or a generator with no block.
    """
    seen = set()

    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in GENERATORS:
            raise ValueError(f"README.md: unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        seen.add(name)
        return match.group(1) + GENERATORS[name]() + match.group(4)

    out = BLOCK.sub(replace, text)
    missing = set(GENERATORS) - seen
    if missing:
        raise ValueError(f"README.md: no generated block named {', '.join(sorted(missing))}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 with a diff when a block is stale")
    args = parser.parse_args()
    text = README.read_text(encoding="utf-8")
    fresh = render(text)
    if args.check:
        if fresh != text:
            sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), fresh.splitlines(True), "README.md",
                                                       "README.md (generated)"))
            return 1
        return 0
    README.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
