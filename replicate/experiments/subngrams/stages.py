"""Stage-wise analysis of paper C's training curves (our method): plateaus, their k-gram
levels, the first-layer heads' offsets and the gradient norm around each transition."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from replicate.analysis import (
    Plateau,
    assign_level,
    detect_plateaus,
    head_on_offset,
    level_calls,
    offset_masses,
    running_median,
)
from replicate.settings import NonNegativeFloat, PositiveInt, Strict

OFFSETS = (0, 1, 2, 3)  # delta of m_h(delta) (ours)
FIRST_ROW = 3  # m_h(delta) averages rows l >= 3 (ours)


class StageSettings(Strict):
    """Detector and head thresholds (ours): plateaus of >= rho t_ref steps, flat where
    the loss falls by <= kappa (L_0 - b_n) / t_ref per step, or of >= rho T steps flat on the
    scale T of the steps elapsed (`detect_plateaus` with ``local_scale``, which finds paper
    C's own early plateaus: Fig. 1's unigram, Fig. 4's bigram); a head is on offset delta
    when m_h(delta) >= threshold and >= dominance x every other offset.

    t_ref = ``reference_steps``, the paper's run length for this figure at both scales, so a
    plateau is the same number of steps and the same slope whether the run stops at the
    paper's step or earlier; L_0 the run's smoothed first loss, b_n the n-gram loss on the
    test set.

    A plateau's k-gram order is called firmly only when every level within ``call_se``
    standard errors of the test loss gets the same order (`level_calls`); otherwise each
    order it could get is a reading of the run (`Stages.readings`), and a claim whose
    verdict differs between readings is inconclusive."""

    rho: float
    threshold: float
    dominance: float
    reference_steps: PositiveInt
    call_se: NonNegativeFloat
    local_scale: bool = True
    """Also find plateaus flat on the scale of the steps elapsed (`detect_plateaus`): the
    paper's figures show early plateaus that a rule on the scale of the whole run alone misses
    (the positive control, `paper_readings`); False gives that run-scale detector alone."""


def masses_of(attention: torch.Tensor) -> np.ndarray:
    """m_h(delta) for delta in OFFSETS of first-layer maps (..., T, T): (..., len(OFFSETS))."""
    return offset_masses(attention.detach(), OFFSETS, FIRST_ROW).double().cpu().numpy()


def heads_on(masses: np.ndarray, s: StageSettings) -> set[int]:
    """The offsets delta some head is on, from (H, len(OFFSETS)) masses."""
    on = {head_on_offset(row, OFFSETS, s.threshold, s.dominance) for row in masses}
    return {d for d in on if d is not None}


@dataclass(frozen=True)
class Stages:
    """One member's plateaus and their assigned k-gram orders (None: no band matches);
    ``t_ref`` the length (steps) the detector's thresholds and the windows below scale with;
    ``calls`` every order each plateau's level could get within the test loss's noise
    (`level_calls`; one order when the call is firm)."""

    plateaus: list[Plateau]
    orders: list[int | None]
    t_ref: float
    calls: list[frozenset[int | None]]

    def readings(self) -> Iterator[Stages]:
        """The run read with every combination of its plateaus' possible orders (one, this
        reading, when every call is firm)."""
        options = [sorted(c, key=lambda o: -1 if o is None else o) for c in self.calls]
        for orders in itertools.product(*options):
            yield replace(self, orders=list(orders), calls=[frozenset({o}) for o in orders])

    @property
    def intermediate(self) -> list[Plateau]:
        """Every plateau but the last (the last usually ends at the run's end: convergence)."""
        return self.plateaus[:-1]

    @property
    def final_order(self) -> int | None:
        """The order of the last plateau (None: no plateau, or no band matches its level)."""
        return self.orders[-1] if self.orders else None

    def longest_intermediate(self) -> Plateau | None:
        return max(self.intermediate, key=lambda p: p.t1 - p.t0, default=None)

    def second_plateau(self, order: int) -> Plateau | None:
        """Paper C's "second plateau" (Fig. 3 and Fig. 5 captions): the first plateau not
        assigned to ``order`` (n: a sub-n-gram plateau), in time, the last one included (a
        run that ends before its escape ends on it). The initial stage, where both heads
        attend uniformly, is too short to be a plateau, so this is the plateau the escape
        (the head switch) ends. Our first reading took the longest such plateau (claims
        F3b, F5b), which is the plateau *after* the escape when a seed escapes early;
        the paper's order of events wins."""
        return next(
            (p for p, o in zip(self.plateaus, self.orders, strict=True) if o != order), None
        )


def stages(
    steps: np.ndarray,
    loss: np.ndarray,
    baselines: Sequence[float],
    s: StageSettings,
    noise: float,
) -> Stages:
    """Plateaus of one test-loss curve and their k-gram orders (ours); no plateau is
    assigned when the k-gram losses are not strictly decreasing (a test set too small to
    order them). ``noise``: the standard error (nats) of a loss on the test set
    (`level_noise`); each plateau's calls are the orders of every level within
    ``s.call_se`` x ``noise`` of its own (`level_calls`). Plateaus are judged at the run's
    scale and at the scale of the steps elapsed (``local_scale``): our run-scale rule
    alone misses plateaus that paper C's Figs. 1 and 4 show (`paper_readings`)."""
    plateaus = detect_plateaus(
        steps,
        loss,
        rho=s.rho,
        reference_steps=s.reference_steps,
        floor=float(baselines[-1]),
        local_scale=s.local_scale,
    )
    ordered = all(a > b for a, b in itertools.pairwise(baselines))
    orders = [assign_level(p.level, baselines) if ordered else None for p in plateaus]
    width = s.call_se * noise
    calls = [
        frozenset(level_calls(p.level, baselines, width)) if ordered else frozenset({None})
        for p in plateaus
    ]
    return Stages(plateaus, orders, float(s.reference_steps), calls)


def with_call_bounds(
    stage: Stages, measure: Callable[[Stages], Mapping[str, float]], keys: Iterable[str]
) -> dict[str, float]:
    """``measure(stage)``, and for each of ``keys`` the least and the greatest value over
    the run's readings (`Stages.readings`) as ``<key>.lo`` and ``<key>.hi``: the range a
    claim on that value has while some level call is decided by noise (a claim reads them
    through ``per_seed.call_bounds``)."""
    values = dict(measure(stage))
    alternatives = [measure(reading) for reading in stage.readings()]
    for key in keys:
        seen = [float(v[key]) for v in alternatives]
        values[f"{key}.lo"], values[f"{key}.hi"] = min(seen), max(seen)
    return values


def index_at(steps: np.ndarray, step: float) -> int:
    """Evaluation index nearest to ``step``."""
    return int(np.abs(steps - step).argmin())


def midpoint_index(steps: np.ndarray, plateau: Plateau) -> int:
    return index_at(steps, 0.5 * (plateau.t0 + plateau.t1))


def first_step_on(steps: np.ndarray, masses: np.ndarray, delta: int, s: StageSettings) -> float:
    """First evaluation step at which some head is on ``delta`` (inf if never); masses (n, H, .)."""
    for step, m in zip(steps, masses, strict=True):
        if delta in heads_on(m, s):
            return float(step)
    return math.inf


def gradient_ratio(
    steps: np.ndarray, norms: np.ndarray, stage: Stages, smooth: bool
) -> tuple[float, float]:
    """(max over intermediate plateaus of g_med / g_max, step of the overall maximum).

    g_med: median norm on a plateau; g_max: maximum (of the running median when
    ``smooth``) over [t1 - 0.02 t_ref, t0_next + 0.02 t_ref] of the transition that follows
    (ours, for App. I.3's Fig. 6: F6b-F6d). NaN ratio when no plateau is followed by a transition.
    """
    curve = running_median(norms) if smooth else np.asarray(norms)
    margin = 0.02 * stage.t_ref
    ratios = []
    for p, q in itertools.pairwise(stage.plateaus):
        on = (steps >= p.t0) & (steps <= p.t1)
        window = (steps >= p.t1 - margin) & (steps <= q.t0 + margin)
        ratios.append(float(np.median(norms[on]) / curve[window].max()))
    peak = float(steps[int(np.argmax(curve))])
    return (max(ratios) if ratios else math.nan), peak


def spike_factor(steps: np.ndarray, norms: np.ndarray, stage: Stages) -> float:
    """Min over transitions of g_max(transition) / g_max(plateau): how far the smoothed
    minibatch norm around a transition rises above its own largest excursion on the plateau
    before it (F6b). The transition window is `gradient_ratio`'s; the plateau window has the
    same length, centred on the plateau and clipped to it, so noise alone gives about 1
    (g_med / g_max does not: 0.55 on a run without a transition). NaN when no plateau is
    followed by a transition.
    """
    curve = running_median(norms)
    margin = 0.02 * stage.t_ref
    factors = []
    for p, q in itertools.pairwise(stage.plateaus):
        transition = (steps >= p.t1 - margin) & (steps <= q.t0 + margin)
        half = 0.5 * (q.t0 - p.t1) + margin
        middle = 0.5 * (p.t0 + p.t1)
        plateau = (steps >= max(p.t0, middle - half)) & (steps <= min(p.t1, middle + half))
        factors.append(float(curve[transition].max() / curve[plateau].max()))
    return min(factors, default=math.nan)


def mass_probe(model: torch.nn.Module) -> np.ndarray:
    """Probe: m_h(delta) (E, H, len(OFFSETS)) of a disentangled model's first layer."""
    return masses_of(model.first_layer_attention())


def max_rise(loss: np.ndarray) -> float:
    """Largest increase of the running-median curve above its running minimum (F1c)."""
    smooth = running_median(loss)
    return float((smooth - np.minimum.accumulate(smooth)).max())


def peak_distance(peak: float, stage: Stages) -> float:
    """Distance (fraction of t_ref) from ``peak`` to the nearest transition [t1, t0_next]
    (0 inside one; inf without transitions), F6d."""
    gaps = [
        max(0.0, p.t1 - peak, peak - q.t0) / stage.t_ref
        for p, q in itertools.pairwise(stage.plateaus)
    ]
    return min(gaps, default=math.inf)
