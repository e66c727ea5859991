"""Layout checks of the built website at a phone's and a laptop's size, shared by test_layout.py
and test_layout_checks_catch_breakage.py.

What a reader meets on a phone (390 x 844) and on a laptop (1366 x 768), checked in headless
Chromium:
  - the menu button opens the chapter list on a phone, and hides and shows the sidebar on a
    laptop; the page's contents are a tap away on a phone and shown on a laptop; there is one
    search entry point on the screen, not two;
  - no page is wider than a phone: nothing widens it beyond 390 px, except inside the elements
    that scroll on their own (code blocks, display math, table scrollers);
  - on a laptop every table fits its content column: no column sits off-screen behind a
    scrollbar, and no cell's content is cut off;
  - the text names no tracker issue ("issue 11"), and the Results table states each chapter's
    shared set-up and published references once, not on every row.

As in site_checks, the browser part returns plain data and the `*_problems` functions judge it:
each returns a list of problems (strings), empty when the check passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import site_checks
import yaml

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 768}

# The pages whose phone and laptop screenshots CI keeps (_build/artifacts/{phone,laptop}/NAME.png):
# the landing page, chapters 1, 2, 3, 7, 8, 9, 10, 11, 12, 14 and 19, Results, Performance, the API.
SCREENSHOT_PAGES = [
    "intro",
    "01",
    "02",
    "03",
    "07",
    "08",
    "09",
    "10",
    "11",
    "12",
    "14",
    "19",
    "results",
    "performance",
    "api",
]

# Elements inside which wide content scrolls on its own instead of widening the page.
SCROLLING = ("auto", "scroll", "hidden", "clip")

# A tracker's issue cited in the text ("issue 11", "issues 7, 11"): it means nothing to a reader.
ISSUE_REFERENCE = re.compile(r"\bissues? #?\d+(?:\s*(?:,|and)\s*#?\d+)*", re.I)

# Search entry points: the theme's search buttons and fields, and any search input.
SEARCH_SELECTOR = (
    "button.search-button, .search-button-field, .search-button__button, "
    "form.bd-search, input[type=search], input[name=q]"
)


def screenshot_docs(docnames: list[str]) -> dict[str, str]:
    """{key: docname} of SCREENSHOT_PAGES found in `docnames`: 'intro' -> book/intro,
    '01' -> book/01_attention, ...; a key with no page is left out."""
    chosen = {}
    for key in SCREENSHOT_PAGES:
        found = [d for d in docnames if Path(d).name == key or Path(d).name.startswith(f"{key}_")]
        if found:
            chosen[key] = found[0]
    return chosen


def toc_chapter_docnames(repo: Path = site_checks.REPO) -> list[str]:
    """The root and the chapters of _toc.yml's parts: the entries the sidebar lists at its top
    level (sections under them, such as the API reference's modules, open with their page)."""

    def docname(file: str) -> str:
        return re.sub(r"\.(ipynb|md|rst)$", "", str(file).strip("/"))

    toc = yaml.safe_load((repo / "_toc.yml").read_text(encoding="utf-8"))
    names = [docname(toc["root"])]
    for part in toc.get("parts") or [{"chapters": toc.get("chapters") or []}]:
        names += [docname(c["file"]) for c in part.get("chapters") or [] if "file" in c]
    return names


def screenshot_path(kind: str, docname: str) -> Path:
    return site_checks.artifacts_dir() / kind / f"{Path(docname).name}.png"


# ---- the browser -----------------------------------------------------------------------------


def new_context(browser, viewport: dict, phone: bool = False):
    """A browser context of one size; a phone one emulates touch. Outside hosts are blocked (by the
    browser: site_checks.CHROMIUM_ARGS)."""
    options = {"viewport": viewport, "device_scale_factor": 1}
    if phone:
        options.update(is_mobile=True, has_touch=True)
    return browser.new_context(**options)


def load(page, url: str, timeout_ms: int = 30_000) -> None:
    """Open `url` and wait until MathJax has typeset it (math sets the width of many lines) and
    the fonts are in."""
    page.set_default_timeout(timeout_ms)
    page.goto(url, wait_until="load")
    if page.evaluate("() => !!document.querySelector('script[src*=\"mathjax\" i]')"):
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
    page.evaluate("() => document.fonts.ready.then(() => true)")


_SETTLE_JS = r"""
() => new Promise(resolve => {
  // Resolve once the article's box has kept its size for 3 frames (the theme's sidebars slide
  // in over a transition after the window changes size, unless transitions are off), or after 3 s.
  const article = () => document.querySelector('.bd-article') || document.body;
  let last = '', same = 0;
  const start = performance.now();
  const tick = () => {
    const r = article().getBoundingClientRect();
    const now = `${r.left},${r.width}`;
    same = now === last ? same + 1 : 0;
    last = now;
    if (same >= 3 || performance.now() - start > 3000) resolve();
    else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})
"""


def settle(page) -> None:
    """Wait until the layout has stopped moving after a change of the window's size."""
    page.evaluate(_SETTLE_JS)


def open_collapsed(page) -> None:
    """Open every <details> (the exercises' answers), so that their content is measured too."""
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")


_DESCRIBE_JS = r"""
const mathItems = (window.MathJax && MathJax.startup && MathJax.startup.document)
    ? Array.from(MathJax.startup.document.math) : [];
const describe = (el) => {
  let name = el.tagName.toLowerCase();
  if (el.id) name += '#' + el.id;
  const classes = Array.from(el.classList).slice(0, 3);
  if (classes.length) name += '.' + classes.join('.');
  const item = mathItems.find(i => i.typesetRoot && (el.contains(i.typesetRoot) || i.typesetRoot.contains(el)));
  let text = item ? '$' + item.math.trim() + '$'
      : (el.innerText || el.textContent || el.getAttribute('alt') || '').trim();
  text = text.replace(/\s+/g, ' ');
  return text ? `${name} "${text.length > 70 ? text.slice(0, 70) + '...' : text}"` : name;
};
const scrollsOnItsOwn = (el) => %SCROLLING%.includes(getComputedStyle(el).overflowX);
// Inline math that is clipped (the theme's span.math { overflow: hidden; max-width: 100% }): the
// reader sees part of the formula, and nothing says there is more. (Its scrollWidth is no
// guide: MathJax's invisible boxes overhang; the typeset formula's own width is.)
const clippedMath = (root) => Array.from(root.querySelectorAll('span.math')).map(m => {
  const formula = m.querySelector('mjx-container');
  if (!formula || !m.getClientRects().length) return null;
  if (!['hidden', 'clip'].includes(getComputedStyle(m).overflowX)) return null;  // it scrolls
  const width = formula.getBoundingClientRect().width;
  return width > m.clientWidth + 1 ? `${describe(m)} shows ${m.clientWidth} of its ${Math.round(width)} px` : null;
}).filter(x => x);
"""
_DESCRIBE_JS = _DESCRIBE_JS.replace("%SCROLLING%", str(list(SCROLLING)))

_OVERFLOW_JS = (
    "() => {"
    + _DESCRIBE_JS
    + r"""
  const root = document.documentElement;
  const limit = root.clientWidth;
  // The right edge of each element's box, and of its content (text that overflows the box
  // shows in its scrollWidth only), for the elements that reach past the screen. Elements
  // inside one that scrolls (or clips) on its own, and fixed ones (off-canvas sidebars), do
  // not widen the page.
  const reach = new Map();
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const content = scrollsOnItsOwn(el) ? r.right : r.left + el.clientLeft + el.scrollWidth;
    if (Math.max(r.right, content) <= limit + 0.5) continue;
    let contained = false;
    for (let a = el; a && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).position === 'fixed' || (a !== el && scrollsOnItsOwn(a))) { contained = true; break; }
    }
    if (!contained) reach.set(el, [r.right, content]);
  }
  // The causes: the outermost elements whose box reaches past the screen, and the elements
  // whose own text does (no child element of theirs reaches as far). Widest first.
  const causes = [];
  for (const [el, [box, content]] of reach) {
    if (box > limit + 0.5) {
      let a = el.parentElement;
      while (a && !(reach.has(a) && reach.get(a)[0] > limit + 0.5)) a = a.parentElement;
      if (!a) causes.push([el, box]);
    } else if (!Array.from(el.children).some(c => reach.has(c))) {
      causes.push([el, content]);
    }
  }
  causes.sort((a, b) => b[1] - a[1]);
  const article = document.querySelector('.bd-article') || document.body;
  return {
    scroll_width: root.scrollWidth,
    viewport_width: limit,
    offenders: causes.slice(0, 5).map(([el, right]) => [describe(el), Math.round(right)]),
    clipped_math: clippedMath(article).slice(0, 10),
  };
}
"""
)

_TABLES_JS = (
    "() => {"
    + _DESCRIBE_JS
    + r"""
  const results = [];
  const tables = Array.from(document.querySelectorAll('.bd-article table'));
  tables.forEach((table, index) => {
    if (!table.getClientRects().length) return;  // not shown (in a closed toggle)
    const article = table.closest('.bd-article');
    const style = getComputedStyle(article);
    const box = article.getBoundingClientRect();
    const columnRight = box.right - parseFloat(style.paddingRight) - parseFloat(style.borderRightWidth);
    const rect = table.getBoundingClientRect();
    const headers = Array.from(table.querySelectorAll('tr'))[0];
    const names = headers ? Array.from(headers.children).map(c => c.innerText.trim().replace(/\s+/g, ' ')) : [];
    let scroller = null;
    for (let a = table.parentElement; a && a !== article; a = a.parentElement) {
      if (scrollsOnItsOwn(a)) { scroller = a; break; }
    }
    let visibleRight = columnRight;
    if (scroller) {
      const s = scroller.getBoundingClientRect();
      visibleRight = Math.min(columnRight, s.left + scroller.clientWidth);
    }
    const hiddenColumns = headers ? Array.from(headers.children)
        .filter(c => c.getBoundingClientRect().right > visibleRight + 1)
        .map(c => c.innerText.trim().replace(/\s+/g, ' ') || '(unnamed)') : [];
    const cutCells = Array.from(table.querySelectorAll('th, td'))
        .filter(c => c.getClientRects().length && c.scrollWidth > c.clientWidth + 1)
        .map(c => describe(c)).concat(clippedMath(table));
    let heading = table.closest('section');
    heading = heading ? heading.querySelector('h1, h2, h3, h4') : null;
    results.push({
      index: index + 1,
      section: heading ? heading.innerText.replace(/#$/, '').trim() : '',
      columns: names,
      width: Math.round(rect.width),
      right: Math.round(rect.right),
      column_right: Math.round(columnRight),
      scroller: scroller ? describe(scroller).split(' ')[0] : null,
      scroller_hidden_px: scroller ? Math.max(0, Math.round(scroller.scrollWidth - scroller.clientWidth)) : 0,
      hidden_columns: hiddenColumns,
      cut_cells: cutCells.slice(0, 5),
    });
  });
  return results;
}
"""
)

# Is the element drawn on the screen where a reader can see and tap it (not hidden, not off-screen,
# not covered by anything)? Used for sidebar links, buttons and search fields.
_ON_SCREEN_JS = r"""
const onScreen = (el) => {
  if (!el.getClientRects().length) return false;
  if (el.checkVisibility && !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
  const r = el.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) return false;
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  if (x < 0 || y < 0 || x >= window.innerWidth || y >= window.innerHeight) return false;
  const hit = document.elementFromPoint(x, y);
  return !!hit && (hit === el || el.contains(hit) || hit.contains(el));
};
"""

_LINKS_ON_SCREEN_JS = (
    "(paths) => {"
    + _ON_SCREEN_JS
    + r"""
  // For each site path: is one of the sidebar's links to it on the screen (scrolled into view
  // within the sidebar, as a reader would scroll it)?
  const links = Array.from(document.querySelectorAll('nav.bd-docs-nav a[href], .bd-sidebar-primary a.navbar-brand[href]'));
  const result = {};
  for (const path of paths) {
    const candidates = links.filter(a => new URL(a.href).pathname.replace(/^\//, '') === path);
    result[path] = candidates.some(a => {
      a.scrollIntoView({block: 'center', inline: 'nearest'});
      return onScreen(a);
    });
  }
  document.scrollingElement.scrollLeft = 0;  // scrolling a hidden link into view may shift the page
  return result;
}
"""
)

_VISIBLE_JS = (
    "(selector) => {"
    + _ON_SCREEN_JS
    + r"""
  const shown = Array.from(document.querySelectorAll(selector)).filter(onScreen);
  const outer = shown.filter(el => !shown.some(o => o !== el && o.contains(el)));
  return outer.map(el => {
    const r = el.getBoundingClientRect();
    const name = el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
        ? '.' + el.className.trim().split(/\s+/).slice(0, 3).join('.') : '');
    return `${name} at (${Math.round(r.left)}, ${Math.round(r.top)})`;
  });
}
"""
)

_TEXT_JS = r"""
() => {
  const article = document.querySelector('.bd-article') || document.body;
  return article.innerText;
}
"""

_RESULTS_JS = r"""
() => {
  // The results table as chapters (a row of class book-group), each with its rows of results:
  // the notes said under a row or beside it (its set-up cell), and its published references.
  const table = document.querySelector('table.results-table');
  if (!table) return null;
  const text = el => el.innerText.trim().replace(/\s+/g, ' ');
  const groups = [];
  for (const row of table.querySelectorAll('tbody tr')) {
    if (row.classList.contains('book-group')) {
      groups.push({chapter: text(row).slice(0, 60), rows: []});
      continue;
    }
    if (!groups.length || row.classList.contains('book-subgroup')) continue;
    const cells = Array.from(row.children);
    const notes = Array.from(row.querySelectorAll('p.book-note')).map(text);
    for (const cell of row.querySelectorAll('td.book-split, td.book-setup')) {
      if (text(cell)) notes.push(text(cell));
    }
    const published = row.querySelector('td.book-published') || (cells.length >= 4 ? cells[cells.length - 1] : null);
    groups[groups.length - 1].rows.push({
      metric: cells[0] ? text(cells[0].querySelector('p') || cells[0]) : '',
      notes: notes,
      published: published ? text(published) : '',
    });
  }
  return groups;
}
"""


def overflow(page) -> dict:
    """{scroll_width, viewport_width, offenders: [[description, right edge], ...]} of the page."""
    return page.evaluate(_OVERFLOW_JS)


def tables(page) -> list[dict]:
    """What each table of the article occupies, against its column and its scroller."""
    return page.evaluate(_TABLES_JS)


def links_on_screen(page, paths: list[str]) -> dict[str, bool]:
    return page.evaluate(_LINKS_ON_SCREEN_JS, paths)


def visible(page, selector: str) -> list[str]:
    """The outermost elements matching `selector` that a reader sees on the screen."""
    return page.evaluate(_VISIBLE_JS, selector)


def article_text(page) -> str:
    return page.evaluate(_TEXT_JS)


def results_groups(page) -> list[dict] | None:
    return page.evaluate(_RESULTS_JS)


def tap_visible(page, selector: str, phone: bool) -> str | None:
    """Tap (phone) or click (laptop) the one element matching `selector` that is on the screen.
    Returns a problem, or None."""
    shown = page.locator(selector).filter(visible=True)
    handles = [h for h in shown.element_handles() if h.evaluate("el => {" + _ON_SCREEN_JS + " return onScreen(el); }")]
    if not handles:
        return f"no {selector} button on the screen"
    if phone:
        handles[0].tap()
    else:
        handles[0].click()
    page.wait_for_timeout(400)  # the sidebar slides in or out
    return None


@dataclass
class PageLayout:
    """What one page looks like on a phone and on a laptop."""

    docname: str
    phone: dict = field(default_factory=dict)  # overflow() at 390 px
    laptop_tables: list = field(default_factory=list)  # tables() at 1366 px
    text: str = ""  # the article's visible text
    results: list | None = None  # results_groups(), on the Results page
    screenshots: list = field(default_factory=list)  # paths written


def measure(page, url: str, docname: str, screenshots: bool = False) -> PageLayout:
    """Load the page once at a phone's width, then widen the same page to a laptop's.

    With `screenshots`, the top of the page (one screen) is saved at each size before anything
    is opened: artifacts/phone/NAME.png and artifacts/laptop/NAME.png.
    """
    layout = PageLayout(docname)
    page.set_viewport_size(PHONE)
    load(page, url)
    # The theme's sidebars slide over a transition when the window changes size: switched off,
    # the page is laid out for the laptop at once (the layout at rest is the same).
    page.add_style_tag(content="*, *::before, *::after { transition: none !important; }")
    if screenshots:
        layout.screenshots.append(_screenshot(page, "phone", docname))
    open_collapsed(page)
    layout.phone = overflow(page)
    layout.text = article_text(page)
    page.set_viewport_size(LAPTOP)
    settle(page)
    if screenshots:
        page.evaluate("() => window.scrollTo(0, 0)")
        layout.screenshots.append(_screenshot(page, "laptop", docname))
    layout.laptop_tables = tables(page)
    layout.results = results_groups(page)
    return layout


def _screenshot(page, kind: str, docname: str) -> Path:
    path = screenshot_path(kind, docname)
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=False)
    return path


