"""The built website, checked in a real browser (headless Chromium driven by Playwright).

Every page of _toc.yml (and any other page the left navigation links to) is loaded from a
local server, with outside hosts blocked, and judged after MathJax has typeset it:
  - no TeX is left as text outside code and cell outputs, and MathJax reports no error;
  - every image has loaded;
  - no console error or page error beyond site_checks.ALLOWED_ERRORS, and no failed request;
  - the download button offers the page's source file (.ipynb for notebooks);
  - every chapter has the Colab link built from _config.yml's repository url and branch.
The left navigation reaches every entry of _toc.yml, every internal link and #anchor resolves,
and chapter 1 is saved as a full-page screenshot in _build/artifacts/chapter1.png.
"""

from __future__ import annotations

import pytest
import site_checks as sc

DOCS = sc.toc_docnames()
CHAPTERS = sc.chapter_docnames()


def _page_problems(snap):
    return sc.math_problems(snap) + sc.image_problems(snap) + sc.error_problems(snap)


def test_toc_lists_chapters():
    assert CHAPTERS, "_toc.yml lists no chapter notebook book/NN_slug.ipynb"


@pytest.mark.parametrize("doc", DOCS)
def test_math_is_typeset(snapshot, doc):
    sc.fail_if(sc.math_problems(snapshot(sc.page_path(doc))), f"{doc}: math not typeset")


@pytest.mark.parametrize("doc", DOCS)
def test_images_load(snapshot, doc):
    sc.fail_if(sc.image_problems(snapshot(sc.page_path(doc))), f"{doc}: broken images")


@pytest.mark.parametrize("doc", DOCS)
def test_no_errors_in_console(snapshot, doc):
    sc.fail_if(sc.error_problems(snapshot(sc.page_path(doc))), f"{doc}: errors while loading")


@pytest.mark.parametrize("doc", DOCS)
def test_download_button_offers_source(snapshot, site, doc):
    snap = snapshot(sc.page_path(doc))
    sc.fail_if(sc.download_problems(snap, doc, sc.source_suffix(doc), site), f"{doc}: download button")


@pytest.mark.parametrize("doc", CHAPTERS)
def test_colab_link(snapshot, config, doc):
    sc.fail_if(sc.colab_problems(snapshot(sc.page_path(doc)), doc, config), f"{doc}: Colab link")


def test_navigation_reaches_every_toc_entry(snapshot, site_url):
    nav = sc.sidebar_pages(snapshot(sc.page_path(DOCS[0])), site_url)
    sc.fail_if(sc.navigation_problems(nav, DOCS), "left navigation of the root page")


def test_other_pages_in_navigation(snapshot, site_url):
    """Pages the navigation links to that _toc.yml does not list get the same page checks."""
    nav = sc.sidebar_pages(snapshot(sc.page_path(DOCS[0])), site_url)
    others = sorted(nav - {sc.page_path(d) for d in DOCS})
    sc.fail_if(
        [f"{p}: {problem}" for p in others for problem in _page_problems(snapshot(p))],
        "pages linked from the navigation but not in _toc.yml",
    )


def test_index_leads_to_root_page(snapshot, site_url):
    snap = snapshot("index.html")
    assert snap.final_url == site_url + sc.page_path(DOCS[0]), f"index.html led to {snap.final_url}"


def test_internal_links_resolve(site):
    problems, crawled = sc.link_problems(site)
    sc.fail_if(problems, "dangling internal links")
    unreached = [sc.page_path(d) for d in DOCS if sc.page_path(d) not in crawled]
    sc.fail_if(unreached, "pages of _toc.yml that no link reaches from index.html")


def test_chapter1_screenshot(visit_context, site_url):
    """The CI artifact: a full-page screenshot of chapter 1, checked like any page."""
    chapter1 = next((d for d in CHAPTERS if d.startswith("book/01_")), CHAPTERS[0])
    path = sc.artifacts_dir() / "chapter1.png"
    path.unlink(missing_ok=True)
    snap = sc.visit(visit_context, site_url + sc.page_path(chapter1), screenshot=path)
    assert path.stat().st_size > 10_000, f"{path} is suspiciously small"
    sc.fail_if(_page_problems(snap), f"{chapter1} while taking the screenshot")
