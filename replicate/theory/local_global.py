"""Closed forms of the canonical low-rank model of paper B.

Paper B is "Local to Global: Learning Dynamics and Effect of Initialization for
Transformers" (Makkuva, Bondaschi, Ekbote, Girish, Nagle, Kim, Gastpar, 2024; docs/papers.md).
Sections, equations, lemmas and theorems below are paper B's; "ours" marks our own
derivations and choices.

The model is a single-layer transformer on a binary first-order Markov chain with kernel
P(p, q), restricted to a rank-one manifold. There the loss depends only on
theta = (e, w) (embedding and feed-forward scalars) or theta = (e, w, a) (plus a
linear-attention scalar), and on a scalar output bias b. Logs are natural logs (nats).

Conventions:
* Closed forms take the coordinates as separate broadcastable arguments, ``(e, w, ..., a)``,
  so that grids (``e[:, None]``, ``w[None, :]``) work directly.
* Functions of points of the flow (velocity, integrator, classifier) take ``theta`` with a
  last axis of length 2, ``(e, w)``, or 3, ``(e, w, a)``.
* ``p``, ``q`` outside (0, 1) raise `ChainParameterError` (from `replicate.markov.chains`).
  The theorems on critical sets and basins assume p + q != 1; the functions built on them
  raise `ChainParameterError` at p + q = 1.
* "Delta" (`logit_gap`) is our name for logit(x_n = 1) - logit(x_n = 0). The loss at
  the optimal bias depends on theta only through Delta (ours, from Lemmas 5-6, Eq. (32)).

Typos of the paper corrected here (other modules cite them by these numbers):
1. Main-text Thm 2(ii) prints I_sad with ``sqrt(w^2 log(-w) + E_sad)``. The minus sign is
   lost; the correct ``sqrt(w^2 - log(-w) + E_sad)`` is in `separatrix_half_width`.
2. Main-text §3 prints l_log(z) = log(1 + log(z)). `_logistic_loss` uses log(1 + exp(-z)),
   as in App. A "Notation".
3. Thm 10(iii) labels the local maxima "Theta_min", and Eqs. (48)/(50) write the critical set
   as a subset of R^2. `classify_limit` names the set `LimitClass.MAX`, in R^3.
4. App. M.3.1, Eq. (96), derives the e-e Hessian entry as pi1 (p+q-1)(1 + 4w|w|). The
   correct 2 pi0 pi1 (p+q-1)(1 + 2w|w|) (Lemma 4/8) is in `hessian_on_w_axis`.
5. App. M.4, Eq. (108), prints the integrand as w'/(4|w|)(1 + 2w|w|); it should be
   w'/(2|w|)(1 + 2w|w|). See `energy`, which keeps the paper's (correct) result.
6. These are corrected where they apply:
   * The proof of Thm 1(iii) calls Theta_max "local minima" (`LimitClass.MAX`).
   * The proof of Thm 7 writes w = 1/sqrt 2 for the saddle (`SADDLE_W` = -1/sqrt 2).
   * App. J.2 writes the factor ``(2X(1+2w|w| - 1))`` (`loss_gradient_with_bias`).
   * Lemma 12(ii) writes the image interval backwards (`_w_axis_crossing`).
7. App. C/H.1 take alpha in {+-1}^d / sqrt d, so ||alpha|| = 1, but then use
   ||alpha||^2 = d. They also write x_n where x_i is meant. With the unit-norm alpha, the
   attention scalar is a = <v, alpha> q^2 sqrt(d) / 4, not <v, alpha> q^2 d^(5/2) / 4
   (Eq. 42); see `canonical_weights`.

Inconsistencies of the full-model experiments (Figs. 1, 3, 4, Table 1) do not apply here.

Further typos, found while implementing:
* App. M.5 integrates e' = -(p+q-1)(pi1 - pi1^2) e. That drops the factor 2 of its own
  Eq. (110). The small-e rate is d log|e|/dt = -2 pi0 pi1 (p+q-1)(1 + 2w|w|), as Lemma 8's
  Hessian gives.
* The proof of Thm 2 (App. G.1) writes de/dt = +2E[(f1 X + f2) X](1 - 2w^2)e and
  dw/dt = +4E[...](-e^2 w). Both minus signs of -grad L are lost. The conclusion (escape
  from the saddle for w0 < -1/sqrt 2) holds with the correct signs.
* Thm 11 writes N(0, sigma^2 I_2) for an init in R^3.

Where we go beyond the paper:
* App. H.1 gives a := <v, alpha> q^2 d^(5/2) / 4 together with ||alpha|| = 1. That is
  the paper's Eq. (42), inconsistent with its own normalisation (item 7 above). The
  consistent scale is sqrt(d).
* The paper's App. M.5 factor is (p+q-1)(pi1 - pi1^2) = pi0 pi1 (p+q-1). Our linearised
  rate, 2 pi0 pi1 (p+q-1)(1 + 2w|w|), is the correct one; the paper's integrated rate is
  half of it (see above).
* Thm 10 leaves Theta_station = {e != 0, w = -1/sqrt 2, a = -1/e^2} unclassified, and we
  find its points to be saddles. `classify_limit` keeps a separate
  `LimitClass.STATION` label, so that the paper's sets stay distinguishable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.integrate import quad, solve_ivp
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import norm

from replicate.markov.chains import (
    ChainParameterError,
    binary_entropy_rate,
    binary_stationary,
    binary_unigram_entropy,
)

FloatArray = NDArray[np.float64]

SADDLE_W: float = -1.0 / math.sqrt(2.0)
"""w of the saddle (0, -1/sqrt 2), paper B Thm 1(iv) (the proof of Thm 7 misprints +1/sqrt 2)."""

ENERGY_SADDLE: float = -(1.0 + math.log(2.0)) / 2.0
"""E_sad = E(0, -1/sqrt 2) = -(1 + log 2)/2, paper B §4 (before Thm 2)."""

_LOG_ABS_SADDLE_W = -0.5 * math.log(2.0)


class LimitClass(IntEnum):
    """Critical set a point lies in (Thm 1, Thm 10), used for basins and flow limits.

    STAR: global minima Theta_*. MIN: local minima Theta_min. SAD: saddle(s) Theta_sad.
    MAX: local maxima Theta_max (mislabelled Theta_min in Thm 10(iii), and called "local
    minima" in the proof of Thm 1(iii); typos 3 and 6 of the module docstring). STATION:
    Theta_station of Thm 10 (attention model only). UNCONVERGED: none of these.
    """

    STAR = 0
    MIN = 1
    SAD = 2
    MAX = 3
    STATION = 4
    UNCONVERGED = 5


@dataclass(frozen=True)
class ChainConstants:
    """Reference constants of the chain P(p, q) (paper B §2, Thm 1)."""

    p: float
    q: float
    pi0: float
    pi1: float
    c_star: float
    """log[(1-p)(1-q)/(pq)], the logit gap of the global minima (Thm 1(i))."""
    unigram_loss: float
    """H(x_{n+1}) = h(pi1), the loss on Theta_min, Theta_max and Theta_sad (Thm 1)."""
    bigram_loss: float
    """H(x_{n+1} | x_n), the loss on Theta_* (Thm 1)."""

    @property
    def switching(self) -> float:
        """p + q - 1, whose sign selects Thm 2 (> 0) or Thm 8 (< 0)."""
        return self.p + self.q - 1.0

    @property
    def reduced_loss_slope_at_zero(self) -> float:
        """Phi'(0) = pi0 pi1 (p+q-1), the slope of `reduced_loss` at Delta = 0 (ours, Lemma 6)."""
        return self.pi0 * self.pi1 * self.switching


@lru_cache(maxsize=128)
def chain_constants(p: float, q: float) -> ChainConstants:
    """Validated constants of P(p, q); raises `ChainParameterError` unless 0 < p, q < 1."""
    pi0, pi1 = binary_stationary(p, q)
    p, q = float(p), float(q)
    return ChainConstants(
        p=p,
        q=q,
        pi0=float(pi0),
        pi1=float(pi1),
        c_star=math.log((1.0 - p) * (1.0 - q) / (p * q)),
        unigram_loss=binary_unigram_entropy(p, q),
        bigram_loss=binary_entropy_rate(p, q),
    )


def _switching_sign(constants: ChainConstants) -> float:
    if constants.switching == 0.0:
        raise ChainParameterError(
            f"paper B's critical sets and basins need p + q != 1, got p={constants.p}, "
            f"q={constants.q}"
        )
    return math.copysign(1.0, constants.switching)


def _floats(*values: ArrayLike) -> tuple[FloatArray, ...]:
    return tuple(np.asarray(value, dtype=np.float64) for value in values)


def _signed_square(w: FloatArray) -> FloatArray:
    return w * np.abs(w)


# --------------------------------------------------------------------------------------
# Canonical parameterisation
# --------------------------------------------------------------------------------------


def logit_gap(e: ArrayLike, w: ArrayLike, a: ArrayLike = 0.0) -> FloatArray:
    """Delta_a = e^2 (1 + a e^2)(1 + 2w|w|) = logit(x_n = 1) - logit(x_n = 0).

    Paper B Eq. (6)/(24) at a = 0 (Delta = e^2 (1 + 2w|w|)) and Eq. (44) with attention.
    """
    e, w, a = _floats(e, w, a)
    return e**2 * (1.0 + a * e**2) * (1.0 + 2.0 * _signed_square(w))


def canonical_logits(
    e: ArrayLike, w: ArrayLike, b: ArrayLike, a: ArrayLike = 0.0
) -> tuple[FloatArray, FloatArray]:
    """(logit at x_n = 0, logit at x_n = 1) of the canonical model with bias b.

    logit_X = e^2 [(X - 1/2)(1 + a e^2)(1 + 2w|w|) + w|w(1 + a e^2)|] + b: paper B
    Eq. (44). At a = 0 it is Eq. (6): logit_X = e^2 (1 + 2w|w|) X + b - e^2/2.
    """
    e, w, b, a = _floats(e, w, b, a)
    gap = logit_gap(e, w, a)
    centre = e**2 * w * np.abs(w * (1.0 + a * e**2)) + b
    return centre - gap / 2.0, centre + gap / 2.0


def low_rank_predictions(
    e: float, p: float, w: float, b: float, beta: int, r: int, d: int
) -> tuple[float, float]:
    """(P(x_{n+1} = 1 | x_n = 0), P(x_{n+1} = 1 | x_n = 1)) of the low-rank optimum of App. C.

    Paper B App. C, Eq. (17) and the "Prediction" line after it: with e_vec = e alpha,
    p_n = -p alpha (alpha in {+-1}^d), <v, alpha> = 0, W_1 = w w_vec alpha^T (w_vec in
    {+-1}^r with beta ones), W_2 = W_1^T, e > p > 0 and w > 0, the prediction is
    f = x_n sigma(e d (e - p)(1 + beta w^2 d) + b)
        + (1 - x_n) sigma(-e d p (1 + (r - beta) w^2 d) + b).
    """
    at_one = e * d * (e - p) * (1.0 + beta * w**2 * d) + b
    at_zero = -e * d * p * (1.0 + (r - beta) * w**2 * d) + b
    return float(expit(at_zero)), float(expit(at_one))


@dataclass(frozen=True)
class CanonicalWeights:
    """Full-model weights that realise theta = (e, w, a) (paper B App. A.1, D, H.1).

    The forward pass they are meant for (paper B §2, App. H.1, no LayerNorm, W_O = I):
    x_n = x_n e_vec + p_n; y_n = x_n + sum_{i<=n} att_{n,i} W_V x_i, with linear attention
    att_{n,i} = <W_Q x_n, W_K x_i> / (n sqrt d); z_n = y_n + W_2 ReLU(W_1 y_n); and
    logit_n = <e_vec, z_n> + b (weight tying). At a = 0, W_V = 0 and attention drops out.
    """

    token_embedding: FloatArray
    positional_embedding: FloatArray
    w1: FloatArray
    w2: FloatArray
    value: FloatArray
    query: FloatArray
    key: FloatArray


def canonical_weights(
    e: float, w: float, d: int, a: float = 0.0, signs: ArrayLike | None = None
) -> CanonicalWeights:
    """The rank-one weights of paper B App. D / H.1 for the scalars (e, w, a).

    The map, with alpha = signs / sqrt(d) (all-ones signs by default):
    * e_vec = |e| alpha, and p_n = -(|e|/2) alpha for every n. Only e^2 matters, so the sign
      of e is absorbed into alpha (Eq. (6) is even in e).
    * W_1 = (|w|/sqrt d) 1_{4d} alpha^T and W_2 = (w/sqrt d) alpha 1_{4d}^T.
    * W_Q = W_K = sqrt(d) alpha alpha^T, so W_Q^T W_K = q^2 d alpha alpha^T with q = 1.
    * W_V = alpha v^T with v = (4a/sqrt d) alpha.

    Eq. (42) defines a = <v, alpha> q^2 d^(5/2) / 4, but that uses ||alpha||^2 = d. With the
    unit-norm alpha of App. D the forward pass gives a = <v, alpha> q^2 sqrt(d) / 4, which
    is used here (typo 7 of the module docstring).
    """
    if int(d) != d or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    d = int(d)
    signs = np.ones(d) if signs is None else np.asarray(signs, dtype=np.float64)
    if signs.shape != (d,) or not np.all(np.abs(signs) == 1.0):
        raise ValueError(f"signs must be a vector in {{-1, +1}}^{d}")
    alpha = signs / math.sqrt(d)
    ones = np.ones(4 * d)
    query_key = math.sqrt(d) * np.outer(alpha, alpha)
    return CanonicalWeights(
        token_embedding=abs(e) * alpha,
        positional_embedding=-(abs(e) / 2.0) * alpha,
        w1=(abs(w) / math.sqrt(d)) * np.outer(ones, alpha),
        w2=(w / math.sqrt(d)) * np.outer(alpha, ones),
        value=np.outer(alpha, (4.0 * a / math.sqrt(d)) * alpha),
        query=query_key,
        key=query_key.copy(),
    )


# --------------------------------------------------------------------------------------
# Loss with and without bias
# --------------------------------------------------------------------------------------


def _logistic_loss(z: FloatArray) -> FloatArray:
    """l_log(z) = log(1 + exp(-z)) (paper B App. A; the main text §3 misprints log(1+log z))."""
    return np.logaddexp(0.0, -z)


def _expected_logistic_loss(
    logit0: FloatArray, logit1: FloatArray, constants: ChainConstants
) -> FloatArray:
    """E_{X,Y}[l_log((2Y - 1) logit_X)] with X ~ pi and Y | X ~ P(p, q) (Lemma 2, Eq. 31)."""
    p, q = constants.p, constants.q
    given_x0 = p * _logistic_loss(logit0) + (1.0 - p) * _logistic_loss(-logit0)
    given_x1 = (1.0 - q) * _logistic_loss(logit1) + q * _logistic_loss(-logit1)
    return constants.pi0 * given_x0 + constants.pi1 * given_x1


def _log_x_star(gap: FloatArray, ratio: float) -> FloatArray:
    """log x*, x* = [(r - 1) + sqrt((r - 1)^2 + 4 r A)] / (2A), A = exp(gap), r = p/q.

    Paper B Lemma 5, Eq. (33), where x* = exp(b* - e^2/2) is the optimal logit at x_n = 0.
    It is evaluated in our log-space form, which neither cancels (r < 1)
    nor overflows (large |gap|).
    """
    log_abs_r_minus_1 = math.log(abs(ratio - 1.0)) if ratio != 1.0 else -math.inf
    log_sqrt_disc = 0.5 * np.logaddexp(2.0 * log_abs_r_minus_1, math.log(4.0 * ratio) + gap)
    if ratio >= 1.0:
        return np.logaddexp(log_abs_r_minus_1, log_sqrt_disc) - math.log(2.0) - gap
    return math.log(2.0 * ratio) - np.logaddexp(log_abs_r_minus_1, log_sqrt_disc)


def loss_with_bias(
    e: ArrayLike, w: ArrayLike, b: ArrayLike, p: float, q: float, a: ArrayLike = 0.0
) -> FloatArray:
    """L(theta, b) = E[l_log((2Y - 1) logit_X)], the next-token cross-entropy in nats.

    Paper B Eq. (8)/(31) (Lemma 2) at a = 0; Eq. (44) with attention.
    """
    constants = chain_constants(p, q)
    logit0, logit1 = canonical_logits(e, w, b, a)
    return _expected_logistic_loss(logit0, logit1, constants)


def optimal_bias(e: ArrayLike, w: ArrayLike, p: float, q: float, a: ArrayLike = 0.0) -> FloatArray:
    """b*(theta) = argmin_b L(theta, b).

    At a = 0 this is paper B Lemma 5, Eq. (33): b* = e^2/2 + log x*. With attention it is
    Eqs. (98)-(101): the same x*, with Delta_a in A, sets the logit at x_n = 0.
    """
    constants = chain_constants(p, q)
    e, w, a = _floats(e, w, a)
    gap = logit_gap(e, w, a)
    logit0_without_bias, _ = canonical_logits(e, w, 0.0, a)
    return _log_x_star(gap, constants.p / constants.q) - logit0_without_bias


def loss(e: ArrayLike, w: ArrayLike, p: float, q: float, a: ArrayLike = 0.0) -> FloatArray:
    """L(theta) = L(theta, b*(theta)), the loss without bias.

    Paper B Eq. (9)/(32)/(34) (Lemma 6) at a = 0; Eq. (45) with attention.
    """
    return loss_with_bias(e, w, optimal_bias(e, w, p, q, a), p, q, a)


def reduced_loss(gap: ArrayLike, p: float, q: float) -> FloatArray:
    """Phi(Delta) = min_b L at logit gap Delta, so that L(theta) = Phi(Delta_a(theta)).

    Ours (not stated in the paper), derived from Lemmas 5-6. Phi is strictly convex, with
    Phi(0) = H(x_{n+1}) and minimum Phi(c*) = H(x_{n+1} | x_n).
    """
    constants = chain_constants(p, q)
    (gap,) = _floats(gap)
    logit0 = _log_x_star(gap, constants.p / constants.q)
    return _expected_logistic_loss(logit0, logit0 + gap, constants)


# --------------------------------------------------------------------------------------
# Gradients and Hessian
# --------------------------------------------------------------------------------------


def _lemma3_residuals(
    e: FloatArray, w: FloatArray, b: FloatArray, constants: ChainConstants
) -> tuple[FloatArray, FloatArray]:
    """(f1, f2) of paper B Lemma 3/7, so that E[sigma(logit_X) - Y | X] = f1 X + f2."""
    prediction_at_x0 = expit(b - e**2 / 2.0)
    prediction_at_x1 = expit(2.0 * e**2 * _signed_square(w) + b + e**2 / 2.0)
    f1 = prediction_at_x1 + constants.q - 1.0 - prediction_at_x0 + constants.p
    f2 = prediction_at_x0 - constants.p
    return f1, f2


def loss_gradient_with_bias(
    e: ArrayLike, w: ArrayLike, b: ArrayLike, p: float, q: float
) -> FloatArray:
    """(dL/de, dL/dw, dL/db) of L(e, w, b) (a = 0), stacked on the last axis.

    Paper B Lemma 3: dL/de = E_X[(f1 X + f2)(2X(1 + 2w|w|) - 1)] e,
    dL/dw = E_X[(f1 X + f2) X] 4e^2|w|, and dL/db = E_X[f1 X + f2]. The proof (App. J.2)
    misprints the first factor as (2X(1 + 2w|w| - 1)); the statement's form is the correct
    one (typo 6 of the module docstring).
    """
    constants = chain_constants(p, q)
    e, w, b = _floats(e, w, b)
    f1, f2 = _lemma3_residuals(e, w, b, constants)
    mean_times_x = constants.pi1 * (f1 + f2)  # E_X[(f1 X + f2) X]
    # E_X[(f1 X + f2)(2X(1 + 2w|w|) - 1)], summed over X = 1 and X = 0:
    mean_times_e_factor = mean_times_x * (1.0 + 4.0 * _signed_square(w)) - constants.pi0 * f2
    return np.stack(
        [
            mean_times_e_factor * e,
            mean_times_x * 4.0 * e**2 * np.abs(w),
            constants.pi1 * f1 + f2,
        ],
        axis=-1,
    )


def loss_gradient(e: ArrayLike, w: ArrayLike, p: float, q: float) -> FloatArray:
    """(dL/de, dL/dw) of the loss without bias, stacked on the last axis.

    Paper B Lemma 7: dL/de = E_X[(f1 X + f2) X] 2(1 + 2w|w|) e and
    dL/dw = E_X[(f1 X + f2) X] 4e^2|w|, with f1, f2 at b = b* (where pi1 f1 + f2 = 0).
    """
    constants = chain_constants(p, q)
    e, w = _floats(e, w)
    f1, f2 = _lemma3_residuals(e, w, optimal_bias(e, w, p, q), constants)
    mean_times_x = constants.pi1 * (f1 + f2)  # E_X[(f1 X + f2) X]
    return np.stack(
        [
            mean_times_x * 2.0 * (1.0 + 2.0 * _signed_square(w)) * e,
            mean_times_x * 4.0 * e**2 * np.abs(w),
        ],
        axis=-1,
    )


def loss_gradient_attention(
    e: ArrayLike, w: ArrayLike, a: ArrayLike, p: float, q: float
) -> FloatArray:
    """(dL/de, dL/dw, dL/da) of the attention model's loss without bias, on the last axis.

    Paper B Lemma 13, with f1 = 1 - p - q - phi1 + phi0 and f2 = p - phi0, where
    phi_x = sigma(logit_x at b*), and m = E[(f1 X + f2)(X - 1/2)]:
    * dL/de = -m 2e(1 + a e^2)(1 + 2w|w|) - m 2e^3 a (1 + 2w|w|);
    * dL/dw = -m 2e^2 (1 + a e^2)(|w| + sign(w) w);
    * dL/da = -m e^4 (1 + 2w|w|).
    """
    constants = chain_constants(p, q)
    e, w, a = _floats(e, w, a)
    logit0, logit1 = canonical_logits(e, w, optimal_bias(e, w, p, q, a), a)
    phi0, phi1 = expit(logit0), expit(logit1)
    f1 = 1.0 - constants.p - constants.q - phi1 + phi0
    f2 = constants.p - phi0
    m = 0.5 * (constants.pi1 * (f1 + f2) - constants.pi0 * f2)  # E[(f1 X + f2)(X - 1/2)]
    gap_factor = 1.0 + 2.0 * _signed_square(w)
    return np.stack(
        [
            -m * 2.0 * e * (1.0 + a * e**2) * gap_factor - m * 2.0 * e**3 * a * gap_factor,
            -m * 2.0 * e**2 * (1.0 + a * e**2) * (np.abs(w) + np.sign(w) * w),
            -m * e**4 * gap_factor,
        ],
        axis=-1,
    )


def loss_gradient_attention_with_bias(
    e: ArrayLike, w: ArrayLike, b: ArrayLike, a: ArrayLike, p: float, q: float
) -> FloatArray:
    """(dL/de, dL/dw, dL/db, dL/da) of L(e, w, b, a), paper B Eq. (44), on the last axis.

    The chain rule through logit_X = e^2 [(X - 1/2) A B + w|w| |A|] + b, A = 1 + a e^2,
    B = 1 + 2w|w|: dL/dtheta = sum_x pi_x (sigma(logit_x) - P(Y = 1 | X = x)) dlogit_x/dtheta.
    Paper B states no gradient for this loss (Lemma 13 is the one at b = b*); where A = 0
    (Theta_station of Thm 9(iv)) d|A| is taken as 0: its coefficient there is
    sum_x pi_x (sigma(b) - P(1 | x)) = sigma(b) - pi1, which vanishes at b = log(p/q).
    """
    constants = chain_constants(p, q)
    e, w, b, a = _floats(e, w, b, a)
    logit0, logit1 = canonical_logits(e, w, b, a)
    residual0 = constants.pi0 * (expit(logit0) - constants.p)
    residual1 = constants.pi1 * (expit(logit1) - (1.0 - constants.q))
    big_a, big_b, ww = 1.0 + a * e**2, 1.0 + 2.0 * _signed_square(w), _signed_square(w)
    gradient = np.zeros((*np.broadcast(e, w, b, a).shape, 4))
    for half, residual in ((-0.5, residual0), (0.5, residual1)):
        d_e = 2.0 * e * (half * big_a * big_b + ww * np.abs(big_a)) + e**2 * (
            half * big_b * 2.0 * a * e + ww * np.sign(big_a) * 2.0 * a * e
        )
        d_w = e**2 * (half * big_a * 4.0 * np.abs(w) + 2.0 * np.abs(w) * np.abs(big_a))
        d_a = e**4 * (half * big_b + ww * np.sign(big_a))
        gradient += residual[..., None] * np.stack([d_e, d_w, np.ones_like(d_e), d_a], -1)
    return gradient


def hessian_on_w_axis(w: float, p: float, q: float, attention: bool = False) -> FloatArray:
    """Hessian of L(theta) at (e = 0, w) [and any a]: pi0 pi1 diag(2(p+q-1)(1+2w|w|), 0[, 0]).

    Paper B Lemma 8, Eq. (36), in the order (e, w), and (e, w, a) with attention. The
    attention case is App. M.3.1, where Eq. (96) misderives the e-e entry as
    pi1 (p+q-1)(1 + 4w|w|) (typo 4 of the module docstring). The entry vanishes only at the saddle
    w = -1/sqrt 2 (not +1/sqrt 2, as the proof of Thm 7 misprints).
    """
    constants = chain_constants(p, q)
    size = 3 if attention else 2
    hessian = np.zeros((size, size))
    hessian[0, 0] = 2.0 * constants.reduced_loss_slope_at_zero * (1.0 + 2.0 * w * abs(w))
    return hessian


def small_e_log_rate(w: ArrayLike, p: float, q: float) -> FloatArray:
    """d log|e|/dt at e -> 0 under (GF) or (GF-attn): -2 pi0 pi1 (p+q-1)(1 + 2w|w|).

    It is minus the e-e entry of the Hessian on the w-axis (Lemma 8, Eq. 36; our linearisation),
    and does not depend on a, since a enters only through a e^2. Negative means the local
    minima on e = 0 attract (p + q > 1, 1 + 2w|w| > 0), positive that they repel (Fig. 5).
    App. M.5 integrates half this rate at w = 0: its e' = -(p+q-1)(pi1 - pi1^2) e drops the
    factor 2 of its own Eq. (110).
    """
    constants = chain_constants(p, q)
    (w,) = _floats(w)
    return -2.0 * constants.reduced_loss_slope_at_zero * (1.0 + 2.0 * _signed_square(w))


# --------------------------------------------------------------------------------------
# Gradient-flow vector fields and energies
# --------------------------------------------------------------------------------------


def _split_point(theta: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim == 0 or theta.shape[-1] not in (2, 3):
        raise ValueError(f"theta must have a last axis of length 2 or 3, got {theta.shape}")
    a = theta[..., 2] if theta.shape[-1] == 3 else np.zeros(theta.shape[:-1])
    return theta[..., 0], theta[..., 1], a


def gradient_flow_velocity(theta: ArrayLike, p: float, q: float) -> FloatArray:
    """d theta/dt = -grad L(theta), for theta of shape (..., 2) or (..., 3).

    Paper B §4, (GF), with Lemma 7 for theta = (e, w). App. A.2, (GF-attn), with Lemma 13
    for theta = (e, w, a).
    """
    e, w, a = _split_point(theta)
    if np.shape(theta)[-1] == 2:
        return -loss_gradient(e, w, p, q)
    return -loss_gradient_attention(e, w, a, p, q)


def energy(e: ArrayLike, w: ArrayLike, a: ArrayLike = 0.0) -> FloatArray:
    """E(e, w, a) = e^2 - (w^2 + sign(w) log|w|) - 2a^2; NaN on w = 0, where it is undefined.

    Paper B Eq. (4)/(37) (E(e, w), a = 0) and Eq. (10)/(51) (E(e, w, a)). It is conserved
    by the flow (Lemmas 1, 9, 14). App. M.4 reaches it by integrating
    e e' = w'/(2|w|)(1 + 2w|w|) + 2a a'; Eq. (108) misprints the integrand with 4|w|
    (typo 5 of the module docstring).
    """
    e, w, a = _floats(e, w, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = e**2 - (w**2 + np.sign(w) * np.log(np.abs(w))) - 2.0 * a**2
    return np.where(w == 0.0, np.nan, value)


# --------------------------------------------------------------------------------------
# Critical sets (Thm 1, Thm 10)
# --------------------------------------------------------------------------------------


def global_min_locus_e(w: ArrayLike, p: float, q: float) -> FloatArray:
    """e >= 0 with e^2 (1 + 2w|w|) = c*, i.e. Theta_* of Thm 1(i) at fixed w (NaN if none)."""
    constants = chain_constants(p, q)
    (w,) = _floats(w)
    with np.errstate(divide="ignore"):
        e_squared = constants.c_star / (1.0 + 2.0 * _signed_square(w))
    return np.where((e_squared > 0.0) & np.isfinite(e_squared), np.sqrt(np.abs(e_squared)), np.nan)


def global_min_surface_a(e: ArrayLike, w: ArrayLike, p: float, q: float) -> FloatArray:
    """a with e^2 (1 + a e^2)(1 + 2w|w|) = c*, i.e. Theta_* of Thm 10(i) at fixed (e, w).

    Paper B Eq. (49). The result is NaN where no a solves it (e = 0 or w = -1/sqrt 2).
    """
    constants = chain_constants(p, q)
    e, w = _floats(e, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (constants.c_star / (e**2 * (1.0 + 2.0 * _signed_square(w))) - 1.0) / e**2
    return np.where(np.isfinite(a), a, np.nan)


def classify_limit(
    theta: ArrayLike,
    p: float,
    q: float,
    *,
    e_tol: float = 1e-4,
    gap_tol: float = 1e-3,
    saddle_tol: float = 1e-2,
) -> NDArray[np.int8]:
    """Which critical set of paper B Thm 1 (2D) / Thm 10 (3D) each point lies near.

    theta has shape (..., 2) or (..., 3); the result holds `LimitClass` codes with shape
    theta.shape[:-1]. The rules are ours (the paper gives none), checked in this order:
    * STAR: |e| >= e_tol and |Delta_a - c*| < gap_tol (Theta_*).
    * SAD: |e| < e_tol and |w + 1/sqrt 2| < saddle_tol (Theta_sad; a line in 3D).
    * MIN / MAX: |e| < e_tol, by the sign of (p+q-1)(1 + 2w|w|) (Theta_min / Theta_max).
    * STATION: |e| >= e_tol, |w + 1/sqrt 2| < saddle_tol and |1 + a e^2| < saddle_tol.
    * UNCONVERGED: anything else.
    """
    constants = chain_constants(p, q)
    sign = _switching_sign(constants)
    e, w, a = _split_point(theta)
    on_w_axis = np.abs(e) < e_tol
    near_saddle_w = np.abs(w - SADDLE_W) < saddle_tol
    curvature = sign * (1.0 + 2.0 * _signed_square(w))
    conditions = [
        ~on_w_axis & (np.abs(logit_gap(e, w, a) - constants.c_star) < gap_tol),
        on_w_axis & near_saddle_w,
        on_w_axis & (curvature > 0.0),
        on_w_axis & (curvature < 0.0),
        ~on_w_axis & near_saddle_w & (np.abs(1.0 + a * e**2) < saddle_tol),
    ]
    choices = [LimitClass.STAR, LimitClass.SAD, LimitClass.MIN, LimitClass.MAX, LimitClass.STATION]
    return np.select(conditions, choices, default=LimitClass.UNCONVERGED).astype(np.int8)


# --------------------------------------------------------------------------------------
# Basins of attraction (Thm 2, Thm 8, §4 I_common)
# --------------------------------------------------------------------------------------


def separatrix_half_width(w: ArrayLike) -> FloatArray:
    """g(w) = sqrt(w^2 - log(-w) + E_sad) for w < 0 (NaN for w >= 0).

    Paper B Thm 2(i), Thm 8 and §4 (I_common); App. G.1. For w < 0, |e| < g(w) iff
    E(e, w) < E_sad, and |e| = g(w) is the separatrix through the saddle. Main-text
    Thm 2(ii) misprints the radicand as w^2 log(-w) + E_sad (typo 1 of the module docstring). That
    radicand is negative on all of [-1/sqrt 2, 0), which would leave I_sad empty.
    """
    (w,) = _floats(w)
    negative = w < 0.0
    safe_w = np.where(negative, w, -1.0)
    radicand = safe_w**2 - np.log(-safe_w) + ENERGY_SADDLE
    return np.where(negative, np.sqrt(np.maximum(radicand, 0.0)), np.nan)


def _energy_above_saddle(e: FloatArray, w: FloatArray) -> FloatArray:
    """E(e, w) - E_sad where w < 0 (it is < 0 iff |e| < g(w)), NaN elsewhere."""
    return np.where(w < 0.0, energy(e, w) - ENERGY_SADDLE, np.nan)


def is_in_basin_min(
    e: ArrayLike, w: ArrayLike, p: float, q: float, *, separatrix_tol: float = 1e-12
) -> NDArray[np.bool_]:
    """theta_0 in I_min: the flow converges to a local minimum.

    * p + q > 1 (Thm 2(i)): I_min = {-1/sqrt 2 < w < 0, |e| < g(w)} U {w >= 0}.
    * p + q < 1 (Thm 8(i)): I_min = {w < -1/sqrt 2, |e| < g(w)}.

    Points whose energy is within `separatrix_tol` of E_sad count as on the separatrix
    (`is_in_basin_sad`).
    """
    sign = _switching_sign(chain_constants(p, q))
    e, w = _floats(e, w)
    inside_separatrix = _energy_above_saddle(e, w) < -separatrix_tol
    if sign > 0:
        return (w >= 0.0) | ((w > SADDLE_W) & (w < 0.0) & inside_separatrix)
    return (w < SADDLE_W) & inside_separatrix


def is_in_basin_sad(
    e: ArrayLike, w: ArrayLike, p: float, q: float, *, separatrix_tol: float = 1e-12
) -> NDArray[np.bool_]:
    """theta_0 in I_sad: the flow converges to the saddle (0, -1/sqrt 2).

    * p + q > 1 (Thm 2(ii)): I_sad = {-1/sqrt 2 <= w < 0, |e| = g(w)}.
    * p + q < 1 (Thm 8(ii)): I_sad = {w <= -1/sqrt 2, |e| = g(w)}.

    Here |e| = g(w) means |E(e, w) - E_sad| <= `separatrix_tol`. The main text misprints g
    in Thm 2(ii); see `separatrix_half_width`.
    """
    sign = _switching_sign(chain_constants(p, q))
    e, w = _floats(e, w)
    on_separatrix = np.abs(_energy_above_saddle(e, w)) <= separatrix_tol
    if sign > 0:
        return (w >= SADDLE_W) & (w < 0.0) & on_separatrix
    return (w <= SADDLE_W) & on_separatrix


def is_in_basin_max(e: ArrayLike, w: ArrayLike, p: float, q: float) -> NDArray[np.bool_]:
    """theta_0 in I_max = Theta_max: a local maximum, where the flow stays.

    * p + q > 1 (Thm 2(iii)): I_max = {e = 0, w < -1/sqrt 2}.
    * p + q < 1 (Thm 8(iii)): I_max = {e = 0, w > -1/sqrt 2}.
    """
    sign = _switching_sign(chain_constants(p, q))
    e, w = _floats(e, w)
    return (e == 0.0) & ((w < SADDLE_W) if sign > 0 else (w > SADDLE_W))


def is_in_basin_star(
    e: ArrayLike, w: ArrayLike, p: float, q: float, *, separatrix_tol: float = 1e-12
) -> NDArray[np.bool_]:
    """theta_0 in I_* = R^2 minus (I_min U I_sad U I_max): the flow reaches a global minimum.

    Paper B Thm 2(iv) and Thm 8(iv).
    """
    return ~(
        is_in_basin_min(e, w, p, q, separatrix_tol=separatrix_tol)
        | is_in_basin_sad(e, w, p, q, separatrix_tol=separatrix_tol)
        | is_in_basin_max(e, w, p, q)
    )


def is_in_common_basin(
    e: ArrayLike, w: ArrayLike, *, separatrix_tol: float = 1e-12
) -> NDArray[np.bool_]:
    """theta_0 in I_common = {w < 0, |e| > g(w)} = {w < 0, E(e, w) > E_sad} (paper B §4).

    It lies in I_* for every (p, q) with p + q != 1.
    """
    e, w = _floats(e, w)
    return (w < 0.0) & (_energy_above_saddle(e, w) > separatrix_tol)


def basin_of(
    e: ArrayLike, w: ArrayLike, p: float, q: float, *, separatrix_tol: float = 1e-12
) -> NDArray[np.int8]:
    """`LimitClass` code (STAR, MIN, SAD or MAX) of the basin of each (e, w), per Thm 2 / Thm 8.

    This is the basin map of Fig. 1b/1d. The inputs broadcast, e.g. ``basin_of(e[:, None],
    w[None, :], p, q)`` on a grid.
    """
    conditions = [
        is_in_basin_max(e, w, p, q),
        is_in_basin_sad(e, w, p, q, separatrix_tol=separatrix_tol),
        is_in_basin_min(e, w, p, q, separatrix_tol=separatrix_tol),
    ]
    choices = [LimitClass.MAX, LimitClass.SAD, LimitClass.MIN]
    return np.select(conditions, choices, default=LimitClass.STAR).astype(np.int8)


def _probability_outside_separatrix(w: float, sigma: float) -> float:
    """P(|e| > g(w)) for e ~ N(0, sigma^2): 2 Phi(-g(w)/sigma)."""
    return float(2.0 * norm.sf(separatrix_half_width(w) / sigma))


def gaussian_basin_probability(sigma: float, p: float, q: float) -> float:
    """P(theta_0 in I_*) for theta_0 = (e, w) ~ N(0, sigma^2 I_2), by quadrature over w.

    The sets are those of Thm 2 (p + q > 1) and Thm 8 (p + q < 1); I_sad and I_max are
    null sets. With phi_sigma the N(0, sigma^2) density:
    * p + q > 1: I_* = {w < -1/sqrt 2} U {-1/sqrt 2 < w < 0, |e| > g(w)}, so
      P = Phi(-1/(sqrt 2 sigma)) + int_{-1/sqrt 2}^0 phi_sigma(w) 2 Phi(-g(w)/sigma) dw.
    * p + q < 1: I_min = {w < -1/sqrt 2, |e| < g(w)}, so
      P = 1 - int_{-inf}^{-1/sqrt 2} phi_sigma(w) (1 - 2 Phi(-g(w)/sigma)) dw.
    The result depends on (p, q) only through the sign of p + q - 1 (ours, by
    quadrature over these sets; "sigma^2 << 1/sqrt 2" of Thm 2 means a small sigma).
    """
    if not sigma > 0.0:
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    sign = _switching_sign(chain_constants(p, q))

    def density(w: float) -> float:
        return float(norm.pdf(w, scale=sigma))

    if sign > 0:
        inner, _ = quad(
            lambda w: density(w) * _probability_outside_separatrix(w, sigma), SADDLE_W, 0.0
        )
        return float(norm.cdf(SADDLE_W / sigma)) + inner
    outer, _ = quad(
        lambda w: density(w) * (1.0 - _probability_outside_separatrix(w, sigma)),
        -np.inf,
        SADDLE_W,
    )
    return 1.0 - outer


# --------------------------------------------------------------------------------------
# Predicted limit points (ours, from the proofs of Thm 2 / Thm 8)
# --------------------------------------------------------------------------------------


def _root_by_expansion(fun: Callable[[float], float], start: float, direction: float) -> float:
    """Root of `fun`, which changes sign between `start` and start + direction * infinity."""
    start_value = fun(start)
    if start_value == 0.0:
        return start
    previous, step = start, 0.5
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(12):
            current = start + direction * step
            if np.sign(fun(current)) != np.sign(start_value):
                low, high = sorted((previous, current))
                return float(brentq(fun, low, high, xtol=1e-15, rtol=4.0 * np.finfo(float).eps))
            previous, step = current, 2.0 * step
    raise RuntimeError("no sign change found: the energy level is out of range")


_Branch = Literal["positive", "inner", "outer"]
"""Branches of the w-axis: w > 0, -1/sqrt 2 < w < 0, and w < -1/sqrt 2."""


def _branch_of(w: float) -> _Branch:
    if w > 0.0:
        return "positive"
    return "inner" if w > SADDLE_W else "outer"


def _w_axis_crossing(energy0: float, branch: _Branch) -> float:
    """log|w| of the point (0, w) on `branch` with energy E(0, w) = energy0.

    It relies on the monotonicity of f(w) = E(0, w) (paper B Lemma 12). f decreases on
    w > 0 from +inf to -inf, and on the inner branch from E_sad to -inf. Lemma 12(ii)
    writes that image interval backwards, as [E_sad, -inf). On the outer branch f
    increases from -inf to E_sad.
    """
    w_sign = 1.0 if branch == "positive" else -1.0

    def gap_to_level(log_abs_w: float) -> float:
        return -(np.exp(2.0 * log_abs_w) + w_sign * log_abs_w) - energy0

    if branch == "positive":
        return _root_by_expansion(gap_to_level, 0.0, -1.0 if gap_to_level(0.0) < 0.0 else 1.0)
    return _root_by_expansion(gap_to_level, _LOG_ABS_SADDLE_W, -1.0 if branch == "inner" else 1.0)


def _global_min_on_contour(
    energy0: float, e_sign: float, branch: _Branch, c_star: float
) -> FloatArray:
    """The point of Theta_* on the contour E = energy0 and on `branch` (proofs of Thms 2/8).

    Along the branch, Delta is monotone on the part of the contour with e^2 >= 0. Between the
    contour's end (where e = 0, or w = -1/sqrt 2) and the far end of the branch, Delta - c*
    therefore has a single sign change.
    """
    w_sign = 1.0 if branch == "positive" else -1.0

    def e_squared(log_abs_w: float) -> float:
        return energy0 + np.exp(2.0 * log_abs_w) + w_sign * log_abs_w

    def gap_to_c_star(log_abs_w: float) -> float:
        signed_square_w = w_sign * np.exp(2.0 * log_abs_w)
        return e_squared(log_abs_w) * (1.0 + 2.0 * signed_square_w) - c_star

    if branch != "positive" and energy0 >= ENERGY_SADDLE:
        contour_end = _LOG_ABS_SADDLE_W
    else:
        contour_end = _w_axis_crossing(energy0, branch)
    log_abs_w = _root_by_expansion(gap_to_c_star, contour_end, -1.0 if branch == "inner" else 1.0)
    return np.array(
        [e_sign * math.sqrt(max(e_squared(log_abs_w), 0.0)), w_sign * math.exp(log_abs_w)]
    )


def predicted_limit(e0: float, w0: float, p: float, q: float) -> FloatArray:
    """The limit (e, w) of the 2D gradient flow from (e0, w0), predicted in closed form.

    The flow stays on its energy contour (Lemma 9) and converges to the contour's unique
    intersection with the critical set of the limit class given by `basin_of` (proofs of
    Thm 2 / Thm 8; our derivation). Initial points on the e-axis (w0 = 0) converge to the
    origin when p + q > 1, and to (sign(e0) sqrt(c*), 0) when p + q < 1.
    """
    constants = chain_constants(p, q)
    e0, w0 = float(e0), float(w0)
    basin = LimitClass(int(basin_of(e0, w0, p, q)))
    if basin is LimitClass.MAX:
        return np.array([e0, w0])
    if basin is LimitClass.SAD:
        return np.array([0.0, SADDLE_W])
    if w0 == 0.0:
        e_limit = 0.0 if basin is LimitClass.MIN else math.copysign(math.sqrt(constants.c_star), e0)
        return np.array([e_limit, 0.0])
    energy0 = float(energy(e0, w0))
    w_sign = math.copysign(1.0, w0)
    if basin is LimitClass.MIN:
        return np.array([0.0, w_sign * math.exp(_w_axis_crossing(energy0, _branch_of(w0)))])
    if w0 > 0.0:
        branch: _Branch = "positive"
    else:
        branch = "inner" if constants.switching < 0.0 else "outer"
    return _global_min_on_contour(energy0, math.copysign(1.0, e0), branch, constants.c_star)


# --------------------------------------------------------------------------------------
# Gradient-flow integration
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GradientFlowResult:
    """One integrated gradient-flow trajectory and its diagnostics.

    `energy_drift` is max_t |E(theta_t) - E(theta_0)| / max(1, |E(theta_0)|), the quantity
    bounded by the energy checks of Figs. 1 and 2 (Lemmas 1, 14). It is NaN when w0 = 0, where E
    is undefined.
    """

    t: FloatArray
    theta: FloatArray
    energy: FloatArray
    energy_drift: float
    limit_class: LimitClass
    gradient_norm: float
    success: bool
    message: str

    @property
    def limit(self) -> FloatArray:
        """The last point of the trajectory, the numerical theta_lim."""
        return self.theta[-1]


def _flow_rhs(_t: float, theta: FloatArray, p: float, q: float) -> FloatArray:
    return gradient_flow_velocity(theta, p, q)


def _flow_result(
    t: FloatArray, theta: FloatArray, success: bool, message: str, p: float, q: float
) -> GradientFlowResult:
    """Diagnostics of one integrated trajectory ``theta`` (shape (len(t), 2 or 3))."""
    e, w, a = _split_point(theta)
    energies = energy(e, w, a)
    drift = float(np.max(np.abs(energies - energies[0])) / max(1.0, abs(energies[0])))
    limit_class = (
        LimitClass(int(classify_limit(theta[-1], p, q))) if success else LimitClass.UNCONVERGED
    )
    return GradientFlowResult(
        t=t,
        theta=theta,
        energy=energies,
        energy_drift=drift,
        limit_class=limit_class,
        gradient_norm=float(np.linalg.norm(gradient_flow_velocity(theta[-1], p, q))),
        success=success,
        message=message,
    )


def integrate_gradient_flow(
    theta0: ArrayLike,
    p: float,
    q: float,
    *,
    t_max: float = 3000.0,
    method: str = "LSODA",
    rtol: float = 1e-9,
    atol: float = 1e-11,
    t_eval: ArrayLike | None = None,
) -> GradientFlowResult:
    """Integrate (GF) for theta0 = (e, w), or (GF-attn) for theta0 = (e, w, a), to t_max.

    It uses scipy's `solve_ivp`. The default, LSODA, detects stiffness and switches between
    an Adams and a BDF stepper on its own; "Radau" and "BDF" are the other stiff choices,
    "DOP853" a non-stiff one. The defaults T = 3000, rtol = 1e-9 and atol = 1e-11 are
    ours.
    With `t_eval` None, the trajectory holds every accepted step. The limit class is
    `classify_limit` of the last point, or UNCONVERGED if the solver failed.
    """
    theta0 = np.asarray(theta0, dtype=np.float64)
    if theta0.shape not in ((2,), (3,)) or not np.all(np.isfinite(theta0)):
        raise ValueError(f"theta0 must be a finite (e, w) or (e, w, a), got {theta0!r}")
    chain_constants(p, q)
    solution = solve_ivp(
        _flow_rhs,
        (0.0, float(t_max)),
        theta0,
        method=method,
        rtol=rtol,
        atol=atol,
        t_eval=t_eval,
        args=(p, q),
    )
    return _flow_result(
        solution.t, solution.y.T, bool(solution.success), str(solution.message), p, q
    )


def _block_diagonal_options(method: str, n: int, dim: int) -> dict[str, object]:
    """Jacobian structure of n uncoupled dim-dimensional flows stacked as (n * dim,).

    LSODA takes it as a band (half-width dim - 1); BDF and Radau as a sparsity pattern.
    The explicit Runge-Kutta methods use no Jacobian.
    """
    if method == "LSODA":
        return {"lband": dim - 1, "uband": dim - 1}
    if method in ("BDF", "Radau"):
        return {"jac_sparsity": np.kron(np.eye(n), np.ones((dim, dim)))}
    return {}


def integrate_gradient_flows(
    inits: ArrayLike,
    p: float,
    q: float,
    *,
    t_max: float = 3000.0,
    method: str = "LSODA",
    rtol: float = 1e-9,
    atol: float = 1e-11,
    t_eval: ArrayLike | None = None,
) -> list[GradientFlowResult]:
    """The flows from each row of `inits` (shape (n, 2) or (n, 3)), integrated together.

    The n flows are uncoupled, so they are stacked into one (n * dim)-dimensional system
    whose Jacobian is block diagonal, and integrated by one `solve_ivp` call: the vector
    field is evaluated once per step for all of them (10-50x faster than n separate calls).
    Every result shares the time grid. LSODA's error test uses a weighted max-norm over the
    components, so each trajectory keeps the per-component rtol/atol of
    `integrate_gradient_flow`; the defaults are ours.

    For Gaussian inits pass ``rng.normal(0, sigma, (n, dim))``; for a grid pass the
    stacked, flattened mesh.
    """
    inits = np.asarray(inits, dtype=np.float64)
    if inits.ndim != 2 or inits.shape[1] not in (2, 3) or not np.all(np.isfinite(inits)):
        raise ValueError(f"inits must be finite with shape (n, 2) or (n, 3), got {inits.shape}")
    chain_constants(p, q)
    n, dim = inits.shape

    def rhs(_t: float, stacked: FloatArray) -> FloatArray:
        return gradient_flow_velocity(stacked.reshape(n, dim), p, q).ravel()

    solution = solve_ivp(
        rhs,
        (0.0, float(t_max)),
        inits.ravel(),
        method=method,
        rtol=rtol,
        atol=atol,
        t_eval=t_eval,
        **_block_diagonal_options(method, n, dim),
    )
    paths = solution.y.reshape(n, dim, -1).transpose(0, 2, 1)
    success, message = bool(solution.success), str(solution.message)
    return [_flow_result(solution.t, path, success, message, p, q) for path in paths]
