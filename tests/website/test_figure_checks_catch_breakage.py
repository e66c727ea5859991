"""The checks of figure_checks.py catch what a reader of the old pages met, and pass the book's style.

Each case serves a small page whose cell outputs hold figures drawn with matplotlib (in the
book's style, or as the pages used to draw them) or the text of a training cell, loads it in
headless Chromium at a laptop's and a phone's width, and asserts that the check names the
problem, or that it finds none. The page's column is as wide as the theme's on a phone
(358 px) and images shrink to fit it, as they do on the site. The diagram check is also tried
without a browser, on snapshots written by hand and on the book's own SVG files.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import figure_checks as fc
import matplotlib.pyplot as plt
import pytest
import site_checks as sc

from transformer_book.plotting import BOOK_COLOURS

PAGE = """<!doctype html><html><head><meta name="viewport" content="width=device-width">
<style>body {{ margin: 0 16px; }} img {{ max-width: 100%; height: auto !important; }}</style></head>
<body><article>{}</article></body></html>"""


def _svg(width, font):
    """A diagram `width` units wide whose smallest text is `font` units (inherited from a <g>)."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="120" viewBox="0 0 {width} 120" '
        f'font-family="sans-serif" font-size="16"><title>a diagram</title><desc>boxes</desc>'
        f'<rect x="10" y="10" width="{width - 20}" height="100" fill="#0173B2" fill-opacity="0.2"/>'
        f'<g font-size="{font}"><text x="20" y="60">query<tspan font-size="{font + 4}"> key</tspan></text></g></svg>'
    )


def _figure(path, width_in, dpi, colours=("C0", "C1")):
    fig, ax = plt.subplots(figsize=(width_in, 3), dpi=dpi)
    for k, colour in enumerate(colours):
        ax.plot([0, 1, 2], [k, k + 1, k], color=colour, linewidth=8)
    ax.set(xlabel="step", ylabel="loss", title="a figure")
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("figures")
    _figure(root / "old.png", 11, 100)  # the pages' old figures
    _figure(root / "book.png", 7, 200)  # retina, the book's width
    _figure(root / "wide.png", 11, 200)  # retina, but too wide
    _figure(root / "green_red.png", 7, 200, ("tab:green", "tab:red"))
    _figure(root / "book_colours.png", 7, 200, (BOOK_COLOURS[2], BOOK_COLOURS[3]))
    (root / "book_diagram.svg").write_text(_svg(700, 13), encoding="utf-8")
    (root / "small_text_diagram.svg").write_text(_svg(700, 8), encoding="utf-8")
    pages = {
        "old": '<div class="cell_output"><img src="old.png" alt="a figure"></div>',
        # as myst-nb writes a retina PNG: the size to show it at as an inline style
        "book": '<div class="cell_output"><img src="book.png" style="width: 700px; height: 300px;" alt="a figure">'
        "</div>",
        "squeezed": "<style>.cell_output img { height: 300px !important; }</style>"
        '<div class="cell_output"><img src="book.png" style="width: 700px; height: 300px;" alt="a figure">'
        "</div>",
        "wide": '<div class="cell_output"><img src="wide.png" width="1100" alt="a figure"></div>',
        "green_red": '<div class="cell_output"><img src="green_red.png" width="700" alt="a figure"></div>',
        "book_colours": '<div class="cell_output"><img src="book_colours.png" width="700" alt="a figure"></div>',
        "stopped": '<div class="cell_output"><pre>train:  35%|███▌      | 904/2600 [17:04&lt;32:02,  1.13it/s, '
        "loss=1.2345]</pre></div>",
        "finished": '<div class="cell_output"><pre>SST-2: 100%|██████████| 18/18 [14:30&lt;00:00, 48.38s/it]\n'
        "GloVe: 100%|██████████| 3.21M/3.21M [00:31&lt;00:00, 103knz/s, loss=0.0123]\n"
        "train: 904 of 2,600 steps, stopped by the 1,024 s time budget; 17:04 (0.88 steps/s); "
        "training loss 1.2345 (mean of the last 100 steps)</pre></div>",
        # as Sphinx writes a MyST figure of an SVG (in the text, not in a cell output)
        "diagrams": "<style>figure { margin: 0; }</style>"  # the theme's figures span the column
        '<figure><img src="book_diagram.svg" style="width: 100%;" alt="a diagram of attention">'
        "<figcaption>Fig. 1</figcaption></figure>"
        '<figure><img src="small_text_diagram.svg" style="width: 100%;" alt="a diagram of masks">'
        "<figcaption>Fig. 2</figcaption></figure>"
        '<figure><img src="missing_diagram.svg" style="width: 100%;" alt="a diagram of heads">'
        "<figcaption>Fig. 3</figcaption></figure>"
        '<figure><img src="book_diagram.svg" style="width: 100%;" alt=""><figcaption>Fig. 4</figcaption>'
        "</figure>"
        '<div class="cell_output"><figure><img src="book_diagram.svg" width="700" alt="an output">'
        "</figure></div>",
        "path": '<div class="cell_output"><pre>torch threads    : 2\ndata directory   : /work/shared/data</pre></div>',
        "no_path": '<div class="cell_output"><pre>torch threads    : 2\ndata             : a local copy, from '
        "$TB_DATA_DIR</pre></div>",
    }
    for name, body in pages.items():
        (root / f"{name}.html").write_text(PAGE.format(body), encoding="utf-8")
    with sc.SiteServer(root) as url:
        yield root, url


@pytest.fixture(scope="module")
def context(browser):
    context = fc.new_context(browser)
    yield context
    context.close()


