"""What a newcomer reads first agrees with its sources.

The README's chapter list and run-time table are generated (``.ci/front_pages.py``) from
``_toc.yml``, the notebooks' titles and the timings stored in their cells; the rest of the front
pages is checked here against what it describes: the roadmap against the table of contents, the
list of checks against ``.ci/run``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INTRO = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
WORDS = {3: "three", 4: "four", 5: "five", 6: "six"}


def _front_pages():
    spec = importlib.util.spec_from_file_location("front_pages", ROOT / ".ci" / "front_pages.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("front_pages", module)
    spec.loader.exec_module(module)
    return module


fp = _front_pages()


def test_the_readme_generated_blocks_are_current() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert fp.render(text) == text, "README.md is stale: run python .ci/front_pages.py"


def test_a_stale_block_is_detected_and_an_unknown_one_refused() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = text.replace("It has 20 chapters", "It has 15 chapters")
    assert stale != text and fp.render(stale) == text
    with pytest.raises(ValueError, match="unknown generated block 'roadmap'"):
        fp.render(
            text + "\n<!-- BEGIN generated: roadmap (python .ci/front_pages.py) -->\n<!-- END generated: roadmap -->\n"
        )
    with pytest.raises(ValueError, match="no generated block named run-times"):
        fp.render(re.sub(r"<!-- BEGIN generated: run-times.*?END generated: run-times -->", "", text, flags=re.DOTALL))


def test_the_chapter_list_names_every_numbered_chapter_of_the_toc() -> None:
    listed = fp.chapter_list()
    chapters = [p for _, paths in fp.chapters() for p in paths]
    assert len(chapters) == len(list((ROOT / "book").glob("[0-9][0-9]_*.ipynb")))
    for path in chapters:
        assert f"{int(path.name[:2])}. {fp.title(path)}" in listed


def test_the_roadmap_covers_every_chapter_of_the_toc() -> None:
    roadmap = INTRO[INTRO.index("## Roadmap") :]
    chapters = [p.stem for _, paths in fp.chapters() for p in paths]
    missing = [c for c in chapters if f"{{doc}}`{c}`" not in roadmap]
    assert not missing, f"book/intro.md's roadmap does not list {missing}"
    assert f"chapters 1 to {len(chapters)}" in roadmap


def test_the_intro_lists_the_checks_that_ci_runs() -> None:
    """Each ``say`` step of ``.ci/run``'s test section (the website's two run beside the unit tests,
    in a subshell) is a layer of checks the intro must count and describe."""
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    tests = run[run.index('say "unit tests"') : run.index('say "all checks passed"')]
    steps = re.findall(r'^\s*say "([^"]+)"', tests, flags=re.MULTILINE)
    assert len(steps) == 4, steps
    section = INTRO[INTRO.index("## How the book checks itself") : INTRO.index("## Roadmap")]
    assert f"{WORDS[len(steps)]} layers of tests" in section and f"runs all {WORDS[len(steps)]}" in section
    described = {"unit tests": "Unit tests", "nbval": "Strict nbval", "book build": "book build", "Chromium": "browser"}
    for step in steps:
        layer = [words for key, words in described.items() if key in step]
        assert len(layer) == 1, f".ci/run's step {step!r} is none of the four layers, or several"
        assert layer[0] in section, f"book/intro.md does not describe the check {step!r}"


@pytest.mark.parametrize("page", ["README.md", "book/intro.md", "book/notation.md"])
def test_no_front_page_speaks_of_chapters_still_to_come(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    for phrase in ("still to be written", "await a re-run", "yet to be written"):
        assert phrase not in text, f"{page}: {phrase!r}"


def test_what_a_chapter_needs_is_read_from_its_code() -> None:
    by_chapter = {p.name[:2]: fp.needs(p) for _, paths in fp.chapters() for p in paths}
    assert by_chapter["08"] == ["chapter 7's translators"]
    assert "chapter 9's GPT" not in by_chapter["09"]  # a chapter does not need itself
    assert "chapter 13's BERT" in by_chapter["14"] and "chapter 9's GPT" in by_chapter["20"]


@pytest.mark.parametrize("path", [p for _, paths in fp.chapters() for p in paths], ids=lambda p: p.name)
def test_every_chapter_opens_with_its_current_run_facts(path: Path) -> None:
    """The box before a chapter's first code cell states its stored run's time and what it loads."""
    assert fp.render_notebook(path) is None, f"{path.name}: run python .ci/front_pages.py"


def test_the_run_facts_say_what_a_chapter_loads_and_how_long_its_source_takes() -> None:
    (lora_chapter,) = (ROOT / "book").glob("20_*.ipynb")
    facts = fp.run_facts(lora_chapter)
    assert facts.startswith("```{admonition} Running this chapter") and facts.endswith("```")
    assert "chapter 9's GPT from the cache, training it first" in facts
    assert "chapter 13's BERT from the cache, training it first" in facts
    assert "SmolLM2-135M-Instruct from the cache, else from the package index (98 MB" in facts
    (first,) = (ROOT / "book").glob("01_*.ipynb")
    assert "It loads" not in fp.run_facts(first)
