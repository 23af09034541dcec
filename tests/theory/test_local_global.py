"""Tests of `replicate.theory.local_global` (paper B) against brute force and reference numbers.

Reference values are paper B's (docs/papers.md) or our own computations from its results.
The printed, mistyped versions of the paper's formulas appear here only to show that they
fail where the corrected versions pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize_scalar
from scipy.special import expit

from replicate.markov.chains import ChainParameterError
from replicate.theory.local_global import (
    ENERGY_SADDLE,
    SADDLE_W,
    CanonicalWeights,
    LimitClass,
    basin_of,
    canonical_logits,
    canonical_weights,
    chain_constants,
    classify_limit,
    energy,
    gaussian_basin_probability,
    global_min_locus_e,
    global_min_surface_a,
    gradient_flow_velocity,
    hessian_on_w_axis,
    integrate_gradient_flow,
    integrate_gradient_flows,
    is_in_basin_max,
    is_in_basin_min,
    is_in_basin_sad,
    is_in_basin_star,
    is_in_common_basin,
    logit_gap,
    loss,
    loss_gradient,
    loss_gradient_attention,
    loss_gradient_attention_with_bias,
    loss_gradient_with_bias,
    loss_with_bias,
    optimal_bias,
    predicted_limit,
    reduced_loss,
    separatrix_half_width,
    small_e_log_rate,
)

CHAINS = [(0.1, 0.1), (0.9, 0.9), (0.2, 0.3), (0.5, 0.8)]
ABOVE_ONE = (0.5, 0.8)  # p + q > 1 (Thm 2)
BELOW_ONE = (0.2, 0.3)  # p + q < 1 (Thm 8)
STAR, MIN, SAD, MAX = LimitClass.STAR, LimitClass.MIN, LimitClass.SAD, LimitClass.MAX


def random_points(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Points with |e|, |w| <= 1.5, |a| <= 0.5, and |w| >= 0.05 (away from the |w| kink)."""
    e = rng.uniform(-1.5, 1.5, n)
    w = rng.choice([-1.0, 1.0], n) * rng.uniform(0.05, 1.5, n)
    columns = [e, w] if dim == 2 else [e, w, rng.uniform(-0.5, 0.5, n)]
    return np.stack(columns, axis=-1)


def loss_of_point(point: np.ndarray, p: float, q: float) -> float:
    a = point[2] if len(point) == 3 else 0.0
    return float(loss(point[0], point[1], p, q, a))


def central_difference_gradient(
    fun: Callable[[np.ndarray], float], point: np.ndarray, step: float = 1e-6
) -> np.ndarray:
    gradient = np.zeros_like(point)
    for i in range(len(point)):
        shift = np.zeros_like(point)
        shift[i] = step
        gradient[i] = (fun(point + shift) - fun(point - shift)) / (2.0 * step)
    return gradient


def torch_loss(theta: torch.Tensor, p: float, q: float) -> torch.Tensor:
    """L(theta) from paper B Eq. (44) with b* of Eq. (33)/(98), as a torch BCE over (X, Y)."""
    e, w = theta[0], theta[1]
    a = theta[2] if len(theta) == 3 else torch.zeros((), dtype=torch.float64)
    gap = e**2 * (1 + a * e**2) * (1 + 2 * w * w.abs())
    centre_without_bias = e**2 * w * (w * (1 + a * e**2)).abs()
    ratio = p / q
    big_a = torch.exp(gap)
    x_star = ((ratio - 1) + torch.sqrt((ratio - 1) ** 2 + 4 * ratio * big_a)) / (2 * big_a)
    b_star = torch.log(x_star) + gap / 2 - centre_without_bias
    x = torch.tensor([0.0, 1.0], dtype=torch.float64)
    logits = centre_without_bias + b_star + gap * (x - 0.5)
    prob_x = torch.tensor([q, p], dtype=torch.float64) / (p + q)
    prob_one_given_x = torch.tensor([p, 1 - q], dtype=torch.float64)
    cross_entropy = prob_one_given_x * F.binary_cross_entropy_with_logits(
        logits, torch.ones(2, dtype=torch.float64), reduction="none"
    ) + (1 - prob_one_given_x) * F.binary_cross_entropy_with_logits(
        logits, torch.zeros(2, dtype=torch.float64), reduction="none"
    )
    return (prob_x * cross_entropy).sum()


