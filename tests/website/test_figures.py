"""The chapters' figures and training outputs as a reader sees them (figure_checks.py), in headless
Chromium at a laptop's width and a phone's, for every chapter drawn in the book's figure style
(its first cell calls ``plotting.use_book_style()``):

  - every figure is sharp on a high-density screen (a retina PNG: two pixels drawn for each shown);
  - a phone shrinks no figure so far that the book's smallest text (9 pt) falls under 5.5 px;
  - a figure shrunk to a phone keeps its proportions;
  - no figure pairs matplotlib's default green with its default red;
  - no output keeps a progress bar stopped part-way (training ends with one summary line);
  - no environment summary prints the build machine's data path;
  - every schematic diagram (an SVG figure in a chapter's text) loads, has alt text, and keeps its
    smallest text at 5.5 px or more on a phone; a chapter whose markdown shows diagrams shows them
    all on its page.

Every chapter is drawn in that style, and a test holds it: a chapter whose first cell loses the
call fails it, since its stored figures would then come from matplotlib's defaults.
"""

from __future__ import annotations

import functools
import json
import re

import figure_checks as fc
import pytest
import site_checks as sc


def _in_book_style(doc: str) -> bool:
    notebook = json.loads((sc.REPO / f"{doc}.ipynb").read_text(encoding="utf-8"))
    first = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
    return "plotting.use_book_style()" in "".join(first["source"])


CHAPTERS = sc.chapter_docnames()


def test_every_chapter_is_drawn_in_the_book_style():
    without = [doc for doc in CHAPTERS if not _in_book_style(doc)]
    assert not without, f"drawn without plotting.use_book_style() in the first code cell: {without}"


@pytest.fixture(scope="module")
def context(browser):
    context = fc.new_context(browser)
    yield context
    context.close()


@pytest.fixture(scope="module")
def figures(context, site_url):
    """figures("book/02_masks") -> FigureSnapshot; each page is loaded once a module."""
    return functools.cache(lambda doc: fc.visit_figures(context, site_url + sc.page_path(doc)))


@pytest.mark.parametrize("doc", CHAPTERS)
def test_figures_are_sharp(figures, doc):
    sc.fail_if(fc.sharpness_problems(figures(doc)), f"{doc}: blurry figures")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_figure_text_is_legible_on_a_phone(figures, doc):
    sc.fail_if(fc.phone_text_problems(figures(doc)), f"{doc}: figures too wide for a phone")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_figures_keep_their_proportions_on_a_phone(figures, doc):
    sc.fail_if(fc.distortion_problems(figures(doc)), f"{doc}: squeezed figures")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_no_figure_pairs_green_with_red(figures, doc, site, site_url):
    sc.fail_if(fc.red_green_problems(figures(doc), site, site_url), f"{doc}: colours")


def _diagrams_in_source(doc: str) -> int:
    """How many SVG images the chapter's markdown cells show with a figure directive."""
    notebook = json.loads((sc.REPO / f"{doc}.ipynb").read_text(encoding="utf-8"))
    markdown = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    return len(re.findall(r"^(?:`{3,}|:{3,})\{figure\}[ \t]+\S+\.svg[ \t]*$", markdown, re.MULTILINE | re.IGNORECASE))


@pytest.mark.parametrize("doc", CHAPTERS)
def test_diagrams_load_with_alt_text_and_are_legible_on_a_phone(figures, doc, site, site_url):
    snap = figures(doc)
    expected = _diagrams_in_source(doc)
    assert len(snap.diagrams) == expected, (
        f"{doc}: the page shows {len(snap.diagrams)} SVG diagrams, its markdown {expected}"
    )
    sc.fail_if(fc.diagram_problems(snap, site, site_url), f"{doc}: diagrams")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_no_progress_bar_stopped_part_way(figures, doc):
    sc.fail_if(fc.progress_bar_problems(figures(doc)), f"{doc}: progress bars")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_no_machine_data_path(figures, doc):
    sc.fail_if(fc.machine_path_problems(figures(doc)), f"{doc}: environment summary")
