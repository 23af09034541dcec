"""Paper B Thm 9: the critical points of the linear-attention loss with bias L(e, w, b, a).

Checked exactly in float64 (no training) on L of Eq. (44), with the analytic gradient
`lg.loss_gradient_attention_with_bias` (itself tested against finite differences):

* Thm 9 (i)-(iv): sampled points of Gamma_* (Eqs. 46-47), Gamma_min, Gamma_sad and
  Gamma_station have grad L = 0; L = H(x_{n+1} | x_n) on Gamma_* and H(x_{n+1}) on Gamma_min
  and Gamma_sad (the theorem gives no loss for Gamma_station).
* Thm 9, Eq. (48) (the list is complete): every root of grad L that a least-squares solver
  finds from random starts lies in one of the four sets, measured as the distance of the
  set equations from zero (`set_residual`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import least_squares

from replicate.experiments.base import Metrics
from replicate.settings import BinaryChainSettings
from replicate.theory import local_global as lg

ROOT_TOLERANCE = 1e-10
"""max |grad L| at which a solver's end point counts as a root."""
ROOT_STARTS = 25
"""Solver starts per chain (about 0.8 s of CPU per chain)."""


def _gradient(point: np.ndarray, chain: BinaryChainSettings) -> np.ndarray:
    e, w, b, a = np.moveaxis(point, -1, 0)
    return lg.loss_gradient_attention_with_bias(e, w, b, a, chain.p, chain.q)


def _loss(point: np.ndarray, chain: BinaryChainSettings) -> np.ndarray:
    e, w, b, a = np.moveaxis(point, -1, 0)
    return lg.loss_with_bias(e, w, b, chain.p, chain.q, a)


def star_bias(e: ArrayLike, w: ArrayLike, a: ArrayLike, chain: BinaryChainSettings) -> np.ndarray:
    """b of Gamma_* at (e, w, a): e^2 w|w(1 + a e^2)| + b = (1/2) log[p(1-q)/(q(1-p))],
    paper B Thm 9, Eq. (46)."""
    e, w, a = (np.asarray(x, dtype=np.float64) for x in (e, w, a))
    half_log = 0.5 * math.log(chain.p * (1.0 - chain.q) / (chain.q * (1.0 - chain.p)))
    return half_log - e**2 * w * np.abs(w * (1.0 + a * e**2))


def critical_sets(
    chain: BinaryChainSettings, rng: np.random.Generator, n: int
) -> dict[str, np.ndarray]:
    """n points (e, w, b, a) of each set of Thm 9; Gamma_* points keep |a| <= 3 (Eq. 47)."""
    p, q = chain.p, chain.q
    constants = lg.chain_constants(p, q)
    e = rng.uniform(0.3, 1.5, 50 * n) * rng.choice([-1.0, 1.0], 50 * n)
    w = rng.uniform(-1.5, 1.5, 50 * n)
    a = lg.global_min_surface_a(e, w, p, q)  # Eq. (47)
    keep = np.flatnonzero(np.abs(a) <= 3.0)[:n]
    e, w, a = e[keep], w[keep], a[keep]
    b = star_bias(e, w, a, chain)
    inner = rng.uniform(lg.SADDLE_W + 0.01, 1.5, n)  # 1 + 2w|w| > 0
    outer = rng.uniform(-2.5, lg.SADDLE_W, n)  # 1 + 2w|w| <= 0
    minima, saddles = (inner, outer) if constants.switching > 0 else (outer, inner)
    zero, unigram_b = np.zeros(n), np.full(n, math.log(p / q))
    e_station = rng.uniform(0.3, 1.5, n) * rng.choice([-1.0, 1.0], n)
    return {
        "star": np.stack([e, w, b, a], -1),
        "min": np.stack([zero, minima, unigram_b, rng.uniform(-1.5, 1.5, n)], -1),
        "sad": np.stack([zero, saddles, unigram_b, rng.uniform(-1.5, 1.5, n)], -1),
        "station": np.stack(
            [e_station, np.full(n, lg.SADDLE_W), unigram_b, -1.0 / e_station**2], -1
        ),
    }


def set_residual(point: np.ndarray, chain: BinaryChainSettings) -> tuple[float, str]:
    """(distance of the nearest set's equations from zero, that set) of Thm 9 at ``point``.

    Gamma_*: Eqs. (46)-(47); Gamma_min U Gamma_sad: e = 0, b = log(p/q) (the sign of
    (p+q-1)(1+2w|w|) only splits them); Gamma_station: 1 + a e^2 = 0, 1 + 2w|w| = 0,
    b = log(p/q) (with e != 0 implied by 1 + a e^2 = 0).
    """
    p, q = chain.p, chain.q
    e, w, b, a = point
    big_a, big_b = 1.0 + a * e**2, 1.0 + 2.0 * w * abs(w)
    residuals = {
        "star": max(
            abs(b - star_bias(e, w, a, chain)),
            abs(e**2 * big_a * big_b - lg.chain_constants(p, q).c_star),
        ),
        "unigram": max(abs(e), abs(b - math.log(p / q))),
        "station": max(abs(big_a), abs(big_b), abs(b - math.log(p / q))),
    }
    nearest = min(residuals, key=lambda k: residuals[k])
    return residuals[nearest], nearest


def roots(chain: BinaryChainSettings, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """The end points with |grad L| < ROOT_TOLERANCE of Levenberg-Marquardt on grad L = 0
    from n uniform starts in [-2, 2]^2 x [-3, 3] x [-2, 2]."""
    starts = rng.uniform([-2.0, -2.0, -3.0, -2.0], [2.0, 2.0, 3.0, 2.0], (n, 4))
    found = []
    for start in starts:
        end = least_squares(
            _gradient, start, args=(chain,), method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15
        ).x
        if np.abs(_gradient(end, chain)).max() < ROOT_TOLERANCE:
            found.append(end)
    return found


def thm9_checks(chains: list[BinaryChainSettings], rng: np.random.Generator, n: int) -> Metrics:
    """Worst |grad L| and |L - H| on the sets of Thm 9, and the worst set residual of the
    roots found, over ``chains``; a chain where no root is found gives an infinite residual."""
    gradient, loss_error, residual, found = 0.0, 0.0, 0.0, 0
    for chain in chains:
        constants = lg.chain_constants(chain.p, chain.q)
        for name, points in critical_sets(chain, rng, n).items():
            gradient = max(gradient, float(np.abs(_gradient(points, chain)).max()))
            if name != "station":
                target = constants.bigram_loss if name == "star" else constants.unigram_loss
                loss_error = max(loss_error, float(np.abs(_loss(points, chain) - target).max()))
        chain_roots = roots(chain, rng, min(n, ROOT_STARTS))
        found += len(chain_roots)
        worst = max((set_residual(x, chain)[0] for x in chain_roots), default=math.inf)
        residual = max(residual, float(worst))
    return {
        "thm9_max_gradient_norm": gradient,
        "thm9_max_loss_error": loss_error,
        "thm9_root_max_set_residual": residual,
        "thm9_roots_found": float(found),
    }
