"""The book's schematic diagrams (book/figures/*.svg) and where the chapters show them.

Each diagram is a hand-written SVG shown by a MyST figure directive in a chapter's markdown (never
by a code cell, whose output would need a re-run). The tests hold:

  - every SVG parses as XML and has a viewBox about 700 units wide (the book's figures are 7 inches
    at 100 px/inch), with a width, if it gives one, equal to the viewBox's (so that a browser's
    natural width is the drawing's);
  - it has a <title> and a <desc>, text as <text> elements, and no text under 13 units (13 units of
    a 700-unit drawing shown on a phone's 342-px column are 6.4 px; the website test checks the
    shown size), font sizes given as attributes or inline styles, inherited as SVG inherits them;
  - no script, no event handler, no foreignObject, no reference to anything outside the file;
  - its colours are the book's colour-blind-safe palette (matplotlib's "colorblind") or greys;
  - every SVG is shown by exactly one figure directive, in one chapter, with alt text and a
    caption; every figure directive's file exists;
  - the chapters listed in DIAGRAM_CHAPTERS each show at least one diagram.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
FIGURES = BOOK / "figures"
SVG_NS = "{http://www.w3.org/2000/svg}"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"

# The chapters that teach an idea that every peer textbook draws, and so must show a diagram of it.
DIAGRAM_CHAPTERS = {
    "01_attention",  # attention as a soft dictionary look-up
    "02_masks",  # the padding and causal masks and their OR, as matrices
    "03_multi_head_attention",  # the split into heads, the concatenation and W^O
    "05_transformer_block",  # post-LN and pre-LN blocks side by side
    "06_encoder_decoder",  # the encoder-decoder with cross-attention
    "09_language_model",  # the KV cache at one decoding step
    "13_bert_pretraining",  # BERT's 15% selection and 80-10-10 replacement
}
MIN_FONT = 13.0
WIDTH_RANGE = (600.0, 800.0)
DEFAULT_FONT = 16.0  # CSS "medium", what an SVG's text inherits when nothing sets a size
# matplotlib's (seaborn's) "colorblind" palette, as the book's figures use it; greys are allowed too
PALETTE = {"#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4", "#949494", "#ece133", "#56b4e9"}
TEXT_TAGS = {"text", "tspan", "textPath"}
COLOUR = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b")
# ```{figure} path  or  :::{figure} path, its options (:key: value), a blank line, the caption
FIGURE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{figure\}[ \t]+(?P<path>\S+)[ \t]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def _tag(element) -> str:
    return element.tag.removeprefix(SVG_NS) if isinstance(element.tag, str) else ""


def _font_size(value: str, parent: float) -> float:
    """A CSS font-size (a number of user units, px, pt, em or %) against the parent's size."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(px|pt|em|%)?\s*", value)
    if not match:
        raise ValueError(f"font-size {value!r} is not a plain size (units, px, pt, em or %)")
    number, unit = float(match.group(1)), match.group(2)
    return {None: number, "px": number, "pt": number * 4 / 3, "em": number * parent, "%": number * parent / 100}[unit]


def _own_font_size(element) -> str | None:
    style = dict(
        (key.strip(), value.strip())
        for key, _, value in (part.partition(":") for part in element.get("style", "").split(";"))
        if key.strip()
    )
    return style.get("font-size") or element.get("font-size")


def text_sizes(root) -> list[tuple[float, str]]:
    """(font size, text) of every run of characters in the SVG, sizes resolved with inheritance."""
    runs = []

    def walk(element, inherited: float):
        own = _own_font_size(element)
        size = _font_size(own, inherited) if own else inherited
        if _tag(element) in TEXT_TAGS and (element.text or "").strip():
            runs.append((size, element.text.strip()))
        for child in element:
            walk(child, size)
            if _tag(element) in TEXT_TAGS and (child.tail or "").strip():
                runs.append((size, child.tail.strip()))

    walk(root, DEFAULT_FONT)
    return runs


def viewbox_width(root) -> float:
    values = [float(v) for v in re.split(r"[\s,]+", root.get("viewBox", "").strip()) if v]
    assert len(values) == 4, f"viewBox {root.get('viewBox')!r} is not four numbers"
    return values[2]


