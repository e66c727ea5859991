"""Sphinx extension of the book: tables read from files at build time.

Four directives, for MyST pages:

``results-table``
    Every result the chapters recorded with :func:`transformer_book.results.record`, read
    from ``book/results/*.json``, one group of rows per chapter, with the published reference
    numbers for the same data set beside them (labelled ``R1``, ``R2``, ... as in
    ``reference-list``). What rows share (data, split, run, set-up, references) is said once.
``reference-list``
    The published reference numbers of ``book/results/references.json``: value, set-up,
    citation, source, and how comparable they are.
``notebook-status``
    One row per chapter notebook of the book (``book/NN_*.ipynb`` in the table of contents):
    when it was last executed and how long that took, from the timings that
    ``jupyter execute`` (nbclient) stores in each code cell's ``metadata.execution``; the
    profile, device and versions its environment summary printed; and its code cells.
``benchmark-table PATH``
    The side-by-side timings of ``benchmarks/run_all.py`` (its ``summary.json``) in six columns
    that fit a laptop's text column: comparison, book, baseline, ratio, aim, met.

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
table.book-table .book-value { text-align: right; font-variant-numeric: tabular-nums; }
table.book-table .book-value strong { white-space: nowrap; }
table.book-table tr.book-group td { background: var(--pst-color-surface); border-top: 2px solid var(--pst-color-border); }
table.book-table p.book-note { font-size: 0.85em; color: var(--pst-color-text-muted); margin-top: 0.15em; }
table.book-table td.book-setup, table.book-table td.book-split { font-size: 0.85em; color: var(--pst-color-text-muted); }
table.book-table tr.book-subgroup td { background: var(--pst-color-surface); }
/* The rows across the table (a chapter's, a data set's) take the width the others leave: their
   long text must not widen the columns it spans (auto layout would share it out among them). */
table.book-table tr.book-group > td, table.book-table tr.book-subgroup > td { contain: inline-size; }
table.book-table th, table.book-table td { padding-left: 0.35rem; padding-right: 0.35rem; }
p.book-note { font-size: 0.85em; color: var(--pst-color-text-muted); }
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
    """One table cell: MyST text, a muted note under it, CSS classes, columns and rows spanned."""

    text: str
    note: str = ""
    classes: tuple[str, ...] = ()
    span: int = 1
    rows: int = 1


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
        """A table; ``rows`` are ``(cells, row classes)``; a cell may span several columns, or
        several rows (the rows below it then leave that column out)."""
        table = nodes.table(classes=["book-table", self.name, "colwidths-auto"])  # widths from the content
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
            if cell.rows > 1:
                entry["morerows"] = cell.rows - 1
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
    """``results-table``: every recorded result, by chapter, with published numbers for its data.

    What several rows share is said once, where it applies: what a whole chapter's rows share
    (the data, the split, the run: profile, device, date, versions) in the chapter's row; when a
    chapter measures on more than one data set, what the rows of each data set share in a row
    above them; what is left of a row's split and notes (its set-up: the clauses that not every
    row of its data set has) in two columns, where one cell spans the consecutive rows that
    share it; and the published references in the row of the chapter or data set when they
    apply to all of its rows.
    """

    RUN_KEYS = ("profile", "device", "recorded_date", "package_version", "torch_version")
    COLUMNS = ("Metric", "Measured on", "Set-up", "Value", "Wall time", "Published")

    def build(self) -> list[nodes.Node]:
        from transformer_book.results import load_references, load_results, reference_applies

        folder = self.results_dir()
        entries = load_results(folder)
        references = load_references(folder)
        if not entries:
            return self.parse("*No results have been recorded yet: run a chapter in the `full` profile.*")
        for entry in entries:
            entry["recorded_date"] = entry["recorded_at"][:10]
            entry["clauses"] = split_clauses(entry.get("notes") or "")
            entry["published"] = [ref for ref in references if reference_applies(ref, entry)]
        chapters: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            chapters.setdefault(entry["chapter"], []).append(entry)

        rows: list[tuple[list[Cell], tuple[str, ...]]] = []
        for chapter, group in chapters.items():
            run = {k: group[0][k] for k in self.RUN_KEYS if all(e[k] == group[0][k] for e in group)}
            blocks = consecutive(group, key=lambda e: e["dataset"])
            link = f"**{self.chapter_link(chapter)}**"
            if len(blocks) == 1:
                rows.append(self.heading_row(link, self.block_context(group, run), group, "book-group"))
                rows += self.entry_rows(group, run)
            else:
                rows.append(self.heading_row(link, self.describe(run), [], "book-group"))
                for block in blocks:
                    rows.append(self.heading_row("", self.block_context(block, {}), block, "book-subgroup"))
                    rows += self.entry_rows(block, run)
        header = [Cell(name) for name in self.COLUMNS]
        return [self.table(header, rows, widths=[22, 19, 26, 11, 10, 12])]

    # ---- rows
    def heading_row(self, title: str, context: str, block: list[dict[str, Any]], kind: str):
        """A row across the table: its title and context, and the references common to `block`."""
        common = self.common_references(block) if block else []
        text = " ".join(part for part in (title, context) if part)
        published = self.references_text(common) if common else ""
        return ([Cell(text, span=len(self.COLUMNS) - 1), Cell(published, classes=("book-published",))], (kind,))

    def block_context(self, block: list[dict[str, Any]], run: dict[str, str]) -> str:
        """The data set, and the split and notes that every row of the block shares, then the run."""
        context: dict[str, str] = {"dataset": block[0]["dataset"]}
        if all(e["split"] == block[0]["split"] for e in block):
            context["split"] = block[0]["split"]
        shared = shared_clauses(block)
        if shared:
            context["notes"] = "; ".join(shared)
        context.update(run)
        return self.describe(context)

    def entry_rows(self, block: list[dict[str, Any]], run: dict[str, str]) -> list:
        """The block's rows. What a row measured on (its split, when the block's rows differ in
        it) and its set-up (the clauses of its notes that not every row of the block has) have
        columns of their own, and one cell spans the consecutive rows that share it."""
        split_shared = all(e["split"] == block[0]["split"] for e in block)
        shared = set(shared_clauses(block))
        common_refs = self.common_references(block)
        splits = ["" if split_shared else escape(e["split"]) for e in block]
        setups = ["; ".join(escape(c) for c in e["clauses"] if c not in shared) for e in block]
        split_spans, setup_spans = run_lengths(splits), run_lengths(setups)
        rows = []
        for i, entry in enumerate(block):
            own = {k: entry[k] for k in self.RUN_KEYS if k not in run}
            direction = "↑" if entry["higher_is_better"] else "↓"
            unit = f" {escape(entry['unit'])}" if entry["unit"] else ""
            refs = [ref for ref in entry["published"] if ref not in common_refs]
            cells = [Cell(f"{escape(entry['metric'])}{NBSP}{direction}", note=self.describe(own), classes=("book-metric",))]
            if split_spans[i]:
                cells.append(Cell(splits[i], classes=("book-split",), rows=split_spans[i]))
            if setup_spans[i]:
                cells.append(Cell(setups[i], classes=("book-setup",), rows=setup_spans[i]))
            cells += [
                Cell(f"**{format_number(entry['value'])}**{unit}", classes=("book-value",)),
                Cell(format_seconds(entry["wall_time_s"]), classes=("book-number",)),
                Cell(self.references_text(refs) if refs or not common_refs else "", classes=("book-published",)),
            ]
            rows.append((cells, ()))
        return rows

    # ---- references
    @staticmethod
    def common_references(block: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = block[0]["published"]
        return [ref for ref in first if all(ref in e["published"] for e in block)]

    @staticmethod
    def references_text(refs: list[dict[str, Any]]) -> str:
        if not refs:
            return "–"
        return " · ".join(f"{ref['id']}:{NBSP}" + (f"{ref['value']:g}" if ref["value"] is not None else "none")
                          for ref in refs)

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


def split_clauses(notes: str) -> list[str]:
    """A note's clauses: its parts between semicolons (commas stay inside a clause)."""
    # a prompt quoted with Python's escape for a line break ("Review: <text>\\nSentiment:") shows the
    # break as the symbol a reader knows, not as a backslash that reads like TeX
    notes = notes.replace("\\n", "\u21b5")
    return [part.strip() for part in notes.split(";") if part.strip()]


