"""The website as a reader sees it on a phone (390 x 844) and on a laptop (1366 x 768).

Every page of _toc.yml is loaded once, at a phone's width, then widened to a laptop's in the
same browser page (layout_checks.measure), and judged:
  - on a phone no page is wider than the screen, except inside code blocks, display math and
    table scrollers, which scroll on their own; the widest offending element is named;
  - on a laptop every table fits its column: no column off-screen behind a scrollbar, no cell
    cut off;
  - no page cites a tracker's issue ("issue 11") instead of saying what was asked;
  - the Results table states each chapter's shared set-up and published references once.
The menu button opens the chapter list on a phone and hides and shows the sidebar on a laptop,
the "Contents" button shows the page's contents on a phone (a laptop shows them beside the page),
and each size shows one search entry point. The top of the pages named in
layout_checks.SCREENSHOT_PAGES is saved at both sizes in _build/artifacts/phone/ and
_build/artifacts/laptop/ for CI (test_site.py keeps the full-page chapter1.png).
"""

from __future__ import annotations

import functools

import layout_checks as lc
import pytest
import site_checks as sc

DOCS = sc.toc_docnames()
CHAPTERS = sc.chapter_docnames()
CHAPTER = next((d for d in CHAPTERS if d.startswith("book/01_")), CHAPTERS[0] if CHAPTERS else DOCS[0])
SHOTS = lc.screenshot_docs(DOCS)  # {key: docname}


@pytest.fixture(scope="module")
def layout(browser, site_url):
    """layout(docname) -> PageLayout; each page is loaded once, in one browser page."""
    context = lc.new_context(browser, lc.PHONE)
    page = context.new_page()
    yield functools.cache(
        lambda doc: lc.measure(page, site_url + sc.page_path(doc), doc, screenshots=doc in SHOTS.values())
    )
    context.close()


@pytest.mark.parametrize("doc", DOCS)
def test_page_fits_a_phone(layout, doc):
    sc.fail_if(lc.overflow_problems(layout(doc).phone), f"{doc}: wider than a phone")


@pytest.mark.parametrize("doc", DOCS)
def test_tables_fit_a_laptop(layout, doc):
    sc.fail_if(lc.table_problems(layout(doc).laptop_tables), f"{doc}: tables on a 1366-px laptop")


@pytest.mark.parametrize("doc", DOCS)
def test_no_issue_numbers_in_the_text(layout, doc):
    sc.fail_if(lc.issue_reference_problems(layout(doc).text), f"{doc}: tracker issues cited")


def test_results_state_shared_context_once(layout):
    results = next((d for d in DOCS if d.endswith("/results")), None)
    assert results, "_toc.yml lists no results page"
    sc.fail_if(lc.results_repetition_problems(layout(results).results), f"{results}: repeated on every row")


def test_screenshots_for_ci(layout):
    problems = [f"no page of _toc.yml for the screenshot {key!r}" for key in lc.SCREENSHOT_PAGES if key not in SHOTS]
    for doc in SHOTS.values():
        written = layout(doc).screenshots
        for kind in ("phone", "laptop"):
            path = lc.screenshot_path(kind, doc)
            if path not in written or not path.is_file() or path.stat().st_size < 5_000:
                problems.append(f"{path}: missing or suspiciously small")
    sc.fail_if(problems, "screenshots in _build/artifacts")


@pytest.mark.parametrize("phone", [True, False], ids=["phone", "laptop"])
def test_menu_button(browser, site_url, phone):
    paths = [sc.page_path(d) for d in lc.toc_chapter_docnames()]
    sc.fail_if(lc.menu_problems(browser, site_url + sc.page_path(CHAPTER), paths, phone), "the menu button")


@pytest.mark.parametrize("phone", [True, False], ids=["phone", "laptop"])
def test_page_contents_within_reach(browser, site_url, phone):
    sc.fail_if(lc.contents_problems(browser, site_url + sc.page_path(CHAPTER), phone), "the page's contents")


@pytest.mark.parametrize("phone", [True, False], ids=["phone", "laptop"])
def test_one_search_entry_point(browser, site_url, phone):
    shown = lc.search_entry_points(browser, site_url + sc.page_path(CHAPTER), phone)
    sc.fail_if(lc.search_problems(shown, f"{CHAPTER} on a {'phone' if phone else 'laptop'}"), "search")
