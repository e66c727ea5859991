r"""Scaling laws: the loss of a language model as a function of its size and its data (chapter 19).

Hoffmann et al. (2022, "Training compute-optimal large language models", the Chinchilla paper)
model the final loss of a model of :math:`N` parameters trained on :math:`D` tokens as

.. math:: L(N, D) = E + \frac{A}{N^{\alpha}} + \frac{B}{D^{\beta}}

an irreducible loss :math:`E` (the entropy of the text, which no model removes) plus two
power laws that vanish as the model and the data grow. Their "approach 3" fits the five
constants to a grid of training runs by minimising a Huber loss of the error in *log* loss
(:func:`fit_scaling_law`), which weighs every run alike whatever its loss and lets a run that
went wrong pull little on the fit. Training costs :math:`C \approx kND` floating-point
operations (:math:`k = 6`: two per weight and token forward, four backward; Kaplan et al. 2020),
so for a budget :math:`C` the law has a best split between parameters and tokens
(:meth:`ScalingLaw.compute_optimal`), the *compute-optimal frontier*.

The module is the arithmetic of chapter 19; training the grid of runs is chapter 9's recipe
(:mod:`transformer_book.recipes.gpt`). :func:`non_embedding_parameters` gives :math:`N` of a
model, :func:`training_flops` and :func:`isoflop_points` lay runs out on slices of equal
compute (Hoffmann et al.'s approach 2), :func:`fit_isoflop_valley` finds the bottom of the
losses measured along one slice, and :func:`fit_power_law` fits one power law
:math:`y = c\,x^p` (the frontier :math:`N_{opt}(C)` on log-log axes).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import NamedTuple

import numpy as np
from scipy.optimize import OptimizeResult, minimize
from torch import nn

from transformer_book import checks

__all__ = [
    "ScalingLaw",
    "ComputeOptimal",
    "PowerLaw",
    "DEFAULT_GRID",
    "HOFFMANN_GRID",
    "fit_scaling_law",
    "huber",
    "scaling_law_objective",
    "non_embedding_parameters",
    "training_flops",
    "isoflop_points",
    "IsoFLOPValley",
    "fit_isoflop_valley",
    "fit_power_law",
]

ArrayLike = float | Sequence[float] | np.ndarray

HOFFMANN_GRID: dict[str, tuple[float, ...]] = dict(
    alpha=(0.0, 0.5, 1.0, 1.5, 2.0),
    beta=(0.0, 0.5, 1.0, 1.5, 2.0),
    e=(-1.0, -0.5, 0.0, 0.5, 1.0),
    a=(0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
    b=(0.0, 5.0, 10.0, 15.0, 20.0, 25.0),
)
"""The 4,500 starting points for L-BFGS that Hoffmann et al. (2022) used, a grid over the five
constants (:math:`E = e^e`, :math:`A = e^a`, :math:`B = e^b`)."""

DEFAULT_GRID: dict[str, tuple[float, ...]] = dict(
    alpha=(0.25, 0.5, 1.0), beta=(0.25, 0.5, 1.0), e=(-1.0, 0.0, 1.0), a=(0.0, 5.0, 10.0), b=(0.0, 10.0, 20.0)
)
r"""The default grid, coarser than :data:`HOFFMANN_GRID`: 243 starts, :math:`3^5`, which fit
20 runs in under a second on one core (with :func:`fit_scaling_law`'s screening). Exponents
start between 0.25 and 1 (Hoffmann et al. report 0.34 and 0.28); :math:`e \in \{-1, 0, 1\}` spans irreducible losses of 0.37 to 2.7
nats; the log-coefficients follow from :math:`A \approx (L - E)\,N^{\alpha}`, which for a
reducible loss near 1 nat is :math:`a \approx \alpha \log N`, 0 to 10 for models of up to a
few million parameters, and :math:`b \approx \beta \log D` reaches further (0 to 20) because runs
see a hundred or more tokens per parameter. L-BFGS moves far from its start; the grid only
has to put one start in the right basin."""


def _positive(where: str, name: str, value: object) -> np.ndarray:
    """``value`` as a float64 array of positive finite numbers, else a ValueError."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {name} must be positive finite numbers, got {type(value).__name__}") from None
    if array.size == 0 or not np.all(np.isfinite(array)) or not np.all(array > 0):
        bad = array[~(np.isfinite(array) & (array > 0))] if array.size else array
        raise ValueError(f"{where}: {name} must be positive finite numbers, got {bad[:3].tolist() or 'none'}")
    return array