# --------------------------------------------------------------------------------------
# Constants and input validation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "q", "c_star", "h_uni", "h_bi", "slope", "bias_at_origin"),
    [
        (0.1, 0.1, 4.394449, 0.693147, 0.325083, -0.200000, 0.0),
        (0.9, 0.9, -4.394449, 0.693147, 0.325083, 0.200000, 0.0),
        (0.2, 0.3, 2.233592, 0.673012, 0.544587, -0.120000, -0.405465),
        (0.5, 0.8, -1.386294, 0.666278, 0.619015, 0.071006, -0.470004),
    ],
)
def test_chain_constants_match_spec_table(
    p: float,
    q: float,
    c_star: float,
    h_uni: float,
    h_bi: float,
    slope: float,
    bias_at_origin: float,
) -> None:
    constants = chain_constants(p, q)
    assert constants.c_star == pytest.approx(c_star, abs=1e-6)
    assert constants.unigram_loss == pytest.approx(h_uni, abs=1e-6)
    assert constants.bigram_loss == pytest.approx(h_bi, abs=1e-6)
    assert constants.reduced_loss_slope_at_zero == pytest.approx(slope, abs=1e-6)
    assert float(optimal_bias(0.0, -0.3, p, q)) == pytest.approx(bias_at_origin, abs=1e-6)


def test_bad_inputs_raise_clear_errors() -> None:
    with pytest.raises(ChainParameterError, match="open interval"):
        loss(1.0, 1.0, 0.0, 0.5)
    with pytest.raises(ChainParameterError, match="open interval"):
        basin_of(1.0, 1.0, 0.5, 1.2)
    with pytest.raises(ChainParameterError, match="p \\+ q != 1"):
        basin_of(1.0, 1.0, 0.4, 0.6)
    with pytest.raises(ChainParameterError, match="p \\+ q != 1"):
        classify_limit([0.0, 1.0], 0.4, 0.6)
    with pytest.raises(ValueError, match="theta0"):
        integrate_gradient_flow([0.1, 0.2, 0.3, 0.4], *ABOVE_ONE)
    with pytest.raises(ValueError, match="signs"):
        canonical_weights(1.0, 1.0, 4, signs=[1.0, 0.5, 1.0, 1.0])


# --------------------------------------------------------------------------------------
# Parameterisation and losses
# --------------------------------------------------------------------------------------


def full_model_logits(weights: CanonicalWeights, tokens: np.ndarray, b: float) -> np.ndarray:
    """The literal forward pass of `CanonicalWeights` (linear attention, no LayerNorm)."""
    d = len(weights.token_embedding)
    x = np.outer(tokens, weights.token_embedding) + weights.positional_embedding
    positions = np.arange(1, len(tokens) + 1)
    scores = (x @ weights.query.T) @ (x @ weights.key.T).T
    attention = np.tril(scores) / (positions[:, None] * math.sqrt(d))
    y = x + attention @ (x @ weights.value.T)
    z = y + np.maximum(y @ weights.w1.T, 0.0) @ weights.w2.T
    return z @ weights.token_embedding + b


