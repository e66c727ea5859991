"""Checks of what the pages' content shows a reader, shared by test_content.py and
test_content_checks_catch_breakage.py.

`visit_content` loads one page in a browser context made by `new_context`, waits for the
scripts that add buttons, and returns a `ContentSnapshot` of the content: the visible text
outside code, the text of cell outputs that are not preformatted, the images of cell outputs
with their alt text and captions, the copy buttons, the cells that record results, the
boxes of stream outputs, the download menu, and the long source listings. The `*_problems`
functions judge a snapshot and return a list of problems (empty: the check passed), each
naming the problem and where it is. `page_size_problems` reads the built files, with no browser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import site_checks as sc

# A line of a Markdown table left as text: starts and ends with a pipe, with a pipe between.
TABLE_ROW = re.compile(r"^\s*\|.*\|.*\|\s*$", re.MULTILINE)
# Inline or display math left as text: $...$ (as site_checks defines it) or $$.
RAW_DOLLARS = re.compile(r"\$\$|" + sc.RAW_TEX_PATTERNS[-1])
# Placeholders that stand for the book's repository instead of naming it.
PLACEHOLDER = re.compile(
    r"\b(?:OWNER|ORG|ORGANI[SZ]ATION|USER(?:NAME)?|YOUR[-_]?(?:USER(?:NAME)?|ORG|NAME))"
    r"/(?:REPO(?:SITORY)?|PROJECT)\b|[<{](?:owner|user|org)[>}]/[<{]repo(?:sitory)?[>}]"
)
# Alt text that is a file name or path rather than a description.
FILE_LIKE = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|gif|svg|webp)$|^\.{0,2}/|/_images/", re.I)
MIN_ALT_WORDS = 5
MAX_PAGE_BYTES = 1_500_000
LONG_LISTING_LINES = 40

# Elements whose text is code or math, not prose. The pages are judged without MathJax, which
# only typesets the math elements (.math: \( \) and \[ \]) that MyST made, never a $ left as
# text (the book's MathJax has no $ delimiters): typesetting itself is test_site.py's concern.
CODE = "pre, code, .highlight, .math, mjx-container, script, style, noscript"


@dataclass
class ContentSnapshot:
    url: str
    prose: str = ""  # visible text outside code and outputs
    outputs: list[str] = field(default_factory=list)  # each cell output's text outside code
    page_text: str = ""  # all visible text, code included
    images: list[dict] = field(default_factory=list)  # {src, alt, figure, caption} of output images
    copy_buttons: list[dict] = field(default_factory=list)  # {name, code}
    code_blocks: int = 0  # blocks that should have a copy button
    record_cells: list[dict] = field(default_factory=list)  # {code, collapsed, toggle}
    split_streams: list[dict] = field(default_factory=list)  # {stream, first}
    download_items: list[dict] = field(default_factory=list)  # {tag, text, href, onclick}
    print_buttons: list[str] = field(default_factory=list)  # elements that call print()
    article_links: list[str] = field(default_factory=list)  # hrefs inside the article
    listings: list[dict] = field(default_factory=list)  # {lines, clipped, toggle, title}
    output_tables: int = 0  # <table>s in cell outputs
    output_math: int = 0  # formulas (math elements) in cell outputs


_CONTENT_JS = """
([code, longLines]) => {
  const text = (el) => (el.innerText || '').trim();
  // (a closed <details> hides its content with content-visibility, which only checkVisibility sees)
  const visible = (el) => !!el && el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden'
      && (!el.checkVisibility || el.checkVisibility({visibilityProperty: true}));
  const hide = document.createElement('style');
  document.head.appendChild(hide);
  hide.textContent = code + ', .cell_output { display: none !important; }';
  const prose = document.body.innerText;
  hide.textContent = code + ' { display: none !important; }';
  // (an output inside a closed <details> is not rendered: its innerText would be its raw text)
  const outputs = Array.from(document.querySelectorAll('.cell_output')).filter(visible).map(text).filter(t => t);
  hide.remove();
  const pageText = document.body.innerText;

  const images = Array.from(document.querySelectorAll('.cell_output img')).map(img => {
    const figure = img.closest('figure');
    const caption = figure ? figure.querySelector('figcaption') : null;
    return {src: img.getAttribute('src') || '', alt: img.getAttribute('alt'),
            figure: !!figure, caption: caption ? text(caption) : ''};
  });

  // An accessible name given by the button itself: aria-labelledby, aria-label, its text or
  // its title (an icon's SVG <title> is not counted: screen readers do not announce it reliably).
  const nameOf = (el) => {
    const ids = (el.getAttribute('aria-labelledby') || '').split(/\\s+/).filter(i => i);
    const byIds = ids.map(i => document.getElementById(i)).filter(e => e).map(e => e.textContent.trim()).join(' ');
    const clone = el.cloneNode(true);
    clone.querySelectorAll('svg').forEach(s => s.remove());
    const ownText = clone.textContent.trim();
    return (byIds || (el.getAttribute('aria-label') || '').trim() || ownText || (el.getAttribute('title') || '').trim());
  };
  const copyButtons = Array.from(document.querySelectorAll('button.copybtn')).map(b => {
    const pre = document.querySelector(b.getAttribute('data-clipboard-target') || 'nothing');
    return {name: nameOf(b), code: pre ? pre.textContent.trim().split('\\n')[0].slice(0, 60) : ''};
  });

  const recordCells = Array.from(document.querySelectorAll('.cell')).filter(cell => {
    const input = cell.querySelector('.cell_input');
    return input && input.textContent.includes('results.record');
  }).map(cell => {
    const input = cell.querySelector('.cell_input');
    const details = input.closest('details');
    const summary = details ? details.querySelector(':scope > summary') : null;
    const first = input.textContent.trim().split('\\n').find(l => l.includes('record')) || '';
    return {code: first.trim().slice(0, 80), collapsed: !visible(input), toggle: visible(summary)};
  });

  const splitStreams = [];
  document.querySelectorAll('.cell_output').forEach(out => {
    const kids = Array.from(out.children);
    kids.forEach((kid, i) => {
      const next = kids[i + 1];
      for (const stream of ['stream', 'stderr']) {
        if (next && kid.classList.contains('output') && kid.classList.contains(stream)
            && next.classList.contains('output') && next.classList.contains(stream)) {
          splitStreams.push({stream: stream === 'stream' ? 'stdout' : 'stderr',
                             first: text(kid).split('\\n')[0].slice(0, 80)});
        }
      }
    });
  });

  const downloadItems = Array.from(document.querySelectorAll('[class*="btn-download-"]')).map(el => ({
    tag: el.tagName.toLowerCase(), text: text(el), href: el.getAttribute('href') || '',
    onclick: el.getAttribute('onclick') || ''}));
  const printButtons = Array.from(document.querySelectorAll('[onclick*="print("]'))
      .map(el => (el.getAttribute('title') || text(el) || el.tagName).slice(0, 60));
  const article = document.querySelector('article') || document.body;
  const articleLinks = Array.from(article.querySelectorAll('a[href]')).map(a => a.href);

  const listings = Array.from(document.querySelectorAll('.cell_output > div[class^="highlight-"] pre')).filter(visible).map(pre => {
    const lines = pre.textContent.replace(/\\n$/, '').split('\\n').length;
    const block = pre.closest('div[class^="highlight-"]');
    const next = block.nextElementSibling;
    const toggle = next && next.matches('button') && next.getAttribute('aria-expanded') === 'false' && visible(next);
    const outputTitle = block.previousElementSibling ? text(block.previousElementSibling).slice(0, 80) : '';
    return {lines, clipped: pre.scrollHeight > pre.clientHeight + 2, toggle: !!toggle, title: outputTitle};
  }).filter(l => l.lines > longLines);

  const outputTables = document.querySelectorAll('.cell_output table').length;
  const outputMath = document.querySelectorAll('.cell_output .math').length;
  return {prose, outputs, page_text: pageText, images, copy_buttons: copyButtons,
          output_tables: outputTables, output_math: outputMath,
          code_blocks: document.querySelectorAll('div.highlight pre').length,
          record_cells: recordCells, split_streams: splitStreams, download_items: downloadItems,
          print_buttons: printButtons, article_links: articleLinks, listings};
}
"""


def new_context(browser):
    """One browser context for every page: a laptop's viewport, outside hosts blocked, and
    MathJax not loaded (it triples the time of a page, and these checks do not need it)."""
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    return sc.without_mathjax(context)


def visit_content(context, url: str, timeout_ms: int = 20_000) -> ContentSnapshot:
    page = context.new_page()
    page.set_default_timeout(timeout_ms)
    try:
        page.goto(url, wait_until="load")
        # sphinx-copybutton adds its buttons once clipboard.js has loaded.
        page.wait_for_function(
            "() => document.querySelectorAll('button.copybtn').length >= document.querySelectorAll('div.highlight pre').length",
            timeout=5_000,
        )
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)))")
        data = page.evaluate(_CONTENT_JS, [CODE, LONG_LISTING_LINES])
    finally:
        page.close()
    snap = ContentSnapshot(url=url)
    for key, value in data.items():
        setattr(snap, key, value)
    return snap


def _excerpt(text: str, start: int, end: int, width: int = 40) -> str:
    return text[max(0, start - width) : min(len(text), end + width)].replace("\n", " ")


# ---- judging a snapshot --------------------------------------------------------------------


def markdown_problems(snap: ContentSnapshot) -> list[str]:
    """Markdown tables and $...$ math left as text, in prose and in rendered (non-<pre>) outputs."""
    problems = []
    for where, texts in (("visible text", [snap.prose]), ("a cell output", snap.outputs)):
        for text in texts:
            for m in TABLE_ROW.finditer(text):
                problems.append(f"Markdown table row left as text in {where}: {m.group(0).strip()[:120]!r}")
            for m in RAW_DOLLARS.finditer(text):
                problems.append(
                    f"math left as text ({m.group(0)[:40]!r}) in {where}: ...{_excerpt(text, m.start(), m.end())}..."
                )
    return list(dict.fromkeys(problems))


def alt_text_problems(snap: ContentSnapshot) -> list[str]:
    """Every image of a cell output describes itself: alt text that is a phrase, not a path."""
    problems = []
    for image in snap.images:
        alt = (image["alt"] or "").strip()
        name = image["src"].rsplit("/", 1)[-1]
        if not alt:
            problems.append(f"image {name} has no alt text")
        elif FILE_LIKE.search(alt) or alt.rsplit("/", 1)[-1] == name:
            problems.append(f"image {name} has a file path as alt text: {alt!r}")
        elif len(alt.split()) < MIN_ALT_WORDS:
            problems.append(f"image {name} has alt text too short to describe a plot: {alt!r}")
    return problems


def caption_problems(snap: ContentSnapshot) -> list[str]:
    """Every image of a chapter's cell outputs is a figure with a caption."""
    problems = []
    for image in snap.images:
        name = image["src"].rsplit("/", 1)[-1]
        if not image["figure"]:
            problems.append(f"image {name} is not a figure (no caption, no number)")
        elif not image["caption"]:
            problems.append(f"figure of {name} has no caption")
    return problems