def _check_sizes(where: str, **values: object) -> list[np.ndarray]:
    """Each keyword argument as a float64 array of positive finite numbers; they must broadcast."""
    arrays = [_positive(where, name, value) for name, value in values.items()]
    try:
        np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in zip(values, arrays))
        raise ValueError(f"{where}: the shapes do not broadcast: {shapes}") from None
    return arrays


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    return float(x) if np.ndim(x) == 0 else x


def _check_law(law: ScalingLaw) -> None:
    r"""Finite constants, :math:`E \ge 0`, :math:`A, B > 0`."""
    for name in ("E", "A", "B", "alpha", "beta"):
        checks.finite_real("ScalingLaw", name, getattr(law, name))
    if law.E < 0 or law.A <= 0 or law.B <= 0:
        raise ValueError(f"ScalingLaw: need E >= 0, A > 0 and B > 0, got E={law.E!r}, A={law.A!r}, B={law.B!r}")


class ComputeOptimal(NamedTuple):
    """The compute-optimal model size ``N``, token count ``D`` and the loss the law predicts there
    (floats, or arrays shaped like the budgets asked for)."""

    N: float | np.ndarray
    D: float | np.ndarray
    loss: float | np.ndarray


@dataclass(frozen=True)
class ScalingLaw:
    r"""The Chinchilla form :math:`L(N, D) = E + A / N^{\alpha} + B / D^{\beta}` (Hoffmann et al. 2022).

    ``E`` is the irreducible loss (nats per token), ``A`` and ``alpha`` the coefficient and
    exponent of the model-size term, ``B`` and ``beta`` those of the data term. ``N`` counts
    parameters (see :func:`non_embedding_parameters` for which), ``D`` training tokens.
    """

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        _check_law(self)

    def loss(self, N: ArrayLike, D: ArrayLike) -> float | np.ndarray:
        r""":math:`L(N, D) = E + A N^{-\alpha} + B D^{-\beta}`, elementwise over ``N`` and ``D``
        (positive numbers or arrays that broadcast; a float when both are scalars)."""
        N, D = _check_sizes("ScalingLaw.loss", N=N, D=D)
        return _scalar_or_array(self.E + self.A / N**self.alpha + self.B / D**self.beta)

    def compute_optimal(self, C: ArrayLike, flops_per_token: float = 6) -> ComputeOptimal:
        r"""The model size and token count that minimise the loss for ``C`` FLOPs of training.

        With :math:`C = kND` (``k = flops_per_token``), the loss along the budget is
        :math:`L(N) = E + A N^{-\alpha} + B\,(C/k)^{-\beta} N^{\beta}`, a falling and a rising
        power of :math:`N`. Setting :math:`dL/dN = 0`,

        .. math::

            \alpha A N^{-\alpha - 1} = \beta B\,(C/k)^{-\beta} N^{\beta - 1}
            \iff \frac{\alpha A}{N^{\alpha}} = \frac{\beta B}{D^{\beta}}
            \iff N^{\alpha + \beta} = \frac{\alpha A}{\beta B} \left(\frac{C}{k}\right)^{\beta},

        so, with :math:`G = \left(\frac{\alpha A}{\beta B}\right)^{1/(\alpha + \beta)}`,

        .. math::

            N_{opt} = G \left(\frac{C}{k}\right)^{\beta / (\alpha + \beta)}, \qquad
            D_{opt} = \frac{C}{k N_{opt}} = G^{-1} \left(\frac{C}{k}\right)^{\alpha / (\alpha + \beta)}.

        It is the only stationary point and a minimum (:math:`dL/dN` runs from negative to
        positive) when :math:`\alpha, \beta > 0`. At the optimum the two reducible terms stand
        in the ratio :math:`A N^{-\alpha} : B D^{-\beta} = \beta : \alpha`, and a tenfold budget
        multiplies :math:`N_{opt}` by :math:`10^{\beta/(\alpha+\beta)}`: equal exponents split
        new compute equally between parameters and tokens (Hoffmann et al.'s finding).

        Args:
            C: training FLOPs, a positive number or array.
            flops_per_token: :math:`k`, FLOPs per parameter and token (6 for a forward and a
                backward pass).

        Returns:
            :class:`ComputeOptimal` ``(N, D, loss)``, floats or arrays shaped like ``C``.

        Raises:
            ValueError: ``C`` or ``flops_per_token`` not positive, or an exponent not positive
                (the law then has no finite optimum).
        """
        C, k = _check_budget("ScalingLaw.compute_optimal", self, C, flops_per_token)
        G = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        N_opt = G * (C / k) ** (self.beta / (self.alpha + self.beta))
        D_opt = (C / k) ** (self.alpha / (self.alpha + self.beta)) / G
        return ComputeOptimal(_scalar_or_array(N_opt), _scalar_or_array(D_opt), self.loss(N_opt, D_opt))

    def __str__(self) -> str:
        return f"L(N, D) = {self.E:.3f} + {self.A:.4g} / N^{self.alpha:.3f} + {self.B:.4g} / D^{self.beta:.3f}"