@pytest.mark.parametrize("a", [0.0, 0.3, -0.7])
@pytest.mark.parametrize(("e", "w"), [(0.8, -1.2), (-1.3, 0.4), (1.1, 0.9)])
def test_logits_equal_the_full_model_forward_pass(e: float, w: float, a: float) -> None:
    signs = np.random.default_rng(3).choice([-1.0, 1.0], 8)
    tokens = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    logits = full_model_logits(canonical_weights(e, w, 8, a=a, signs=signs), tokens, b=0.37)
    logit0, logit1 = canonical_logits(e, w, 0.37, a)
    np.testing.assert_allclose(logits, np.where(tokens == 1.0, logit1, logit0), atol=1e-12)
    if a == 0.0:  # Eq. (6): Delta x_n + b - e^2/2
        np.testing.assert_allclose(logits, logit_gap(e, w) * tokens + 0.37 - e**2 / 2, atol=1e-12)
    else:  # Eq. (42) would call this W_V's scalar a d^2 (typo 7 in `local_global`)
        printed_logit0, printed_logit1 = canonical_logits(e, w, 0.37, a * 8**2)
        printed = np.where(tokens == 1.0, printed_logit1, printed_logit0)
        assert np.max(np.abs(logits - printed)) > 1e-2


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_loss_with_bias_is_the_next_token_cross_entropy(p: float, q: float) -> None:
    rng = np.random.default_rng(0)
    for e, w, a in random_points(rng, 5, 3):
        b = rng.normal()
        logit0, logit1 = canonical_logits(e, w, b, a)
        pi0, pi1 = q / (p + q), p / (p + q)
        cross_entropy = -(
            pi0 * (p * np.log(expit(logit0)) + (1 - p) * np.log(expit(-logit0)))
            + pi1 * ((1 - q) * np.log(expit(logit1)) + q * np.log(expit(-logit1)))
        )
        assert float(loss_with_bias(e, w, b, p, q, a)) == pytest.approx(cross_entropy, abs=1e-12)


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_optimal_bias_matches_numerical_minimisation(p: float, q: float) -> None:
    rng = np.random.default_rng(1)
    points = random_points(rng, 12, 3)
    points[6:, 2] = 0.0  # half of them in the 2D model (Lemma 5), half with attention
    for point in points:
        a = point[2]
        closed_form = float(optimal_bias(point[0], point[1], p, q, a))
        numeric = minimize_scalar(
            lambda b, point=point, a=a: float(loss_with_bias(point[0], point[1], b, p, q, a)),
            bracket=(closed_form - 3.0, closed_form + 3.0),
            tol=1e-12,
        ).x
        assert closed_form == pytest.approx(numeric, abs=1e-6)


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_optimal_bias_special_cases_and_extreme_gaps(p: float, q: float) -> None:
    constants = chain_constants(p, q)
    # Lemma 5: e = 0 gives b* = log(p/q); Delta = c* gives b* - e^2/2 = log(p/(1-p)).
    w = np.array([-2.0, SADDLE_W, 0.0, 0.5])
    np.testing.assert_allclose(optimal_bias(0.0, w, p, q, a=0.4), math.log(p / q), atol=1e-14)
    w_star = -1.2 if constants.switching > 0 else 0.3
    e_star = global_min_locus_e(w_star, p, q)
    assert float(optimal_bias(e_star, w_star, p, q)) - e_star**2 / 2 == pytest.approx(
        math.log(p / (1 - p)), abs=1e-12
    )
    # The log-space form stays finite and stationary at |Delta| = 500 (the naive one overflows).
    for e, w in [(10.0, 2.0), (10.0, -2.0)]:
        b_star = optimal_bias(e, w, p, q)
        assert np.isfinite(b_star)
        assert abs(float(loss_gradient_with_bias(e, w, b_star, p, q)[2])) < 1e-12


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_loss_depends_on_theta_only_through_the_logit_gap(p: float, q: float) -> None:
    constants = chain_constants(p, q)
    points = random_points(np.random.default_rng(2), 20, 3)
    e, w, a = points.T
    np.testing.assert_allclose(
        loss(e, w, p, q, a), reduced_loss(logit_gap(e, w, a), p, q), atol=1e-13
    )
    assert float(reduced_loss(0.0, p, q)) == pytest.approx(constants.unigram_loss, abs=1e-13)
    assert float(reduced_loss(constants.c_star, p, q)) == pytest.approx(
        constants.bigram_loss, abs=1e-13
    )
    gaps = np.linspace(constants.c_star - 3.0, constants.c_star + 3.0, 601)
    values = reduced_loss(gaps, p, q)
    assert np.all(values[2:] - 2 * values[1:-1] + values[:-2] > 0)  # strictly convex
    assert gaps[np.argmin(values)] == pytest.approx(constants.c_star, abs=0.01)


