"""Checks of the built website, shared by test_site.py and test_site_checks_catch_breakage.py.

Every check is a function that returns a list of problems (strings); an empty list means the
check passed. The browser part (`visit`) loads one page in headless Chromium, waits for MathJax,
and returns a `PageSnapshot` of what the reader would see; the `*_problems` functions judge a
snapshot. `link_problems` crawls the HTML files themselves, with no browser.

Internal links are checked by the small crawler below rather than by linkchecker: linkchecker
only checks #fragments with its AnchorCheck plugin, which took 83 s on this 12-page site (it
re-downloads the target page for every anchor), and run as root it drops privileges to
"nobody", which cannot read pytest's private temporary folders. The crawler resolves every
internal href/src of every page to an existing file, and every #fragment to an id in it, in
well under a second.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import shutil
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeout

REPO = Path(__file__).resolve().parents[2]

# Flags for Debian's chromium / chromium-headless-shell run as root in a container, offline.
# Every request to a host other than the loopback (which Chromium never sends through a proxy) goes
# to a proxy that refuses it, so the pages are judged as a reader without internet sees them. The
# browser blocks them itself: a Playwright route would do it too, but routing sends every request
# of every page through Python and turns Chromium's cache off (a page loaded a third slower).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=http://127.0.0.1:9",
]
CHROMIUM_CANDIDATES = ["/usr/bin/chromium", "/usr/bin/chromium-headless-shell"]

# Console errors and uncaught page errors that are expected on every page, as regular
# expressions matched against the whole message. Keep this list short, and say why each is safe.
ALLOWED_ERRORS = [
    # pydata-sphinx-theme reads the light/dark mode from localStorage, which is empty in a
    # fresh browser profile, logs this with console.error, and falls back to "auto" itself.
    r"Got invalid theme mode: \. Resetting to auto\.",
]

# Hosts other than 127.0.0.1 that a page may try to reach without anything breaking when the
# request fails (every outside request is blocked during the test, so the site must work
# offline). None is needed today: MathJax, fonts and icons are all bundled in _static.
OPTIONAL_EXTERNAL_HOSTS: list[str] = []

# Text that, visible outside code and outputs after MathJax has run, means TeX was not typeset.
RAW_TEX_PATTERNS = [
    r"\$\$",  # display-math delimiters
    r"\\[()\[\]]",  # \( \) \[ \] delimiters
    r"\\(?:begin|end)\{",  # environments
    r"\\[A-Za-z]{2,}",  # any control word: \frac, \sqrt, \mathbf, \alpha, ...
    r"(?<![\w$\\])\$[^\s$][^$\n]{0,80}(?<![\s\\])\$(?![\w$])",  # inline $x$ left as text
]
_RAW_TEX = re.compile("|".join(f"(?:{p})" for p in RAW_TEX_PATTERNS))

# Elements whose text may legitimately contain TeX: code, code cells, cell outputs, and
# MathJax's own output (judged by the MathJax checks instead).
NOT_PROSE = "pre, code, .highlight, .cell_output, mjx-container, script, style, noscript"

COLAB = "https://colab.research.google.com/github/{org}/{repo}/blob/{branch}/{path}"
CHAPTER = re.compile(r"^book/\d\d_[a-z0-9_]+$")


# ---- the book's configuration --------------------------------------------------------------


def site_dir() -> Path:
    """The built website: $TB_SITE_DIR, or _build/html in the repository."""
    return Path(os.environ.get("TB_SITE_DIR") or REPO / "_build" / "html").resolve()


def artifacts_dir() -> Path:
    return Path(os.environ.get("TB_ARTIFACTS_DIR") or REPO / "_build" / "artifacts")


def load_config(repo: Path = REPO) -> dict:
    return yaml.safe_load((repo / "_config.yml").read_text(encoding="utf-8"))


def toc_docnames(repo: Path = REPO) -> list[str]:
    """Every document of _toc.yml (root first), as docnames such as 'book/01_attention'."""
    toc = yaml.safe_load((repo / "_toc.yml").read_text(encoding="utf-8"))
    names = [_docname(toc["root"])]

    def walk(node):
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if "file" in node:
                names.append(_docname(node["file"]))
            for key in ("parts", "chapters", "sections"):
                walk(node.get(key))

    walk(toc)
    return names


def _docname(file: str) -> str:
    return re.sub(r"\.(ipynb|md|rst)$", "", str(file).strip("/"))


def chapter_docnames(repo: Path = REPO) -> list[str]:
    """The chapters: notebooks named book/NN_slug in _toc.yml."""
    return [d for d in toc_docnames(repo) if CHAPTER.match(d) and (repo / f"{d}.ipynb").exists()]


def source_suffix(docname: str, repo: Path = REPO) -> str:
    for suffix in (".ipynb", ".md", ".rst"):
        if (repo / f"{docname}{suffix}").exists():
            return suffix
    raise FileNotFoundError(f"no source file for {docname} in {repo}")


def expected_colab_url(docname: str, config: dict) -> str:
    """The Colab address of a chapter, built from repository.url and repository.branch."""
    url = config["repository"]["url"].rstrip("/")
    parts = urlsplit(url)
    assert parts.netloc == "github.com", f"repository.url is not a GitHub address: {url}"
    org, repo = parts.path.strip("/").removesuffix(".git").split("/")
    book_path = (config["repository"].get("path_to_book") or "").strip("/")
    path = f"{book_path}/{docname}.ipynb" if book_path else f"{docname}.ipynb"
    return COLAB.format(org=org, repo=repo, branch=config["repository"].get("branch", "main"), path=path)


def page_path(docname: str) -> str:
    return f"{docname}.html"


# ---- a local web server --------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files quietly. The browser may keep scripts, styles, fonts and images (every page loads
    the same ones), never a page: the breakage tests edit a page, load it, restore it and load it
    again within one second, which a Last-Modified date cannot tell apart."""

    def end_headers(self):
        path = urlsplit(self.path).path
        if path.endswith("/") or path.lower().endswith((".html", ".htm")):
            self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args):
        pass


