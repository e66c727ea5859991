"""Tests of ``transformer_book.scaling``: the Chinchilla law against hand arithmetic, its closed-form
compute-optimal split against a brute-force search along the budget, the fit against synthetic
runs drawn from a known law (noise-free, noisy, with an outlier) and against SciPy's own robust
least squares, and the non-embedding parameter count of a GPT against a count by hand."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy.optimize import least_squares
from scipy.stats import linregress

from transformer_book import scaling
from transformer_book.models import GPT, GPTConfig
from transformer_book.scaling import ScalingLaw

pytestmark = pytest.mark.usefixtures("one_thread")

# A law of the size of chapter 19's character-level runs: 10^4 to 10^6 parameters, 10^6 to 3 x 10^7 tokens.
TRUE = ScalingLaw(E=1.2, A=40.0, B=300.0, alpha=0.5, beta=0.4)
SIZES, TOKENS = np.geomspace(1e4, 1e6, 5), np.geomspace(1e6, 3e7, 4)
N, D = np.repeat(SIZES, TOKENS.size), np.tile(TOKENS, SIZES.size)  # 20 runs, every size with every budget
HELD_OUT = (2e6, 6e7)  # a larger run than any in the fit: twice the largest model and tokens
SEEDS = range(8)


def noisy_losses(seed: int) -> np.ndarray:
    """The true losses times exp(noise), noise N(0, 0.005^2): a 0.5% multiplicative error."""
    return TRUE.loss(N, D) * np.exp(np.random.default_rng(seed).normal(0.0, 0.005, N.size))


@pytest.fixture(scope="module")
def noisy_fits():
    """The default fit of each seed's noisy runs, and the CPU seconds each took (this process's: a
    busy machine does not inflate them)."""
    fits, seconds = [], []
    for seed in SEEDS:
        start = time.process_time()
        fits.append(scaling.fit_scaling_law(N, D, noisy_losses(seed)))
        seconds.append(time.process_time() - start)
    return fits, seconds


# --- the law ----------------------------------------------------------------------------------


def test_loss_by_hand():
    law = ScalingLaw(E=1.0, A=4.0, B=9.0, alpha=0.5, beta=0.5)
    assert law.loss(16, 81) == 1 + 4 / 4 + 9 / 9
    assert isinstance(law.loss(16.0, 81.0), float)
    np.testing.assert_allclose(law.loss([1.0, 4.0], [1.0, 9.0]), [1 + 4 + 9, 1 + 2 + 3])
    grid = law.loss(np.array([[1.0], [4.0]]), np.array([1.0, 9.0]))  # broadcasts: sizes down, tokens across
    np.testing.assert_allclose(grid, [[1 + 4 + 9, 1 + 4 + 3], [1 + 2 + 9, 1 + 2 + 3]])


def test_str_rounds_the_constants():
    assert str(ScalingLaw(1.69, 406.4, 410.7, 0.34, 0.28)) == "L(N, D) = 1.690 + 406.4 / N^0.340 + 410.7 / D^0.280"


@pytest.mark.parametrize("law", [TRUE, ScalingLaw(1.69, 406.4, 410.7, 0.34, 0.28), ScalingLaw(0.5, 3.0, 5e4, 0.2, 0.9)])
@pytest.mark.parametrize("C", [1e13, 1e17, 1e21])
def test_compute_optimal_is_the_brute_force_minimum_along_the_budget(law, C):
    """Search L(N, C / (6N)) over a million log-spaced N spanning twelve decades around the answer."""
    best = law.compute_optimal(C)
    n = np.geomspace(best.N * 1e-6, best.N * 1e6, 1_000_001)
    losses = law.loss(n, C / (6 * n))
    brute = n[np.argmin(losses)]
    assert best.N == pytest.approx(brute, rel=1e-2)
    assert 6 * best.N * best.D == pytest.approx(C, rel=1e-12)
    assert best.loss == pytest.approx(law.E + law.A / best.N**law.alpha + law.B / best.D**law.beta, rel=1e-12)
    assert best.loss <= losses.min() + 1e-12
    # at the optimum the reducible terms stand in the ratio beta : alpha
    assert (law.A / best.N**law.alpha) / (law.B / best.D**law.beta) == pytest.approx(law.beta / law.alpha, rel=1e-9)


def test_compute_optimal_takes_arrays_and_another_k():
    budgets = np.array([1e14, 1e16])
    best = TRUE.compute_optimal(budgets, flops_per_token=8)
    np.testing.assert_allclose(8 * best.N * best.D, budgets, rtol=1e-12)
    for i, C in enumerate(budgets):
        one = TRUE.compute_optimal(float(C), flops_per_token=8)
        assert (one.N, one.D, one.loss) == pytest.approx((best.N[i], best.D[i], best.loss[i]), rel=1e-12)
    # N_opt grows as C^(beta / (alpha + beta))
    assert math.log(best.N[1] / best.N[0]) / math.log(100) == pytest.approx(0.4 / 0.9, rel=1e-9)


# --- the fit ----------------------------------------------------------------------------------


def test_fit_recovers_a_known_law_from_noise_free_runs():
    fit = scaling.fit_scaling_law(N, D, TRUE.loss(N, D))
    assert fit.E == pytest.approx(TRUE.E, rel=1e-3)
    assert fit.alpha == pytest.approx(TRUE.alpha, rel=1e-3)
    assert fit.beta == pytest.approx(TRUE.beta, rel=1e-3)
    assert (fit.A, fit.B) == pytest.approx((TRUE.A, TRUE.B), rel=1e-2)


def test_fit_of_noisy_runs_predicts_a_larger_held_out_run(noisy_fits):
    """0.5% noise on 20 runs: the prediction at twice the largest N and D is off by about 0.008
    nats (root mean square over the seeds); a single draw passes 0.01 about one time in five."""
    fits, seconds = noisy_fits
    errors = np.array([fit.loss(*HELD_OUT) - TRUE.loss(*HELD_OUT) for fit in fits])
    assert math.sqrt(np.mean(errors**2)) < 0.01, errors
    assert np.abs(errors).max() < 0.025, errors
    assert max(seconds) < 5.0, seconds


def test_fit_is_deterministic(noisy_fits):
    assert scaling.fit_scaling_law(N, D, noisy_losses(0)) == noisy_fits[0][0]


def test_fit_reaches_the_minimum_scipys_robust_least_squares_finds(noisy_fits):
    """SciPy's ``least_squares(loss="huber", f_scale=delta)`` minimises the same objective: its
    ``cost``, 0.5 f_scale^2 rho(r^2 / f_scale^2) summed, is h_delta(r) summed. Started from the
    true constants it must find no lower point than the grid search did."""
    L = noisy_losses(0)

    def residuals(theta):
        e, a, b, alpha, beta = theta
        return np.logaddexp(np.logaddexp(a - alpha * np.log(N), b - beta * np.log(D)), e) - np.log(L)

    truth = [math.log(TRUE.E), math.log(TRUE.A), math.log(TRUE.B), TRUE.alpha, TRUE.beta]
    reference = least_squares(residuals, truth, loss="huber", f_scale=1e-3, xtol=1e-15, ftol=1e-15, gtol=1e-15)
    e, a, b, alpha, beta = reference.x
    found = ScalingLaw(math.exp(e), math.exp(a), math.exp(b), alpha, beta)
    assert scaling.scaling_law_objective(found, N, D, L) == pytest.approx(reference.cost, rel=1e-9)
    assert scaling.scaling_law_objective(noisy_fits[0][0], N, D, L) <= reference.cost * (1 + 1e-9)


def test_the_huber_loss_shrugs_off_an_outlier_that_drags_least_squares(noisy_fits):
    """One run's loss 0.5 nats too high: the Huber fit's held-out prediction moves by less than a
    quarter of what the squared loss's (delta = inf) moves."""
    L = noisy_losses(0)
    bad = L.copy()
    bad[9] += 0.5
    huber_shift = scaling.fit_scaling_law(N, D, bad).loss(*HELD_OUT) - noisy_fits[0][0].loss(*HELD_OUT)
    squared = [scaling.fit_scaling_law(N, D, losses, huber_delta=math.inf).loss(*HELD_OUT) for losses in (L, bad)]
    squared_shift = squared[1] - squared[0]
    assert abs(squared_shift) > 0.05
    assert abs(huber_shift) < 0.25 * abs(squared_shift)