# --------------------------------------------------------------------------------------
# Gradients and Hessian
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_gradients_match_finite_differences(p: float, q: float) -> None:
    rng = np.random.default_rng(4)
    for point in random_points(rng, 5, 2):
        expected = central_difference_gradient(lambda x: loss_of_point(x, p, q), point)
        np.testing.assert_allclose(loss_gradient(*point, p, q), expected, atol=1e-8)
    for point in random_points(rng, 5, 3):
        expected = central_difference_gradient(lambda x: loss_of_point(x, p, q), point)
        np.testing.assert_allclose(loss_gradient_attention(*point, p, q), expected, atol=1e-8)
    for e, w in random_points(rng, 5, 2):
        point = np.array([e, w, rng.normal()])
        expected = central_difference_gradient(
            lambda x: float(loss_with_bias(x[0], x[1], x[2], p, q)), point
        )
        np.testing.assert_allclose(loss_gradient_with_bias(*point, p, q), expected, atol=1e-8)


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_gradients_match_torch_autograd(p: float, q: float) -> None:
    rng = np.random.default_rng(5)
    for dim, gradient in [(2, loss_gradient), (3, loss_gradient_attention)]:
        for point in random_points(rng, 5, dim):
            theta = torch.tensor(point, dtype=torch.float64, requires_grad=True)
            value = torch_loss(theta, p, q)
            value.backward()
            assert value.item() == pytest.approx(loss_of_point(point, p, q), abs=1e-13)
            np.testing.assert_allclose(gradient(*point, p, q), theta.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_attention_gradient_with_bias_matches_finite_differences(p: float, q: float) -> None:
    """The chain rule of Eq. (44) in R^4 (e, w, b, a); at a = 0 it is Lemma 3 (plus dL/da)."""
    rng = np.random.default_rng(7)
    for e, w, a in random_points(rng, 5, 3):
        point = np.array([e, w, rng.normal(), a])
        expected = central_difference_gradient(
            lambda x: float(loss_with_bias(x[0], x[1], x[2], p, q, x[3])), point
        )
        np.testing.assert_allclose(
            loss_gradient_attention_with_bias(*point, p, q), expected, atol=1e-8
        )
    e, w, b = 0.8, -0.4, 0.3
    np.testing.assert_allclose(
        loss_gradient_attention_with_bias(e, w, b, 0.0, p, q)[:3],
        loss_gradient_with_bias(e, w, b, p, q),
        atol=1e-15,
    )


def test_attention_gradient_reduces_to_lemma_7_at_a_zero() -> None:
    e, w = random_points(np.random.default_rng(6), 10, 2).T
    np.testing.assert_allclose(
        loss_gradient_attention(e, w, 0.0, *ABOVE_ONE)[:, :2],
        loss_gradient(e, w, *ABOVE_ONE),
        atol=1e-15,
    )


def test_printed_lemma_3_bracket_fails_where_the_statement_passes() -> None:
    p, q = ABOVE_ONE
    e, w, b = 0.9, -0.6, 0.2
    f2 = expit(b - e**2 / 2) - p
    f1 = expit(2 * e**2 * w * abs(w) + b + e**2 / 2) + q - 1 - expit(b - e**2 / 2) + p
    pi1 = p / (p + q)
    # App. J.2 prints (2X(1 + 2w|w| - 1)) = 4X w|w|, which vanishes at X = 0.
    printed = pi1 * (f1 + f2) * 4 * w * abs(w) * e
    expected = central_difference_gradient(
        lambda x: float(loss_with_bias(x[0], w, b, p, q)), np.array([e])
    )[0]
    assert float(loss_gradient_with_bias(e, w, b, p, q)[0]) == pytest.approx(expected, abs=1e-8)
    assert abs(printed - expected) > 1e-2


@pytest.mark.parametrize(("p", "q"), CHAINS)
@pytest.mark.parametrize("w", [-1.2, -0.3, 0.0, 0.8])
def test_w_axis_hessian_matches_finite_differences(p: float, q: float, w: float) -> None:
    step = 1e-4
    theta = np.array([0.0, w, 0.25])
    hessian = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            shift_i, shift_j = np.eye(3)[i] * step, np.eye(3)[j] * step
            hessian[i, j] = (
                loss_of_point(theta + shift_i + shift_j, p, q)
                - loss_of_point(theta + shift_i - shift_j, p, q)
                - loss_of_point(theta - shift_i + shift_j, p, q)
                + loss_of_point(theta - shift_i - shift_j, p, q)
            ) / (4 * step**2)
    scale = abs(hessian_on_w_axis(w, p, q)[0, 0])
    np.testing.assert_allclose(
        hessian_on_w_axis(w, p, q, attention=True), hessian, atol=1e-4 * scale
    )
    np.testing.assert_allclose(hessian_on_w_axis(w, p, q), hessian[:2, :2], atol=1e-4 * scale)
    pi1 = p / (p + q)
    printed_m31 = pi1 * (p + q - 1) * (1 + 4 * w * abs(w))  # App. M.3.1, Eq. (96)
    if w != 0.0:
        assert abs(printed_m31 - hessian[0, 0]) > 1e-2 * scale


def test_hessian_vanishes_at_the_saddle_not_at_its_mirror() -> None:
    # The proof of Thm 7 writes the saddle as w = 1/sqrt 2.
    assert hessian_on_w_axis(SADDLE_W, *ABOVE_ONE)[0, 0] == pytest.approx(0.0, abs=1e-15)
    assert abs(hessian_on_w_axis(-SADDLE_W, *ABOVE_ONE)[0, 0]) > 0.1


# --------------------------------------------------------------------------------------
# Energy
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "q"), [ABOVE_ONE, BELOW_ONE])
@pytest.mark.parametrize("dim", [2, 3])
def test_energy_is_orthogonal_to_the_flow(p: float, q: float, dim: int) -> None:
    def printed_eq_108_energy(x: np.ndarray) -> float:
        """The integral of App. M.4's printed integrand w'/(4|w|)(1 + 2w|w|) (plus 2a a')."""
        a = x[2] if dim == 3 else 0.0
        return x[0] ** 2 - (x[1] ** 2 + np.sign(x[1]) * np.log(abs(x[1]))) / 2 - 2 * a**2

    def paper_energy(x: np.ndarray) -> float:
        return float(energy(x[0], x[1], x[2] if dim == 3 else 0.0))

    for point in random_points(np.random.default_rng(7), 10, dim):
        velocity = gradient_flow_velocity(point, p, q)
        for fun, conserved in [(paper_energy, True), (printed_eq_108_energy, False)]:
            gradient = central_difference_gradient(fun, point)
            cosine = gradient @ velocity / (np.linalg.norm(gradient) * np.linalg.norm(velocity))
            assert (abs(cosine) < 1e-8) == conserved


