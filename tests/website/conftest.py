"""Fixtures of the website tests: the built site, a local server, and one headless Chromium.

The site is the folder $TB_SITE_DIR (default: _build/html in the repository), built beforehand
with `jupyter-book build . -W -n --keep-going`. Chromium is $TB_CHROMIUM, /usr/bin/chromium or
/usr/bin/chromium-headless-shell (Debian's packages), driven by Playwright from PyPI.
"""

from __future__ import annotations

import functools

import pytest
import site_checks
from playwright.sync_api import sync_playwright


@pytest.fixture(scope="session")
def site():
    directory = site_checks.site_dir()
    if not (directory / "index.html").is_file():
        pytest.fail(
            f"no built website in {directory} (index.html is missing). Build it first with "
            "`jupyter-book build . -W -n --keep-going`, or set TB_SITE_DIR to the built folder.",
            pytrace=False,
        )
    return directory


@pytest.fixture(scope="session")
def browser():
    try:
        site_checks.find_chromium()
    except FileNotFoundError as error:
        pytest.fail(str(error), pytrace=False)
    with sync_playwright() as playwright:
        browser = site_checks.launch(playwright)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def site_url(site):
    """The site served on 127.0.0.1, on a free port, for the whole session."""
    with site_checks.SiteServer(site) as url:
        yield url


@pytest.fixture(scope="session")
def config():
    return site_checks.load_config()


@pytest.fixture(scope="session")
def visit_context(browser):
    """The one browser context site_checks.visit loads pages in (its cache serves the scripts and
    styles every page shares)."""
    context = site_checks.new_context(browser)
    yield context
    context.close()


@pytest.fixture(scope="session")
def snapshot(visit_context, site_url):
    """snapshot("book/01_attention.html") -> PageSnapshot; each page is loaded once a session."""
    return functools.cache(lambda path: site_checks.visit(visit_context, site_url + path))