def snap(context, served, name):
    root, url = served
    return fc.visit_figures(context, url + f"{name}.html")


def test_an_old_figure_is_blurry_and_too_small_on_a_phone(context, served):
    old = snap(context, served, "old")
    (problem,) = fc.sharpness_problems(old)
    assert "1100 pixels drawn for 1100 shown" in problem and "blurry" in problem
    (problem,) = fc.phone_text_problems(old)
    assert "1100 px wide, shown at 358 px on a phone" in problem and "4.1 px high" in problem


def test_a_figure_in_the_book_style_passes_both(context, served):
    book = snap(context, served, "book")
    assert book.images[0]["natural"] == 1400 and book.images[0]["laptop"] == 700
    assert fc.sharpness_problems(book) == [] and fc.phone_text_problems(book) == []
    assert book.images[0]["phone"] == 358 and book.images[0]["phone_height"] == pytest.approx(358 * 300 / 700, abs=0.5)


def test_a_sharp_but_too_wide_figure_is_still_too_small_on_a_phone(context, served):
    wide = snap(context, served, "wide")
    assert fc.sharpness_problems(wide) == []
    (problem,) = fc.phone_text_problems(wide)
    assert "1100 px wide" in problem


def test_a_figure_whose_height_does_not_shrink_with_its_width_is_found(context, served):
    assert fc.distortion_problems(snap(context, served, "book")) == []
    (problem,) = fc.distortion_problems(snap(context, served, "squeezed"))
    assert "shown 358 x 300 px on a phone" in problem


def test_matplotlibs_green_beside_its_red_is_found_and_the_book_colours_are_not(context, served):
    root, url = served
    (problem,) = fc.red_green_problems(snap(context, served, "green_red"), root, url)
    assert "green_red.png" in problem and "red-green" in problem
    assert fc.red_green_problems(snap(context, served, "book_colours"), root, url) == []
    assert fc.red_green_problems(snap(context, served, "book"), root, url) == []  # C0 and C1


def test_a_progress_bar_stopped_part_way_is_found_and_finished_ones_are_not(context, served):
    (problem,) = fc.progress_bar_problems(snap(context, served, "stopped"))
    assert "stopped part-way" in problem and "904/2600" in problem
    assert fc.progress_bar_problems(snap(context, served, "finished")) == []


def test_the_machines_data_path_is_found(context, served):
    (problem,) = fc.machine_path_problems(snap(context, served, "path"))
    assert "/work/shared/data" in problem
    assert fc.machine_path_problems(snap(context, served, "no_path")) == []


def test_a_diagram_that_fails_to_load_lacks_alt_text_or_is_too_small_on_a_phone_is_found(context, served):
    root, url = served
    snap_ = snap(context, served, "diagrams")
    assert len(snap_.diagrams) == 4  # the image of a cell output is not a diagram
    good = snap_.diagrams[0]
    assert good["natural"] == 700 and good["phone"] == 358 and good["laptop"] > 1000
    problems = fc.diagram_problems(snap_, root, url)
    assert len(problems) == 3, problems
    small, missing, no_alt = problems
    assert "small_text_diagram.svg" in small and "8-unit text comes out 4.1 px high" in small
    assert "missing_diagram.svg" in missing and "does not load" in missing
    assert "book_diagram.svg" in no_alt and "no alt text" in no_alt


def _diagram(base, name, alt="a diagram of attention", natural=700, phone=342):
    return {"src": f"{base}_images/{name}", "natural": natural, "alt": alt, "laptop": 757, "phone": phone}


def test_the_diagram_check_judges_a_snapshot_without_a_browser(tmp_path):
    base = "http://127.0.0.1:8000/"
    (tmp_path / "_images").mkdir()
    for name, width, font in [("book.svg", 700, 13), ("small.svg", 700, 9), ("wide.svg", 1400, 13)]:
        (tmp_path / "_images" / name).write_text(_svg(width, font), encoding="utf-8")
    (tmp_path / "_images" / "no_text.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 700 100"><rect width="9" height="9"/></svg>',
        encoding="utf-8",
    )

    def judge(*diagrams):
        return fc.diagram_problems(fc.FigureSnapshot(url=base, diagrams=list(diagrams)), tmp_path, base)

    assert judge(_diagram(base, "book.svg")) == []  # 13 units at 342/700: 6.4 px
    (problem,) = judge(_diagram(base, "small.svg"))
    assert "700 units wide, shown at 342 px" in problem and "9-unit text comes out 4.4 px high" in problem
    (problem,) = judge(_diagram(base, "wide.svg"))
    assert "1400 units wide" in problem and "3.2 px high" in problem
    assert judge(_diagram(base, "wide.svg", phone=700)) == []  # shown wide enough, it passes
    (problem,) = judge(_diagram(base, "book.svg", alt="  "))
    assert "no alt text" in problem
    (problem,) = judge(_diagram(base, "book.svg", natural=0))
    assert "does not load" in problem
    (problem,) = judge(_diagram(base, "absent.svg"))
    assert "cannot be read" in problem
    (problem,) = judge(_diagram(base, "no_text.svg"))
    assert "cannot be read (no text)" in problem


def test_the_books_diagrams_pass_the_check_on_a_phone():
    """Every diagram of book/figures, shown at the theme's 342-px phone column, keeps its text at
    MIN_TEXT_PX or more."""
    figures = sorted((sc.REPO / "book" / "figures").glob("*.svg"))
    assert figures, "no diagrams in book/figures"
    for path in figures:
        width, font = fc.svg_text_geometry(path.read_text(encoding="utf-8"))
        assert font * 342 / width >= fc.MIN_TEXT_PX, f"{path.name}: {font:g} units of {width:g}"