def test_saddle_energy_and_separatrix() -> None:
    assert float(energy(0.0, SADDLE_W)) == pytest.approx(ENERGY_SADDLE, abs=1e-15)
    assert abs(ENERGY_SADDLE - (-0.8465735902799727)) < 1e-15
    assert float(separatrix_half_width(-1.0)) == pytest.approx(0.391697, abs=1e-6)
    w = np.linspace(-3.0, -0.01, 50)
    np.testing.assert_allclose(energy(separatrix_half_width(w), w), ENERGY_SADDLE, atol=1e-12)
    assert np.all(np.isnan(separatrix_half_width([0.0, 1.0])))


def test_printed_i_sad_is_empty_and_the_corrected_one_is_the_separatrix() -> None:
    w = np.linspace(SADDLE_W, -1e-3, 200)
    printed_radicand = w**2 * np.log(-w) + ENERGY_SADDLE  # main-text Thm 2(ii)
    assert np.all(printed_radicand < 0)  # sqrt is NaN: the printed I_sad would be empty
    e = separatrix_half_width(w)
    for sign in (1.0, -1.0):
        np.testing.assert_array_equal(basin_of(sign * e, w, *ABOVE_ONE), SAD)
        # For p + q < 1 only the saddle itself (w[0]) is in I_sad on this branch.
        np.testing.assert_array_equal(basin_of(sign * e[1:], w[1:], *BELOW_ONE), STAR)
        assert basin_of(sign * e[0], w[0], *BELOW_ONE) == SAD
    outer_w = np.linspace(-3.0, SADDLE_W - 1e-3, 50)
    np.testing.assert_array_equal(
        basin_of(separatrix_half_width(outer_w), outer_w, *ABOVE_ONE), STAR
    )
    np.testing.assert_array_equal(
        basin_of(separatrix_half_width(outer_w), outer_w, *BELOW_ONE), SAD
    )


# --------------------------------------------------------------------------------------
# Critical sets
# --------------------------------------------------------------------------------------


def critical_points(p: float, q: float, rng: np.random.Generator) -> dict[LimitClass, np.ndarray]:
    """Points of Theta_*, Theta_min, Theta_max, Theta_sad (Thm 1) lifted to (e, w, a), and of
    Theta_station (Thm 10); the 2D sets are the a = 0 slices."""
    constants = chain_constants(p, q)
    w = rng.uniform(-3.0, 3.0, 40)
    e_star = global_min_locus_e(w, p, q)
    star_2d = np.stack([e_star, w, np.zeros_like(w)], axis=-1)[np.isfinite(e_star)]
    e3, w3 = rng.uniform(0.2, 2.0, 40), rng.uniform(-3.0, 3.0, 40)
    star_3d = np.stack([e3, w3, global_min_surface_a(e3, w3, p, q)], axis=-1)
    curvature = constants.switching * (1 + 2 * w * np.abs(w))
    axis = np.stack([np.zeros_like(w), w, rng.uniform(-1.0, 1.0, 40)], axis=-1)
    e_station = rng.uniform(0.2, 2.0, 10)
    return {
        STAR: np.concatenate([star_2d, star_3d]),
        MIN: axis[curvature > 0],
        MAX: axis[curvature < 0],
        SAD: np.stack([np.zeros(10), np.full(10, SADDLE_W), rng.uniform(-1, 1, 10)], axis=-1),
        LimitClass.STATION: np.stack(
            [e_station, np.full(10, SADDLE_W), -1 / e_station**2], axis=-1
        ),
    }


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_critical_sets_have_zero_gradient_and_the_theorem_losses(p: float, q: float) -> None:
    constants = chain_constants(p, q)
    for label, points in critical_points(p, q, np.random.default_rng(8)).items():
        assert len(points) >= 5
        e, w, a = points.T
        assert np.max(np.abs(loss_gradient_attention(e, w, a, p, q))) <= 1e-10
        expected_loss = constants.bigram_loss if label is STAR else constants.unigram_loss
        np.testing.assert_allclose(loss(e, w, p, q, a), expected_loss, atol=1e-10)
        np.testing.assert_array_equal(classify_limit(points, p, q), label)
        in_thm_1_sets = (a == 0.0) | (e == 0.0)  # the a = 0 slices, Thm 1's sets in R^2
        if label is not LimitClass.STATION:
            assert np.count_nonzero(in_thm_1_sets) >= 5
            gradient_2d = loss_gradient(e[in_thm_1_sets], w[in_thm_1_sets], p, q)
            assert np.max(np.abs(gradient_2d)) <= 1e-10
    assert classify_limit([0.7, 0.7], p, q) == LimitClass.UNCONVERGED


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_w_axis_maxima_are_maxima_and_minima_are_minima(p: float, q: float) -> None:
    # Thm 10(iii) labels the maxima Theta_min; the proof of Thm 1(iii) calls them minima.
    rng = np.random.default_rng(9)
    h_uni = chain_constants(p, q).unigram_loss
    for label, points in critical_points(p, q, rng).items():
        if label not in (MIN, MAX):
            continue
        for point in points[np.abs(points[:, 1] - SADDLE_W) > 0.1][:5]:
            for dim in (2, 3):
                neighbours = point[:dim] + rng.normal(0.0, 1e-2, (20, dim))
                excess = np.array([loss_of_point(x, p, q) for x in neighbours]) - h_uni
                assert np.all(excess >= -1e-15) if label is MIN else np.all(excess <= 1e-15)


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_stationary_points_are_saddles(p: float, q: float) -> None:
    h_uni = chain_constants(p, q).unigram_loss
    station = critical_points(p, q, np.random.default_rng(10))[LimitClass.STATION][0]
    offsets = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T * 1e-2
    excess = np.array([loss_of_point(station + offset, p, q) for offset in offsets]) - h_uni
    assert excess.min() < 0 < excess.max()


