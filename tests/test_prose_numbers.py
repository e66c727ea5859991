"""Every number with three or more decimals in a chapter's prose (its markdown cells, outside
``$$ ... $$`` blocks) must be one that a run printed: it occurs in the chapter's own code or
outputs, in another chapter's outputs, or in a recorded result (``book/results``, to the number's
decimals), or it is in ``ALLOWED`` with the reason it holds (a constant, arithmetic on printed
numbers, a paper). A sentence that quotes a number its outputs do not show fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
NUMBER = re.compile(r"(?<![\w.$\\^{])(\d+\.\d{3,})(?![\w])")  # not a digit run, a variable's index or exponent

ALLOWED: dict[str, dict[str, str]] = {
    "05": {"0.0032": "sqrt(1e-5) = 0.00316, LayerNorm's default epsilon under the root"},
    "07": {
        "0.784": "(400/650)^0.5 = 0.7845: the printed step-650 rate 7.845e-04 over the peak 1.000e-03",
        "1.224": "the printed floor H(q) = 1.2237 nats for V = 8,000, eps = 0.1, rounded",
    },
    "08": {
        "0.298": "sqrt(0.4) / sum sqrt(p) = 0.2984 for p = (0.4, 0.25, 0.2, 0.1, 0.05), softmax at T = 2",
        "0.236": "sqrt(0.25) / sum sqrt(p) = 0.2359, the same T = 2 distribution",
        "0.211": "sqrt(0.2) / sum sqrt(p) = 0.2110, the same T = 2 distribution",
        "0.149": "sqrt(0.1) / sum sqrt(p) = 0.1492, the same T = 2 distribution",
        "0.105": "sqrt(0.05) / sum sqrt(p) = 0.1055, the same T = 2 distribution",
        "0.400": "the printed top-p kept [0.4, 0.317, 0.283] at T = 2 (0.4004), to three decimals",
        "1.625": "6.5 / 4.0, the two hypotheses' log-probabilities; ln 1.625 / ln 1.5 = the printed 1.197",
    },
    "09": {
        "1.696": "the two-minute run's validation loss in the chapter's previous run (2,944 steps), quoted as such",
        "1.447": "final validation loss, seed 0, reduce-overhead: benchmarks/results/gpt_speedrun_cuda.md",
        "1.462": "final validation loss, seed 1, reduce-overhead: benchmarks/results/gpt_speedrun_cuda.md",
    },
    "10": {
        "1.875": "30 / 16 = D / (#(fox) #(jumps)), printed as log(1 * 30 / 16)",
        "0.629": "ln 1.875 = 0.6286, the printed PMI(fox, jumps)",
        "0.511": "ln(30 / 18) = 0.5108, the printed PMI(the, lazy)",
    },
    "11": {
        "2.618": "the golden ratio squared, phi^2 = 2.6180 (printed as phi^2 t = 0.002618 at t = 1e-3)",
        "0.0125": "a learning rate the exercise asks for: half of word2vec's default 0.025",
    },
    "14": {
        "0.693": "ln 2, the loss of a guess between two balanced classes",
        "0.571": "4/7 = 0.5714, the printed F1 57.1 of 'Herons written by Simon Stephens'",
    },
    "15": {"0.954": "1 - P(|z| > 2) = 1 - 0.0455 (printed P(outside) = 0.0455) = 0.9545"},
    "19": {
        "0.095": "Kaplan et al. (2020)'s alpha_D, quoted from the paper",
        "0.050": "Kaplan et al. (2020)'s alpha_C, quoted from the paper",
        "0.057": "Gopher's law loss minus Chinchilla's, 1.99326 - 1.93665 = 0.0566 (printed 1.993 and 1.937)",
    },
}


def _cells(notebook: Path) -> tuple[str, str, str]:
    """The notebook's markdown (``$$`` blocks removed), its code, and its outputs' text."""
    markdown: list[str] = []
    code: list[str] = []
    outputs: list[str] = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] in ("markdown", "code"):
            (markdown if cell["cell_type"] == "markdown" else code).append("".join(cell["source"]))
        for output in cell.get("outputs", []):
            outputs.append("".join(output.get("text", "")))
            outputs.extend("".join(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
    return re.sub(r"\$\$.*?\$\$", " ", "\n".join(markdown), flags=re.S), "\n".join(code), "\n".join(outputs)


CELLS = {path.name[:2]: _cells(path) for path in NOTEBOOKS}


def _recorded() -> tuple[str, list[float]]:
    """The text of every results file, and every number in them (to be rounded like the prose)."""
    texts: list[str] = []
    values: list[float] = []

    def walk(node: object) -> None:
        if isinstance(node, dict | list):
            for child in node.values() if isinstance(node, dict) else node:
                walk(child)
        elif isinstance(node, int | float) and not isinstance(node, bool):
            values.append(abs(float(node)))

    for path in sorted((ROOT / "book" / "results").rglob("*.json")):
        texts.append(path.read_text(encoding="utf-8"))
        walk(json.loads(texts[-1]))
    return "\n".join(texts), values


RECORDED_TEXT, RECORDED_VALUES = _recorded()


def _printed(number: str, chapter: str) -> bool:
    """Whether ``number`` occurs in the chapter's code or outputs, another chapter's outputs or a
    results file, or is a recorded value rounded to its decimals."""
    _, code, outputs = CELLS[chapter]
    if number in code or number in outputs or number in RECORDED_TEXT:
        return True
    if any(number in cells[2] for other, cells in CELLS.items() if other != chapter):
        return True
    decimals = len(number.split(".")[1])
    return any(f"{value:.{decimals}f}" == number for value in RECORDED_VALUES)


@pytest.mark.parametrize("chapter", sorted(CELLS))
def test_every_number_in_the_prose_is_printed_or_explained(chapter: str) -> None:
    unexplained = sorted(
        {n for n in NUMBER.findall(CELLS[chapter][0]) if n not in ALLOWED.get(chapter, {}) and not _printed(n, chapter)}
    )
    assert not unexplained, f"chapter {chapter}'s prose quotes numbers no output shows: {unexplained}"


@pytest.mark.parametrize("chapter", sorted(ALLOWED))
def test_every_allowed_number_is_still_in_the_prose(chapter: str) -> None:
    stale = sorted(set(ALLOWED[chapter]) - set(NUMBER.findall(CELLS[chapter][0])))
    assert not stale, f"ALLOWED lists numbers chapter {chapter}'s prose no longer quotes: {stale}"
