"""The argument checks of transformer_book.checks that the package shares (the first ones are also
exercised in test_contracts.py): each names the function and the argument, and passes good values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from transformer_book import checks


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: checks.integer("f", "layer", 4, minimum=0, below=4), r"f: layer must be an int in \[0, 4\), got 4"),
        (lambda: checks.integer("f", "layer", -1, minimum=0, below=4), r"f: layer must be an int in \[0, 4\), got -1"),
        (lambda: checks.integer("f", "k", 2.0, minimum=1), "f: k must be a positive int, got 2.0"),
        (lambda: checks.integer("f", "k", np.int64(3), minimum=1), "f: k must be a positive int, got"),
        (
            lambda: checks.integer("f", "k", np.bool_(True), minimum=0, kinds=(int, np.integer)),
            "f: k must be a non-negative int, got",
        ),
        (lambda: checks.integer("f", "k", True, minimum=0, kinds=(int, np.integer)), "f: k must be a non-negative int"),
        (lambda: checks.probability("f", "p", 0, zero=False, one=True), r"f: p must lie in \(0, 1\], got 0"),
        (lambda: checks.probability("f", "share", 1.0, zero=False), r"f: share must lie in \(0, 1\), got 1.0"),
        (lambda: checks.probability("f", "p", math.nan, one=True), r"f: p must lie in \[0, 1\], got nan"),
        (lambda: checks.probability("f", "p", False, one=True), r"f: p must lie in \[0, 1\], got False"),
        (
            lambda: checks.finite_real("f", "temperature", -0.5, at_least=0),
            "f: temperature must be a finite real >= 0, got -0.5",
        ),
        (lambda: checks.finite_real("f", "t", math.inf, at_least=0), "f: t must be a finite real >= 0, got inf"),
        (lambda: checks.boolean("f", shrink=1), r"f: shrink must be a bool \(True or False\), got 1"),
        (lambda: checks.boolean("f", a=True, causal=None), r"f: causal must be a bool \(True or False\), got None"),
        (
            lambda: checks.choice("f", "normalize", "mean", (None, "length", "gnmt")),
            "f: normalize must be one of None, 'length' or 'gnmt', got 'mean'",
        ),
        (lambda: checks.choice("f", "mode", 1, (True, False)), "f: mode must be one of True or False, got 1"),
        (lambda: checks.choice("f", "kind", "b", ("a",)), "f: kind must be 'a', got 'b'"),
        (lambda: checks.choice("f", "kind", ["a"], ("a", "b")), r"f: kind must be one of 'a' or 'b', got \['a'\]"),
        (lambda: checks.divisible("f", "d_model", 10, "n_heads", 4), "f: d_model=10 is not divisible by n_heads=4$"),
        (
            lambda: checks.divisible("f", "n_heads", 6, "n_kv_heads", 4, " (groups)"),
            r"f: n_heads=6 is not divisible by n_kv_heads=4 \(groups\)$",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_function_and_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_good_values_pass_through():
    assert checks.integer("f", "layer", 3, minimum=0, below=4) == 3
    assert checks.integer("f", "k", np.int64(3), minimum=1, kinds=(int, np.integer)) == 3
    assert checks.probability("f", "p", 1, zero=False, one=True) == 1.0
    assert checks.probability("f", "p", Fraction(1, 2), zero=False) == 0.5
    assert checks.finite_real("f", "t", 0, at_least=0) == 0.0
    assert checks.finite_real("f", "t", 2, above=1, at_least=2) == 2.0
    assert checks.boolean("f", a=True, b=False) is None
    assert checks.choice("f", "normalize", None, (None, "length")) is None
    assert checks.choice("f", "normalize", "length", (None, "length")) == "length"
    assert checks.choice("f", "mode", True, (True, False)) is True
    assert checks.divisible("f", "d_model", 12, "n_heads", 4) is None