# --------------------------------------------------------------------------------------
# Basins
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("e", "w", "above_one", "below_one"),
    [
        (0.0, SADDLE_W, SAD, SAD),
        (0.0, -1.0, MAX, MIN),
        (0.0, 0.5, MIN, MAX),
        (0.0, 0.0, MIN, MAX),
        (1.0, 0.0, MIN, STAR),
        (-0.3, 2.0, MIN, STAR),
        (0.5, -1.0, STAR, STAR),  # I_common, paper B §4
        (0.2, -0.5, MIN, STAR),  # |e| < g(-0.5) = 0.306
        (0.2, -1.0, STAR, MIN),  # 0 < |e| < g(-1) = 0.392
        (0.5, SADDLE_W, STAR, STAR),
    ],
)
def test_basin_of_known_points(
    e: float, w: float, above_one: LimitClass, below_one: LimitClass
) -> None:
    assert basin_of(e, w, *ABOVE_ONE) == above_one
    assert basin_of(e, w, *BELOW_ONE) == below_one


def test_basin_indicators_partition_the_plane() -> None:
    e = np.concatenate([np.linspace(-3, 3, 61), [0.0]])[:, None]
    w = np.concatenate([np.linspace(-3, 3, 61), [SADDLE_W, 0.0]])[None, :]
    for chain in (ABOVE_ONE, BELOW_ONE):
        masks = [f(e, w, *chain) for f in (is_in_basin_min, is_in_basin_sad, is_in_basin_max)]
        masks.append(is_in_basin_star(e, w, *chain))
        np.testing.assert_array_equal(np.sum(masks, axis=0), 1)
        codes = basin_of(e, w, *chain)
        for mask, label in zip(masks, (MIN, SAD, MAX, STAR), strict=True):
            np.testing.assert_array_equal(codes[mask], label)


@pytest.mark.parametrize(
    ("sigma", "above_one", "below_one"),
    [(0.3, 0.043568, 0.997031), (0.5, 0.189011, 0.968547), (1.0, 0.380511, 0.886995)],
)
def test_gaussian_basin_probabilities_match_spec_quadrature(
    sigma: float, above_one: float, below_one: float
) -> None:
    n = 200_000
    e, w = np.random.default_rng(11).normal(0.0, sigma, (2, n))
    for chain, expected in [(ABOVE_ONE, above_one), (BELOW_ONE, below_one)]:
        fraction = np.mean(basin_of(e, w, *chain) == STAR)
        assert abs(fraction - expected) < 4 * math.sqrt(expected * (1 - expected) / n)


SPEC_GAUSSIAN_TABLE = [  # ours (quadrature, Thms 2/8): sigma, P(I_*; p+q>1), P(I_*; p+q<1)
    (0.1, 3.7e-9, 1 - 1.1e-13),
    (0.3, 0.043568, 0.997031),
    (0.5, 0.189011, 0.968547),
    (0.7071, 0.297561, 0.930041),  # our "1/sqrt2" row was computed at sigma = 0.7071
    (1.0, 0.380511, 0.886995),
    (2.0, 0.465196, 0.817333),
]