class SiteServer:
    """Serves a folder on 127.0.0.1 on a free port, in a thread: `with SiteServer(d) as url:`."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def __enter__(self) -> str:
        handler = functools.partial(_QuietHandler, directory=str(self.directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


# ---- the browser ---------------------------------------------------------------------------


def find_chromium() -> str:
    """$TB_CHROMIUM, else Debian's chromium or chromium-headless-shell."""
    explicit = os.environ.get("TB_CHROMIUM")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise FileNotFoundError(f"TB_CHROMIUM={explicit} is not an executable file")
        return explicit
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    for name in ("chromium", "chromium-headless-shell"):
        found = shutil.which(name)
        if found:
            return found
    raise FileNotFoundError(
        "no Chromium found: install Debian's chromium-headless-shell "
        "(apt-get install --no-install-recommends chromium-headless-shell) or set TB_CHROMIUM"
    )


def launch(playwright):
    return playwright.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)


@dataclass
class PageSnapshot:
    url: str
    final_url: str = ""
    prose: str = ""  # visible text outside code/outputs
    math_errors: list = field(default_factory=list)  # [message, TeX] of MathJax errors
    undefined_macros: list = field(default_factory=list)  # [\\macro, TeX], typeset in red
    broken_images: list[str] = field(default_factory=list)
    image_count: int = 0
    colab_links: list[str] = field(default_factory=list)
    download_links: list[str] = field(default_factory=list)
    sidebar_links: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors + page errors
    failed_requests: list[str] = field(default_factory=list)  # to 127.0.0.1
    external_requests: list[str] = field(default_factory=list)  # blocked, to any other host
    has_mathjax: bool = False


_SNAPSHOT_JS = """
(notProse) => {
  const hide = document.createElement('style');
  hide.textContent = notProse + ' { display: none !important; }';
  document.head.appendChild(hide);
  const prose = document.body.innerText;
  hide.remove();

  // [message, TeX source] of every MathJax error node, and of every unknown \\macro, which
  // MathJax's noundefined extension typesets as red text rather than as an error.
  const mj = window.MathJax;
  const items = (mj && mj.startup && mj.startup.document) ? Array.from(mj.startup.document.math) : [];
  const texOf = node => {
    const item = items.find(i => i.typesetRoot && i.typesetRoot.contains(node));
    return item ? item.math : '(not found)';
  };
  const mathErrors = Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
      .filter(e => !e.closest('mjx-assistive-mml'))
      .map(e => [e.getAttribute('data-mjx-error') || e.textContent, texOf(e)]);
  const undefinedMacros = [];
  for (const item of items) {
    const mml = mj.startup.toMML ? mj.startup.toMML(item.root) : '';
    const m = mml.match(/<mtext[^>]*mathcolor="red"[^>]*>(\\\\[^<]*)</);
    if (m) undefinedMacros.push([m[1], item.math]);
    if (/<merror/.test(mml) && !mathErrors.some(e => e[1] === item.math))
      mathErrors.push(['merror', item.math]);
  }

  const images = Array.from(document.images);
  const brokenImages = images.filter(i => !(i.complete && i.naturalWidth > 0))
      .map(i => i.getAttribute('src'));
  const hrefs = sel => Array.from(document.querySelectorAll(sel)).map(a => a.href);
  return {
    final_url: location.href,
    prose: prose,
    math_errors: mathErrors,
    undefined_macros: undefinedMacros,
    broken_images: brokenImages,
    image_count: images.length,
    colab_links: hrefs('a[href*="colab.research.google.com"]'),
    download_links: hrefs('a.btn-download-source-button'),
    sidebar_links: hrefs('nav.bd-docs-nav a[href], a.navbar-brand[href]'),
  };
}
"""


