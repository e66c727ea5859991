"""The package code the chapters display is the equation, not its bookkeeping.

Every function a chapter shows with ``runtime.show_source`` (and every method of a class it
shows) opens with at most one line of argument checking before its first line of computation:
the checks live in :mod:`transformer_book.checks` and are called once. A check is a call to
``checks.*`` or to a function named ``*check*``/``_require*``, or an ``if``/``for`` whose only
effect is to raise. (A check of an intermediate result further down, such as a weight mapping
that finds a weight missing, is part of the computation and allowed.)
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path

import pytest
from notebook_source import without_magics

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def _code(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        without_magics("\n".join("".join(c["source"]).splitlines()))  # %pip in the install cell
        for c in cells
        if c["cell_type"] == "code"
    ]


def _displayed(path: Path) -> tuple[dict, list[str]]:
    """The namespace of the chapter's import statements, and the expressions it passes to show_source."""
    namespace: dict = {}
    shown: list[str] = []
    for source in _code(path):
        for statement in ast.walk(ast.parse(source)):
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module([statement], type_ignores=[]), str(path), "exec"), namespace)
        shown += [m.group(1).strip() for m in re.finditer(r"show_source\(([^()]*)\)", source)]
    return namespace, shown


def _is_check(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        function = statement.value.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        owner = (
            function.value.id if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) else ""
        )
        return "check" in name or owner == "checks" or name.startswith("_require")
    if isinstance(statement, (ast.If, ast.For)):
        nodes = list(ast.walk(statement))
        raises = any(isinstance(n, ast.Raise) for n in nodes)
        does_more = any(isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)) for n in nodes)
        return raises and not does_more
    return False


def _lines(statement: ast.stmt) -> int:
    """The lines a check takes; one call to a check is one line, however the formatter wraps its arguments."""
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return 1
    return statement.end_lineno - statement.lineno + 1


def check_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(lines of checks before the first computation, lines of checks after it) of ``function``."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    first = next((i for i, s in enumerate(body) if not _is_check(s)), len(body))
    return sum(_lines(s) for s in body[:first]), sum(_lines(s) for s in body[first:] if _is_check(s))


def _functions(obj: object) -> list[tuple[str, ast.FunctionDef]]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(obj)))).body[0]
    if isinstance(tree, ast.ClassDef):
        return [
            (f"{tree.name}.{f.name}", f) for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
    return [(tree.name, tree)]


def test_the_audit_tells_a_checked_equation_from_a_wall_of_checks() -> None:
    good, wrapped, bad = ast.parse(
        textwrap.dedent('''
        def good(x, k):
            """Doc."""
            checks.positive_int("good", k=k)
            return x * k

        def wrapped(x, k):
            _check_arguments(
                x, k, "a long list of arguments that the formatter lays out over several lines", "wrapped"
            )
            return x * k

        def bad(x, k):
            if not isinstance(k, int):
                raise TypeError("k")
            if k < 1:
                raise ValueError("k")
            y = x * k
            _check_finite(y)
            return y
    ''')
    ).body
    assert check_lines(good) == (1, 0)
    assert check_lines(wrapped) == (1, 0)
    assert check_lines(bad) == (4, 1)


def test_every_chapter_displays_package_code() -> None:
    assert sum(len(_displayed(path)[1]) for path in NOTEBOOKS) >= 40


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_displayed_functions_open_with_at_most_one_check_line(path: Path) -> None:
    namespace, shown = _displayed(path)
    too_many = []
    for expression in shown:
        obj = eval(expression, namespace)  # a name the chapter cannot resolve fails here, loudly
        for name, function in _functions(obj):
            before, after = check_lines(function)
            if before > 1:
                too_many.append(f"{name}: {before} check lines before the computation, {after} after")
    assert not too_many, f"{path.name} displays argument checks instead of the equation:\n" + "\n".join(too_many)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_displayed_code_carries_no_linter_comments(path: Path) -> None:
    """A listing is read, not linted: no ``noqa`` (or ``type: ignore``) comment in anything shown."""
    namespace, shown = _displayed(path)
    marked = [
        f"{expression}: {line.strip()}"
        for expression in shown
        for line in inspect.getsource(inspect.unwrap(eval(expression, namespace))).splitlines()
        if "# noqa" in line or "# type: ignore" in line
    ]
    assert not marked, f"{path.name} shows linter comments:\n" + "\n".join(marked)