def copy_button_problems(snap: ContentSnapshot) -> list[str]:
    problems = [
        f"copy button of the code block starting {b['code']!r} has no accessible name (no aria-label, text or title)"
        for b in snap.copy_buttons
        if not b["name"]
    ]
    if len(snap.copy_buttons) < snap.code_blocks:
        problems.append(f"{snap.code_blocks - len(snap.copy_buttons)} code blocks have no copy button")
    return problems


def bookkeeping_problems(snap: ContentSnapshot) -> list[str]:
    """Cells that record results for the Results page show their code collapsed, behind a toggle."""
    problems = []
    for cell in snap.record_cells:
        if not cell["collapsed"]:
            problems.append(
                f"the cell that records results ({cell['code']!r}) shows its code in full; tag it hide-input"
            )
        elif not cell["toggle"]:
            problems.append(
                f"the cell that records results ({cell['code']!r}) hides its code with no toggle to open it"
            )
    return problems


def stream_problems(snap: ContentSnapshot) -> list[str]:
    return [
        f"one cell's {s['stream']} is split into separate boxes (the first starts {s['first']!r}); set nb_merge_streams"
        for s in snap.split_streams
    ]


def download_menu_problems(snap: ContentSnapshot) -> list[str]:
    """Every download entry downloads a file; none only prints the page."""
    problems = []
    for item in snap.download_items:
        href = item["href"]
        if item["tag"] != "a" or not href or href.startswith(("#", "javascript:")) or "print(" in item["onclick"]:
            problems.append(
                f"download entry {item['text']!r} downloads nothing ({item['onclick'] or href or item['tag']})"
            )
    problems += [f"a button only prints the page: {b!r}" for b in snap.print_buttons]
    return list(dict.fromkeys(problems))


