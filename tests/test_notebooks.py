"""The stored notebook outputs are real: every chapter was run top to bottom, in the full
profile, without errors, and is listed in the table of contents.

Strict nbval compares stored outputs with a fresh run, but it silently compares nothing for a
cell whose stored ``execution_count`` is null, so these checks close that gap.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def _code_cells(path: Path) -> list[dict]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [c for c in notebook["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def test_there_are_chapters() -> None:
    assert NOTEBOOKS, "no chapter notebooks found in book/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_code_cell_was_executed_in_order(path: Path) -> None:
    counts = [c["execution_count"] for c in _code_cells(path)]
    assert None not in counts, f"{path.name}: {counts.count(None)} code cells have no stored execution"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not run top to bottom in one kernel: {counts}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_has_a_unique_id(path: Path) -> None:
    # nbformat 4.5 requires cell ids; nbval refuses to collect a notebook with a cell that lacks one
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert (notebook["nbformat"], notebook["nbformat_minor"]) >= (4, 5), f"{path.name}: nbformat below 4.5"
    ids = [c.get("id") for c in notebook["cells"]]
    missing = [i for i, cell_id in enumerate(ids) if not cell_id]
    assert not missing, f"{path.name}: cells {missing} have no id (a cell added by a script must carry one)"
    assert len(set(ids)) == len(ids), f"{path.name}: cell ids repeat"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_errors_and_full_profile(path: Path) -> None:
    cells = _code_cells(path)
    outputs = [o for c in cells for o in c.get("outputs", [])]
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, f"{path.name}: stored error outputs {[e['ename'] for e in errors]}"
    text = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")
    assert re.search(r"^profile\s*:\s*full$", text, re.MULTILINE), (
        f"{path.name}: the stored outputs must come from the full profile (environment summary)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_is_in_the_table_of_contents(path: Path) -> None:
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert f"file: book/{path.stem}" in toc, f"{path.name} is missing from _toc.yml"


def _repository_url() -> str:
    match = re.search(
        r"^repository:\s*\n\s+url:\s*(\S+)", (ROOT / "_config.yml").read_text(encoding="utf-8"), re.MULTILINE
    )
    assert match, "_config.yml must set repository.url"
    return match.group(1).rstrip("/")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_install_cell_uses_the_configured_repository(path: Path) -> None:
    """The repository address lives in _config.yml; a chapter's Colab install cell must agree."""
    first = "".join(_code_cells(path)[0]["source"])
    urls = re.findall(r"git\+([^\s'\"]+)", first)  # the address ends at a space or a quote
    assert urls, f"{path.name}: the first code cell must install the package when it is missing"
    assert all(u.rstrip("/") == _repository_url() for u in urls), f"{path.name}: {urls} != {_repository_url()}"


# the import names of the distributions in the package's "notebooks" extra
EXTRA_MODULES = {"scikit-learn": "sklearn", "transformers": "transformers", "accelerate": "accelerate"}


def _notebooks_extra() -> dict[str, str]:
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = [re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0] for requirement in extra["notebooks"]]
    unknown = [name for name in names if name not in EXTRA_MODULES]
    assert not unknown, f"pyproject's notebooks extra has {unknown}: add their import names to EXTRA_MODULES"
    return {name: EXTRA_MODULES[name] for name in names}


def _imported_modules(path: Path) -> set[str]:
    """Top-level names of every module a chapter's code cells import."""
    found = set()
    for cell in _code_cells(path):
        for match in re.finditer(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", "".join(cell["source"]), re.M):
            found.add((match.group(1) or match.group(2)).split(".")[0])
    return found


def test_imported_modules_finds_an_extra() -> None:
    chapter = next(p for p in NOTEBOOKS if p.name.startswith("14_"))
    assert "sklearn" in _imported_modules(chapter) and "transformer_book" in _imported_modules(chapter)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_install_cell_installs_every_extra_the_chapter_imports(path: Path) -> None:
    """A reader who installed the package without its notebooks extra (the plain pip install),
    or a Colab runtime without one of them, must get the extra from the install cell, not an
    ImportError halfway through the chapter: the cell checks each extra module the chapter imports."""
    needed = sorted(_imported_modules(path) & set(_notebooks_extra().values()))
    if not needed:
        return
    first = "".join(_code_cells(path)[0]["source"])
    checked = re.search(r"find_spec\(name\) for name in \(([^)]*)\)", first)
    assert checked, f"{path.name} imports {needed}: its install cell must check them with importlib.util.find_spec"
    names = set(re.findall(r"[\"']([\w.]+)[\"']", checked.group(1)))
    assert {"transformer_book", *needed} <= names, f"{path.name}: the install cell checks {sorted(names)}, not {needed}"
    assert "transformer-book[notebooks]" in first, f"{path.name}: the install cell must install the notebooks extra"


def test_package_metadata_uses_the_configured_repository() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'Homepage = "{_repository_url()}"' in pyproject


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_control_characters_in_cell_sources(path: Path) -> None:
    """A TeX macro written in a non-raw Python string loses its backslash: "\\frac" becomes a
    form feed and "rac", "\\rvert" a carriage return and "vert". The browser test sees the broken
    formula only on a built site; this catches it in the notebook."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for index, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"])
        bad = sorted({repr(ch) for ch in source if ord(ch) < 32 and ch not in "\n\t"})
        assert not bad, f"{path.name}, cell {index}: control characters {bad} in the source"


def _renumbered_lists(markdown: str) -> list[list[int]]:
    """The top-level ordered lists of ``markdown`` whose item numbers do not run 1 by 1 from
    their first: CommonMark takes only the first number and counts on from it, so a list of the
    answers to exercises 1, 3 and 4 would show 1, 2 and 3."""
    wrong, items = [], []

    def close() -> None:
        if items and items != list(range(items[0], items[0] + len(items))):
            wrong.append(list(items))
        items.clear()

    for line in markdown.splitlines():
        item = re.match(r"(\d+)[.)] ", line)
        if item:
            items.append(int(item.group(1)))
        elif line.strip() and not line.startswith((" ", "\t")):
            close()  # a line at the margin ends the list
    close()
    return wrong


def test_renumbered_lists_are_found() -> None:
    assert _renumbered_lists("```{dropdown} Answers\n1. a\n   more\n3. b\n```") == [[1, 3]]
    assert _renumbered_lists("1. a\n2. b\n\n   c\n3. d\n\nText.\n\n5. e\n6. f") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_numbered_lists_show_their_numbers(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            wrong = _renumbered_lists("".join(cell["source"]))
            assert not wrong, (
                f"{path.name}, cell {cell.get('id')}: the list numbered {wrong[0]} would be shown "
                f"as {list(range(wrong[0][0], wrong[0][0] + len(wrong[0])))} (number paragraphs "
                "with **n.** instead)"
            )