def shared_clauses(block: list[dict[str, Any]]) -> list[str]:
    """The clauses of the first entry's notes that every entry of the block has, in order."""
    return [c for c in block[0]["clauses"] if all(c in e["clauses"] for e in block)]


def run_lengths(values: list[str]) -> list[int]:
    """For each value, the length of the run of equal values that starts there; 0 inside a run."""
    lengths = [0] * len(values)
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            lengths[start] = i - start
            start = i
    return lengths


def consecutive(items: list[dict[str, Any]], key) -> list[list[dict[str, Any]]]:  # noqa: ANN001
    """Runs of consecutive items with the same key, in order."""
    runs: list[list[dict[str, Any]]] = []
    for item in items:
        if runs and key(runs[-1][-1]) == key(item):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


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


class BenchmarkTable(_BookTableDirective):
    """``benchmark-table PATH``: the comparisons of ``benchmarks/run_all.py`` (its ``summary.json``;
    PATH relative to the book's source folder) in six columns that fit a laptop's text column:
    the comparison, with what is compared and, where the book's code is slower or misses its aim,
    the cause measured; the book's and the baseline's median times; their ratio; the aim; and
    whether it is met. The measurements behind the causes follow as numbered notes. The aims are
    shown as their numbers only: the page explains each in words.
    """

    required_arguments = 1
    option_spec: dict[str, Any] = {}
    UNITS = {"ms/call": "time per call", "ms/step": "time per training step", "ms/sequence": "time per sequence",
             "ms/batch": "time per batch", "ms/run": "time per run"}

    def build(self) -> list[nodes.Node]:
        path = Path(self.env.srcdir) / self.arguments[0]
        self.env.note_dependency(str(path))
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
            rows_data = list(summary["rows"])
            machine = summary.get("machine") or {}
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{self.arguments[0]}: not a readable benchmark summary ({err})") from None
        evidence: list[str] = []
        rows: list[tuple[list[Cell], tuple[str, ...]]] = []
        for row in rows_data:
            rows.append((self.cells(row, evidence), ("book-missed",) if row.get("met") is False else ()))
        header = [Cell("Comparison"), Cell("Book"), Cell("Baseline"), Cell("Ratio"), Cell("Aim"), Cell("Met")]
        if machine.get("cuda"):
            where = f"one {machine['cuda']} ({machine.get('cpu_count', '?')} CPU cores)"
        else:
            where = f"{machine.get('machine', '?')} ({machine.get('system', '?')}, {machine.get('cpu_count', '?')} CPU cores)"
        dates = sorted({row.get("measured", summary.get("finished", "?")) for row in rows_data}) or [summary.get("finished", "?")]
        when = escape(dates[0]) if len(dates) <= 1 else f"from {escape(dates[0])} to {escape(dates[-1])} (rows refreshed alone)"
        intro = (f"Measured {when} on {escape(where)}, with Python "
                 f"{escape(machine.get('python', '?'))} and PyTorch {escape(machine.get('torch', '?'))}.")
        if summary.get("smoke"):
            intro += " *A smoke run: tiny sizes and one round, whose timings mean nothing.*"
        out = self.parse(intro)
        out.append(self.table(header, rows, widths=[46, 11, 11, 8, 14, 10]))
        notes = [f"\\[{i}\\] Measured on {escape(text)}." for i, text in enumerate(evidence, 1)]
        notes += [f"Did not run: {escape(name)}: {escape(str(message))}." for name, message in (summary.get("failed") or {}).items()]
        for text in notes:
            for paragraph in self.parse(text):
                paragraph["classes"].append("book-note")
                out.append(paragraph)
        return out

    def cells(self, row: dict[str, Any], evidence: list[str]) -> list[Cell]:
        unit = self.UNITS.get(row.get("unit", ""), escape(row.get("unit", "")))
        baseline = row.get("baseline") or ""
        if row.get("baseline_median") is None or baseline.startswith("("):
            what = f"{escape(row['book'])}, with no baseline; {unit}."
        else:
            what = f"{escape(row['book'])} against {escape(baseline)}; {unit}."
        if row.get("why"):
            marker = ""
            if row.get("why_evidence"):
                evidence.append(row["why_evidence"])
                marker = f" \\[{len(evidence)}\\]"
            cause = "Missed because" if row.get("met") is False else "Slower because"
            what += f" *{cause}:* {escape(row['why'])}{marker}."
        met = {True: "yes", False: "**no**"}.get(row.get("met"), "–")
        ratio = row.get("ratio")
        return [
            Cell(f"**{escape(row['comparison'])}**", note=what, classes=("book-comparison",)),
            Cell(format_ms(row.get("book_median")), classes=("book-number",)),
            Cell(format_ms(row.get("baseline_median")), classes=("book-number",)),
            Cell(f"**{ratio:.2f}**" if ratio is not None else "–", classes=("book-number",)),
            Cell(short_aim(row.get("aim")), classes=("book-nowrap",)),
            Cell(met),
        ]


def format_ms(ms: float | None) -> str:
    """A median time given in milliseconds: ``0.34 ms``, ``41.1 ms``, ``1.59 s`` (non-breaking)."""
    if ms is None:
        return "–"
    if ms >= 1000:
        text = f"{ms / 1000:,.2f} s"
    elif ms >= 10:
        text = f"{ms:.1f} ms"
    else:
        text = f"{ms:.2f} ms"
    return text.replace(" ", NBSP)


def short_aim(aim: str | None) -> str:
    """The number an aim sets: the strictest ``ratio <= x`` as ``≤ x``, ``under 60 s``, or ``none``."""
    if not aim:
        return "–"
    thresholds = re.findall(r"ratio\s*<=\s*([0-9]*\.?[0-9]+)", aim)
    if thresholds:
        return f"≤{NBSP}" + min(thresholds, key=float)
    under = re.match(r"under ([0-9][0-9.,]*)\s*s\b", aim)
    if under:
        return f"under{NBSP}{under.group(1)}{NBSP}s"
    if aim.startswith("no aim"):
        return "none"
    return escape(aim)


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
    app.add_directive("benchmark-table", BenchmarkTable)
    app.add_css_file(CSS_FILE)
    app.connect("build-finished", _write_css)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
