"""Plateaus and transitions of a test-loss curve, and their k-gram levels (ours, paper C).

The detector needs no level in advance: it finds flat stretches of the smoothed curve
relative to the curve's own mean descent rate, over the whole run (our rule) and, with
``local_scale``, over the run so far (paper C's stage analysis). Defaults are our
calibrated values.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Plateau:
    """A flat stretch [t0, t1] (steps) at loss ``level`` = median of the raw loss on it."""

    t0: float
    t1: float
    level: float


@dataclass(frozen=True)
class Transition:
    """The stretch between two consecutive plateaus; ``drop`` = level before - level after."""

    t0: float
    t1: float
    drop: float


def running_median(values: Sequence[float] | np.ndarray, window: int = 9) -> np.ndarray:
    """Centred running median over ``window`` points, truncated at both ends."""
    values = np.asarray(values, dtype=np.float64)
    half = window // 2
    return np.array(
        [np.median(values[max(0, j - half) : j + half + 1]) for j in range(len(values))]
    )


def _flat_runs(flat: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs [a, b] (inclusive indices) of True."""
    runs, start = [], None
    for j, is_flat in enumerate(flat):
        if is_flat and start is None:
            start = j
        if not is_flat and start is not None:
            runs.append((start, j - 1))
            start = None
    if start is not None:
        runs.append((start, len(flat) - 1))
    return runs


