"""Paper B's results for the canonical model *with* the bias b, checked exactly (no training).

* Lemma 2 (Eq. 31): the next-token loss of the canonical model, averaged over the positions
  of a sequence drawn from (pi, P), equals the single-pair expectation E[l_log((2Y-1)
  logit_X)]; checked against an exact enumeration of all 2^N sequences (which uses the
  chain's law, not the reduction to one pair).
* Lemma 3: the gradient of L(e, w, b) against central finite differences.
* Lemma 6 (Eq. 32): min_b L(theta, b) = Phi(Delta), the reduced loss of the logit gap alone,
  against a numeric minimisation over b.
* Thm 7: Gamma_* (Theta_* with b - e^2/2 = log(p/(1-p))) is critical with loss H_bi;
  Gamma_min and Gamma_sad (e = 0, b = log(p/q)) are critical with loss H_uni.
* Thm 6 (Eq. 30, the list is complete): every root of the Lemma 3 gradient that a
  least-squares solver finds from random starts lies in Gamma_* U Gamma_min U Gamma_sad,
  measured as the distance of the sets' equations (Eqs. 27-29) from zero.
* Lemma 4: the Hessian at e = 0, b = log(p/q) is pi0 pi1 diag(1, 2(p+q-1)(1+2w|w|), 0) in
  the order (b, e, w), against central second differences.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

from replicate.experiments.base import Metrics
from replicate.markov import binary_kernel, binary_stationary
from replicate.settings import BinaryChainSettings
from replicate.theory import local_global as lg


def enumerated_loss(e: float, w: float, b: float, chain: BinaryChainSettings, length: int) -> float:
    """Exact E[(1/N) sum_n -log P_theta(x_{n+1} | x_n)] over all 2^(N+1) binary sequences
    x_1 ~ pi, x_{n+1} ~ P(. | x_n), with the canonical model's logit (paper B Eq. 6)."""
    kernel = binary_kernel(chain.p, chain.q)
    start = binary_stationary(chain.p, chain.q)
    logits = lg.canonical_logits(e, w, b)
    total = 0.0
    for seq in itertools.product((0, 1), repeat=length + 1):
        prob = start[seq[0]] * math.prod(kernel[x, y] for x, y in itertools.pairwise(seq))
        nll = sum(
            float(np.logaddexp(0.0, -(2 * y - 1) * logits[x])) for x, y in itertools.pairwise(seq)
        )
        total += prob * nll / length
    return float(total)