def new_context(browser):
    """The context `visit` loads pages in: a 1280 x 900 window."""
    return browser.new_context(viewport={"width": 1280, "height": 900})


def visit(context, url: str, screenshot: Path | None = None, timeout_ms: int = 20_000) -> PageSnapshot:
    """Load `url` in a fresh page of `context` (from `new_context`), wait for MathJax and images, and
    take a snapshot.

    Requests to any host other than 127.0.0.1 are blocked and recorded, so the page is judged
    as a reader without internet would see it. Pages share the context's cache of scripts and
    styles; a page itself is never cached (SiteServer), so an edited page is seen as edited.
    """
    snap = PageSnapshot(url=url)
    page = context.new_page()
    try:
        # The browser refuses outside hosts (CHROMIUM_ARGS); each attempt is recorded.
        page.on("request", lambda r: None if _is_local(r.url) else snap.external_requests.append(r.url))
        page.set_default_timeout(timeout_ms)
        page.on("console", lambda m: snap.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: snap.errors.append(f"page error: {e}"))
        page.on(
            "requestfailed",
            lambda r: (
                snap.failed_requests.append(f"{r.url} ({r.failure})")
                if urlsplit(r.url).hostname == "127.0.0.1"
                else None
            ),
        )
        page.on(
            "response", lambda r: snap.failed_requests.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None
        )
        redirects = re.search(r"http-equiv=[\"']?refresh", context.request.get(url).text(), re.I)
        page.goto(url, wait_until="load")
        if redirects:
            # A redirecting page (index.html): judge the page it leads to.
            page.wait_for_url(lambda u: u != url)
            page.wait_for_load_state("load")
        snap.has_mathjax = page.evaluate("() => !!document.querySelector('script[src*=\"mathjax\" i]')")
        if snap.has_mathjax:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
            page.evaluate("() => MathJax.startup.promise")
        # Load lazy images too, then wait until every image has loaded or failed.
        page.evaluate("() => document.querySelectorAll('img[loading=lazy]').forEach(i => i.loading = 'eager')")
        try:
            page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=10_000)
        except PlaywrightTimeout:
            pass  # images still loading are reported as broken below
        data = page.evaluate(_SNAPSHOT_JS, NOT_PROSE)
        for key, value in data.items():
            setattr(snap, key, value)
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
    finally:
        page.close()
    return snap


# ---- judging a snapshot --------------------------------------------------------------------


def raw_tex_problems(prose: str) -> list[str]:
    """TeX left as text outside code blocks and cell outputs."""
    problems = []
    for m in _RAW_TEX.finditer(prose):
        start, end = max(0, m.start() - 40), min(len(prose), m.end() + 40)
        context = prose[start:end].replace("\n", " ")
        problems.append(f"raw TeX {m.group(0)!r} in visible text: ...{context}...")
    return problems


def math_problems(snap: PageSnapshot) -> list[str]:
    problems = raw_tex_problems(snap.prose)
    problems += [f"MathJax error {error!r} in the TeX {tex!r}" for error, tex in snap.math_errors]
    problems += [
        f"undefined TeX macro {macro!r} (typeset in red) in the TeX {tex!r}" for macro, tex in snap.undefined_macros
    ]
    return list(dict.fromkeys(problems))  # once each, in order


def image_problems(snap: PageSnapshot) -> list[str]:
    return [f"image did not load: {src}" for src in snap.broken_images]


def error_problems(snap: PageSnapshot) -> list[str]:
    """Console errors and page errors outside ALLOWED_ERRORS, failed local requests, and
    requests to outside hosts that are not listed as optional."""
    allowed = [re.compile(p) for p in ALLOWED_ERRORS]
    problems = [e for e in snap.errors if not any(p.search(e) for p in allowed)]
    problems += [f"request failed: {r}" for r in snap.failed_requests]
    problems += [
        f"request to an outside host (blocked; the site must work offline): {u}"
        for u in snap.external_requests
        if urlsplit(u).hostname not in OPTIONAL_EXTERNAL_HOSTS
    ]
    return problems


def colab_problems(snap: PageSnapshot, docname: str, config: dict) -> list[str]:
    expected = expected_colab_url(docname, config)
    if not snap.colab_links:
        return [f"no Colab link; expected {expected}"]
    return [f"Colab link {link} should be {expected}" for link in snap.colab_links if link != expected]