def _figure_directives() -> list[dict]:
    """Every figure directive in the markdown of the book's notebooks and Markdown pages."""
    found = []
    sources = [
        (p, [c for c in json.loads(p.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "markdown"])
        for p in sorted(BOOK.glob("*.ipynb"))
    ]
    for path, cells in sources:
        for cell in cells:
            text = "".join(cell["source"])
            for match in FIGURE.finditer(text):
                found.append({"file": path.name, "target": match.group("path"), **_options(match.group("body"))})
    for path in sorted(BOOK.rglob("*.md")):
        for match in FIGURE.finditer(path.read_text(encoding="utf-8")):
            found.append(
                {"file": str(path.relative_to(BOOK)), "target": match.group("path"), **_options(match.group("body"))}
            )
    return found


def _options(body: str) -> dict:
    lines = body.split("\n")
    options = {}
    while lines and lines[0].startswith(":"):
        key, _, value = lines.pop(0)[1:].partition(":")
        options[key.strip()] = value.strip()
    return {"options": options, "caption": "\n".join(lines).strip()}


SVGS = sorted(FIGURES.glob("*.svg"))
DIRECTIVES = _figure_directives()


def _parse(path: Path):
    return ET.parse(path).getroot()


def test_the_chapters_that_need_a_diagram_show_one():
    shown = {Path(d["file"]).stem for d in DIRECTIVES if d["target"].lower().endswith(".svg")}
    missing = sorted(DIAGRAM_CHAPTERS - shown)
    assert not missing, f"chapters without a diagram (a figure directive showing an SVG of book/figures): {missing}"


@pytest.mark.parametrize("directive", DIRECTIVES, ids=lambda d: f"{d['file']}:{d['target']}")
def test_every_figure_directive_shows_an_existing_file_with_alt_text_and_a_caption(directive):
    target = (BOOK / directive["target"]).resolve()
    assert target.is_file(), f"{directive['file']}: figure {directive['target']} does not exist"
    assert directive["options"].get("alt", "").strip(), (
        f"{directive['file']}: figure {directive['target']} has no :alt:"
    )
    assert directive["caption"], f"{directive['file']}: figure {directive['target']} has no caption"


@pytest.mark.parametrize("svg", SVGS, ids=lambda p: p.name)
def test_every_diagram_is_shown_by_exactly_one_chapter(svg):
    users = [d for d in DIRECTIVES if (BOOK / d["target"]).resolve() == svg.resolve()]
    assert len(users) == 1, f"{svg.name} is shown by {len(users)} figure directives: {[d['file'] for d in users]}"
    assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", users[0]["file"]), f"{svg.name} is shown outside a chapter"
    assert users[0]["options"].get("alt", "").strip(), f"{svg.name}: its figure has no :alt:"


@pytest.mark.parametrize("svg", SVGS, ids=lambda p: p.name)
def test_every_diagram_is_a_self_contained_svg_with_a_title_and_a_description(svg):
    root = _parse(svg)
    assert root.tag == f"{SVG_NS}svg", f"{svg.name}: the root element is {root.tag}, not an SVG <svg>"
    width = viewbox_width(root)
    assert WIDTH_RANGE[0] <= width <= WIDTH_RANGE[1], f"{svg.name}: viewBox {width:g} units wide, not about 700"
    if root.get("width"):
        assert float(root.get("width").removesuffix("px")) == width, f"{svg.name}: width differs from the viewBox's"
    title, desc = root.find(f"{SVG_NS}title"), root.find(f"{SVG_NS}desc")
    assert title is not None and (title.text or "").strip(), f"{svg.name}: no <title>"
    assert desc is not None and (desc.text or "").strip(), f"{svg.name}: no <desc>"
    for element in root.iter():
        tag = _tag(element)
        assert tag not in {"script", "foreignObject", "style", "image"}, f"{svg.name}: has a <{tag}> element"
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), f"{svg.name}: event handler {name} on <{tag}>"
            if name in {"href", XLINK_HREF}:
                assert value.startswith("#"), f"{svg.name}: <{tag}> refers to {value} outside the file"
            for url in re.findall(r"url\(\s*['\"]?([^)'\"]*)", value):
                assert url.startswith("#"), f"{svg.name}: {name} refers to {url} outside the file"


@pytest.mark.parametrize("svg", SVGS, ids=lambda p: p.name)
def test_every_diagrams_text_is_large_enough_and_sans_serif(svg):
    root = _parse(svg)
    runs = text_sizes(root)
    assert runs, f"{svg.name}: no <text>: a diagram's labels must be text, not paths"
    size, text = min(runs)
    assert size >= MIN_FONT, f"{svg.name}: {text!r} is set at {size:g} units (under {MIN_FONT:g})"
    families = {e.get("font-family") for e in root.iter() if e.get("font-family")}
    assert families and all("sans-serif" in f for f in families), f"{svg.name}: font families {families}"


@pytest.mark.parametrize("svg", SVGS, ids=lambda p: p.name)
def test_every_diagrams_colours_are_the_colour_blind_safe_palette_or_grey(svg):
    others = set()
    for colour in COLOUR.findall(svg.read_text(encoding="utf-8")):
        colour = colour.lower()
        if len(colour) == 4:
            colour = "#" + "".join(c * 2 for c in colour[1:])
        red, green, blue = (int(colour[k : k + 2], 16) for k in (1, 3, 5))
        if colour not in PALETTE and not red == green == blue:
            others.add(colour)
    assert not others, f"{svg.name}: colours outside the palette: {sorted(others)}"


def test_the_font_size_resolution_follows_inheritance_and_units():
    """The helper the tests rely on: sizes are inherited from <g> and <svg>, and styles win."""
    root = ET.fromstring(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 700 100" font-size="15">'
        '<text>a<tspan font-size="13">b</tspan>c</text>'
        '<g style="font-size: 20px"><text font-size="1.5em">d</text><text>e</text></g>'
        '<g font-size="10"><text style="font-size:50%">f</text></g></svg>'
    )
    assert sorted(text_sizes(root)) == [(5.0, "f"), (13.0, "b"), (15.0, "a"), (15.0, "c"), (20.0, "e"), (30.0, "d")]
    assert viewbox_width(root) == 700
