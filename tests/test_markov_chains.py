"""Closed forms of replicate.markov against brute force on small chains."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from replicate.markov import (
    ChainParameterError,
    binary_entropy_rate,
    binary_kernel,
    binary_stationary,
    binary_unigram_entropy,
    entropy_rate,
    mutual_information_gap,
    sample_chain,
    stationary_distribution,
    symmetric_entropy_rate,
    symmetric_kernel,
    symmetric_unigram_entropy,
    unigram_entropy,
)

CHAINS = [(0.2, 0.3), (0.5, 0.8), (0.1, 0.9), (0.7, 0.7)]


def brute_force_conditional_entropy(kernel: np.ndarray, pi: np.ndarray, n: int) -> float:
    """H(x_{n+1} | x_1..x_n) by enumerating every sequence of length n+1."""
    s = kernel.shape[0]
    joint = {}
    for seq in itertools.product(range(s), repeat=n + 1):
        prob = pi[seq[0]] * np.prod([kernel[a, b] for a, b in itertools.pairwise(seq)])
        joint[seq] = prob
    h_all = -sum(p * math.log(p) for p in joint.values() if p > 0)
    prefix: dict[tuple, float] = {}
    for seq, p in joint.items():
        prefix[seq[:-1]] = prefix.get(seq[:-1], 0.0) + p
    h_prefix = -sum(p * math.log(p) for p in prefix.values() if p > 0)
    return h_all - h_prefix


@pytest.mark.parametrize(("p", "q"), CHAINS)
def test_binary_closed_forms_match_general_and_enumeration(p: float, q: float) -> None:
    kernel = binary_kernel(p, q)
    pi = binary_stationary(p, q)
    np.testing.assert_allclose(pi @ kernel, pi, atol=1e-15)
    np.testing.assert_allclose(stationary_distribution(kernel), pi, atol=1e-12)
    assert binary_entropy_rate(p, q) == pytest.approx(entropy_rate(kernel), abs=1e-12)
    assert binary_unigram_entropy(p, q) == pytest.approx(unigram_entropy(kernel), abs=1e-12)
    # Markov property: conditioning on the whole past equals conditioning on x_n.
    assert brute_force_conditional_entropy(kernel, pi, 3) == pytest.approx(
        binary_entropy_rate(p, q), abs=1e-12
    )


def test_published_reference_values() -> None:
    """Spec A, Sec. 3.1 table (the reference lines of the authors' plots)."""
    assert binary_entropy_rate(0.2, 0.3) == pytest.approx(0.544587, abs=1e-6)
    assert binary_unigram_entropy(0.5, 0.8) == pytest.approx(0.666278, abs=1e-6)
    assert binary_entropy_rate(0.5, 0.8) == pytest.approx(0.619015, abs=1e-6)
    assert symmetric_entropy_rate(5, 0.1) == pytest.approx(0.463712, abs=1e-6)
    assert symmetric_entropy_rate(5, 0.9) == pytest.approx(1.572748, abs=1e-6)


@pytest.mark.parametrize(("p", "q"), [(0.1, 0.9), (0.3, 0.7)])
def test_gap_vanishes_iff_switching_is_one(p: float, q: float) -> None:
    assert mutual_information_gap(binary_kernel(p, q)) == pytest.approx(0.0, abs=1e-12)
    assert mutual_information_gap(binary_kernel(p, q + 0.05)) > 1e-4


@pytest.mark.parametrize(("s", "p"), [(2, 0.3), (3, 0.5), (5, 0.1), (5, 0.9)])
def test_symmetric_closed_forms(s: int, p: float) -> None:
    kernel = symmetric_kernel(s, p)
    np.testing.assert_allclose(stationary_distribution(kernel), np.full(s, 1 / s), atol=1e-12)
    assert symmetric_entropy_rate(s, p) == pytest.approx(entropy_rate(kernel), abs=1e-12)
    assert symmetric_unigram_entropy(s) == pytest.approx(unigram_entropy(kernel), abs=1e-12)
    pi = np.full(s, 1 / s)
    assert brute_force_conditional_entropy(kernel, pi, 2) == pytest.approx(
        symmetric_entropy_rate(s, p), abs=1e-12
    )
    if s == 2:
        np.testing.assert_allclose(kernel, binary_kernel(p, p))


def test_gap_zero_at_symmetric_threshold() -> None:
    assert mutual_information_gap(symmetric_kernel(5, 0.8)) == pytest.approx(0.0, abs=1e-12)


def test_long_run_frequencies_match_stationary_law() -> None:
    kernel = binary_kernel(0.5, 0.8)
    gen = torch.Generator().manual_seed(3)
    x = sample_chain(torch.from_numpy(kernel), torch.tensor([1.0, 0.0]), 8, 20_000, gen)
    assert x[:, 1000:].float().mean().item() == pytest.approx(
        binary_stationary(0.5, 0.8)[1], abs=0.01
    )


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: binary_kernel(1.5, 0.3), "p must lie in the open interval (0, 1), got 1.5"),
        (lambda: binary_kernel(0.2, 0.0), "q must lie in the open interval (0, 1), got 0.0"),
        (lambda: binary_kernel(float("nan"), 0.5), "p must lie"),
        (lambda: symmetric_kernel(1, 0.5), "n_states must be an integer >= 2, got 1"),
        (lambda: entropy_rate(np.array([[0.5, 0.6], [0.5, 0.5]])), "rows must be probability"),
    ],
)
def test_bad_parameters_raise_clear_errors(call, needle: str) -> None:
    with pytest.raises(ChainParameterError) as info:
        call()
    assert needle in str(info.value)