def _check_budget(where: str, law: ScalingLaw, C: object, flops_per_token: object) -> tuple[np.ndarray, float]:
    (C,) = _check_sizes(where, C=C)
    k = checks.finite_real(where, "flops_per_token", flops_per_token, above=0)
    if not (law.alpha > 0 and law.beta > 0):
        raise ValueError(
            f"{where}: the exponents must be positive for a compute-optimal split, got "
            f"alpha={law.alpha:g}, beta={law.beta:g}"
        )
    return C, k


# ---------------------------------------------------------------------------------------------
# Fitting (Hoffmann et al.'s approach 3)


def huber(r: ArrayLike, delta: float = 1e-3) -> np.ndarray:
    r"""The Huber loss, elementwise: quadratic near zero, linear beyond :math:`\delta` (Huber 1964).

    .. math::

        h_\delta(r) = \begin{cases} \tfrac{1}{2} r^2 & |r| \le \delta \\
        \delta\,(|r| - \tfrac{1}{2}\delta) & |r| > \delta \end{cases}

    ``delta = inf`` is the squared loss :math:`r^2/2`. Its slope is :math:`m = \operatorname{clip}(r,
    -\delta, \delta)`: a residual beyond :math:`\delta` pulls with a constant force, however far
    off it is; and :math:`h_\delta(r) = m\,(r - m/2)`, one formula for both cases.
    """
    r = _check_huber("huber", r, delta)
    m = np.clip(r, -delta, delta)
    return m * (r - 0.5 * m)


def _check_delta(where: str, name: str, delta: object) -> None:
    if isinstance(delta, bool) or not isinstance(delta, Real) or math.isnan(delta) or not delta > 0:
        raise ValueError(f"{where}: {name} must be a positive real (inf for the squared loss), got {delta!r}")


