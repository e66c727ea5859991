"""The checks of test_layout.py catch real breakage.

The built site is copied to a temporary folder once. Each case breaks one thing in the copy of
chapter 1's page (or of the Results page), runs the same layout_checks functions that
test_layout.py uses, asserts that they name the problem, and restores the page. The intact
copy of those pages must give no problem at all (its menu, contents and search, which
test_layout.py checks on the same pages, are not checked again here).
"""

from __future__ import annotations

import re
import shutil

import layout_checks as lc
import pytest
import site_checks as sc

DOCS = sc.toc_docnames()
CHAPTERS = sc.chapter_docnames()
CHAPTER = next((d for d in CHAPTERS if d.startswith("book/01_")), CHAPTERS[0] if CHAPTERS else None)
RESULTS = next((d for d in DOCS if d.endswith("/results")), None)
PATHS = [sc.page_path(d) for d in lc.toc_chapter_docnames()]
LONG = "a_long_unbreakable_line_" * 8


@pytest.fixture(scope="module")
def copy(site, tmp_path_factory):
    assert CHAPTER and RESULTS, "_toc.yml lists no chapter or no results page"
    destination = tmp_path_factory.mktemp("site") / "html"
    shutil.copytree(site, destination)
    return destination


@pytest.fixture(scope="module")
def copy_url(copy):
    with sc.SiteServer(copy) as url:
        yield url


@pytest.fixture(scope="module")
def page(browser):
    context = lc.new_context(browser, lc.PHONE)
    yield context.new_page()
    context.close()


def measured(page, copy_url, docname):
    return lc.measure(page, copy_url + sc.page_path(docname), docname)


def assert_reported(problems, *expected):
    for text in expected:
        assert any(text in p for p in problems), f"{text!r} not reported; got {problems}"


def test_intact_copy_reports_nothing(page, copy_url):
    # (The menu, contents and search checks of the intact pages are test_layout.py's own.)
    chapter = measured(page, copy_url, CHAPTER)
    assert lc.overflow_problems(chapter.phone) == []
    assert lc.table_problems(chapter.laptop_tables) == []
    assert lc.issue_reference_problems(chapter.text) == []
    results = measured(page, copy_url, RESULTS)
    assert lc.table_problems(results.laptop_tables) == []
    assert lc.results_repetition_problems(results.results) == []


def test_wide_element_is_reported_and_named(page, copy, copy_url):
    snippet = f'<div class="too-wide" style="white-space: nowrap">{LONG}</div>'
    with sc.edited_page(copy, CHAPTER, sc.in_article(snippet)):
        problems = lc.overflow_problems(measured(page, copy_url, CHAPTER).phone)
    assert_reported(problems, "wide on a 390-px phone", 'div.too-wide "a_long_unbreakable_line_')


def test_wide_code_block_scrolls_on_its_own(page, copy, copy_url):
    snippet = f'<div class="highlight"><pre>{LONG}</pre></div>'
    with sc.edited_page(copy, CHAPTER, sc.in_article(snippet)):
        problems = lc.overflow_problems(measured(page, copy_url, CHAPTER).phone)
    assert problems == []


WIDE_TABLE = (
    '<table class="table"><thead><tr><th>name</th><th>the last column</th></tr></thead>'
    f'<tbody><tr><td style="white-space: nowrap">{LONG * 2}</td><td>42</td></tr></tbody></table>'
)


@pytest.mark.parametrize(
    "wrapper, expected",
    [
        ("{}", "beyond its column's"),
        ('<div class="pst-scrollable-table-container">{}</div>', "hidden in its scroller"),
    ],
    ids=["no-scroller", "in-a-scroller"],
)
def test_table_wider_than_its_column_is_reported(page, copy, copy_url, wrapper, expected):
    with sc.edited_page(copy, CHAPTER, sc.in_article(wrapper.format(WIDE_TABLE))):
        problems = lc.table_problems(measured(page, copy_url, CHAPTER).laptop_tables)
    assert_reported(problems, expected, "the last column")


def test_cut_off_cell_is_reported(page, copy, copy_url):
    table = WIDE_TABLE.replace(
        '<td style="white-space: nowrap">', '<td style="white-space: nowrap; max-width: 100px; overflow: hidden">'
    )
    with sc.edited_page(copy, CHAPTER, sc.in_article(table)):
        problems = lc.table_problems(measured(page, copy_url, CHAPTER).laptop_tables)
    assert_reported(problems, "the content of a cell is cut off")


def test_issue_reference_is_reported(page, copy, copy_url):
    with sc.edited_page(copy, CHAPTER, sc.in_article("<p>The aim (issue 11) is met; see issues 7 and 22.</p>")):
        problems = lc.issue_reference_problems(measured(page, copy_url, CHAPTER).text)
    assert_reported(problems, "'issue 11'", "'issues 7 and 22'")


def test_repeated_results_rows_are_reported(page, copy, copy_url):
    # Each row with a set-up said beside it, repeated three times: the set-up with it.
    def triple_rows(html):
        table = html.index("results-table")
        head, body = html[:table], html[table:]
        row = r'(<tr class="row-(?:odd|even)">(?:(?!</tr>).)*?class="book-setup"[^>]*>\s*<p>(?:(?!</tr>).)*?</tr>)'
        return head + re.sub(row, r"\1\1\1", body, flags=re.S)

    with sc.edited_page(copy, RESULTS, triple_rows):
        problems = lc.results_repetition_problems(measured(page, copy_url, RESULTS).results)
    assert_reported(problems, "the same note on 3 consecutive rows")


def test_dead_menu_buttons_are_reported(browser, copy, copy_url):
    # Today's bug: hidden .primary-toggle and .secondary-toggle buttons first in the page, which
    # the theme's script binds instead of the visible ones.
    def hidden_toggles_first(html):
        at = html.index(">", html.index("<body")) + 1
        hidden = (
            '<button class="primary-toggle" style="display: none"></button>'
            '<button class="secondary-toggle" style="display: none"></button>'
        )
        return html[:at] + hidden + html[at:]

    url = copy_url + sc.page_path(CHAPTER)
    with sc.edited_page(copy, CHAPTER, hidden_toggles_first):
        phone = lc.menu_problems(browser, url, PATHS, phone=True)
        laptop = lc.menu_problems(browser, url, PATHS, phone=False)
        contents = lc.contents_problems(browser, url, phone=True)
    assert_reported(phone, "after tapping the menu button, the link to")
    assert_reported(laptop, "after clicking the menu button the sidebar still shows")
    assert_reported(contents, "after tapping the Contents button, none of the")


def test_second_search_box_is_reported(browser, copy, copy_url):
    snippet = '<form class="bd-search"><input type="search" placeholder="Search"></form>'
    url = copy_url + sc.page_path(CHAPTER)
    with sc.edited_page(copy, CHAPTER, sc.in_article(snippet)):
        problems = lc.search_problems(lc.search_entry_points(browser, url, phone=False), "laptop")
    assert_reported(problems, "2 search entry points on the screen")
