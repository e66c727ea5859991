"""Sphinx extension of the book: tables read from files at build time.

Three directives, for MyST pages:

``results-table``
    Every result the chapters recorded with :func:`transformer_book.results.record`, read
    from ``book/results/*.json``, one group of rows per chapter, with the published reference
    numbers for the same data set beside them (labelled ``R1``, ``R2``, ... as in
    ``reference-list``).
``reference-list``
    The published reference numbers of ``book/results/references.json``: value, set-up,
    citation, source, and how comparable they are.
``notebook-status``
    One row per chapter notebook of the book (``book/NN_*.ipynb`` in the table of contents):
    when it was last executed and how long that took, from the timings that
    ``jupyter execute`` (nbclient) stores in each code cell's ``metadata.execution``; the
    profile, device and versions its environment summary printed; and its code cells.

The text in the cells is MyST markdown, parsed in place, so that citations and links to
chapters resolve, and are checked under ``-n``, like any others. Option of the first two:
``:results-dir:``, the folder of the files relative to the book's source folder (default
``book/results``). The build only reads these files, never writes them. A file that does
not parse fails the build (a warning; an error under ``-W``) with a message naming it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

RESULTS_DIR = "book/results"
CHAPTER_GLOB = "book/[0-9][0-9]_*.ipynb"
SUMMARY_LINE = re.compile(r"^(?P<key>[A-Za-z_][\w ]*?)\s+:\s(?P<value>.*)$")
NBSP = "\u00a0"

CSS_FILE = "book_tables.css"
CSS = """\
/* Tables of the book_tables extension (results and notebook status). */
table.book-table { font-size: 0.9em; }
table.book-table td p, table.book-table th p { margin: 0; }
table.book-table .book-nowrap { white-space: nowrap; }
table.book-table .book-number { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.book-table tr.book-group td { background: var(--pst-color-surface); border-top: 2px solid var(--pst-color-border); }
table.book-table p.book-note { font-size: 0.85em; color: var(--pst-color-text-muted); margin-top: 0.15em; }
"""


# --------------------------------------------------------------------------------------
# formatting helpers
# --------------------------------------------------------------------------------------

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]<>()#+!|~$&])")


def escape(text: str) -> str:
    """Text as literal MyST: markup characters backslash-escaped, on one line."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(str(text).split()))


def format_number(value: float) -> str:
    """Four significant digits, without an exponent for everyday magnitudes: 1.934, 12.35, 2,048."""
    if value == 0 or not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) < 1e-3:
        return f"{value:.3e}"
    digits = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"


def format_seconds(seconds: float | None) -> str:
    """``4.2 s``, ``41 s``, ``2 min 05 s``, ``1 h 02 min`` (non-breaking); an en dash when unknown."""
    if seconds is None:
        return "–"
    if seconds < 10:
        text = f"{seconds:.1f} s"
    elif seconds < 60:
        text = f"{seconds:.0f} s"
    else:
        minutes, secs = divmod(round(seconds), 60)
        if minutes < 60:
            text = f"{minutes} min {secs:02d} s"
        else:
            hours, minutes = divmod(minutes, 60)
            text = f"{hours} h {minutes:02d} min"
    return text.replace(" ", NBSP)


def bibliography_keys(srcdir: str | Path, bibfiles: list[str]) -> set[str]:
    """The entry keys of the book's BibTeX files (a light scan, enough to check a key)."""
    keys: set[str] = set()
    for name in bibfiles:
        path = Path(srcdir) / name
        if path.is_file():
            keys.update(re.findall(r"^\s*@\w+\s*\{\s*([^,\s]+)\s*,", path.read_text(encoding="utf-8"), re.MULTILINE))
    return keys


@dataclass
class Cell:
    """One table cell: MyST text, a muted note under it, CSS classes, columns spanned."""

    text: str
    note: str = ""
    classes: tuple[str, ...] = ()
    span: int = 1


# --------------------------------------------------------------------------------------
# directives
# --------------------------------------------------------------------------------------


