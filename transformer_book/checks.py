"""Argument checks shared by the whole package (internal: the book's chapters never show them).

Every public function of the package refuses bad input with a ``ValueError`` that names the
function and the argument. The checks that several modules make live here, written once, so that
a displayed function can open with one call and the reader sees the equation that follows.
Each takes ``where``, the name of the function the reader called, first. An argument is checked
once, at the public function that takes it; the private helpers that function calls trust it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Real
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where needed: text and metrics use these checks without PyTorch
    import torch

__all__ = [
    "integer",
    "positive_int",
    "divisible",
    "non_negative_int",
    "probability",
    "finite_real",
    "boolean",
    "choice",
    "token_ids",
    "text",
    "id_tensor",
    "ids_within",
    "compiling",
]


def integer(
    where: str,
    name: str,
    value: object,
    *,
    minimum: int,
    below: int | None = None,
    kinds: type | tuple[type, ...] = int,
) -> int:
    """``value`` if it is an int (not a bool) of at least ``minimum`` (and less than ``below``,
    when given); else a ValueError ("must be a positive int" for ``minimum = 1``, "a non-negative
    int" for 0, "an int in [minimum, below)" with ``below``). ``kinds``: the accepted integer
    types, say ``(int, np.integer)`` where NumPy's ints are welcome."""
    if (
        isinstance(value, bool)
        or not isinstance(value, kinds)
        or value < minimum
        or (below is not None and value >= below)
    ):
        if below is not None:
            kind = f"an int in [{minimum}, {below})"
        else:
            kind = {1: "a positive int", 0: "a non-negative int"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{where}: {name} must be {kind}, got {value!r}")
    return value


def positive_int(where: str, **values: object) -> None:
    """Each keyword argument is an int of at least 1."""
    for name, value in values.items():
        integer(where, name, value, minimum=1)


def non_negative_int(where: str, **values: object) -> None:
    """Each keyword argument is an int of at least 0."""
    for name, value in values.items():
        integer(where, name, value, minimum=0)


def divisible(where: str, name: str, value: int, by_name: str, by: int, why: str = "") -> None:
    """``by`` divides ``value`` (``d_model`` by ``n_heads``: each head gets
    :math:`d_k = d_{\text{model}} / h` features); else a ValueError naming both, and ``why`` after."""
    if value % by:
        raise ValueError(f"{where}: {name}={value} is not divisible by {by_name}={by}{why}")


def probability(where: str, name: str, value: object, *, zero: bool = True, one: bool = False) -> float:
    """``value`` as a float in ``[0, 1)`` (a dropout or smoothing rate); ``one``: 1 allowed too,
    ``[0, 1]``; ``zero=False``: 0 refused, ``(0, 1)`` or ``(0, 1]``."""
    interval = f"{'[' if zero else '('}0, 1{']' if one else ')'}"
    if isinstance(value, bool) or not isinstance(value, Real):
        inside = False
    else:
        p = float(value)
        inside = (p >= 0.0 if zero else p > 0.0) and (p <= 1.0 if one else p < 1.0)
    if not inside:
        raise ValueError(f"{where}: {name} must lie in {interval}, got {value!r}")
    return float(value)


def finite_real(
    where: str, name: str, value: object, *, above: float | None = None, at_least: float | None = None
) -> float:
    """``value`` as a float if it is a finite real (and greater than ``above``, or at least
    ``at_least``, when given)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not math.isfinite(float(value))
        or (above is not None and not float(value) > above)
        or (at_least is not None and not float(value) >= at_least)
    ):
        bound = "" if above is None else f" > {above:g}"
        bound += "" if at_least is None else f" >= {at_least:g}"
        raise ValueError(f"{where}: {name} must be a finite real{bound}, got {value!r}")
    return float(value)


def boolean(where: str, **values: object) -> None:
    """Each keyword argument is a bool (``True`` or ``False``; not 0, 1 or None)."""
    for name, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {name} must be a bool (True or False), got {value!r}")


def choice(where: str, name: str, value: object, options: Iterable[object]) -> object:
    """``value`` if it is one of ``options`` (names, or ``None``); else a ValueError that lists them."""
    options = tuple(options)
    if not any(value is option or (isinstance(value, type(option)) and value == option) for option in options):
        known = (
            f"one of {', '.join(map(repr, options[:-1]))} or {options[-1]!r}" if len(options) > 1 else repr(*options)
        )
        raise ValueError(f"{where}: {name} must be {known}, got {value!r}")
    return value


def token_ids(where: str, ids: Iterable[int], size: int, *, kinds: type | tuple[type, ...] = int) -> list[int]:
    """``ids`` (a sequence or a 1-D tensor) as a list of ints in ``[0, size)``, else a ValueError
    naming the first offending ids (``kinds``: the accepted integer types)."""
    values = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if values and isinstance(values[0], list):
        raise ValueError(f"{where}: expected one sequence of ids, got a nested one")
    bad = [i for i in values if isinstance(i, bool) or not isinstance(i, kinds) or not 0 <= i < size]
    if bad:
        raise ValueError(f"{where}: ids {bad[:5]} are outside the vocabulary [0, {size})")
    return [int(i) for i in values]


def text(where: str, value: object) -> str:
    """``value`` if it is a str that encodes as UTF-8 (no lone surrogate)."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate, say from a badly decoded file
        raise ValueError(
            f"{where}: the text is not valid Unicode ({err.reason} at position {err.start}: "
            f"{value[err.start : err.end]!r})"
        ) from None
    return value


def id_tensor(where: str, name: str, value: object, shape: str = "(B, m)") -> torch.Tensor:
    """``value`` if it is an integer tensor (not bool, float or complex) with as many axes as
    ``shape`` names, e.g. ``"(B, m)"``; else one message for all three: "``name`` must be a
    ``shape`` integer tensor, got" its type, or its shape and dtype."""
    import torch

    if (
        not isinstance(value, torch.Tensor)
        or value.dim() != shape.count(",") + 1
        or value.dtype.is_floating_point
        or value.dtype.is_complex
        or value.dtype == torch.bool
    ):
        got = (
            f"shape {tuple(value.shape)}, dtype {value.dtype}"
            if isinstance(value, torch.Tensor)
            else type(value).__name__
        )
        raise ValueError(f"{where}: {name} must be a {shape} integer tensor, got {got}")
    return value


def compiling() -> bool:
    """Whether ``torch.compile`` is tracing the caller. A check that reads a tensor's values makes
    the host wait for the device and, inside a compiled step, breaks the graph in two: such checks
    are skipped while compiling (eager calls, the first and every uncompiled one, still make them)."""
    import torch

    is_compiling = getattr(torch.compiler, "is_compiling", None)  # PyTorch 2.3 on; torch._dynamo's before
    return bool(is_compiling()) if is_compiling is not None else bool(torch._dynamo.is_compiling())


def ids_within(where: str, name: str, ids: torch.Tensor, size: int) -> None:
    """Every id of the integer tensor ``ids`` lies in ``[0, size)`` (one wait for the device, not
    two); skipped while compiling (:func:`compiling`), where an id outside the vocabulary fails in
    the embedding instead (on a GPU as a device-side assert)."""
    if compiling():
        return
    if bool(((ids < 0) | (ids >= size)).any()):
        raise ValueError(
            f"{where}: {name} hold ids in [{int(ids.min())}, {int(ids.max())}], outside the vocabulary [0, {size})"
        )
