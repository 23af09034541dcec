"""Tests for replicate.theory.attn_markov: exact checks of paper A's Theorems 1-3."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from replicate.markov import (
    binary_entropy_rate,
    binary_kernel,
    binary_stationary,
    binary_unigram_entropy,
    entropy,
    sample_chain,
    stationary_distribution,
    symmetric_kernel,
)
from replicate.theory import attn_markov as am

SIZES = am.ModelSizes()
DTYPE = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_torch() -> Iterator[None]:
    # The tensors are tiny; intra-op threads only add contention on a small CI machine.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture(scope="module")
def check_rows() -> list[am.CheckRow]:
    return am.run_theorem_checks()


def _grad_norm(params: am.TheoryParams, law: am.SequenceLaw) -> float:
    return float(am.loss_gradient(params, law).norm())


def _eigs(params: am.TheoryParams, law: am.SequenceLaw) -> torch.Tensor:
    return torch.linalg.eigvalsh(am.loss_hessian(params, law))


# --- model ------------------------------------------------------------------------------


@pytest.mark.parametrize("n_states", [2, 3])
def test_forward_is_a_causal_next_token_law(generator: torch.Generator, n_states: int) -> None:
    theta = am.random_params(SIZES, generator, n_states=n_states, tied=False, scale=1.0)
    x = torch.randint(0, n_states, (4, SIZES.n_positions), generator=generator)
    probs = am.theory_forward(theta, x)
    assert probs.shape == (4, SIZES.n_positions, n_states)
    torch.testing.assert_close(probs.sum(-1), torch.ones(4, SIZES.n_positions, dtype=DTYPE))
    changed_last = x.clone()
    changed_last[:, -1] = (changed_last[:, -1] + 1) % n_states
    later = am.theory_forward(theta, changed_last)
    torch.testing.assert_close(later[:, :-1], probs[:, :-1], rtol=0, atol=1e-15)
    assert (later[:, -1] - probs[:, -1]).abs().max() > 1e-6


def test_binary_prediction_is_sigmoid_of_logit(generator: torch.Generator) -> None:
    theta = am.random_params(SIZES, generator)
    x = am.all_sequences(2, SIZES.n_positions)
    f = am.theory_forward(theta, x)[..., 1]
    torch.testing.assert_close(f, torch.sigmoid(am.theory_logits(theta, x)))


def test_flatten_round_trip_and_tying_removes_a(generator: torch.Generator) -> None:
    tied = am.random_params(SIZES, generator)
    untied = am.untie(tied)
    assert tied.tied and not untied.tied
    assert am.flatten_params(untied).numel() - am.flatten_params(tied).numel() == SIZES.d
    for params in (tied, untied):
        back = am.unflatten_params(am.flatten_params(params), params)
        assert back.tied == params.tied
        torch.testing.assert_close(am.flatten_params(back), am.flatten_params(params))


# --- exact loss ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "initial"),
    [
        (binary_kernel(0.3, 0.6), binary_stationary(0.3, 0.6)),
        (symmetric_kernel(3, 0.4), np.full(3, 1 / 3)),
    ],
)
def test_exact_loss_matches_monte_carlo(
    generator: torch.Generator, kernel: np.ndarray, initial: np.ndarray
) -> None:
    n_states, n = kernel.shape[0], 5
    sizes = am.ModelSizes(n_positions=n)
    theta = am.random_params(sizes, generator, n_states=n_states, tied=False, scale=1.0)
    exact = float(am.population_loss(theta, am.SequenceLaw.from_kernel(kernel, initial, n)))
    paths = sample_chain(
        torch.as_tensor(kernel), torch.as_tensor(initial), 40_000, n + 1, generator
    )
    log_probs = am.next_token_log_probs(theta, paths[:, :-1])
    per_sequence = -log_probs.gather(-1, paths[:, 1:, None]).squeeze(-1).mean(-1)
    standard_error = float(per_sequence.std()) / math.sqrt(per_sequence.numel())
    assert abs(float(per_sequence.mean()) - exact) < 4 * standard_error


def test_sequence_weights_are_a_probability_law() -> None:
    law = am.binary_law(0.2, 0.3, 4)
    assert law.tokens.shape == (16, 4)
    assert math.isclose(float(law.weights.sum()), 1.0, abs_tol=1e-15)
    # x_n ~ pi at every n because x_1 ~ pi.
    for n in range(4):
        p_one = float(law.weights[law.tokens[:, n] == 1].sum())
        assert math.isclose(p_one, 0.4, abs_tol=1e-15)


@pytest.mark.parametrize("n_states", [2, 3])
def test_lemma1_identity_at_random_parameters(generator: torch.Generator, n_states: int) -> None:
    n = 4
    theta = am.random_params(
        am.ModelSizes(n_positions=n), generator, n_states=n_states, tied=False, scale=1.0
    )
    if n_states == 2:
        law, law_next = am.binary_law(0.5, 0.8, n), am.binary_law(0.5, 0.8, n + 1)
    else:
        law, law_next = am.symmetric_law(3, 0.3, n), am.symmetric_law(3, 0.3, n + 1)
    loss = float(am.population_loss(theta, law))
    mean_kl, rate = am.lemma1_terms(theta, law)
    assert mean_kl > 1e-3
    assert math.isclose(float(am.eq1_loss(theta, law_next)), loss, abs_tol=1e-12)
    assert math.isclose(mean_kl + rate, loss, abs_tol=1e-12)


# --- Theorem 1 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "p", "q"),
    [(am.theta_star_eq7, 0.2, 0.3), (am.theta_star_eq10, 0.5, 0.8), (am.theta_star_eq10, 0.7, 0.9)],
)
@pytest.mark.parametrize("tied", [True, False])
def test_theta_star_reproduces_kernel_with_zero_gradient(
    generator: torch.Generator, build, p: float, q: float, tied: bool
) -> None:
    sizes = am.ModelSizes(d=4, m=4, r=16, n_positions=5)
    theta = build(p, q, sizes, generator, tied=tied)
    law = am.binary_law(p, q, sizes.n_positions)
    f = am.theory_forward(theta, law.tokens)[..., 1]
    kernel_f = torch.tensor([p, 1 - q], dtype=DTYPE)[law.tokens]
    assert float((f - kernel_f).abs().max()) <= 1e-12
    assert math.isclose(
        float(am.population_loss(theta, law)), binary_entropy_rate(p, q), abs_tol=1e-10
    )
    assert _grad_norm(theta, law) <= 1e-10


def test_eq7_spec_numbers(generator: torch.Generator) -> None:
    theta = am.theta_star_eq7(0.2, 0.3, am.ModelSizes(d=4, m=4, r=16), generator)
    torch.testing.assert_close(theta.e, torch.full((4,), 0.747260, dtype=DTYPE), atol=1e-6, rtol=0)
    assert math.isclose(float(theta.e @ theta.e), 2.233592, abs_tol=1e-6)
    assert math.isclose(float(theta.b), -1.386294, abs_tol=1e-6)


def test_printed_w_star_only_works_for_r_equal_d(generator: torch.Generator) -> None:
    p, q, d = 0.5, 0.8, 4
    printed = am.w_star_printed(p, q, d)
    assert math.isclose(printed, 0.410270, abs_tol=1e-6)
    assert math.isclose(math.sqrt(am.w_star_squared(p, q, d, 4 * d)), 0.205135, abs_tol=1e-6)
    x = torch.tensor([[0, 1]])
    wide = am.ModelSizes(d=d, m=d, r=4 * d, n_positions=2)
    wrong = am.theta_star_eq10(p, q, wide, generator, w=printed)
    logits = am.theory_logits(wrong, x)[0]
    assert math.isclose(float(logits[0]), 0.0, abs_tol=1e-12)  # x_n = 0 is unaffected
    assert math.isclose(float(logits[1]), -17.545, abs_tol=1e-3)  # ours: -17.55, not ln(1/4)
    square = dataclasses.replace(wide, r=d)
    right = am.theta_star_eq10(p, q, square, generator, w=printed)
    torch.testing.assert_close(
        am.theory_logits(right, x)[0], torch.tensor([0.0, math.log(0.25)], dtype=DTYPE)
    )


# --- Theorems 2 and 3 ----------------------------------------------------------------------


@pytest.mark.parametrize(("p", "q"), [(0.5, 0.8), (0.2, 0.3)])
@pytest.mark.parametrize("tied", [True, False])
def test_theta_pi_has_unigram_loss_and_zero_gradient(
    generator: torch.Generator, p: float, q: float, tied: bool
) -> None:
    law = am.binary_law(p, q, SIZES.n_positions)
    theta = am.theta_pi(p, q, SIZES, generator, tied=tied)
    torch.testing.assert_close(
        am.theory_forward(theta, law.tokens)[..., 1],
        torch.full(law.tokens.shape, p / (p + q), dtype=DTYPE),
    )
    assert math.isclose(
        float(am.population_loss(theta, law)), binary_unigram_entropy(p, q), abs_tol=1e-10
    )
    assert _grad_norm(theta, law) <= 1e-10


def test_theta_pi_is_stationary_only_for_a_stationary_start(generator: torch.Generator) -> None:
    p, q = 0.5, 0.8
    theta = am.theta_pi(p, q, SIZES, generator)
    uniform_start = am.SequenceLaw.from_kernel(binary_kernel(p, q), np.full(2, 0.5), 6)
    assert _grad_norm(theta, uniform_start) > 1e-3


@pytest.mark.parametrize(("p", "q"), [(0.5, 0.8), (0.2, 0.3)])
@pytest.mark.parametrize("tied", [True, False])
def test_closed_form_h_alpha_matches_autograd(
    generator: torch.Generator, p: float, q: float, tied: bool
) -> None:
    law = am.binary_law(p, q, SIZES.n_positions)
    theta = am.theta_pi(p, q, SIZES, generator, tied=tied)
    hessian = am.loss_hessian(theta, law)
    build = am.hessian_alpha_tied if tied else am.hessian_alpha_untied
    closed = build(p, q, theta.p_n)
    torch.testing.assert_close(am.alpha_block(hessian, theta), closed, rtol=0, atol=1e-12)
    assert am.off_alpha_max(hessian, theta) <= 1e-12
    nonzero = torch.linalg.eigvalsh(hessian)
    nonzero = nonzero[nonzero.abs() > 1e-9]
    torch.testing.assert_close(nonzero, torch.linalg.eigvalsh(closed), rtol=0, atol=1e-10)


def test_eq12_spec_eigenvalues_at_zero_positions() -> None:
    p_n = torch.zeros(6, 3, dtype=DTYPE)
    eigs = torch.linalg.eigvalsh(am.hessian_alpha_tied(0.5, 0.8, p_n))
    torch.testing.assert_close(
        eigs, torch.tensor([0.142012] * 3 + [0.236686], dtype=DTYPE), rtol=0, atol=1e-6
    )
    assert math.isclose(am.binary_saddle_eigenvalue(0.2, 0.3), -0.24, abs_tol=1e-15)


def test_tied_minimum_when_switching_exceeds_one(generator: torch.Generator) -> None:
    p, q = 0.5, 0.8
    law = am.binary_law(p, q, SIZES.n_positions)
    theta = am.theta_pi(p, q, SIZES, generator)
    assert am.count_negative(_eigs(theta, law)) == 0
    assert am.local_min_probe(theta, law, generator, n_directions=30) >= -1e-12


def test_untied_theta_pi_is_a_saddle(generator: torch.Generator) -> None:
    p, q = 0.5, 0.8
    law = am.binary_law(p, q, SIZES.n_positions)
    zeros = torch.zeros(SIZES.n_positions, SIZES.d, dtype=DTYPE)
    theta = am.theta_pi(p, q, SIZES, generator, tied=False, p_n=zeros)
    assert am.count_negative(_eigs(theta, law)) == SIZES.d
    assert am.anti_aligned_descent(theta, law, p, q, generator) < 0
    with pytest.raises(ValueError, match="untied"):
        am.anti_aligned_descent(am.theta_pi(p, q, SIZES, generator), law, p, q, generator)


def test_tied_saddle_when_switching_below_one(generator: torch.Generator) -> None:
    p, q = 0.2, 0.3
    law = am.binary_law(p, q, SIZES.n_positions)
    zeros = torch.zeros(SIZES.n_positions, SIZES.d, dtype=DTYPE)
    theta = am.theta_pi(p, q, SIZES, generator, p_n=zeros)
    eigs = _eigs(theta, law)
    assert am.count_negative(eigs) == SIZES.d
    torch.testing.assert_close(
        eigs[: SIZES.d], torch.full((SIZES.d,), -0.24, dtype=DTYPE), rtol=0, atol=1e-12
    )
    assert am.local_min_probe(theta, law, generator, n_directions=30) < -1e-8


@pytest.mark.parametrize(("spread", "expected_negative"), [(math.sqrt(2.0), 2), (0.5, 3)])
def test_tied_inertia_follows_positional_covariance(
    generator: torch.Generator, spread: float, expected_negative: int
) -> None:
    # p_n = +-spread e_1 alternately: Cov(p_n) = spread^2 e_1 e_1^T, vs 2(1-p-q) = 1.
    p, q = 0.2, 0.3
    p_n = torch.zeros(SIZES.n_positions, SIZES.d, dtype=DTYPE)
    p_n[:, 0] = spread * torch.tensor([(-1.0) ** n for n in range(SIZES.n_positions)])
    theta = am.theta_pi(p, q, SIZES, generator, p_n=p_n)
    assert am.predicted_tied_negative_count(p, q, p_n) == expected_negative
    assert am.count_negative(_eigs(theta, am.binary_law(p, q, SIZES.n_positions))) == (
        expected_negative
    )


# --- multi-state (our derivation, not in paper A) -------------------------------------------


@pytest.mark.parametrize(("p", "expected_negative"), [(0.6, 2 * SIZES.d), (0.7, 0)])
def test_multistate_tied_threshold(
    generator: torch.Generator, p: float, expected_negative: int
) -> None:
    s, n = 3, 3
    sizes = dataclasses.replace(SIZES, n_positions=n)
    law = am.symmetric_law(s, p, n)
    constant = torch.randn(SIZES.d, dtype=DTYPE, generator=generator).expand(n, SIZES.d)
    tied = am.theta_pi_multistate(law.pi, sizes, generator, p_n=constant.clone())
    assert math.isclose(float(am.population_loss(tied, law)), math.log(s), abs_tol=1e-12)
    assert _grad_norm(tied, law) <= 1e-10
    assert am.count_negative(_eigs(tied, law)) == expected_negative
    untied = am.theta_pi_multistate(law.pi, sizes, generator, tied=False, p_n=constant.clone())
    assert float(_eigs(untied, law).min()) < -1e-6


def test_symmetric_e_block_eigenvalue() -> None:
    assert math.isclose(am.symmetric_e_block_min_eigenvalue(5, 0.5), -0.15, abs_tol=1e-15)
    assert am.symmetric_e_block_min_eigenvalue(5, 0.8) == pytest.approx(0.0, abs=1e-15)
    # S = 2 has the binary threshold p + q > 1 (the values differ: other coordinates).
    for p in (0.3, 0.7):
        assert math.copysign(1, am.symmetric_e_block_min_eigenvalue(2, p)) == math.copysign(
            1, am.binary_saddle_eigenvalue(p, p)
        )


def test_e_block_formula_for_a_non_symmetric_kernel(generator: torch.Generator) -> None:
    kernel = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2]])
    pi = stationary_distribution(kernel)
    sizes = dataclasses.replace(SIZES, n_positions=3)
    law = am.SequenceLaw.from_kernel(kernel, pi, 3)
    theta = am.theta_pi_multistate(law.pi, sizes, generator)
    assert math.isclose(float(am.population_loss(theta, law)), entropy(pi), abs_tol=1e-12)
    assert _grad_norm(theta, law) <= 1e-10
    schur = am.schur_over_bias(am.loss_hessian(theta, law), theta)
    closed = am.multistate_e_block(law.kernel, law.pi, theta.p_n)
    torch.testing.assert_close(schur, closed, rtol=0, atol=1e-10)


# --- Appendix D ----------------------------------------------------------------------------


def test_appendix_d_arithmetic(generator: torch.Generator) -> None:
    logit_1, logit_0 = am.appendix_d_logit(1), am.appendix_d_logit(0)
    assert math.isclose(logit_1, 0.8191, abs_tol=1e-4)
    assert math.isclose(logit_0, -1.3897, abs_tol=1e-4)
    assert math.isclose(1 / (1 + math.exp(-logit_1)), 0.6940, abs_tol=1e-4)
    assert math.isclose(1 / (1 + math.exp(-logit_0)), 0.1995, abs_tol=1e-4)
    params = am.appendix_d_params(4, generator)
    x = am.all_sequences(2, 4)
    expected = torch.tensor([logit_0, logit_1], dtype=DTYPE)[x]
    torch.testing.assert_close(am.theory_logits(params, x), expected, rtol=0, atol=1e-12)


# --- the check table -----------------------------------------------------------------------


def test_measurement_criteria() -> None:
    assert am.Measurement("x", 1.0, "near", 0.1, target=1.05).passed
    assert not am.Measurement("x", 1.0, "near", 0.01, target=1.05).passed
    assert not am.Measurement("x", math.nan, "<=", 1.0).passed
    assert am.Measurement("n", 3, "==", 3).passed
    assert not am.Measurement("d", 0.0, "<", 0.0).passed
    row = am.CheckRow("id", "desc", (am.Measurement("a", 1.0, ">=", 0.0),))
    assert row.passed and row.metrics() == {"id.a": 1.0}


def test_run_theorem_checks_all_pass(check_rows: list[am.CheckRow]) -> None:
    failed = [
        (row.check_id, [m.criterion for m in row.measurements if not m.passed])
        for row in check_rows
        if not row.passed
    ]
    assert failed == []


def test_run_theorem_checks_covers_spec_items(check_rows: list[am.CheckRow]) -> None:
    ids = [row.check_id for row in check_rows]
    assert len(ids) == len(set(ids))
    expected = {
        "A-T1.eq7.tied.p0.2_q0.3",
        "A-T1.eq7.untied.p0.2_q0.3",
        "A-T1.eq10.tied.p0.5_q0.8",
        "A-T1.eq10.untied.p0.5_q0.8",
        "A-T1.eq10.printed_wstar.r12",
        "A-T2.theta_pi.tied.p0.5_q0.8",
        "A-T3.theta_pi.untied.p0.2_q0.3",
        "A-T2.hessian_blocks.tied.p0.2_q0.3",
        "A-T3.hessian_blocks.untied.p0.5_q0.8",
        "A-T2.local_min.tied.p0.7_q0.9",
        "A-T2.saddle.tied.p0.2_q0.3.pn_zero",
        "A-T3.saddle.untied.p0.2_q0.3",
        "A-L1.identity.p0.5_q0.8",
        "A-MS.tied.S5.p0.85",
        "A-MS.untied.S3.p0.8",
        "A-MS.e_block.S5.p0.5",
        "A-D.eq26.arithmetic",
    }
    assert expected <= set(ids)
    metrics = am.flat_metrics(check_rows)
    assert all(math.isfinite(value) for value in metrics.values())
    tied_s5 = {p: metrics[f"A-MS.tied.S5.p{p}.n_negative"] for p in (0.5, 0.7, 0.75, 0.85, 0.9)}
    assert tied_s5 == {0.5: 12, 0.7: 12, 0.75: 12, 0.85: 0, 0.9: 0}


def test_tied_multistate_schur_minimum_is_flat_above_the_threshold(
    check_rows: list[am.CheckRow],
) -> None:
    assert am.tied_multistate_schur_min(5, 0.5) == pytest.approx(-0.15, abs=1e-15)
    assert am.tied_multistate_schur_min(5, 0.9) == 0.0  # the 1 direction is exactly flat
    metrics = am.flat_metrics(check_rows)
    assert metrics["A-MS.tied.S5.p0.9.schur_min_eig"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["A-MS.tied.S3.p0.6.schur_min_eig"] == pytest.approx(-1 / 15, abs=1e-9)


def test_run_theorem_checks_can_leave_out_appendix_d() -> None:
    rows = am.run_theorem_checks(
        am.ModelSizes(d=2, m=2, r=4, n_positions=3),
        (am.MultiStateCase(3, 2, (0.5,)),),
        n_probe_directions=2,
        appendix_d=False,
    )
    ids = [row.check_id for row in rows]
    assert not any(i.startswith("A-D.") for i in ids) and "A-T1.eq10.printed_wstar.r4" in ids