def test_screening_finds_what_running_every_start_finds():
    grid = dict(e=(0.0,), a=(0.0, 5.0), b=(0.0, 10.0), alpha=(0.5,), beta=(0.25, 1.0))
    L = noisy_losses(3)
    screened = scaling.fit_scaling_law(N, D, L, grid=grid)
    every = scaling.fit_scaling_law(N, D, L, grid=grid, screen=False)
    assert scaling.scaling_law_objective(screened, N, D, L) == pytest.approx(
        scaling.scaling_law_objective(every, N, D, L), rel=1e-6
    )


def test_huber_by_hand():
    np.testing.assert_allclose(
        scaling.huber([0.0005, -0.002, 1.0], 1e-3),
        [0.5 * 0.0005**2, 1e-3 * (0.002 - 0.0005), 1e-3 * (1.0 - 0.0005)],
        rtol=1e-12,
    )
    np.testing.assert_allclose(scaling.huber([1.0, -2.0], math.inf), [0.5, 2.0])


def test_fit_power_law_against_scipy():
    x = np.geomspace(1e12, 1e18, 7)
    assert scaling.fit_power_law(x, 3.0 * x**0.45) == pytest.approx((3.0, 0.45), rel=1e-9)
    y = 3.0 * x**0.45 * np.exp(np.random.default_rng(0).normal(0, 0.05, x.size))
    reference = linregress(np.log(x), np.log(y))
    law = scaling.fit_power_law(x, y)
    assert (law.c, law.p) == pytest.approx((math.exp(reference.intercept), reference.slope), rel=1e-9)
    assert law(1e15) == pytest.approx(law.c * 1e15**law.p, rel=1e-12)