def _points(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """(e, w, b) with |e| <= 1.5, 0.05 <= |w| <= 1.5 (away from the kink at w = 0), |b| <= 2."""
    w = rng.choice([-1.0, 1.0], n) * rng.uniform(0.05, 1.5, n)
    return rng.uniform(-1.5, 1.5, n), w, rng.uniform(-2.0, 2.0, n)


def lemma2_error(chain: BinaryChainSettings, rng: np.random.Generator, length: int) -> float:
    """max |exact enumeration over sequences of ``length`` - Lemma 2's pair expectation| at
    three random (e, w, b)."""
    e, w, b = _points(rng, 3)
    return max(
        abs(
            enumerated_loss(ei, wi, bi, chain, length)
            - float(lg.loss_with_bias(ei, wi, bi, chain.p, chain.q))
        )
        for ei, wi, bi in zip(e, w, b, strict=True)
    )


def lemma3_error(chain: BinaryChainSettings, rng: np.random.Generator, n: int) -> float:
    """max |Lemma 3 gradient - central finite difference| (step 1e-6)."""
    e, w, b = _points(rng, n)
    p, q, h = chain.p, chain.q, 1e-6
    point = np.stack([e, w, b], -1)
    fd = []
    for axis in range(3):
        step = np.zeros(3)
        step[axis] = h
        up, down = (point + step).T, (point - step).T
        fd.append((lg.loss_with_bias(*up, p, q) - lg.loss_with_bias(*down, p, q)) / (2 * h))
    return float(np.max(np.abs(lg.loss_gradient_with_bias(e, w, b, p, q) - np.stack(fd, -1))))


def lemma6_error(chain: BinaryChainSettings, rng: np.random.Generator, n: int) -> float:
    """max |min_b L(theta, b) (Brent) - Phi(Delta(theta))|."""
    e, w, _ = _points(rng, n)
    p, q = chain.p, chain.q
    numeric = [
        minimize_scalar(
            lambda b, ei=ei, wi=wi: float(lg.loss_with_bias(ei, wi, b, p, q)),
            bracket=(-5.0, 5.0),
            tol=1e-12,
        ).fun
        for ei, wi in zip(e, w, strict=True)
    ]
    return float(np.max(np.abs(np.array(numeric) - lg.reduced_loss(lg.logit_gap(e, w), p, q))))


def thm7_errors(
    chain: BinaryChainSettings, rng: np.random.Generator, n: int
) -> tuple[float, float]:
    """(max |grad L(e, w, b)|, max |L - H|) over sampled points of Gamma_*, Gamma_min, Gamma_sad."""
    p, q = chain.p, chain.q
    constants = lg.chain_constants(p, q)
    w_star = rng.uniform(-0.69, 3.0, n) if constants.c_star > 0 else rng.uniform(-3.0, -0.72, n)
    e_star = lg.global_min_locus_e(w_star, p, q)
    b_star = e_star**2 / 2.0 + math.log(p / (1.0 - p))
    w_unigram = np.append(rng.uniform(-3.0, 3.0, n), lg.SADDLE_W)
    zeros = np.zeros_like(w_unigram)
    b_unigram = np.full_like(w_unigram, math.log(p / q))
    sets = (
        (e_star, w_star, b_star, constants.bigram_loss),
        (zeros, w_unigram, b_unigram, constants.unigram_loss),
    )
    gradient = max(
        float(np.abs(lg.loss_gradient_with_bias(e, w, b, p, q)).max()) for e, w, b, _ in sets
    )
    loss_error = max(
        float(np.abs(lg.loss_with_bias(e, w, b, p, q) - target).max()) for e, w, b, target in sets
    )
    return gradient, loss_error


def thm6_set_residual(point: np.ndarray, chain: BinaryChainSettings) -> float:
    """Distance of the nearest critical set's equations from zero at (e, w, b): Gamma_*
    (Eq. 27: e^2(1 + 2w|w|) = c*, b - e^2/2 = log(p/(1-p))) or Gamma_min U Gamma_sad
    (Eqs. 28-29: e = 0, b = log(p/q); the sign of (p+q-1)(1+2w|w|) only splits them)."""
    p, q = chain.p, chain.q
    e, w, b = point
    star = max(
        abs(e**2 * (1.0 + 2.0 * w * abs(w)) - lg.chain_constants(p, q).c_star),
        abs(b - e**2 / 2.0 - math.log(p / (1.0 - p))),
    )
    return min(star, max(abs(e), abs(b - math.log(p / q))))


def thm6_root_residual(chain: BinaryChainSettings, rng: np.random.Generator, n: int) -> float:
    """max `thm6_set_residual` over the roots (|grad L| < 1e-10) that Levenberg-Marquardt on
    the Lemma 3 gradient reaches from n uniform starts in [-2, 2]^2 x [-3, 3]; infinite if
    none is found (then the check has nothing to show)."""
    p, q = chain.p, chain.q

    def gradient(x: np.ndarray) -> np.ndarray:
        return lg.loss_gradient_with_bias(x[0], x[1], x[2], p, q)

    residuals = []
    for start in rng.uniform([-2.0, -2.0, -3.0], [2.0, 2.0, 3.0], (n, 3)):
        end = least_squares(gradient, start, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15).x
        if np.abs(gradient(end)).max() < 1e-10:
            residuals.append(thm6_set_residual(end, chain))
    return max(residuals, default=math.inf)


def lemma4_error(chain: BinaryChainSettings, rng: np.random.Generator, n: int) -> float:
    """max |Lemma 4 Hessian - central second differences| at e = 0, b = log(p/q)."""
    p, q, h = chain.p, chain.q, 1e-4
    constants = lg.chain_constants(p, q)
    worst = 0.0
    for w in rng.uniform(-2.0, 2.0, n):
        centre = np.array([math.log(p / q), 0.0, w])  # (b, e, w)

        def f(x: np.ndarray) -> float:
            return float(lg.loss_with_bias(x[1], x[2], x[0], p, q))

        numeric = np.zeros((3, 3))
        for i, j in itertools.product(range(3), repeat=2):
            di, dj = np.eye(3)[i] * h, np.eye(3)[j] * h
            numeric[i, j] = (
                f(centre + di + dj)
                - f(centre + di - dj)
                - f(centre - di + dj)
                + f(centre - di - dj)
            ) / (4 * h * h)
        scale = 2.0 * (p + q - 1.0) * (1.0 + 2.0 * w * abs(w))
        exact = constants.pi0 * constants.pi1 * np.diag([1.0, scale, 0.0])
        worst = max(worst, float(np.abs(numeric - exact).max()))
    return worst


def bias_checks(chains: list[BinaryChainSettings], rng: np.random.Generator, n: int) -> Metrics:
    """The worst error of each check over ``chains`` (``n`` random points per check)."""
    rows = []
    for chain in chains:
        gradient, loss_error = thm7_errors(chain, rng, n)
        rows.append(
            {
                "lemma2_max_error": lemma2_error(chain, rng, length=6),
                "lemma3_max_fd_error": lemma3_error(chain, rng, n),
                "lemma6_max_error": lemma6_error(chain, rng, min(n, 20)),
                "thm7_max_gradient_norm": gradient,
                "thm7_max_loss_error": loss_error,
                "lemma4_max_error": lemma4_error(chain, rng, min(n, 10)),
            }
        )
    return {key: max(row[key] for row in rows) for key in rows[0]}


def thm6_checks(chains: list[BinaryChainSettings], rng: np.random.Generator, n: int) -> Metrics:
    """The worst Thm 6 root residual over ``chains`` (``n`` solver starts per chain)."""
    return {"thm6_root_max_set_residual": float(max(thm6_root_residual(c, rng, n) for c in chains))}
