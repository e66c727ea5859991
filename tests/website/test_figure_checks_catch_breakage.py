"""The checks of figure_checks.py catch what a reader of the old pages met, and pass the book's style.

Each case serves a small page whose cell outputs hold figures drawn with matplotlib (in the
book's style, or as the pages used to draw them) or the text of a training cell, loads it in
headless Chromium at a laptop's and a phone's width, and asserts that the check names the
problem, or that it finds none. The page's column is as wide as the theme's on a phone
(358 px) and images shrink to fit it, as they do on the site.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import figure_checks as fc  # noqa: E402
import site_checks as sc  # noqa: E402
from transformer_book.plotting import BOOK_COLOURS  # noqa: E402

PAGE = """<!doctype html><html><head><meta name="viewport" content="width=device-width">
<style>body {{ margin: 0 16px; }} img {{ max-width: 100%; height: auto !important; }}</style></head>
<body><article>{}</article></body></html>"""


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
    _figure(root / "old.png", 11, 100)                                     # the pages' old figures
    _figure(root / "book.png", 7, 200)                                     # retina, the book's width
    _figure(root / "wide.png", 11, 200)                                    # retina, but too wide
    _figure(root / "green_red.png", 7, 200, ("tab:green", "tab:red"))
    _figure(root / "book_colours.png", 7, 200, (BOOK_COLOURS[2], BOOK_COLOURS[3]))
    pages = {
        "old": '<div class="cell_output"><img src="old.png" alt="a figure"></div>',
        # as myst-nb writes a retina PNG: the size to show it at as an inline style
        "book": '<div class="cell_output"><img src="book.png" style="width: 700px; height: 300px;" alt="a figure">'
                '</div>',
        "squeezed": '<style>.cell_output img { height: 300px !important; }</style>'
                    '<div class="cell_output"><img src="book.png" style="width: 700px; height: 300px;" alt="a figure">'
                    '</div>',
        "wide": '<div class="cell_output"><img src="wide.png" width="1100" alt="a figure"></div>',
        "green_red": '<div class="cell_output"><img src="green_red.png" width="700" alt="a figure"></div>',
        "book_colours": '<div class="cell_output"><img src="book_colours.png" width="700" alt="a figure"></div>',
        "stopped": '<div class="cell_output"><pre>train:  35%|███▌      | 904/2600 [17:04&lt;32:02,  1.13it/s, '
                   'loss=1.2345]</pre></div>',
        "finished": '<div class="cell_output"><pre>SST-2: 100%|██████████| 18/18 [14:30&lt;00:00, 48.38s/it]\n'
                    'GloVe: 100%|██████████| 3.21M/3.21M [00:31&lt;00:00, 103knz/s, loss=0.0123]\n'
                    "train: 904 of 2,600 steps, stopped by the 1,024 s time budget; 17:04 (0.88 steps/s); "
                    "training loss 1.2345 (mean of the last 100 steps)</pre></div>",
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
    assert fc.red_green_problems(snap(context, served, "book"), root, url) == []   # C0 and C1


def test_a_progress_bar_stopped_part_way_is_found_and_finished_ones_are_not(context, served):
    (problem,) = fc.progress_bar_problems(snap(context, served, "stopped"))
    assert "stopped part-way" in problem and "904/2600" in problem
    assert fc.progress_bar_problems(snap(context, served, "finished")) == []


def test_the_machines_data_path_is_found(context, served):
    (problem,) = fc.machine_path_problems(snap(context, served, "path"))
    assert "/work/shared/data" in problem
    assert fc.machine_path_problems(snap(context, served, "no_path")) == []