# --- helpers ----------------------------------------------------------------------------------


def _hand_count(d: int, d_ff: int, n_layers: int) -> int:
    """One pre-LN block: Q, K, V, O (d x d + d each), the FFN (d x d_ff + d_ff, d_ff x d + d),
    two LayerNorms (gain and shift); then the final LayerNorm."""
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norms = 2 * 2 * d
    return n_layers * (attention + ffn + norms) + 2 * d


@pytest.mark.parametrize("tie_output", [True, False])
def test_non_embedding_parameters_by_hand(tie_output):
    config = GPTConfig(11, context=8, d_model=12, n_heads=3, n_layers=2, d_ff=20, dropout=0.0, tie_output=tie_output)
    model = GPT(config)
    untied_output = 0 if tie_output else 11 * 12  # an untied output layer is a matrix product: counted
    assert scaling.non_embedding_parameters(model) == _hand_count(12, 20, 2) + untied_output
    total = sum(p.numel() for p in model.parameters())
    assert scaling.non_embedding_parameters(model) == total - 11 * 12 - 8 * 12  # without the two tables


def test_non_embedding_parameters_is_about_twelve_L_d_squared():
    """Kaplan et al.'s approximation 12 L d^2 (d_ff = 4d) leaves out the biases and LayerNorms."""
    model = GPT(GPTConfig(11, context=8, d_model=128, n_heads=4, n_layers=2, dropout=0.0))
    assert scaling.non_embedding_parameters(model) == pytest.approx(12 * 2 * 128**2, rel=1e-2)


def test_training_flops_and_isoflop_points():
    assert scaling.training_flops(1e5, 2e7) == 6 * 1e5 * 2e7
    assert scaling.training_flops(1e5, 2e7, k=8) == 8 * 1e5 * 2e7
    sizes = np.array([1e4, 1e5, 1e6])
    tokens = scaling.isoflop_points(sizes, 1e15)
    np.testing.assert_allclose(tokens, [1e15 / 6e4, 1e15 / 6e5, 1e15 / 6e6], rtol=1e-12)
    np.testing.assert_allclose(scaling.training_flops(sizes, tokens), 1e15, rtol=1e-12)
    slices = scaling.isoflop_points(sizes, np.array([1e14, 1e15])[:, None])
    assert slices.shape == (2, 3)
    np.testing.assert_allclose(slices[1], tokens, rtol=1e-12)


def test_fit_isoflop_valley_recovers_a_parabola_in_log_N():
    sizes = np.geomspace(2e3, 2e5, 6)
    x0, bottom = np.log(1.5e4), 2.1
    losses = 0.03 * (np.log(sizes) - x0) ** 2 + bottom
    valley = scaling.fit_isoflop_valley(sizes, losses)
    assert valley.N == pytest.approx(1.5e4, rel=1e-9) and valley.loss == pytest.approx(bottom, rel=1e-12)
    assert valley.a == pytest.approx(0.03, rel=1e-9) and valley.inside
    np.testing.assert_allclose(valley(sizes), losses, rtol=1e-12)
    outside = scaling.fit_isoflop_valley(sizes[3:], losses[3:] + 0.01 * (np.log(sizes[3:]) - np.log(sizes[3])))
    assert not outside.inside and outside.N < sizes[3]  # its bottom lies below the sizes measured


def test_fit_isoflop_valley_approaches_the_laws_optimum_on_a_narrow_slice():
    """Along a slice of the Chinchilla law the loss is not a parabola in log N, but near its
    bottom it is one to second order: a narrow ladder of sizes finds the closed form's N_opt."""
    C = 1e21
    best = TRUE.compute_optimal(C)
    for spread, tolerance in ((1.5, 0.01), (1.05, 1e-4)):
        sizes = best.N * np.geomspace(1 / spread, spread, 5) * 1.01  # not centred on the answer
        valley = scaling.fit_isoflop_valley(sizes, TRUE.loss(sizes, scaling.isoflop_points(sizes, C)))
        assert valley.N == pytest.approx(best.N, rel=tolerance) and valley.inside