# ---- judging ---------------------------------------------------------------------------------


def overflow_problems(data: dict) -> list[str]:
    """The page must not be wider than the phone's screen, nor cut an inline formula short."""
    width, limit = data["scroll_width"], data["viewport_width"]
    problems = [f"an inline formula is cut off: {what}" for what in data["clipped_math"]]
    if width <= limit:
        return problems
    widest = (
        "; ".join(f"{what} reaches {right} px" for what, right in data["offenders"])
        or "no single element found (a margin or a transform?)"
    )
    return [f"the page is {width} px wide on a {limit}-px phone; the widest: {widest}"] + problems


def table_problems(data: list[dict]) -> list[str]:
    """On a laptop every table fits its column: no column is off-screen, no cell cut off."""
    problems = []
    for t in data:
        where = (
            f"table {t['index']}"
            + (f" (section {t['section']!r})" if t["section"] else "")
            + (f", columns {t['columns']}" if t["columns"] else "")
        )
        if t["scroller"] and t["scroller_hidden_px"] > 1:
            problems.append(
                f"{where}: {t['width']} px wide, {t['scroller_hidden_px']} px of it hidden in its scroller "
                f"({t['scroller']}); off-screen until scrolled: {t['hidden_columns'] or 'part of the last column'}"
            )
        elif not t["scroller"] and t["right"] > t["column_right"] + 1:
            problems.append(
                f"{where}: its right edge is at {t['right']} px, beyond its column's {t['column_right']} px; "
                f"off the column: {t['hidden_columns'] or 'part of the last column'}"
            )
        for cell in t["cut_cells"]:
            problems.append(f"{where}: the content of a cell is cut off: {cell}")
    return problems


