"""Markov kernels and their closed-form information quantities.

All entropies are in nats. Every closed form has a general-matrix counterpart
(`stationary_distribution`, `entropy_rate`, ...) that the tests compare against brute
force on small cases; the binary and symmetric closed forms are the ones the papers print.
"""

from __future__ import annotations

import math

import numpy as np


class ChainParameterError(ValueError):
    """A Markov-chain parameter is outside its domain."""


def _check_open_unit(name: str, value: float) -> float:
    value = float(value)
    if not (0.0 < value < 1.0) or math.isnan(value):
        raise ChainParameterError(f"{name} must lie in the open interval (0, 1), got {value!r}")
    return value


def _check_states(n_states: int) -> int:
    if int(n_states) != n_states or n_states < 2:
        raise ChainParameterError(f"n_states must be an integer >= 2, got {n_states!r}")
    return int(n_states)


def binary_kernel(p: float, q: float) -> np.ndarray:
    """P(p, q) = [[1-p, p], [q, 1-q]]; p flips 0->1, q flips 1->0 (paper A, Sec. 2.2)."""
    p = _check_open_unit("p", p)
    q = _check_open_unit("q", q)
    return np.array([[1.0 - p, p], [q, 1.0 - q]])


def symmetric_kernel(n_states: int, p: float) -> np.ndarray:
    """S-state chain: stay with prob. 1-p, else jump uniformly to another state.

    Paper A (journal version), Sec. 4.3; the matrix form follows the authors' code. For
    S = 2 it is ``binary_kernel(p, p)``.
    """
    n_states = _check_states(n_states)
    p = _check_open_unit("p", p)
    kernel = np.full((n_states, n_states), p / (n_states - 1))
    np.fill_diagonal(kernel, 1.0 - p)
    return kernel


def validate_kernel(kernel: np.ndarray) -> np.ndarray:
    """Return ``kernel`` as float64 after checking it is a row-stochastic square matrix."""
    kernel = np.asarray(kernel, dtype=np.float64)
    if kernel.ndim != 2 or kernel.shape[0] != kernel.shape[1] or kernel.shape[0] < 2:
        raise ChainParameterError(
            f"kernel must be a square matrix of size >= 2, got {kernel.shape}"
        )
    if (kernel < 0).any() or not np.allclose(kernel.sum(axis=1), 1.0, atol=1e-12):
        raise ChainParameterError("kernel rows must be probability vectors")
    return kernel


def stationary_distribution(kernel: np.ndarray) -> np.ndarray:
    """The stationary law pi with pi P = pi, for an irreducible kernel (left eigenvector)."""
    kernel = validate_kernel(kernel)
    n = kernel.shape[0]
    # Solve pi (P - I) = 0 with sum(pi) = 1 as a least-squares system.
    system = np.vstack([(kernel - np.eye(n)).T, np.ones((1, n))])
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    pi, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    return pi


def binary_stationary(p: float, q: float) -> np.ndarray:
    """pi(p, q) = (q, p) / (p + q) (paper A, Sec. 2.2)."""
    p = _check_open_unit("p", p)
    q = _check_open_unit("q", q)
    return np.array([q, p]) / (p + q)


def entropy(probs: np.ndarray) -> float:
    """Shannon entropy in nats, with 0 ln 0 = 0."""
    probs = np.asarray(probs, dtype=np.float64)
    nz = probs[probs > 0]
    return float(-(nz * np.log(nz)).sum())


def binary_entropy(x: float) -> float:
    """h(x) = -x ln x - (1-x) ln(1-x)."""
    return entropy(np.array([x, 1.0 - x]))


def entropy_rate(kernel: np.ndarray) -> float:
    """H(x_{n+1} | x_n) = sum_i pi_i H(P_i.) for a stationary first-order chain."""
    kernel = validate_kernel(kernel)
    pi = stationary_distribution(kernel)
    return float(sum(pi[i] * entropy(kernel[i]) for i in range(kernel.shape[0])))


def unigram_entropy(kernel: np.ndarray) -> float:
    """H(pi): the loss of the best predictor that ignores the past (the unigram)."""
    return entropy(stationary_distribution(kernel))


def mutual_information_gap(kernel: np.ndarray) -> float:
    """I(x_n; x_{n+1}) = H(pi) - H(x_{n+1} | x_n) (paper A, Remark 2)."""
    return unigram_entropy(kernel) - entropy_rate(kernel)


def binary_entropy_rate(p: float, q: float) -> float:
    """(q h(p) + p h(q)) / (p + q): the bigram loss L_* of P(p, q) (paper A, Sec. 3)."""
    p = _check_open_unit("p", p)
    q = _check_open_unit("q", q)
    return (q * binary_entropy(p) + p * binary_entropy(q)) / (p + q)


def binary_unigram_entropy(p: float, q: float) -> float:
    """H(pi) = h(p / (p + q)) (paper A, Thm. 2 (iii))."""
    return binary_entropy(binary_stationary(p, q)[1])


def symmetric_entropy_rate(n_states: int, p: float) -> float:
    """h(p) + p ln(S - 1) for the symmetric S-state chain (paper A, Sec. 4.3; derived)."""
    n_states = _check_states(n_states)
    p = _check_open_unit("p", p)
    return binary_entropy(p) + p * math.log(n_states - 1)


def symmetric_unigram_entropy(n_states: int) -> float:
    """ln S: the symmetric chain's stationary law is uniform (paper A, Sec. 4.3; derived)."""
    return math.log(_check_states(n_states))
