"""Tests of :mod:`transformer_book.listings`: the package's own code as a chapter shows it."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

import transformer_book.attention
from transformer_book import listings
from transformer_book.listings import SourceListing, show_source

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_show_source_of_a_function():
    fn = transformer_book.attention.scaled_dot_product_attention
    listing = show_source(fn)
    lines, first = inspect.getsourcelines(fn)
    assert isinstance(listing, SourceListing)
    assert listing.qualname == "transformer_book.attention.scaled_dot_product_attention"
    assert listing.path == "transformer_book/attention.py"
    assert listing.first_line == first
    assert listing.last_line == first + len(lines) - 1
    assert listing.source == "".join(lines)
    # the caption's line numbers point at the real def line in the file
    file_lines = (REPO_ROOT / "transformer_book" / "attention.py").read_text().splitlines()
    assert file_lines[listing.first_line - 1].startswith("def scaled_dot_product_attention(")
    assert file_lines[listing.last_line - 1] == lines[-1].rstrip("\n")

    markdown = listing._repr_markdown_()
    assert "```python\n" in markdown
    assert "\ndef scaled_dot_product_attention(" in markdown
    assert markdown.rstrip().endswith("```")
    assert "transformer_book/attention.py" in markdown and "lines" not in markdown.splitlines()[0]
    assert str(listing).startswith("# transformer_book.attention.scaled_dot_product_attention")


def test_show_source_of_a_method_is_dedented():
    listing = show_source(listings.SourceListing._repr_markdown_)
    assert listing.qualname == "transformer_book.listings.SourceListing._repr_markdown_"
    assert listing.path == "transformer_book/listings.py"
    assert listing.source.startswith("def _repr_markdown_(self)")
    assert listing.source == textwrap.dedent("".join(inspect.getsourcelines(listings.SourceListing._repr_markdown_)[0]))


def test_show_source_of_a_decorated_function_shows_the_function_and_its_file():
    from transformer_book.decoding import greedy_decode  # wrapped by @torch.no_grad()

    listing = show_source(greedy_decode)
    assert listing.path == "transformer_book/decoding.py"
    assert listing.qualname == "transformer_book.decoding.greedy_decode"
    assert listing.source.startswith("@torch.no_grad()\ndef greedy_decode(")


@pytest.mark.parametrize("obj", [len, 42])
def test_show_source_without_source_raises(obj):
    with pytest.raises(ValueError, match="no source"):
        show_source(obj)