def issue_reference_problems(text: str) -> list[str]:
    """Text that cites a tracker's issue ('issue 11') instead of saying what it asked."""
    problems = []
    for m in ISSUE_REFERENCE.finditer(text):
        start, end = max(0, m.start() - 50), min(len(text), m.end() + 30)
        context = " ".join(text[start:end].split())
        problems.append(f"cites {m.group(0)!r}, which means nothing to a reader: ...{context}...")
    return list(dict.fromkeys(problems))


# A note this long, said again on the next row, is a repeated set-up paragraph; shorter ones
# (a date, a split such as "pairs in the vocabulary") may recur.
REPEATED_NOTE_CHARS = 40


def results_repetition_problems(groups: list[dict] | None) -> list[str]:
    """The Results table states what rows share once: no note (a set-up, a split) said again on
    the next row of the same chapter, and not the same published references on every row of a
    chapter."""
    if groups is None:
        return ["no results table (table.results-table) on the page"]
    problems = []
    for group in groups:
        repeated: dict[str, int] = {}
        for before, row in zip(group["rows"], group["rows"][1:]):
            for note in row["notes"]:
                if note in before["notes"] and len(note) >= REPEATED_NOTE_CHARS:
                    repeated[note] = repeated.get(note, 1) + 1
        for note, count in repeated.items():
            problems.append(f"{group['chapter']}: the same note on {count} consecutive rows: {note[:90]!r}")
        published = [r["published"] for r in group["rows"]]
        if len(published) > 1 and len(set(published)) == 1 and published[0] not in ("", "–", "-"):
            problems.append(
                f"{group['chapter']}: the same published references {published[0]!r} "
                f"on each of its {len(published)} rows"
            )
    return problems