class _BookTableDirective(SphinxDirective):
    """Shared machinery: MyST parsing of cell text, tables with spans, warnings naming files."""

    has_content = False
    option_spec: dict[str, Any] = {"results-dir": str}

    def run(self) -> list[nodes.Node]:
        if not hasattr(self.state, "_renderer"):
            raise self.error(f"{self.name}: this directive is for MyST pages only")
        try:
            return self.build()
        except ValueError as err:  # a file that does not parse: name it, fail the build under -W
            logger.warning(f"{self.name}: {err}", location=self.get_location())
            return []

    def build(self) -> list[nodes.Node]:  # pragma: no cover - abstract
        raise NotImplementedError

    def parse(self, text: str) -> list[nodes.Node]:
        """MyST text parsed as a nested block: a list of nodes (paragraphs, lists...)."""
        holder = nodes.container()
        self.state.nested_parse(StringList(text.split("\n"), source=self.env.docname), self.content_offset, holder)
        return holder.children

    def table(self, header: list[Cell], rows: list[tuple[list[Cell], tuple[str, ...]]], widths: list[int]) -> nodes.table:
        """A table; ``rows`` are ``(cells, row classes)``; a cell may span several columns."""
        table = nodes.table(classes=["book-table", self.name])
        group = nodes.tgroup(cols=len(widths))
        table += group
        for width in widths:
            group += nodes.colspec(colwidth=width)
        head, body = nodes.thead(), nodes.tbody()
        head += self._row(header)
        for cells, classes in rows:
            body += self._row(cells, classes)
        group += head
        group += body
        return table

    def _row(self, cells: list[Cell], classes: tuple[str, ...] = ()) -> nodes.row:
        row = nodes.row(classes=list(classes))
        for cell in cells:
            entry = nodes.entry(classes=list(cell.classes))
            if cell.span > 1:
                entry["morecols"] = cell.span - 1
            entry.extend(self.parse(cell.text) if cell.text else [])
            if cell.note:
                for paragraph in self.parse(cell.note):
                    paragraph["classes"].append("book-note")
                    entry += paragraph
            row += entry
        return row

    # ---- shared helpers
    def results_dir(self) -> Path:
        folder = Path(self.env.srcdir) / self.options.get("results-dir", RESULTS_DIR)
        self.env.note_dependency(str(folder))  # a file added or removed changes its mtime
        for path in sorted(folder.glob("*.json")):
            self.env.note_dependency(str(path))
        return folder

    def chapter_link(self, chapter: str) -> str:
        docname = f"book/{chapter}"
        if docname not in self.env.found_docs:
            raise ValueError(f"results for {chapter!r}, but book/{chapter} is not a page of the book")
        return f"{{doc}}`/{docname}`"

    def citation(self, key: str) -> str:
        """``{cite:p}`` of the key when it is in the bibliography; else the key as code (logged)."""
        bibfiles = getattr(self.config, "bibtex_bibfiles", None) or []
        if key in bibliography_keys(self.env.srcdir, bibfiles):
            return f"{{cite:p}}`{key}`"
        logger.info(f"{self.name}: citation key {key!r} is not in {bibfiles}; shown as text")
        return f"`{key}`"


