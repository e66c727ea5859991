"""The parts of the front pages that can be computed, computed from their sources.

The README's chapter list comes from ``_toc.yml`` (parts and order) and each notebook's title
(its first heading); its table of run times from the timings that ``jupyter execute`` stores in
every code cell (the same reading as the book's status page); the models a chapter loads from
another chapter's file, or fetches, from the calls in its code. Each generated block sits between
two markers in ``README.md``::

    <!-- BEGIN generated: NAME (python .ci/front_pages.py) -->
    ...
    <!-- END generated: NAME -->

Each chapter also opens its set-up with a generated box (a markdown cell tagged ``run-facts``): the
time its stored outputs took, and what it loads from another chapter's file or fetches, with how
long that chapter takes to train it.

``python .ci/front_pages.py`` rewrites the blocks and the boxes; ``--check`` exits with status 1 and
a diff when one is stale (``tests/test_front_pages.py`` runs the same check).
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
BLOCK = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[\w-]+) \(python \.ci/front_pages\.py\) -->\n)(?P<body>.*?)"
    r"(<!-- END generated: (?P=name) -->)",
    re.DOTALL,
)
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}

# What a chapter's code calls -> what it needs that another chapter (or the package index) provides.
NEEDS = [
    (re.compile(r"translator\.load_or_train\("), "chapter 7's translators"),
    (re.compile(r"gpt(_recipes)?\.load_or_train\("), "chapter 9's GPT"),
    (re.compile(r"\b(small_bert|bert(_recipe)?)\.load_or_train\("), "chapter 13's BERT"),
    (re.compile(r"\bload_encoder\("), "all-MiniLM-L6-v2 (package index)"),
    (re.compile(r"\bload_language_model\(|\btokenizer_from_gguf\("), "SmolLM2-135M-Instruct (package index)"),
]
RUN_FACTS_TAG = "run-facts"  # the tag of the generated markdown cell before a chapter's first code cell


def _book_tables():
    """book/_ext/book_tables.py, the status page's reader of execution timings."""
    if "book_tables" not in sys.modules:
        spec = importlib.util.spec_from_file_location("book_tables", ROOT / "book" / "_ext" / "book_tables.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["book_tables"] = module  # its dataclasses look their module up there
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
    lines = ["| Chapter | Full profile, last stored run | Threads | Loads or fetches |", "| --- | --- | --- | --- |"]
    for _, paths in chapters():
        for path in paths:
            minutes = _minutes(path)
            if minutes is None:
                when = "not recorded"
            else:
                when = f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"
            threads = _book_tables().notebook_status(path)["summary"].get("torch threads", "–")
            lines.append(
                f"| {int(path.name[:2])}. {title(path)} | {when} | {threads} | {', '.join(needs(path)) or '–'} |"
            )
    return "\n".join(lines) + "\n"


def _minutes(path: Path) -> float | None:
    s = _book_tables().notebook_status(path)
    return (s["finished"] - s["started"]).total_seconds() / 60 if s["started"] and s["finished"] else None


def _format_minutes(minutes: float) -> str:
    if minutes < 1:
        return f"{60 * minutes:.0f} seconds"
    return f"{minutes:.1f} minutes" if minutes < 10 else f"{minutes:.0f} minutes"


def run_facts(path: Path) -> str:
    """The box a chapter opens its set-up with: its stored run's time on the CPU, and what it loads."""
    from transformer_book.pretrained.catalogue import CATALOGUE

    status = _book_tables().notebook_status(path)
    threads = status["summary"].get("torch threads", "?")
    minutes = _minutes(path)
    ran = (
        f"The outputs on this page took {_format_minutes(minutes)} to compute in the `full` profile on "
        f"{threads} CPU thread{'' if threads == '1' else 's'} (their last run, {status['finished']:%Y-%m-%d})."
        if minutes is not None
        else "The outputs on this page carry no timings."
    )
    lines = ["```{admonition} Running this chapter", ":class: tip", ran]
    chapter_of = {"chapter 7's translators": "07", "chapter 9's GPT": "09", "chapter 13's BERT": "13"}
    own = []
    for need in needs(path):
        if need in chapter_of:
            (source,) = (ROOT / "book").glob(f"{chapter_of[need]}_*.ipynb")
            took = _minutes(source)
            it = "them" if need.endswith("s") else "it"
            own.append(
                f"{need} from the cache, training {it} first when the cache has none (chapter "
                f"{int(chapter_of[need])} runs in {_format_minutes(took) if took else 'an unrecorded time'} "
                f"on two cores, most of it that training)"
            )
        else:
            name = need.split(" (")[0]
            entry = CATALOGUE[name]
            size = sum(f.size for f in entry.files) / 1e6
            own.append(f"{name} from the cache, else from the package index ({size:.0f} MB, fetched once)")
    if own:
        lines.append("It loads " + "; ".join(own) + ".")
    lines.append("On a Colab-class GPU the chapter has not been timed yet.")
    lines.append("```")
    return "\n".join(lines)


def render_notebook(path: Path) -> str | None:
    """The notebook's JSON text with its run-facts cell (re)generated; ``None`` if already current."""
    import nbformat

    text = path.read_text(encoding="utf-8")
    notebook = nbformat.reads(text, as_version=4)
    facts = run_facts(path)
    cells = [c for c in notebook.cells if RUN_FACTS_TAG in c.metadata.get("tags", [])]
    if len(cells) > 1:
        raise ValueError(f"{path.name}: {len(cells)} cells tagged {RUN_FACTS_TAG!r}")
    if cells and cells[0].source == facts:
        return None
    if cells:
        cells[0].source = facts
    else:
        first_code = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code")
        notebook.cells.insert(first_code, nbformat.v4.new_markdown_cell(facts, metadata={"tags": [RUN_FACTS_TAG]}))
    return nbformat.writes(notebook) + "\n"


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
    stale = {
        path: notebook
        for path in (p for _, paths in chapters() for p in paths)
        if (notebook := render_notebook(path)) is not None
    }
    if args.check:
        if fresh != text:
            sys.stdout.writelines(
                difflib.unified_diff(
                    text.splitlines(True), fresh.splitlines(True), "README.md", "README.md (generated)"
                )
            )
        for path in stale:
            print(f"{path.relative_to(ROOT)}: its {RUN_FACTS_TAG!r} cell is stale")
        return int(fresh != text or bool(stale))
    README.write_text(fresh, encoding="utf-8")
    for path, notebook in stale.items():
        path.write_text(notebook, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
