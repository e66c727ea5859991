"""Checks of the figures and training outputs that a chapter page shows, for the website tests.

`visit_figures` loads one page at a laptop's width and again at a phone's (device scale 1) and
returns a `FigureSnapshot`: each output image's drawn size in pixels, the width its output asks to
be shown at, and the width it is shown at on each screen; and the text of every cell output. The
`*_problems` functions judge a snapshot and return a list of problems (empty: the check passed),
each naming the problem and the figure or line:

  - `sharpness_problems`: a figure is drawn with fewer than 1.9 pixels for each pixel it is shown
    at on a laptop, so that it is blurry on a high-density screen (the book's figures are retina
    PNGs: twice the pixels, shown at half size);
  - `phone_text_problems`: a phone shrinks a figure so far that its smallest text (the book's
    minimum, 9 pt, drawn at 100 pixels per inch) comes out below 5.5 pixels;
  - `distortion_problems`: a figure squeezed on a phone (its width shrunk, its height not);
  - `red_green_problems` (reads the image files): a figure pairs matplotlib's default green with
    its default red, which readers with a red-green colour-vision deficiency cannot tell apart;
  - `progress_bar_problems`: an output keeps a progress bar stopped part-way ("35%|...| 904/2600"),
    which reads as a crashed run (the training loop leaves one summary line instead);
  - `machine_path_problems`: the environment summary prints the build machine's data path;
  - `diagram_problems` (reads the SVG files): a schematic diagram (an SVG shown by a figure in the
    chapter's text, not by a cell output) does not load, has no alt text, or a phone shrinks it so
    far that its smallest text (its own smallest font size, scaled by the width it is shown at
    over its viewBox's width) comes out below 5.5 pixels.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import site_checks as sc

LAPTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}
MIN_FONT_PT = 9.0
PIXELS_PER_INCH = 100  # matplotlib's figure.dpi: the size a figure asks to be shown at
# The old pages' figures (10-16 inches wide) put their text at 3-4.5 px on the theme's 342-px phone
# column; the book's 7-inch figures (7.3-7.5 inches once cropped to what is drawn) at 5.7-6 px.
MIN_TEXT_PX = 5.5
MIN_SHARPNESS = 1.9
# matplotlib's default green and red (tab:green, tab:red), and how close a pixel must be to count
DEFAULT_GREEN, DEFAULT_RED = (44, 160, 44), (214, 39, 40)
COLOUR_RADIUS = 30
MIN_COLOUR_SHARE = 0.001
# a tqdm bar: "35%|███▌      | 904/2600 [17:04<32:02, ...]" (counts may carry k, M, ... suffixes)
BAR = re.compile(r"(\d{1,3})%\|[^|\n]*\|\s*([\d.,]+[kMGT]?)/([\d.,]+[kMGT]?)")
# the environment summary's data row with a path in it (absolute, home-relative or a drive)
DATA_PATH = re.compile(r"^\s*data(?: directory)?\s*:\s*(?:/|~|[A-Za-z]:\\)\S*", re.MULTILINE)


@dataclass
class FigureSnapshot:
    url: str
    images: list[dict] = field(default_factory=list)  # {src, natural, natural_height, asked, laptop,
    #  phone, phone_height}: sizes in pixels
    outputs: list[str] = field(default_factory=list)  # each cell output's text
    diagrams: list[dict] = field(default_factory=list)  # {src, natural, alt, laptop, phone}: the SVG images
    # of figures outside cell outputs; widths in pixels


_IMAGES_JS = """
() => Array.from(document.querySelectorAll('.cell_output img')).map(img => ({
  src: img.currentSrc || img.src, natural: img.naturalWidth, naturalHeight: img.naturalHeight,
  // the width the output asks for: myst-nb writes it as an inline style, HTML may give an attribute
  asked: parseFloat(img.style.width) || parseFloat(img.getAttribute('width')) || null,
  shown: img.getBoundingClientRect().width,
  shownHeight: img.getBoundingClientRect().height}))
"""
# The schematic diagrams: SVG images of figures in the text (a MyST figure in a markdown cell), which
# are not cell outputs. naturalWidth is the SVG's own width (0 when it failed to load).
_DIAGRAMS_JS = """
() => Array.from(document.querySelectorAll('figure img'))
  .filter(img => !img.closest('.cell_output')
          && /\\.svg$/i.test(new URL(img.currentSrc || img.src, document.baseURI).pathname))
  .map(img => ({src: img.currentSrc || img.src, natural: img.naturalWidth, alt: img.getAttribute('alt') || '',
                shown: img.getBoundingClientRect().width}))