# --- bad input --------------------------------------------------------------------------------

GOOD_L = TRUE.loss(N, D)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: scaling.fit_scaling_law(N, D[:-1], GOOD_L), "equal length"),
        (lambda: scaling.fit_scaling_law(N[:4], D[:4], GOOD_L[:4]), "at least 5 runs"),
        (lambda: scaling.fit_scaling_law(np.where(N == N[3], -1.0, N), D, GOOD_L), "N must be positive finite"),
        (lambda: scaling.fit_scaling_law(N, D, np.where(N == N[3], np.nan, GOOD_L)), "L must be positive finite"),
        (lambda: scaling.fit_scaling_law(N, np.where(D == D[0], np.inf, D), GOOD_L), "D must be positive finite"),
        (lambda: scaling.fit_scaling_law(N[:, None], D[:, None], GOOD_L[:, None]), "1-D"),
        (lambda: scaling.fit_scaling_law(N, D, "losses"), "L must be positive finite"),
        # points that cannot identify the law: one model size, two token counts, the same run five times
        (lambda: scaling.fit_scaling_law(np.full(N.size, N[0]), D, GOOD_L), "1 distinct N"),
        (lambda: scaling.fit_scaling_law(N, np.where(D > np.median(D), D.max(), D.min()), GOOD_L), "2 distinct D"),
        (lambda: scaling.fit_scaling_law([N[0]] * 5, [D[0]] * 5, [GOOD_L[0]] * 5), "1 distinct N"),
        (lambda: scaling.fit_scaling_law(N, D, GOOD_L, huber_delta=0.0), "huber_delta must be a positive real"),
        (lambda: scaling.fit_scaling_law(N, D, GOOD_L, huber_delta=float("nan")), "huber_delta"),
        (lambda: scaling.fit_scaling_law(N, D, GOOD_L, grid=dict(e=(0.0,))), "grid must map"),
        (lambda: scaling.fit_scaling_law(N, D, GOOD_L, grid={**scaling.DEFAULT_GRID, "a": ()}), r"grid\['a'\]"),
        (lambda: ScalingLaw(1.0, -1.0, 1.0, 0.5, 0.5), "A > 0"),
        (lambda: ScalingLaw(1.0, 1.0, 1.0, float("nan"), 0.5), "alpha must be a finite real"),
        (lambda: TRUE.loss(0.0, 1e6), "ScalingLaw.loss: N must be positive"),
        (lambda: TRUE.loss([1e4, 1e5], [1e6, 1e7, 1e8]), "do not broadcast"),
        (lambda: TRUE.compute_optimal(-1.0), "C must be positive"),
        (lambda: TRUE.compute_optimal(1e15, flops_per_token=0), "flops_per_token"),
        (lambda: ScalingLaw(1.0, 1.0, 1.0, -0.1, 0.5).compute_optimal(1e15), "exponents must be positive"),
        (lambda: scaling.non_embedding_parameters("gpt"), "must be an nn.Module"),
        (lambda: scaling.training_flops(1e5, 0.0), "D must be positive"),
        (lambda: scaling.isoflop_points([1e4, 1e5], 1e15, flops_per_token=-6), "flops_per_token"),
        (lambda: scaling.fit_power_law([1.0, 1.0], [2.0, 3.0]), "2 distinct x"),
        (lambda: scaling.fit_power_law([1.0, 2.0], [2.0, -3.0]), "y must be positive"),
        (lambda: scaling.fit_isoflop_valley([1e3, 1e4, 1e4], [2.0, 1.9, 1.8]), "3 distinct N to fit a parabola"),
        (lambda: scaling.fit_isoflop_valley([1e3, 1e4, 1e5], [2.0, 1.9]), "N and L must be 1-D and of equal length"),
        (lambda: scaling.fit_isoflop_valley([1e3, 1e4, 1e5], [2.0, 0.0, 1.8]), "L must be positive"),
        (lambda: scaling.fit_isoflop_valley([1e3, 1e4, 1e5], [2.0, 1.99, 1.5]), "do not form a valley"),
        (lambda: scaling.huber([0.1], delta=-1.0), "delta must be a positive real"),
        (lambda: scaling.scaling_law_objective("law", N, D, GOOD_L), "law must be a ScalingLaw"),
    ],
)
def test_bad_input_is_named(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
