"""The chapters' figures and training outputs as a reader sees them (figure_checks.py), in headless
Chromium at a laptop's width and a phone's, for every chapter drawn in the book's figure style
(its first cell calls ``plotting.use_book_style()``):

  - every figure is sharp on a high-density screen (a retina PNG: two pixels drawn for each shown);
  - a phone shrinks no figure so far that the book's smallest text (9 pt) falls under 5.5 px;
  - a figure shrunk to a phone keeps its proportions;
  - no figure pairs matplotlib's default green with its default red;
  - no output keeps a progress bar stopped part-way (training ends with one summary line);
  - no environment summary prints the build machine's data path.

The chapters not yet re-run in that style are listed in AWAITING_RERUN, and a test holds the list
exact: a chapter that loses the style fails it, and so does one re-run in the style but still listed.
Their stored outputs come from runs made before the style existed (issue 27); re-running one in the
full profile and removing it from the list puts it under every check below.
"""

from __future__ import annotations

import functools
import json

import pytest

import figure_checks as fc
import site_checks as sc

AWAITING_RERUN = {"book/08_decoding"}


def _in_book_style(doc: str) -> bool:
    notebook = json.loads((sc.REPO / f"{doc}.ipynb").read_text(encoding="utf-8"))
    first = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
    return "plotting.use_book_style()" in "".join(first["source"])


ALL_CHAPTERS = sc.chapter_docnames()
CHAPTERS = [doc for doc in ALL_CHAPTERS if doc not in AWAITING_RERUN]


def test_the_chapters_awaiting_a_rerun_are_exactly_those_without_the_style():
    without = {doc for doc in ALL_CHAPTERS if not _in_book_style(doc)}
    assert without == AWAITING_RERUN, (
        f"drawn without the book's style but not listed: {sorted(without - AWAITING_RERUN)}; "
        f"listed but now in the style (remove them from AWAITING_RERUN): {sorted(AWAITING_RERUN - without)}")



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


@pytest.mark.parametrize("doc", CHAPTERS)
def test_no_progress_bar_stopped_part_way(figures, doc):
    sc.fail_if(fc.progress_bar_problems(figures(doc)), f"{doc}: progress bars")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_no_machine_data_path(figures, doc):
    sc.fail_if(fc.machine_path_problems(figures(doc)), f"{doc}: environment summary")