def menu_problems(browser, url: str, paths: list[str], phone: bool) -> list[str]:
    """The menu button works. On a phone, tapping it puts the pages of `paths` (the chapters of
    _toc.yml) in reach: each one's sidebar link is on the screen once scrolled to. On a laptop
    the sidebar shows them, a click on the button hides it and a second click shows it again."""
    context = new_context(browser, PHONE if phone else LAPTOP, phone=phone)
    where = "phone (390 x 844)" if phone else "laptop (1366 x 768)"
    try:
        page = context.new_page()
        load(page, url)
        if not phone:
            shown = links_on_screen(page, paths)
            missing = [p for p, ok in shown.items() if not ok]
            if missing:
                return [f"{where}: before any click, the sidebar does not show the links to {missing}"]
        problem = tap_visible(page, ".primary-toggle", phone)
        if problem:
            return [f"{where}: {problem}"]
        shown = links_on_screen(page, paths)
        if phone:
            return [
                f"{where}: after tapping the menu button, the link to {p} is not on the screen"
                for p, ok in shown.items()
                if not ok
            ]
        still = [p for p, ok in shown.items() if ok]
        if still:
            return [
                f"{where}: after clicking the menu button the sidebar still shows the links to "
                f"{still[:3]}{' ...' if len(still) > 3 else ''}"
            ]
        problem = tap_visible(page, ".primary-toggle", phone)
        if problem:
            return [f"{where}: with the sidebar hidden, {problem}"]
        shown = links_on_screen(page, paths)
        return [
            f"{where}: after a second click the sidebar does not show the link to {p} again"
            for p, ok in shown.items()
            if not ok
        ]
    finally:
        context.close()