@pytest.mark.parametrize(("sigma", "above_one", "below_one"), SPEC_GAUSSIAN_TABLE)
def test_gaussian_basin_quadrature_matches_the_spec_table(
    sigma: float, above_one: float, below_one: float
) -> None:
    tolerance = 1e-6 if above_one > 1e-3 else 1e-10  # the table's 6 decimals / 2 digits
    for chain, expected in [(ABOVE_ONE, above_one), ((0.9, 0.9), above_one)]:
        assert gaussian_basin_probability(sigma, *chain) == pytest.approx(expected, abs=tolerance)
    for chain in (BELOW_ONE, (0.1, 0.1)):
        assert gaussian_basin_probability(sigma, *chain) == pytest.approx(below_one, abs=1e-6)


def test_gaussian_basin_quadrature_matches_monte_carlo() -> None:
    e, w = np.random.default_rng(15).normal(0.0, 0.8, (2, 100_000))
    for chain in (ABOVE_ONE, BELOW_ONE):
        expected = gaussian_basin_probability(0.8, *chain)
        fraction = np.mean(basin_of(e, w, *chain) == STAR)
        assert abs(fraction - expected) < 4 * math.sqrt(expected * (1 - expected) / e.size)
    with pytest.raises(ValueError, match="sigma"):
        gaussian_basin_probability(0.0, *ABOVE_ONE)


def test_common_basin_lies_in_both_global_basins() -> None:
    e, w = np.random.default_rng(12).uniform((-3, -3), (3, 0), (20_000, 2)).T
    common = is_in_common_basin(e, w)
    assert 0.3 < common.mean() < 0.9
    for chain in CHAINS:
        np.testing.assert_array_equal(basin_of(e[common], w[common], *chain), STAR)


# --------------------------------------------------------------------------------------
# Predicted limits and gradient-flow integration
# --------------------------------------------------------------------------------------

SPEC_LIMITS = [  # ours, from the proofs of Thms 2/8: (p, q), theta_0, basin, theta_lim
    ((0.5, 0.8), (0.5, -1.0), STAR, (0.789495, -1.269668)),
    ((0.5, 0.8), (0.02, 0.02), MIN, (0.0, 0.019992)),
    ((0.5, 0.8), (0.02, -0.02), MIN, (0.0, -0.020008)),
    ((0.5, 0.8), (1.0, 1.0), MIN, (0.0, 0.652919)),
    ((0.5, 0.8), (0.3, -1.5), STAR, (0.579920, -1.600329)),
    ((0.5, 0.8), (0.3, -0.5), MIN, (0.0, -0.650572)),
    ((0.2, 0.3), (0.5, -1.0), STAR, (1.498296, -0.050168)),
    ((0.2, 0.3), (0.02, 0.02), STAR, (1.456542, 0.162525)),
    ((0.2, 0.3), (0.02, -0.02), STAR, (1.494528, -0.002143)),
    ((0.2, 0.3), (1.0, 1.0), STAR, (0.900627, 0.936399)),
    ((0.2, 0.3), (0.3, -1.5), MIN, (0.0, -1.460613)),
    ((0.1, 0.1), (0.5, -1.0), STAR, (2.096365, -0.005830)),
    ((0.1, 0.1), (0.02, 0.02), STAR, (1.798086, 0.423793)),
    ((0.1, 0.1), (0.3, -1.5), MIN, (0.0, -1.460613)),
    ((0.9, 0.9), (0.5, -1.0), STAR, (1.086748, -1.536374)),
    ((0.9, 0.9), (0.02, 0.02), MIN, (0.0, 0.019992)),
    ((0.9, 0.9), (0.3, -0.5), MIN, (0.0, -0.650572)),
]


@pytest.mark.parametrize(("chain", "theta0", "basin", "theta_lim"), SPEC_LIMITS)
def test_flow_converges_to_the_predicted_limit_of_the_spec_table(
    chain: tuple[float, float],
    theta0: tuple[float, float],
    basin: LimitClass,
    theta_lim: tuple[float, float],
) -> None:
    assert basin_of(*theta0, *chain) == basin
    prediction = predicted_limit(*theta0, *chain)
    np.testing.assert_allclose(prediction, theta_lim, atol=1e-6)  # the table has 6 decimals
    result = integrate_gradient_flow(theta0, *chain)
    assert result.success
    assert result.limit_class is basin
    np.testing.assert_allclose(result.limit, prediction, atol=1e-6)
    assert result.energy_drift <= 1e-6
    assert result.gradient_norm <= 1e-8