"""
_OUTPUTS_JS = """
() => Array.from(document.querySelectorAll('.cell_output')).map(o => o.textContent)
"""


def new_context(browser):
    """A browser context at a laptop's viewport and device scale 1, outside hosts blocked, and
    MathJax not loaded: it doubles a page's time, and the figures' sizes at either width do not
    depend on it (every chapter's images and diagrams measured the same with and without it)."""
    context = browser.new_context(viewport=LAPTOP, device_scale_factor=1)
    return sc.without_mathjax(context)


def _images(page) -> list[dict]:
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=20_000)
    return page.evaluate(_IMAGES_JS)


def visit_figures(context, url: str) -> FigureSnapshot:
    page = context.new_page()
    try:
        page.set_viewport_size(LAPTOP)
        page.goto(url, wait_until="load")
        laptop = _images(page)
        laptop_diagrams = page.evaluate(_DIAGRAMS_JS)
        outputs = page.evaluate(_OUTPUTS_JS)
        page.set_viewport_size(PHONE)
        page.wait_for_timeout(100)
        phone = _images(page)
        phone_diagrams = page.evaluate(_DIAGRAMS_JS)
    finally:
        page.close()
    images = [
        {
            "src": a["src"],
            "natural": a["natural"],
            "natural_height": a["naturalHeight"],
            "asked": a["asked"],
            "laptop": a["shown"],
            "phone": b["shown"],
            "phone_height": b["shownHeight"],
        }
        for a, b in zip(laptop, phone)
    ]
    diagrams = [
        {"src": a["src"], "natural": a["natural"], "alt": a["alt"], "laptop": a["shown"], "phone": b["shown"]}
        for a, b in zip(laptop_diagrams, phone_diagrams)
    ]
    return FigureSnapshot(url=url, images=images, outputs=outputs, diagrams=diagrams)


def _name(image: dict) -> str:
    return unquote(urlsplit(image["src"]).path.rsplit("/", 1)[-1])[:24]


def sharpness_problems(snap: FigureSnapshot) -> list[str]:
    problems = []
    for image in snap.images:
        if image["laptop"] < 50 or not image["natural"]:
            continue
        ratio = image["natural"] / image["laptop"]
        if ratio < MIN_SHARPNESS:
            problems.append(
                f"figure {_name(image)}: {image['natural']} pixels drawn for {image['laptop']:.0f} "
                f"shown on a laptop ({ratio:.2f} per pixel, under {MIN_SHARPNESS}): blurry on a "
                "high-density screen"
            )
    return problems


def phone_text_problems(snap: FigureSnapshot) -> list[str]:
    problems = []
    for image in snap.images:
        asked = image["asked"] or image["natural"]
        if not asked or image["phone"] < 1:
            continue
        text_px = MIN_FONT_PT / 72 * PIXELS_PER_INCH * min(1.0, image["phone"] / asked)
        if text_px < MIN_TEXT_PX:
            problems.append(
                f"figure {_name(image)}: {asked:.0f} px wide, shown at {image['phone']:.0f} px on a "
                f"phone: {MIN_FONT_PT:g}-pt text comes out {text_px:.1f} px high (under {MIN_TEXT_PX})"
            )
    return problems


def distortion_problems(snap: FigureSnapshot) -> list[str]:
    """A figure shrunk to a phone's width keeps its proportions (its height shrinks with it)."""
    problems = []
    for image in snap.images:
        if not image["natural"] or not image["natural_height"] or image["phone"] < 1:
            continue
        drawn, shown = image["natural_height"] / image["natural"], image["phone_height"] / image["phone"]
        if abs(shown / drawn - 1) > 0.02:
            problems.append(
                f"figure {_name(image)}: shown {image['phone']:.0f} x {image['phone_height']:.0f} px on a "
                f"phone, {shown / drawn:.2f} times as tall as its proportions"
            )
    return problems


def _image_file(site: Path, base_url: str, src: str) -> Path:
    path = unquote(urlsplit(urljoin(base_url, src)).path).lstrip("/")
    return Path(site) / path


def red_green_problems(snap: FigureSnapshot, site: Path, base_url: str) -> list[str]:
    import numpy as np
    from PIL import Image

    byte = np.arange(256)

    def share(channels, colour) -> float:
        """The share of pixels within COLOUR_RADIUS of `colour` in every channel: each channel's
        bytes looked up in a table of the 256 values near the colour's (a few times faster than
        subtracting the colour from every pixel)."""
        near = [np.abs(byte - value) <= COLOUR_RADIUS for value in colour]
        return float((near[0][channels[0]] & near[1][channels[1]] & near[2][channels[2]]).mean())

    problems = []
    for image in snap.images:
        with Image.open(_image_file(site, base_url, image["src"])) as picture:
            channels = [np.asarray(channel) for channel in picture.convert("RGB").split()]
        green, red = share(channels, DEFAULT_GREEN), share(channels, DEFAULT_RED)
        if green >= MIN_COLOUR_SHARE and red >= MIN_COLOUR_SHARE:
            problems.append(
                f"figure {_name(image)}: matplotlib's green ({green:.1%} of its pixels) beside its red "
                f"({red:.1%}), which a red-green colour-vision deficiency merges"
            )
    return problems