_PAGE_TOC_JS = (
    "() => {"
    + _ON_SCREEN_JS
    + r"""
  const links = Array.from(document.querySelectorAll('.bd-sidebar-secondary nav a[href]'));
  return {count: links.length, shown: links.filter(onScreen).length};
}
"""
)


def contents_problems(browser, url: str, phone: bool) -> list[str]:
    """The page's own table of contents ("Contents") is within reach: on a phone after tapping
    its button, on a laptop beside the page."""
    context = new_context(browser, PHONE if phone else LAPTOP, phone=phone)
    where = "phone (390 x 844)" if phone else "laptop (1366 x 768)"
    try:
        page = context.new_page()
        load(page, url)
        if phone:
            problem = tap_visible(page, ".secondary-toggle", phone)
            if problem:
                return [f"{where}: {problem}"]
        toc = page.evaluate(_PAGE_TOC_JS)
        if not toc["count"]:
            return [f"{where}: the page has no table of contents (.bd-sidebar-secondary nav a)"]
        if not toc["shown"]:
            action = "after tapping the Contents button, " if phone else ""
            return [f"{where}: {action}none of the {toc['count']} links of the page's contents is on the screen"]
        return []
    finally:
        context.close()


def search_entry_points(browser, url: str, phone: bool) -> list[str]:
    context = new_context(browser, PHONE if phone else LAPTOP, phone=phone)
    try:
        page = context.new_page()
        load(page, url)
        return visible(page, SEARCH_SELECTOR)
    finally:
        context.close()


def search_problems(shown: list[str], where: str) -> list[str]:
    if len(shown) == 1:
        return []
    if not shown:
        return [f"{where}: no search button or field on the screen"]
    return [f"{where}: {len(shown)} search entry points on the screen, one expected: {shown}"]