class ResultsTable(_BookTableDirective):
    """``results-table``: every recorded result, by chapter, with published numbers for its data."""

    # What an entry was measured on and how: shown once per chapter when all its entries agree.
    CONTEXT_KEYS = ("dataset", "split", "profile", "device", "recorded_date", "package_version", "torch_version", "notes")

    def build(self) -> list[nodes.Node]:
        from transformer_book.results import load_references, load_results, reference_applies

        folder = self.results_dir()
        entries = load_results(folder)
        references = load_references(folder)
        if not entries:
            return self.parse("*No results have been recorded yet: run a chapter in the `full` profile.*")
        for entry in entries:
            entry["recorded_date"] = entry["recorded_at"][:10]
        chapters: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            chapters.setdefault(entry["chapter"], []).append(entry)

        rows: list[tuple[list[Cell], tuple[str, ...]]] = []
        for chapter, group in chapters.items():
            shared = {k: group[0][k] for k in self.CONTEXT_KEYS if all(e[k] == group[0][k] for e in group)}
            rows.append(([Cell(f"**{self.chapter_link(chapter)}**", self.describe(shared), span=4)], ("book-group",)))
            for entry in group:
                own = {k: entry[k] for k in self.CONTEXT_KEYS if k not in shared}
                direction = "↑" if entry["higher_is_better"] else "↓"
                unit = f" {escape(entry['unit'])}" if entry["unit"] else ""
                published = [
                    f"{ref['id']}:{NBSP}" + (f"{ref['value']:g}" if ref["value"] is not None else "none")
                    for ref in references
                    if reference_applies(ref, entry)
                ]
                rows.append(([
                    Cell(f"{escape(entry['metric'])} {direction}", note=self.describe(own)),
                    Cell(f"**{format_number(entry['value'])}**{unit}", classes=("book-number",)),
                    Cell(format_seconds(entry["wall_time_s"]), classes=("book-number",)),
                    Cell(" · ".join(published) if published else "–", classes=("book-nowrap",)),
                ], ()))
        header = [Cell("Metric"), Cell("Value"), Cell("Wall time"), Cell("Published")]
        return [self.table(header, rows, widths=[52, 16, 12, 20])]

    @staticmethod
    def describe(context: dict[str, str]) -> str:
        """Sentences saying what was measured, on what, and where and with what it ran."""
        sentences = []
        if "dataset" in context or "split" in context:
            sentences.append("; ".join(escape(context[k]) for k in ("dataset", "split") if k in context))
        if context.get("notes"):
            sentences.append(escape(context["notes"]))
        run = []
        if "profile" in context:
            run.append(f"in the {escape(context['profile'])} profile")
        if "device" in context:
            run.append(f"on {escape(context['device'])}")
        if "recorded_date" in context:
            run.append(f"on {escape(context['recorded_date'])}")
        versions = [f"transformer\\_book {escape(context['package_version'])}"] if "package_version" in context else []
        versions += [f"PyTorch {escape(context['torch_version'])}"] if "torch_version" in context else []
        if versions:
            run.append("with " + " and ".join(versions))
        if run:
            sentences.append("Run " + " ".join(run))
        return " ".join(f"{text[:1].upper()}{text[1:]}." for text in sentences)


class ReferenceList(_BookTableDirective):
    """``reference-list``: the published reference numbers and how comparable they are."""

    def build(self) -> list[nodes.Node]:
        from transformer_book.results import load_references

        references = load_references(self.results_dir())
        if not references:
            return self.parse("*No reference numbers are listed.*")
        lines = []
        for ref in references:
            direction = "↑" if ref["higher_is_better"] else "↓"
            if ref["value"] is not None:
                unit = f" {escape(ref['unit'])}" if ref["unit"] else ""
                value = f"**{ref['value']:g}**{unit}"  # as published, with its digits
            else:
                value = "**none published**"
            source = self.citation(ref["citation"]) if ref["citation"] else ""
            if ref["source"]:
                url = ref["source"].split()[0]
                rest = ref["source"][len(url):].strip()
                source += f", [{escape(url)}]({url})" + (f" {escape(rest)}" if rest else "")
            lines += [
                f"- **{escape(ref['id'])}**. {escape(ref['dataset'])}, {escape(ref['metric'])} {direction}: {value}"
                + (f" ({source.lstrip(', ')})" if source else ""),
                "",
                f"  - *Set-up:* {escape(ref['setup'])}.",
                f"  - *Split:* {escape(ref['split'])}.",
                f"  - *How comparable:* {escape(ref['comparability'])}",
                "",
            ]
        container = nodes.container(classes=["book-reference-list"])
        container.extend(self.parse("\n".join(lines)))
        return [container]