def placeholder_problems(snap: ContentSnapshot) -> list[str]:
    return [
        f"placeholder {m.group(0)!r} instead of the repository: ...{_excerpt(snap.page_text, m.start(), m.end())}..."
        for m in PLACEHOLDER.finditer(snap.page_text)
    ]


def repository_link_problems(snap: ContentSnapshot, config: dict) -> list[str]:
    url = config["repository"]["url"].rstrip("/")
    if not any(link.rstrip("/") == url for link in snap.article_links):
        return [f"the page's text does not link to the configured repository {url}"]
    return []


def listing_problems(snap: ContentSnapshot) -> list[str]:
    problems = []
    for listing in snap.listings:
        if not (listing["clipped"] and listing["toggle"]):
            problems.append(
                f"the {listing['lines']}-line listing {listing['title']!r} is shown in full; "
                f"listings over {LONG_LISTING_LINES} lines start collapsed with a button"
            )
    return problems


def page_size_problems(site: Path, limit: int = MAX_PAGE_BYTES) -> list[str]:
    """No HTML page of the site is larger than `limit` bytes."""
    return [
        f"{p.relative_to(site).as_posix()} is {p.stat().st_size / 1e6:.2f} MB of HTML (limit {limit / 1e6:.1f} MB)"
        for p in sorted(Path(site).rglob("*.html"))
        if p.stat().st_size > limit
    ]