def download_problems(snap: PageSnapshot, docname: str, suffix: str, site: Path) -> list[str]:
    """The theme's download button must offer the page's source file (.ipynb for notebooks)."""
    expected = f"_sources/{docname}{suffix}"
    if not snap.download_links:
        return [
            f"no download button (a.btn-download-source-button) for {expected}; "
            "it comes from html.use_download_button in _config.yml"
        ]
    problems = []
    for link in snap.download_links:
        path = unquote(urlsplit(link).path).lstrip("/")
        if path != expected:
            problems.append(f"download link {link} should point to {expected}")
        elif not (site / path).is_file():
            problems.append(f"download link {link}: {path} is not in the built site")
    return problems


def sidebar_pages(snap: PageSnapshot, base_url: str) -> set[str]:
    """The site-relative .html paths that the left navigation links to."""
    pages = set()
    for link in snap.sidebar_links:
        if link.startswith(base_url):
            pages.add(unquote(urlsplit(link).path).lstrip("/"))
    return pages


def navigation_problems(nav_pages: set[str], docnames: list[str]) -> list[str]:
    return [
        f"the left navigation has no link to {page_path(d)} (listed in _toc.yml)"
        for d in docnames
        if page_path(d) not in nav_pages
    ]


# ---- internal links, without a browser -----------------------------------------------------

_LINK_ATTRS = {
    "a": "href",
    "link": "href",
    "area": "href",
    "img": "src",
    "script": "src",
    "iframe": "src",
    "source": "src",
    "video": "src",
    "audio": "src",
    "embed": "src",
}


class _PageParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, value)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        attr = _LINK_ATTRS.get(tag)
        if attr and attrs.get(attr) is not None:
            self.links.append((tag, attrs[attr]))
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "refresh":
            m = re.search(r"url\s*=\s*(\S+)", attrs.get("content") or "", re.I)
            if m:
                self.links.append(("meta refresh", m.group(1).strip("'\"")))


@functools.cache
def _parse(path: Path) -> _PageParser:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def link_problems(site: Path, start: str = "index.html") -> tuple[list[str], list[str]]:
    """Crawl the HTML pages reachable from `start`; return (problems, pages crawled).

    Every href/src that stays on the site must name an existing file, and every #fragment of a
    link to an HTML page must be an id (or <a name>) in that page. Links to other hosts,
    mailto: and javascript: are not followed.
    """
    site = Path(site).resolve()
    _parse.cache_clear()
    origin = "http://site.invalid/"
    todo, seen, problems = [start], {start}, []
    while todo:
        page = todo.pop()
        parsed = _parse(site / page)
        for tag, value in parsed.links:
            value = value.strip()
            if not value or value == "#" or value.startswith(("mailto:", "javascript:", "data:", "tel:")):
                continue
            target = urlsplit(urljoin(origin + page, value))
            if f"{target.scheme}://{target.netloc}/" != origin:
                continue  # another host
            path = unquote(target.path).lstrip("/")
            if path == "" or path.endswith("/"):
                path += "index.html"
            file = site / path
            where = f"{page}: <{tag} {value!r}>"
            if not file.is_file():
                problems.append(f"{where} -> {path} does not exist")
                continue
            if path.endswith(".html"):
                if target.fragment and unquote(target.fragment) not in _parse(file).ids:
                    problems.append(f"{where} -> no id {unquote(target.fragment)!r} in {path}")
                if tag in ("a", "area", "meta refresh") and path not in seen:
                    seen.add(path)
                    todo.append(path)
    return problems, sorted(seen)


# ---- helpers shared by the checks and their tests -------------------------------------------


def _is_local(url: str) -> bool:
    return url.startswith(("data:", "blob:")) or urlsplit(url).hostname == "127.0.0.1"


def without_mathjax(context):
    """`context`, refusing MathJax's files, so that pages load in half the time where what is checked
    does not depend on typeset math (outside hosts the browser refuses itself: CHROMIUM_ARGS)."""
    context.route(_MATHJAX_FILES, lambda r: r.abort())
    return context


_MATHJAX_FILES = re.compile(r"/mathjax/", re.IGNORECASE)


def fail_if(problems: list[str], what: str) -> None:
    """Fail a test with every problem a check reported, one per line under `what`."""
    assert not problems, f"{what}:\n  " + "\n  ".join(problems)


@contextmanager
def edited_page(copy: Path, docname: str, edit):
    """Apply `edit` (str -> str) to the copy of one page for the duration of the block."""
    path = copy / page_path(docname)
    original = path.read_text(encoding="utf-8")
    changed = edit(original)
    assert changed != original, f"the edit did not change {path}"
    path.write_text(changed, encoding="utf-8")
    try:
        yield
    finally:
        path.write_text(original, encoding="utf-8")


def in_article(snippet: str):
    """An edit that puts `snippet` right after the page's title, in the article."""

    def edit(html):
        at = html.index("</h1>", html.index('<article class="bd-article"')) + len("</h1>")
        return html[:at] + snippet + html[at:]

    return edit