def _count(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    text = text.replace(",", "")
    return float(text[:-1]) * scale[text[-1]] if text[-1] in scale else float(text)


def progress_bar_problems(snap: FigureSnapshot) -> list[str]:
    problems = []
    for output in snap.outputs:
        for match in BAR.finditer(output):
            percent, done, total = int(match.group(1)), _count(match.group(2)), _count(match.group(3))
            if percent < 100 or done < total:
                line = output[match.start() :].split("\n", 1)[0]
                problems.append(f"a progress bar stopped part-way: {line[:90]}")
    return problems


def machine_path_problems(snap: FigureSnapshot) -> list[str]:
    return [
        f"the environment summary names the machine's data path: {m.group(0).strip()[:80]}"
        for output in snap.outputs
        for m in DATA_PATH.finditer(output)
    ]


# ---- schematic diagrams (SVG) ------------------------------------------------------------------

_SVG = "{http://www.w3.org/2000/svg}"
_TEXT_TAGS = {"text", "tspan", "textPath"}
_DEFAULT_FONT = 16.0  # CSS "medium": what an SVG's text is set at when nothing gives a size


def _font_size(value: str, parent: float) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(px|pt|em|%)?\s*", value)
    if not match:
        raise ValueError(f"font-size {value!r} is not a plain size")
    number, unit = float(match.group(1)), match.group(2)
    return {None: number, "px": number, "pt": number * 4 / 3, "em": number * parent, "%": number * parent / 100}[unit]


def svg_text_geometry(svg_text: str) -> tuple[float, float]:
    """(width of the viewBox, smallest font size of any text) of an SVG, in its user units.

    Font sizes come from font-size attributes or inline styles (the style wins), inherited from
    the enclosing elements as SVG inherits them; only elements that hold characters count.
    Raises ValueError for an SVG without a viewBox or without text.
    """
    root = ET.fromstring(svg_text)
    box = [float(v) for v in re.split(r"[\s,]+", root.get("viewBox", "").strip()) if v]
    if len(box) != 4 or box[2] <= 0:
        raise ValueError(f"no usable viewBox ({root.get('viewBox')!r})")
    sizes = []

    def walk(element, inherited):
        style = dict(
            (k.strip(), v.strip()) for k, _, v in (p.partition(":") for p in element.get("style", "").split(";"))
        )
        own = style.get("font-size") or element.get("font-size")
        size = _font_size(own, inherited) if own else inherited
        holds_text = isinstance(element.tag, str) and element.tag.removeprefix(_SVG) in _TEXT_TAGS
        if holds_text and ((element.text or "").strip() or any((c.tail or "").strip() for c in element)):
            sizes.append(size)
        for child in element:
            walk(child, size)

    walk(root, _DEFAULT_FONT)
    if not sizes:
        raise ValueError("no text")
    return box[2], min(sizes)


def diagram_problems(snap: FigureSnapshot, site: Path, base_url: str) -> list[str]:
    """Each SVG diagram of the page loads, has alt text, and keeps its smallest text legible on a
    phone: its smallest font size times the shown width over the viewBox's width is at least
    MIN_TEXT_PX. The SVG is read from the built site (`site`, served at `base_url`)."""
    problems = []
    for diagram in snap.diagrams:
        name = _name(diagram)
        if not diagram["natural"]:
            problems.append(f"diagram {name}: does not load (its image has no width)")
            continue
        if not (diagram["alt"] or "").strip():
            problems.append(f"diagram {name}: no alt text")
        try:
            width, font = svg_text_geometry(_image_file(site, base_url, diagram["src"]).read_text(encoding="utf-8"))
        except (OSError, ValueError, ET.ParseError) as error:
            problems.append(f"diagram {name}: its SVG cannot be read ({error})")
            continue
        if diagram["phone"] < 1:
            continue
        text_px = font * diagram["phone"] / width
        if text_px < MIN_TEXT_PX:
            problems.append(
                f"diagram {name}: {width:g} units wide, shown at {diagram['phone']:.0f} px on a phone: its "
                f"{font:g}-unit text comes out {text_px:.1f} px high (under {MIN_TEXT_PX})"
            )
    return problems