def _slopes(t: np.ndarray, smooth: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s_j = (L~_{j-h_j} - L~_{j+h_j}) / (t_{j+h_j} - t_{j-h_j}) with indices clipped to the
    curve (`detect_plateaus`, step 3), and the clipped indices j + h_j."""
    index = np.arange(len(t))
    before = np.clip(index - h, 0, len(t) - 1)
    after = np.clip(index + h, 0, len(t) - 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # a window of one step: NaN, not flat
        return (smooth[before] - smooth[after]) / (t[after] - t[before]), after


def detect_plateaus(
    steps: Sequence[float] | np.ndarray,
    losses: Sequence[float] | np.ndarray,
    *,
    window: int = 9,
    kappa: float = 0.5,
    rho: float = 0.05,
    slope_span: float = 0.025,
    merge_abs: float = 0.003,
    merge_rel: float = 0.05,
    reference_steps: float | None = None,
    floor: float | None = None,
    local_scale: bool = False,
) -> list[Plateau]:
    """Plateaus of a loss curve evaluated at increasing ``steps`` (ours, steps 1-4).

    1. L~ = centred running median of the loss over ``window`` evaluations.
    2. Delta = L~_0 - ``floor`` (min L~ when None), r = Delta / t_ref,
       h = max(1, round(slope_span t_ref / E)) evaluations, E = median evaluation interval;
       t_ref = ``reference_steps``, or the run's own length t_max = steps[-1] - steps[0]
       when None.
    3. s_j = (L~_{j-h} - L~_{j+h}) / (t_{j+h} - t_{j-h}), indices clipped to the curve;
       point j is flat if s_j <= kappa r.
    4. A plateau is a maximal run of flat points lasting >= rho t_ref steps, level = the
       median of the raw loss over the run. Consecutive plateaus whose levels differ by
       <= max(merge_abs, merge_rel Delta) and whose gap is <= rho t_ref are merged (in this
       order: length filter, then merging; the merged level is the median over the merged
       interval).

    With t_ref = t_max the thresholds scale with the run: a flat tail added to a curve
    lowers the flatness threshold and lengthens the minimum plateau, and can remove every
    early plateau. A fixed ``reference_steps`` (the paper's run length) gives thresholds in
    steps and nats per step that do not depend on where the run stops, once Delta does not
    either: ``floor`` = the level the run descends to (paper C: the n-gram loss b_n), not
    the lowest point this run reached.

    ``local_scale``: also judge each point as steps 2-4 would judge the run stopped there,
    on the scale of the steps elapsed. One scale t_ref for the whole run misses the early
    plateaus of paper C's own curves, whose stages lengthen as training proceeds: at E = 16,
    Fig. 1's unigram plateau (steps ~20-250 of t_ref = 6,144) is narrower than the slope
    window (+-160 steps), and Fig. 4's bigram plateau (~200-320 of 4,096) shorter than
    rho t_ref = 123 steps plus its window (+-96 steps) (read off paper C's Figs. 1 and 4;
    readings in `replicate.experiments.subngrams.paper_readings`). Our detector distils the
    paper's figures; where they disagree, the figures win. The local rule, at evaluation j:
    * time scale: T_j = t_j - t_0 clipped to [T_min, t_ref], T_min = (window // 2) E /
      slope_span; at shorter scales the slope window would be narrower than the running
      median's half-width, and the slope of the smoothed curve mostly noise;
    * slope: s'_j as in step 3 over h_j = round(slope_span T_j / E) evaluations, each L~
      placed at the median step of its window, so that the truncated windows at the ends
      do not halve the slope of a steady descent there;
    * flatness: s'_j <= kappa r_j, r_j = (L_0 - min L~ up to j + h_j) / (steps elapsed by
      j + h_j), step 2's rate for the run stopped at the slope window's far end, with L_0
      the first loss unsmoothed (the median replaces it by a later level when the first
      drop is shorter than half the window: Fig. 1 falls from 1.10 to 1.058 within 20
      steps);
    * plateau: a run of such points lasting >= rho T at its last point and sharing no
      point with a plateau of step 4.
    So the local rule adds the plateaus that are flat and long relative to the time the
    run took to reach them, wherever the run stops, and that the run-scale rule cannot
    resolve; the plateaus of step 4 and the merging are the run-scale rule's, unchanged. A steady
    descent is never flat by the local rule (its slope is its own mean rate, twice the
    threshold), and a curve flat at its first loss is one plateau by both rules.
    """
    t = np.asarray(steps, dtype=np.float64)
    loss = np.asarray(losses, dtype=np.float64)
    if t.ndim != 1 or t.shape != loss.shape or len(t) < 2 or (np.diff(t) <= 0).any():
        raise ValueError("steps and losses must be 1-D, of equal length >= 2, steps increasing")
    smooth = running_median(loss, window)
    t_ref = t[-1] - t[0] if reference_steps is None else float(reference_steps)
    delta = smooth[0] - (smooth.min() if floor is None else floor)
    spacing = float(np.median(np.diff(t)))
    slope, _ = _slopes(t, smooth, np.full(len(t), max(1, round(slope_span * t_ref / spacing))))
    flat = slope <= kappa * delta / t_ref
    runs = [(a, b) for a, b in _flat_runs(flat) if t[b] - t[a] >= rho * t_ref]
    if local_scale:
        scale = np.clip(t - t[0], min(t_ref, (window // 2) * spacing / slope_span), t_ref)
        centre = running_median(t, window)
        h = np.maximum(1, np.round(slope_span * scale / spacing)).astype(int)
        slope, after = _slopes(centre, smooth, h)
        rate = (loss[0] - np.minimum.accumulate(smooth)[after]) / (centre[after] - t[0])
        found = np.zeros(len(t), dtype=bool)
        for a, b in runs:
            found[a : b + 1] = True
        runs += [
            (a, b)
            for a, b in _flat_runs(slope <= kappa * rate)
            if t[b] - t[a] >= rho * scale[b] and not found[a : b + 1].any()
        ]
        runs.sort()
    merged: list[tuple[int, int]] = []
    tolerance = max(merge_abs, merge_rel * delta)
    for a, b in runs:
        if merged:
            pa, pb = merged[-1]
            close = abs(np.median(loss[pa : pb + 1]) - np.median(loss[a : b + 1])) <= tolerance
            if close and t[a] - t[pb] <= rho * t_ref:
                merged[-1] = (pa, b)
                continue
        merged.append((a, b))
    return [Plateau(float(t[a]), float(t[b]), float(np.median(loss[a : b + 1]))) for a, b in merged]


def transitions(plateaus: Sequence[Plateau]) -> list[Transition]:
    """The stretches between consecutive plateaus and their drops (ours)."""
    return [Transition(p.t1, q.t0, p.level - q.level) for p, q in itertools.pairwise(plateaus)]


def assign_level(
    level: float,
    baselines: Sequence[float],
    *,
    lower_fraction: float = 0.5,
    upper_margin: float = 0.02,
    final_margin: float = 0.05,
) -> int | None:
    """The order k (1-indexed) a plateau level belongs to, or None (ours, docs/choices.md).

    ``baselines`` = b_1 > b_2 > ... > b_n, the add-alpha k-gram losses on the same test
    set. Bands: b_k - lower_fraction (b_k - b_{k+1}) <= level <= b_k + upper_margin for
    k < n; level <= b_n + final_margin for k = n. Asymmetric because trained models land
    0.01-0.035 nats below add-alpha. Where bands overlap the nearest b_k wins (ties: the
    smaller k).
    """
    b = [float(x) for x in baselines]
    if any(hi <= lo for hi, lo in itertools.pairwise(b)):
        raise ValueError(f"baselines must be strictly decreasing, got {b}")
    matches = [
        k
        for k in range(1, len(b) + 1)
        if (
            k < len(b)
            and b[k - 1] - lower_fraction * (b[k - 1] - b[k]) <= level <= b[k - 1] + upper_margin
        )
        or (k == len(b) and level <= b[k - 1] + final_margin)
    ]
    return min(matches, key=lambda k: (abs(level - b[k - 1]), k), default=None)


def level_calls(
    level: float,
    baselines: Sequence[float],
    width: float,
    *,
    lower_fraction: float = 0.5,
    upper_margin: float = 0.02,
    final_margin: float = 0.05,
) -> set[int | None]:
    """Every order `assign_level` gives some level in [level - width, level + width].

    One element: the call is firm. More: the level lies within ``width`` (the test set's
    standard error, say) of a band edge or of the point where the nearest b_k changes, so
    the call is decided by noise. The assignment is constant between the band edges and the
    midpoints (b_i + b_j) / 2, so it is read at the interval's ends and on both sides of
    every such point inside it.
    """
    if width < 0:
        raise ValueError(f"width must be >= 0, got {width}")
    band = {
        "lower_fraction": lower_fraction,
        "upper_margin": upper_margin,
        "final_margin": final_margin,
    }
    b = [float(x) for x in baselines]
    n = len(b)
    edges = [b[k] - lower_fraction * (b[k] - b[k + 1]) for k in range(n - 1)]
    edges += [b[k] + upper_margin for k in range(n - 1)] + [b[-1] + final_margin]
    edges += [(x + y) / 2 for x, y in itertools.combinations(b, 2)]
    lo, hi = level - width, level + width
    points = [lo, level, hi]
    for x in edges:
        if lo < x < hi:
            points += [np.nextafter(x, -np.inf), x, np.nextafter(x, np.inf)]
    return {assign_level(x, b, **band) for x in points}


def still_falling(
    steps: Sequence[float] | np.ndarray,
    losses: Sequence[float] | np.ndarray,
    fraction: float,
    z: float,
    min_drop: float,
) -> bool | None:
    """Whether a run is still learning when it stops: over the evaluations in the last
    ``fraction`` of its steps, the least-squares slope of the test loss is below zero by
    more than ``z`` of its standard errors (from the residuals about the line, so that the
    evaluation noise of a fixed test set sets the scale), and the line falls by at least
    ``min_drop`` (nats) across the window (a schedule's last, tiny gains are not learning
    that could change a verdict). A claim about the end of training read on such a run has
    not tested it (the paper trains to convergence, e.g. paper D, App. H: 30,000 steps).
    None where fewer than 4 evaluations fall in the window: the curve cannot tell."""
    t = np.asarray(steps, dtype=np.float64)
    y = np.asarray(losses, dtype=np.float64)
    window = t >= t[-1] - fraction * (t[-1] - t[0])
    t, y = t[window], y[window]
    if len(t) < 4:
        return None
    centred = t - t.mean()
    slope = float((centred * (y - y.mean())).sum() / (centred**2).sum())
    residuals = y - y.mean() - slope * centred
    error = float(np.sqrt((residuals**2).sum() / (len(t) - 2) / (centred**2).sum()))
    return slope < -z * error and -slope * float(t[-1] - t[0]) >= min_drop