def _check_huber(where: str, r: object, delta: object) -> np.ndarray:
    _check_delta(where, "delta", delta)
    try:
        return np.asarray(r, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: r must be numbers, got {type(r).__name__}") from None


def scaling_law_objective(
    law: ScalingLaw, N: ArrayLike, D: ArrayLike, L: ArrayLike, *, huber_delta: float = 1e-3
) -> float:
    r"""What :func:`fit_scaling_law` minimises: the Huber loss of the error in log loss, summed over the runs.

    .. math:: \sum_i h_\delta\bigl(\log \hat L(N_i, D_i) - \log L_i\bigr)

    with :math:`\hat L` the ``law``'s prediction, :math:`L_i` the loss measured after training a
    model of :math:`N_i` parameters on :math:`D_i` tokens, :math:`h_\delta` :func:`huber`.
    """
    N, D, L = _check_runs("scaling_law_objective", N, D, L, huber_delta, law=law)
    return float(np.sum(huber(np.log(law.loss(N, D)) - np.log(L), huber_delta)))


def _check_runs(
    where: str, N: object, D: object, L: object, huber_delta: object, *, minimum: int = 1, law: object = None
) -> tuple[np.ndarray, ...]:
    if law is not None and not isinstance(law, ScalingLaw):
        raise ValueError(f"{where}: law must be a ScalingLaw, got {type(law).__name__}")
    arrays = [_positive(where, name, value) for name, value in (("N", N), ("D", D), ("L", L))]
    if any(a.ndim != 1 for a in arrays) or len({a.size for a in arrays}) != 1:
        raise ValueError(
            f"{where}: N, D and L must be 1-D and of equal length, got shapes {', '.join(str(a.shape) for a in arrays)}"
        )
    if arrays[0].size < minimum:
        raise ValueError(f"{where}: need at least {minimum} runs (the law has 5 constants), got {arrays[0].size}")
    _check_delta(where, "huber_delta", huber_delta)
    return tuple(arrays)


def _check_grid(where: str, grid: object) -> np.ndarray:
    """The grid's starts as an ``(S, 5)`` array of ``(e, a, b, alpha, beta)``."""
    grid = DEFAULT_GRID if grid is None else grid
    names = ("e", "a", "b", "alpha", "beta")
    if not isinstance(grid, Mapping) or set(grid) != set(names):
        got = sorted(grid) if isinstance(grid, Mapping) else type(grid).__name__
        raise ValueError(f"{where}: grid must map each of {names} to a sequence of starting values, got {got}")
    axes = []
    for name in names:
        try:
            axis = np.asarray(grid[name], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: grid[{name!r}] must be a sequence of numbers") from None
        if axis.size == 0 or not np.all(np.isfinite(axis)):
            raise ValueError(f"{where}: grid[{name!r}] must hold at least one finite number, got {axis.tolist()}")
        axes.append(axis)
    return np.array(list(itertools.product(*axes)))


def _objective(
    theta: np.ndarray, log_N: np.ndarray, log_D: np.ndarray, log_L: np.ndarray, delta: float
) -> tuple[float, np.ndarray]:
    r"""The Huber objective in the parameters :math:`\theta = (e, a, b, \alpha, \beta)` and its gradient.

    :math:`\log \hat L_i = \operatorname{LSE}(a - \alpha \log N_i,\ b - \beta \log D_i,\ e)`,
    computed stably; its gradient is the softmax :math:`w_i` of the three terms, and the
    Huber loss's slope is :math:`\operatorname{clip}(r, -\delta, \delta)`. Divided by a finite
    :math:`\delta` (same minimiser), so that a residual in the linear part costs its size and
    the optimiser's tolerances mean the same for every :math:`\delta`.
    """
    e, a, b, alpha, beta = theta
    t_N, t_D = a - alpha * log_N, b - beta * log_D
    top = np.maximum(np.maximum(t_N, t_D), e)
    w_N, w_D, w_E = np.exp(t_N - top), np.exp(t_D - top), np.exp(e - top)
    total = w_N + w_D + w_E
    r = top + np.log(total) - log_L
    slope = np.clip(r, -delta, delta)
    scale = delta if math.isfinite(delta) else 1.0
    value = float(slope @ (r - 0.5 * slope)) / scale
    slope = slope / (scale * total)  # d value / d log L-hat, times 1 / sum of the w's (the softmax)
    return value, np.array([slope @ w_E, slope @ w_N, slope @ w_D, -(slope * w_N) @ log_N, -(slope * w_D) @ log_D])


def fit_scaling_law(
    N: ArrayLike,
    D: ArrayLike,
    L: ArrayLike,
    *,
    huber_delta: float = 1e-3,
    grid: Mapping[str, Sequence[float]] | None = None,
    screen: bool = True,
) -> ScalingLaw:
    r"""Fit :math:`L(N, D) = E + A/N^{\alpha} + B/D^{\beta}` to measured runs, as Hoffmann et al. (2022, approach 3).

    With :math:`E = e^e`, :math:`A = e^a`, :math:`B = e^b` (positive by construction), the
    prediction's logarithm is a log-sum-exp of three terms, and the fit minimises

    .. math::

        \min_{a, b, e, \alpha, \beta} \sum_i h_\delta\Bigl(
        \operatorname{LSE}\bigl(a - \alpha \log N_i,\ b - \beta \log D_i,\ e\bigr) - \log L_i\Bigr)

    (:func:`scaling_law_objective`) with L-BFGS from every point of ``grid``, keeping the best.
    The objective is not convex, so one start can end in a poor local minimum; the grid makes
    that unlikely, and the fit is deterministic. With :math:`\delta = 10^{-3}` a run whose loss
    is off by more than 0.1% pulls with a constant force, so one bad run cannot drag the fit far.

    Most starts end in the same minimum, and the Huber loss's kinks make each run to
    convergence long (a hundred or more iterations), so by default (``screen``) every start gets
    ten iterations and the five lowest go on to convergence; ``screen=False`` runs every start
    to the end, as Hoffmann et al. The optimiser's tolerances are tight: Besiroglu et al.
    (2024), refitting the runs read off Hoffmann et al.'s figures, found that the published
    constants fit them poorly, a reminder to run the optimiser to convergence.

    Args:
        N: model sizes (parameters), a 1-D sequence of positive numbers.
        D: training tokens of each run, the same length.
        L: the loss each run reached (nats per token), the same length; at least 5 runs.
        huber_delta: :math:`\delta`, Hoffmann et al.'s :math:`10^{-3}`; ``math.inf`` gives
            the squared loss (least squares in log loss).
        grid: starting values, a mapping of ``"e"``, ``"a"``, ``"b"``, ``"alpha"``, ``"beta"``
            to sequences, every combination a start; default :data:`DEFAULT_GRID` (243 starts);
            :data:`HOFFMANN_GRID` is the paper's (4,500 starts, twenty times slower).
        screen: run every start briefly and only the most promising to convergence.

    Returns:
        The fitted :class:`ScalingLaw`; its residuals are ``np.log(law.loss(N, D) / L)``.

    Raises:
        ValueError: lengths differ, fewer than 5 runs, fewer than 3 distinct ``N`` or ``D``
            (the law is not identifiable from them), a value not positive and finite, a bad
            ``huber_delta`` or ``grid``, or no start reaching finite constants.
    """
    data, starts = _check_fit("fit_scaling_law", N, D, L, huber_delta, grid)
    fits = [_lbfgs(start, data, _SCREEN_ITERATIONS if screen else _MAX_ITERATIONS) for start in starts]
    if screen:  # the most promising starts run on to convergence
        fits = [_lbfgs(fit.x, data, _MAX_ITERATIONS) for fit in sorted(fits, key=_value)[:_FINALISTS]]
    e, a, b, alpha, beta = min(fits, key=_value).x
    return _law_from_logs("fit_scaling_law", e, a, b, alpha, beta)


_SCREEN_ITERATIONS, _FINALISTS, _MAX_ITERATIONS = 10, 5, 1000


def _lbfgs(start: np.ndarray, data: tuple, iterations: int) -> OptimizeResult:
    """L-BFGS on :func:`_objective` from ``start`` for at most ``iterations`` iterations."""
    return minimize(
        _objective,
        start,
        args=data,
        jac=True,
        method="L-BFGS-B",
        options=dict(maxiter=iterations, ftol=1e-14, gtol=1e-10),
    )


def _value(fit: OptimizeResult) -> float:
    """The objective a fit reached, ``inf`` if not finite (so ``min`` and ``sorted`` skip it)."""
    return float(fit.fun) if np.isfinite(fit.fun) and np.all(np.isfinite(fit.x)) else math.inf


def _check_fit(
    where: str, N: object, D: object, L: object, huber_delta: object, grid: object
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]:
    """The fit's data ``(log N, log D, log L, delta)`` and its starts ``(S, 5)``."""
    N, D, L = _check_runs(where, N, D, L, huber_delta, minimum=5)
    _check_identifiable(where, N, D)
    return (np.log(N), np.log(D), np.log(L), float(huber_delta)), _check_grid(where, grid)


def _check_identifiable(where: str, N: np.ndarray, D: np.ndarray) -> None:
    r"""At least three distinct model sizes and three distinct token counts. Along :math:`N` the
    runs see :math:`E + A N^{-\alpha}` only up to a constant shared with the data term, so two sizes
    give one difference for two unknowns (:math:`A`, :math:`\alpha`): any exponent fits, and the
    fit returns one without a word. The same holds for :math:`D`, :math:`B` and :math:`\beta`."""
    for name, values, term in (("N", N, "A and alpha"), ("D", D, "B and beta")):
        distinct = np.unique(values)
        if distinct.size < 3:
            raise ValueError(
                f"{where}: the runs have {distinct.size} distinct {name} ({distinct.tolist()}); the law "
                f"needs at least 3 to tell {term} apart from each other and from E"
            )


def _law_from_logs(where: str, e: float, a: float, b: float, alpha: float, beta: float) -> ScalingLaw:
    with np.errstate(over="ignore"):
        E, A, B = np.exp([e, a, b])
    if not np.all(np.isfinite([E, A, B, alpha, beta])) or A <= 0 or B <= 0:
        raise ValueError(
            f"{where}: the fit did not reach finite constants (e, a, b, alpha, beta) = "
            f"{(e, a, b, alpha, beta)}; are the losses a power law in N and D?"
        )
    return ScalingLaw(E=float(E), A=float(A), B=float(B), alpha=float(alpha), beta=float(beta))


# ---------------------------------------------------------------------------------------------
# Helpers for laying out and reading the runs


def non_embedding_parameters(model: nn.Module) -> int:
    r"""The model size :math:`N` of a scaling law: the parameters outside the embedding tables.

    Kaplan et al. (2020) count :math:`N` without the token and position embeddings (for the
    GPT of chapter 9, :math:`N \approx 12\,L\,d_{\text{model}}^2`): with them left out, models of
    different depths and widths fall on one power law, while the tables, a lookup that costs no
    multiplication per parameter, bend the curve for small models (where they are a large part
    of the total). Pearce and Song (2024) trace part of the gap between Kaplan's and Hoffmann's
    exponents to this choice, so it matters which one a fit uses; this function is Kaplan's.

    Counted: every parameter of ``model`` that belongs to no ``nn.Embedding`` (all the
    blocks' weights, biases and LayerNorm gains and shifts, the final LayerNorm, and an
    *untied* output layer, a true matrix product), each tensor once however many modules share
    it. A tied output layer is the token table itself, so it is not counted.
    """
    _check_module("non_embedding_parameters", model)
    tables = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    unique = {id(p): p for p in model.parameters()}  # parameters() yields a shared tensor once
    return sum(p.numel() for key, p in unique.items() if key not in tables)


def _check_module(where: str, model: object) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"{where}: model must be an nn.Module, got {type(model).__name__}")


def training_flops(N: ArrayLike, D: ArrayLike, k: float = 6) -> float | np.ndarray:
    r"""The training compute :math:`C = kND` of a model of ``N`` parameters on ``D`` tokens.

    :math:`k = 6`: a weight costs a multiply-add (2 FLOPs) per token forward and twice that
    backward (Kaplan et al. 2020). The estimate leaves out attention's scores, :math:`12\,L\,n\,
    d_{\text{model}}` per token for a context of :math:`n`: a fraction :math:`n / (6\,d_{\text{model}})`
    of :math:`6N` for the GPT of chapter 9 with :math:`d_{ff} = 4 d_{\text{model}}`, a third for its
    ten-minute model (see :func:`transformer_book.flops.gpt_flops_per_token`).
    """
    N, D, k = _check_flops("training_flops", N, D, k)
    return _scalar_or_array(k * N * D)


def isoflop_points(N: ArrayLike, C: ArrayLike, *, flops_per_token: float = 6) -> np.ndarray:
    r"""The token budget :math:`D = C / (kN)` of each model size ``N`` on one IsoFLOP slice of compute ``C``.

    Hoffmann et al.'s approach 2 trains several model sizes at one fixed compute each; the
    losses along a slice trace a valley whose bottom is the compute-optimal size. Laying the
    grid of runs out as slices also spreads it over :math:`N` and :math:`D` for approach 3.

    Train each run with a learning-rate schedule that ends at its own :math:`D` (Hoffmann et
    al. found that a cosine cycle longer than the run overstates its loss), e.g. chapter 9's
    recipe with ``steps = round(D / (batch * context))``.

    Args:
        N: model sizes, positive numbers.
        C: the slice's compute in FLOPs, a number (or an array that broadcasts with ``N``,
            e.g. ``C[:, None]`` for one row per slice).
        flops_per_token: :math:`k`.

    Returns:
        ``D``, an array of the broadcast shape of ``N`` and ``C`` (tokens).
    """
    N, C, k = _check_flops("isoflop_points", N, C, flops_per_token, names=("N", "C", "flops_per_token"))
    return np.asarray(C / (k * N), dtype=np.float64)


class IsoFLOPValley(NamedTuple):
    r"""The bottom of one IsoFLOP profile, :math:`L \approx a\,(\log N)^2 + b \log N + c`.

    ``N`` is the model size at the bottom, :math:`e^{-b/(2a)}`; ``loss`` the parabola's value
    there; ``a``, ``b``, ``c`` its coefficients (``a > 0``: a valley); ``inside`` is True when
    ``N`` lies between the smallest and the largest size measured (otherwise the bottom is an
    extrapolation, not a measurement).
    """

    N: float
    loss: float
    a: float
    b: float
    c: float
    inside: bool

    def __call__(self, N: ArrayLike) -> float | np.ndarray:
        """The parabola's loss at the model sizes ``N``."""
        (N,) = _check_sizes("IsoFLOPValley", N=N)
        x = np.log(N)
        return _scalar_or_array(self.a * x**2 + self.b * x + self.c)


def fit_isoflop_valley(N: ArrayLike, L: ArrayLike) -> IsoFLOPValley:
    r"""Hoffmann et al.'s approach 2 on one slice: a parabola in :math:`\log N` through the losses.

    Runs of equal compute :math:`C` (their tokens from :func:`isoflop_points`) trace a valley
    against the model size: too small a model cannot use the data, too large a one sees too
    few tokens. Least squares of

    .. math:: L_i \approx a\,(\log N_i)^2 + b \log N_i + c

    puts its bottom at :math:`\log N_{opt} = -b / (2a)`, with the loss :math:`c - b^2/(4a)`.

    Args:
        N: the model sizes of the slice, a 1-D sequence of positive numbers, at least three
            distinct.
        L: their final losses, positive, of the same length.

    Returns:
        :class:`IsoFLOPValley` ``(N, loss, a, b, c, inside)``.

    Raises:
        ValueError: fewer than three distinct sizes, lengths that differ, a loss or size that is
            not a positive finite number, or losses that do not curve upwards (``a <= 0``: no
            bottom, e.g. a slice whose sizes all lie on one side of its optimum).
    """
    log_N, log_L = _check_pairs("fit_isoflop_valley", N, L, names=("N", "L"), distinct=3, curve="a parabola")
    a, b, c = (float(v) for v in np.polyfit(log_N, np.exp(log_L), 2))
    if not a > 0:
        raise ValueError(
            f"fit_isoflop_valley: the losses do not form a valley (the parabola opens downwards or "
            f"is flat, a = {a:.3g}); the sizes may all lie on one side of the slice's optimum"
        )
    x_opt = -b / (2 * a)
    return IsoFLOPValley(
        N=float(np.exp(x_opt)),
        loss=c - b * b / (4 * a),
        a=a,
        b=b,
        c=c,
        inside=bool(log_N.min() <= x_opt <= log_N.max()),
    )


def _check_flops(
    where: str, x: object, y: object, k: object, names: tuple[str, str, str] = ("N", "D", "k")
) -> tuple[np.ndarray, np.ndarray, float]:
    x, y = _check_sizes(where, **{names[0]: x, names[1]: y})
    return x, y, checks.finite_real(where, names[2], k, above=0)


class PowerLaw(NamedTuple):
    r"""A single power law :math:`y = c\,x^p`; call it on ``x`` for ``y``."""

    c: float
    p: float

    def __call__(self, x: ArrayLike) -> float | np.ndarray:
        (x,) = _check_sizes("PowerLaw", x=x)
        return _scalar_or_array(self.c * x**self.p)


def fit_power_law(x: ArrayLike, y: ArrayLike) -> PowerLaw:
    r"""Least squares of :math:`\log y = \log c + p \log x`: a straight line on log-log axes.

    Used for the compute-optimal frontier, :math:`N_{opt} \propto C^{\,p}` (Kaplan et al. 2020;
    Hoffmann et al. 2022, approaches 1 and 2).

    Args:
        x, y: 1-D sequences of positive finite numbers of one length, at least two distinct ``x``.

    Returns:
        :class:`PowerLaw` ``(c, p)``.
    """
    log_x, log_y = _check_pairs("fit_power_law", x, y)
    p, log_c = np.polyfit(log_x, log_y, 1)
    return PowerLaw(c=float(np.exp(log_c)), p=float(p))


def _check_pairs(
    where: str, x: object, y: object, names: tuple[str, str] = ("x", "y"), *, distinct: int = 2, curve: str = "a line"
) -> tuple[np.ndarray, np.ndarray]:
    (nx, ny) = names
    x, y = _positive(where, nx, x), _positive(where, ny, y)
    if x.ndim != 1 or y.shape != x.shape:
        raise ValueError(f"{where}: {nx} and {ny} must be 1-D and of equal length, got shapes {x.shape} and {y.shape}")
    if np.unique(x).size < distinct:
        raise ValueError(f"{where}: need at least {distinct} distinct {nx} to fit {curve}, got {np.unique(x).tolist()}")
    return np.log(x), np.log(y)