class NotebookStatus(_BookTableDirective):
    """``notebook-status``: when, how long and where each chapter notebook was last executed."""

    option_spec: dict[str, Any] = {}

    def build(self) -> list[nodes.Node]:
        rows: list[tuple[list[Cell], tuple[str, ...]]] = []
        for path in sorted(Path(self.env.srcdir).glob(CHAPTER_GLOB)):
            docname = path.relative_to(self.env.srcdir).with_suffix("").as_posix()
            if docname not in self.env.found_docs:
                continue  # not in the table of contents
            self.env.note_dependency(str(path))
            status = notebook_status(path)
            started, finished, summary = status["started"], status["finished"], status["summary"]
            device = summary.get("device", "–")
            if summary.get("torch threads"):
                device += f", {summary['torch threads']}{NBSP}thread" + ("" if summary["torch threads"] == "1" else "s")
            versions = " · ".join(
                [escape(summary[key]) for key in ("transformer_book",) if key in summary]
                + [f"torch{NBSP}{escape(summary[key])}" for key in ("torch",) if key in summary]
            )
            cells = f"{status['code_cells']}" + (f" ({status['untimed']} untimed)" if status["untimed"] else "")
            rows.append(([
                Cell(f"{{doc}}`/{docname}`"),
                Cell(finished.strftime(f"%Y-%m-%d{NBSP}%H:%M") if finished else "not recorded", classes=("book-nowrap",)),
                Cell(format_seconds((finished - started).total_seconds()) if started and finished else "–",
                     classes=("book-number",)),
                Cell(f"{escape(summary.get('profile', '–'))} · {escape(device)}"),
                Cell(versions or "–"),
                Cell(cells, classes=("book-number",)),
            ], ()))
        if not rows:
            return self.parse("*No chapter notebooks found.*")
        header = [Cell("Chapter"), Cell("Last executed (UTC)"), Cell("Run time"), Cell("Profile · device"),
                  Cell("transformer\\_book · PyTorch"), Cell("Code cells")]
        return [self.table(header, rows, widths=[26, 16, 11, 17, 20, 10])]


def notebook_status(path: Path) -> dict[str, Any]:
    """Execution facts of one stored notebook.

    Returns ``started`` (the earliest ``iopub.execute_input`` of a code cell), ``finished``
    (the latest ``shell.execute_reply``), both timezone-aware datetimes or ``None``;
    ``summary``, the ``key : value`` lines that the first code cell printed (the environment
    summary); ``code_cells``, the number of non-empty code cells, and ``untimed``, how many
    of them store no timing.

    Raises:
        ValueError: if the file is not a readable notebook.
    """
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = [c for c in notebook["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a readable notebook ({err})") from None
    starts, replies, untimed = [], [], 0
    for cell in cells:
        timing = cell.get("metadata", {}).get("execution", {})
        start, reply = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if not (start and reply):
            untimed += 1
            continue
        starts.append(_timestamp(start, path))
        replies.append(_timestamp(reply, path))
    summary: dict[str, str] = {}
    if cells:
        text = "".join("".join(o.get("text", "")) for o in cells[0].get("outputs", []) if o.get("output_type") == "stream")
        for line in text.splitlines():
            match = SUMMARY_LINE.match(line.strip())
            if match:
                summary.setdefault(match["key"].strip(), match["value"].strip())
    return {
        "started": min(starts) if starts else None,
        "finished": max(replies) if replies else None,
        "summary": summary,
        "code_cells": len(cells),
        "untimed": untimed,
    }


def _timestamp(text: str, path: Path) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{path}: unreadable execution timestamp {text!r}") from None


def _write_css(app, exception) -> None:  # noqa: ANN001 - Sphinx event signature
    """Write the tables' style sheet into the HTML output (the only file the extension writes)."""
    if exception is None and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        (static / CSS_FILE).write_text(CSS, encoding="utf-8")


def setup(app):  # noqa: ANN001, ANN201 - Sphinx's extension entry point
    app.add_directive("results-table", ResultsTable)
    app.add_directive("reference-list", ReferenceList)
    app.add_directive("notebook-status", NotebookStatus)
    app.add_css_file(CSS_FILE)
    app.connect("build-finished", _write_css)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
