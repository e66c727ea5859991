"""The checks of test_content.py catch real breakage.

The built site is copied to a temporary folder once. Each case breaks one thing in the copy of
chapter 1's page (or adds a page), runs the same content_checks functions that test_content.py
uses, asserts that they name the problem, and restores the page. The intact copy of chapter 1
must give no problem at all.
"""

from __future__ import annotations

import shutil

import content_checks as cc
import pytest
import site_checks as sc

CHAPTERS = sc.chapter_docnames()
CHAPTER = next((d for d in CHAPTERS if d.startswith("book/01_")), CHAPTERS[0] if CHAPTERS else None)
OUTPUT = '<div class="cell_output docutils container">{}</div>'


@pytest.fixture(scope="module")
def copy(site, tmp_path_factory):
    assert CHAPTER, "_toc.yml lists no chapter"
    destination = tmp_path_factory.mktemp("content") / "html"
    shutil.copytree(site, destination)
    return destination


@pytest.fixture(scope="module")
def copy_url(copy):
    with sc.SiteServer(copy) as url:
        yield url


@pytest.fixture(scope="module")
def context(browser):
    context = cc.new_context(browser)
    yield context
    context.close()


def visit(context, copy_url):
    return cc.visit_content(context, copy_url + sc.page_path(CHAPTER))


def assert_reported(problems, expected):
    assert any(expected in p for p in problems), f"{expected!r} not reported; got {problems}"


CHECKS = [
    cc.markdown_problems,
    cc.alt_text_problems,
    cc.caption_problems,
    cc.copy_button_problems,
    cc.bookkeeping_problems,
    cc.stream_problems,
    cc.download_menu_problems,
    cc.placeholder_problems,
    cc.listing_problems,
]


def test_intact_copy_reports_nothing(context, copy, copy_url):
    snap = visit(context, copy_url)
    assert {check.__name__: check(snap) for check in CHECKS} == {check.__name__: [] for check in CHECKS}
    assert snap.images, f"{CHAPTER} has no plot: the image checks below would test nothing"
    assert snap.listings, f"{CHAPTER} has no long listing: the listing check below would test nothing"
    assert cc.page_size_problems(copy) == []


@pytest.mark.parametrize(
    "snippet, check, expected",
    [
        # a Markdown table rendered as CommonMark without the table extension: one paragraph
        (
            OUTPUT.format("<p>| model | loss |\n| --- | --- |\n| causal | 1.9 |</p>"),
            cc.markdown_problems,
            "Markdown table row left as text in a cell output",
        ),
        (
            OUTPUT.format("<p>under the mask $[j &gt; i]$ only</p>"),
            cc.markdown_problems,
            "math left as text ('$[j > i]$')",
        ),
        (
            "<p>| idea | equation | package |</p>",
            cc.markdown_problems,
            "Markdown table row left as text in visible text",
        ),
        # an image whose alt text is its own path, as myst-nb writes it by default
        (
            OUTPUT.format('<img alt="../_images/abc.png" src="../_images/abc.png">'),
            cc.alt_text_problems,
            "image abc.png has a file path as alt text",
        ),
        (OUTPUT.format('<img src="../_images/abc.png">'), cc.alt_text_problems, "image abc.png has no alt text"),
        (OUTPUT.format('<img alt="a plot" src="../_images/abc.png">'), cc.alt_text_problems, "alt text too short"),
        (
            OUTPUT.format('<img alt="A line plot of the loss against the step." src="../_images/abc.png">'),
            cc.caption_problems,
            "image abc.png is not a figure",
        ),
        (
            OUTPUT.format(
                '<figure><img alt="A line plot of the loss against the step." src="../_images/abc.png">'
                "<figcaption><p></p></figcaption></figure>"
            ),
            cc.caption_problems,
            "figure of abc.png has no caption",
        ),
        # a cell recording results, shown in full
        (
            '<div class="cell docutils container"><div class="cell_input docutils container"><div class="highlight"><pre>'
            'transformer_book.results.record("01_attention", "metric", 1.0)</pre></div></div></div>',
            cc.bookkeeping_problems,
            "shows its code in full",
        ),
        # one cell's stdout in two boxes
        (
            OUTPUT.format(
                '<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre>first part</pre></div></div>'
                '<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre>second part</pre></div></div>'
            ),
            cc.stream_problems,
            "one cell's stdout is split into separate boxes (the first starts 'first part')",
        ),
        # the theme's print-to-PDF entry
        (
            '<button onclick="window.print()" class="btn btn-sm btn-download-pdf-button dropdown-item" title="Print to PDF">'
            '<span class="btn__text-container">.pdf</span></button>',
            cc.download_menu_problems,
            "download entry '.pdf' downloads nothing",
        ),
        (
            "<p>Open https://colab.research.google.com/github/OWNER/REPOSITORY/blob/main/book/01_attention.ipynb</p>",
            cc.placeholder_problems,
            "placeholder 'OWNER/REPOSITORY'",
        ),
    ],
    ids=[
        "table-in-output",
        "dollars-in-output",
        "table-in-prose",
        "path-alt",
        "no-alt",
        "short-alt",
        "no-figure",
        "empty-caption",
        "record-cell",
        "split-stream",
        "print-button",
        "placeholder",
    ],
)
def test_breakage_is_reported(context, copy, copy_url, snippet, check, expected):
    with sc.edited_page(copy, CHAPTER, sc.in_article(snippet)):
        problems = check(visit(context, copy_url))
    assert_reported(problems, expected)


def test_unlabelled_copy_buttons_are_reported(context, copy, copy_url):
    """Without the script that labels them, sphinx-copybutton's buttons have no name."""
    with sc.edited_page(copy, CHAPTER, lambda html: html.replace("a11y.js", "no-such-script.js")):
        problems = cc.copy_button_problems(visit(context, copy_url))
    assert_reported(problems, "has no accessible name")


def test_uncollapsed_listing_is_reported(context, copy, copy_url):
    with sc.edited_page(copy, CHAPTER, lambda html: html.replace("listings.js", "no-such-script.js")):
        problems = cc.listing_problems(visit(context, copy_url))
    assert_reported(problems, "listing")
    assert_reported(problems, "is shown in full")


def test_large_page_is_reported(copy):
    page = copy / "book" / "huge.html"
    page.write_text("<html><body>" + "x" * 1_600_000 + "</body></html>", encoding="utf-8")
    try:
        problems = cc.page_size_problems(copy)
    finally:
        page.unlink()
    assert_reported(problems, "book/huge.html is 1.60 MB of HTML")
