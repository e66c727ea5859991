"""What the pages' content shows a reader, checked in headless Chromium (content_checks.py):

  - Markdown outputs render: no line of a Markdown table and no $...$ left as text, in the
    prose or in any cell output that is not preformatted text; chapter 2's headline table is a
    table with math in it (MyST math, which test_site.py checks MathJax typesets);
  - every plot of a cell output has alt text that describes it, and every plot of a chapter is
    a captioned (numbered) figure;
  - every copy button has an accessible name;
  - the cells that only record results show their code collapsed behind a toggle;
  - a cell's stdout (or stderr) is one box, not several;
  - the download menu only offers files (no entry that merely prints the page);
  - no page names the repository by a placeholder such as OWNER/REPOSITORY, and the landing
    page links to the configured repository;
  - long source listings start collapsed, and their button shows every line;
  - no HTML page is over 1.5 MB (the API reference is split by layer).
Every page is loaded once, in one browser context.
"""

from __future__ import annotations

import functools

import content_checks as cc
import pytest
import site_checks as sc

DOCS = sc.toc_docnames()
CHAPTERS = sc.chapter_docnames()
ROOT = DOCS[0]


@pytest.fixture(scope="module")
def context(browser):
    context = cc.new_context(browser)
    yield context
    context.close()


@pytest.fixture(scope="module")
def content(context, site_url):
    """content("book/02_masks") -> ContentSnapshot; each page is loaded once a module."""
    return functools.cache(lambda doc: cc.visit_content(context, site_url + sc.page_path(doc)))


@pytest.mark.parametrize("doc", DOCS)
def test_markdown_and_math_render(content, doc):
    sc.fail_if(cc.markdown_problems(content(doc)), f"{doc}: Markdown or math shown as raw text")


def test_markdown_table_output_is_a_table(content):
    """Chapter 2's headline table is a Markdown output with $...$ in it."""
    chapter2 = next(d for d in CHAPTERS if d.startswith("book/02_"))
    snap = content(chapter2)
    assert snap.output_tables >= 1, f"{chapter2}: no <table> in any cell output (Markdown outputs not rendered)"
    assert snap.output_math >= 1, f"{chapter2}: no math in any cell output ($...$ not turned into math)"


@pytest.mark.parametrize("doc", DOCS)
def test_plots_have_alt_text(content, doc):
    sc.fail_if(cc.alt_text_problems(content(doc)), f"{doc}: images without a description")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_plots_are_captioned_figures(content, doc):
    sc.fail_if(cc.caption_problems(content(doc)), f"{doc}: plots without a caption")


@pytest.mark.parametrize("doc", DOCS)
def test_copy_buttons_have_names(content, doc):
    sc.fail_if(cc.copy_button_problems(content(doc)), f"{doc}: copy buttons")


@pytest.mark.parametrize("doc", DOCS)
def test_bookkeeping_cells_are_collapsed(content, doc):
    sc.fail_if(cc.bookkeeping_problems(content(doc)), f"{doc}: bookkeeping cells")


@pytest.mark.parametrize("doc", DOCS)
def test_streams_are_one_box(content, doc):
    sc.fail_if(cc.stream_problems(content(doc)), f"{doc}: stream outputs")


@pytest.mark.parametrize("doc", DOCS)
def test_download_menu_offers_files(content, doc):
    sc.fail_if(cc.download_menu_problems(content(doc)), f"{doc}: download menu")


@pytest.mark.parametrize("doc", DOCS)
def test_no_placeholders(content, doc):
    sc.fail_if(cc.placeholder_problems(content(doc)), f"{doc}: placeholders")


def test_landing_page_links_to_the_repository(content, config):
    sc.fail_if(cc.repository_link_problems(content(ROOT), config), f"{ROOT}: repository")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_long_listings_start_collapsed(content, doc):
    sc.fail_if(cc.listing_problems(content(doc)), f"{doc}: long source listings")


def test_long_listing_button_shows_every_line(context, site_url):
    """The button under a collapsed listing shows all of it, and collapses it again."""
    chapter1 = next(d for d in CHAPTERS if d.startswith("book/01_"))
    page = context.new_page()
    try:
        page.goto(site_url + sc.page_path(chapter1), wait_until="load")
        button = page.locator('.cell_output > div[class^="highlight-"] + button').first
        assert button.count() == 1, f"{chapter1}: no button under a long listing"
        pre = button.locator("xpath=preceding-sibling::div[1]//pre")
        full = lambda: pre.evaluate("p => p.scrollHeight <= p.clientHeight + 2")
        assert not full() and button.get_attribute("aria-expanded") == "false"
        button.click()
        assert full() and button.get_attribute("aria-expanded") == "true", "the button did not show every line"
        button.click()
        assert not full() and button.get_attribute("aria-expanded") == "false", "the button did not collapse it again"
    finally:
        page.close()


def test_no_page_is_too_large(site):
    sc.fail_if(cc.page_size_problems(site), "pages over the size limit")
