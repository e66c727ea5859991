"""The API reference is the package's one module index: every module of ``transformer_book`` is
documented on exactly one of its pages (an ``automodule`` directive), and every top-level module
and subpackage stands in the layering picture of ``book/api.md``. A module added without its
page, or a page left behind by a module removed, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "transformer_book"
PAGES = [ROOT / "book" / "api.md", *sorted((ROOT / "book" / "api").glob("*.md"))]


def _modules() -> set[str]:
    """Every importable module of the package, by dotted name (``__main__`` scripts excluded)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__main__.py":
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _documented() -> list[str]:
    return [
        name
        for page in PAGES
        for name in re.findall(r"^\.\. automodule:: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M)
    ]


def test_the_module_finder_sees_the_package() -> None:
    modules = _modules()
    assert {
        "transformer_book",
        "transformer_book.attention",
        "transformer_book.data.batching",
        "transformer_book.recipes.loading",
    } <= modules
    assert "transformer_book.pretrained.__main__" not in modules


@pytest.mark.parametrize("module", sorted(_modules()))
def test_every_module_has_one_page(module: str) -> None:
    assert _documented().count(module) == 1, f"{module} is documented {_documented().count(module)} times in book/api"


def test_every_documented_module_exists() -> None:
    assert not sorted(set(_documented()) - _modules())


def test_the_layering_picture_names_every_top_level_module() -> None:
    picture = re.search(r"```text\n(.*?)```", (ROOT / "book" / "api.md").read_text(encoding="utf-8"), re.S)
    assert picture, "book/api.md has lost its layering picture"
    drawn = set(re.findall(r"[a-z_]+", picture.group(1)))
    top = {name.split(".")[1] for name in _modules() if name.count(".") >= 1}
    assert not sorted(top - drawn), "modules missing from the picture in book/api.md"


@pytest.mark.parametrize("old", ["text", "subword", "wordpiece", "bytebpe"])
def test_the_tokenizers_live_in_one_subpackage(old: str) -> None:
    # one place for the four tokenizers, and no module left behind under the old name
    assert f"transformer_book.tokenizers.{old}" in _modules()
    assert f"transformer_book.{old}" not in _modules()


def test_listings_are_not_part_of_runtime() -> None:
    import transformer_book.listings
    import transformer_book.runtime

    assert hasattr(transformer_book.listings, "show_source")
    assert (
        not hasattr(transformer_book.runtime, "show_source") and "show_source" not in transformer_book.runtime.__all__
    )
