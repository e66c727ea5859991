"""The checks of test_site.py catch real breakage.

The built site is copied to a temporary folder once. Each case breaks one thing in the copy of
chapter 1's page (or of the root page), runs the same site_checks functions that test_site.py
uses, asserts that they name the problem, and restores the page. The intact copy of those
pages must give no problem at all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import site_checks as sc

DOCS = sc.toc_docnames()
ROOT = DOCS[0]
CHAPTERS = sc.chapter_docnames()
CHAPTER = next((d for d in CHAPTERS if d.startswith("book/01_")), CHAPTERS[0] if CHAPTERS else None)
MATH = '<span class="math notranslate nohighlight">{}</span>'  # how MyST writes inline math


@pytest.fixture(scope="module")
def copy(site, tmp_path_factory):
    assert CHAPTER, "_toc.yml lists no chapter"
    destination = tmp_path_factory.mktemp("site") / "html"
    shutil.copytree(site, destination)
    return destination


@pytest.fixture(scope="module")
def copy_url(copy):
    with sc.SiteServer(copy) as url:
        yield url


def replace(old, new):
    return lambda html: html.replace(old, new)


def chapter_problems(visit_context, copy, copy_url, config):
    snap = sc.visit(visit_context, copy_url + sc.page_path(CHAPTER))
    return {
        "math": sc.math_problems(snap),
        "images": sc.image_problems(snap),
        "errors": sc.error_problems(snap),
        "colab": sc.colab_problems(snap, CHAPTER, config),
        "download": sc.download_problems(snap, CHAPTER, ".ipynb", copy),
    }


def assert_reported(problems, expected):
    assert any(expected in p for p in problems), f"{expected!r} not reported; got {problems}"


def test_intact_copy_reports_nothing(visit_context, copy, copy_url, config):
    assert chapter_problems(visit_context, copy, copy_url, config) == dict.fromkeys(
        ["math", "images", "errors", "colab", "download"], []
    )
    root = sc.visit(visit_context, copy_url + sc.page_path(ROOT))
    assert sc.navigation_problems(sc.sidebar_pages(root, copy_url), DOCS) == []
    assert sc.link_problems(copy)[0] == []


@pytest.mark.parametrize(
    "snippet, expected",
    [
        # display math left as text in prose (MyST did not convert it, MathJax ignores it)
        (r"<p>Broken: $$\frac{1}{$$ here.</p>", "raw TeX '$$'"),
        # an unbalanced brace: MathJax finds no closing \) and leaves the TeX as text
        ("<p>" + MATH.format(r"\(\frac{1}{\)") + "</p>", r"raw TeX '\\frac'"),
        # a TeX syntax error: MathJax typesets an error node (mjx-merror, data-mjx-error)
        ("<p>" + MATH.format(r"\(x^1^2\)") + "</p>", "MathJax error 'Double exponent"),
        # an undefined macro: MathJax typesets its name in red, with no error node
        ("<p>" + MATH.format(r"\(\nosuchmacro{x} + 1\)") + "</p>", r"undefined TeX macro '\\nosuchmacro'"),
    ],
    ids=["raw-dollars", "unbalanced-brace", "syntax-error", "undefined-macro"],
)
def test_broken_math_is_reported(visit_context, copy, copy_url, config, snippet, expected):
    with sc.edited_page(copy, CHAPTER, sc.in_article(snippet)):
        problems = chapter_problems(visit_context, copy, copy_url, config)
    assert_reported(problems["math"], expected)


def test_missing_image_is_reported(visit_context, copy, copy_url, config):
    with sc.edited_page(copy, CHAPTER, sc.in_article('<p><img src="nope.png" alt="missing"></p>')):
        problems = chapter_problems(visit_context, copy, copy_url, config)
        links = sc.link_problems(copy)[0]
    assert_reported(problems["images"], "image did not load: nope.png")
    assert_reported(problems["errors"], "nope.png (HTTP 404)")
    assert_reported(links, "nope.png does not exist")


@pytest.mark.parametrize("broken", ["wrong-branch", "wrong-path", "wrong-repo", "no-link"])
def test_broken_colab_link_is_reported(visit_context, copy, copy_url, config, broken):
    good = sc.expected_colab_url(CHAPTER, config)
    bad = {
        "wrong-branch": good.replace("/blob/main/", "/blob/master/"),
        "wrong-path": good.replace(f"/{CHAPTER}.ipynb", f"/{Path(CHAPTER).name}.ipynb"),
        "wrong-repo": good.replace("/github/", "/github/someone-else-"),
        "no-link": "https://example.invalid/",
    }[broken]
    with sc.edited_page(copy, CHAPTER, replace(good, bad)):
        problems = chapter_problems(visit_context, copy, copy_url, config)["colab"]
    assert_reported(problems, "no Colab link" if broken == "no-link" else f"Colab link {bad} should be {good}")


@pytest.mark.parametrize(
    "href, expected",
    [
        ("no_such_page.html", "no_such_page.html does not exist"),
        ("#no-such-anchor", "no id 'no-such-anchor'"),
        ("bibliography.html#no-such-entry", "no id 'no-such-entry' in book/bibliography.html"),
        ("../_static/no_such_script.js", "_static/no_such_script.js does not exist"),
    ],
    ids=["page", "anchor-here", "anchor-elsewhere", "asset"],
)
def test_dangling_internal_link_is_reported(copy, href, expected):
    with sc.edited_page(copy, CHAPTER, sc.in_article(f'<p><a href="{href}">dangling</a></p>')):
        problems = sc.link_problems(copy)[0]
    assert_reported(problems, expected)


def test_console_error_and_outside_request_are_reported(visit_context, copy, copy_url, config):
    snippet = (
        '<script>console.error("boom from a test")</script><script>noSuchFunction()</script>'
        '<img src="https://example.org/needed.png" alt="from outside">'
    )
    with sc.edited_page(copy, CHAPTER, sc.in_article(snippet)):
        problems = chapter_problems(visit_context, copy, copy_url, config)
    assert_reported(problems["errors"], "console.error: boom from a test")
    assert_reported(problems["errors"], "page error: noSuchFunction is not defined")
    assert_reported(
        problems["errors"], "outside host (blocked; the site must work offline): https://example.org/needed.png"
    )
    assert_reported(problems["images"], "https://example.org/needed.png")


def test_missing_download_button_is_reported(visit_context, copy, copy_url, config):
    with sc.edited_page(copy, CHAPTER, replace("btn-download-source-button", "btn-something-else")):
        problems = chapter_problems(visit_context, copy, copy_url, config)["download"]
    assert_reported(problems, "no download button")


def test_navigation_missing_a_chapter_is_reported(visit_context, copy, copy_url):
    # The root page's sidebar stops linking to chapter 1 (each link to it now points to "#").
    target = Path(sc.page_path(CHAPTER)).relative_to(Path(ROOT).parent).as_posix()
    with sc.edited_page(copy, ROOT, replace(f'href="{target}"', 'href="#"')):
        root = sc.visit(visit_context, copy_url + sc.page_path(ROOT))
    problems = sc.navigation_problems(sc.sidebar_pages(root, copy_url), DOCS)
    assert problems == [f"the left navigation has no link to {sc.page_path(CHAPTER)} (listed in _toc.yml)"]