@pytest.mark.parametrize("chain", [ABOVE_ONE, BELOW_ONE, (0.9, 0.9)])
@pytest.mark.parametrize("sigma", [0.02, 0.5, 1.0])
def test_gaussian_inits_end_where_thm_2_and_thm_8_say(
    chain: tuple[float, float], sigma: float
) -> None:
    inits = np.random.default_rng(13).normal(0.0, sigma, (12, 2))
    away_from_separatrix = np.abs(energy(*inits.T) - ENERGY_SADDLE) >= 1e-3
    results = integrate_gradient_flows(inits[away_from_separatrix], *chain)
    for init, result in zip(inits[away_from_separatrix], results, strict=True):
        assert result.limit_class == basin_of(*init, *chain)
        np.testing.assert_allclose(result.limit, predicted_limit(*init, *chain), atol=1e-6)
        assert result.energy_drift <= 1e-6
    if sigma == 0.02:  # Thm 2/8 "consequently": small inits pick the side of p + q = 1
        expected = MIN if sum(chain) > 1 else STAR
        assert all(result.limit_class is expected for result in results)


@pytest.mark.parametrize("method", ["LSODA", "BDF"])
@pytest.mark.parametrize("dim", [2, 3])
def test_stacked_flows_equal_separate_integrations(method: str, dim: int) -> None:
    inits = np.random.default_rng(16).normal(0.0, 0.7, (6, dim))
    stacked = integrate_gradient_flows(inits, *BELOW_ONE, t_max=200.0, method=method)
    for init, together in zip(inits, stacked, strict=True):
        alone = integrate_gradient_flow(init, *BELOW_ONE, t_max=200.0, method=method)
        assert together.limit_class is alone.limit_class
        np.testing.assert_allclose(together.limit, alone.limit, atol=1e-7)
        np.testing.assert_array_equal(together.theta[0], init)
        assert together.energy_drift <= 1e-6
    with pytest.raises(ValueError, match="inits"):
        integrate_gradient_flows(np.zeros((3, 4)), *BELOW_ONE)


@pytest.mark.parametrize(("chain", "expected_e"), [(ABOVE_ONE, 0.0), (BELOW_ONE, 1.494521)])
def test_flow_from_the_e_axis_stays_on_it(chain: tuple[float, float], expected_e: float) -> None:
    result = integrate_gradient_flow([-0.7, 0.0], *chain)
    assert np.all(result.theta[:, 1] == 0.0)
    assert math.isnan(result.energy_drift)
    np.testing.assert_allclose(result.limit, [-expected_e, 0.0], atol=1e-6)
    np.testing.assert_allclose(predicted_limit(-0.7, 0.0, *chain), [-expected_e, 0.0], atol=1e-6)
    assert expected_e == pytest.approx(math.sqrt(max(chain_constants(*chain).c_star, 0)), abs=1e-6)


@pytest.mark.parametrize("chain", [ABOVE_ONE, BELOW_ONE])
def test_attention_flow_conserves_energy_and_small_inits_pick_a_side(
    chain: tuple[float, float],
) -> None:
    constants = chain_constants(*chain)
    rng = np.random.default_rng(14)
    small = integrate_gradient_flows(rng.normal(0.0, 0.02, (8, 3)), *chain)
    expected = MIN if constants.switching > 0 else STAR
    expected_loss = constants.unigram_loss if expected is MIN else constants.bigram_loss
    for result in small:
        assert result.limit_class is expected
        assert loss_of_point(result.limit, *chain) == pytest.approx(expected_loss, abs=1e-8)
    for result in small + integrate_gradient_flows(rng.normal(0.0, 1.0, (8, 3)), *chain):
        assert result.energy_drift <= 1e-6
        assert result.gradient_norm <= 1e-8


@pytest.mark.parametrize(
    ("chain", "w0", "a0", "expected_rate"),
    [  # Fig. 5's small-e rate (Lemma 8)
        ((0.5, 0.8), 0.3, 0.2, -0.167574),
        ((0.2, 0.3), 0.0, 0.1, 0.240000),
        ((0.9, 0.9), 0.0, 0.1, -0.400000),
        ((0.1, 0.1), -0.3, -0.3, 0.328000),
    ],
)
def test_small_e_rate_near_the_w_axis(
    chain: tuple[float, float], w0: float, a0: float, expected_rate: float
) -> None:
    constants = chain_constants(*chain)
    linearised = float(small_e_log_rate(w0, *chain))
    assert linearised == pytest.approx(expected_rate, abs=1e-6)
    assert linearised == pytest.approx(-hessian_on_w_axis(w0, *chain)[0, 0], abs=1e-15)
    result = integrate_gradient_flow([1e-4, w0, a0], *chain, t_max=1.0, t_eval=[0.0, 1.0])
    measured = math.log(abs(result.theta[-1, 0]) / 1e-4)
    assert measured == pytest.approx(linearised, rel=1e-2)
    paper_m5_rate = -constants.switching * (constants.pi1 - constants.pi1**2)  # App. M.5
    assert abs(paper_m5_rate - measured) > 0.2 * abs(measured)
