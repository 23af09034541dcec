"""Plateau detector and level assignment on synthetic curves (ours, paper C)."""

from __future__ import annotations

import numpy as np
import pytest

from replicate.analysis import (
    assign_level,
    detect_plateaus,
    level_calls,
    running_median,
    still_falling,
    transitions,
)

STEPS = np.arange(0, 3001, 10, dtype=np.float64)


def _piecewise(knots: list[tuple[float, float]], noise: float = 0.002, seed: int = 0):
    """Linear interpolation through (step, loss) knots plus Gaussian noise."""
    t, loss = zip(*knots, strict=True)
    clean = np.interp(STEPS, t, loss)
    return clean + np.random.default_rng(seed).normal(0.0, noise, STEPS.shape)


STAIRCASE = [
    (0, 1.70),
    (100, 1.60),
    (800, 1.60),
    (1000, 1.50),
    (1800, 1.50),
    (2000, 1.40),
    (3000, 1.40),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_staircase_gives_three_plateaus_at_the_right_levels(seed: int) -> None:
    plateaus = detect_plateaus(STEPS, _piecewise(STAIRCASE, seed=seed))
    assert len(plateaus) == 3
    for plateau, level, (start, end) in zip(
        plateaus, [1.60, 1.50, 1.40], [(100, 800), (1000, 1800), (2000, 3000)], strict=True
    ):
        assert abs(plateau.level - level) < 0.003
        # the slope window (h = 8 evaluations = 80 steps) blurs each edge by at most ~h
        assert start - 20 <= plateau.t0 <= start + 120
        assert end - 120 <= plateau.t1 <= end
    assert plateaus[-1].t1 == 3000
    drops = [tr.drop for tr in transitions(plateaus)]
    assert np.allclose(drops, [0.1, 0.1], atol=0.005)
    assert [(tr.t0, tr.t1) for tr in transitions(plateaus)] == [
        (plateaus[0].t1, plateaus[1].t0),
        (plateaus[1].t1, plateaus[2].t0),
    ]


def test_steady_descent_has_no_intermediate_plateau() -> None:
    """A straight descent, then convergence: only the final plateau."""
    plateaus = detect_plateaus(STEPS, _piecewise([(0, 1.7), (2000, 1.4), (3000, 1.4)]))
    assert len(plateaus) == 1
    assert abs(plateaus[0].level - 1.4) < 0.003
    assert 1950 <= plateaus[0].t0 <= 2150


def test_descent_without_convergence_has_no_plateau() -> None:
    assert detect_plateaus(STEPS, _piecewise([(0, 1.7), (3000, 1.4)])) == []


def test_too_short_plateau_is_not_counted() -> None:
    """An intermediate flat stretch of 80 steps < rho t_max = 150 steps."""
    knots = [(0, 1.6), (1000, 1.6), (1100, 1.5), (1180, 1.5), (1280, 1.4), (3000, 1.4)]
    plateaus = detect_plateaus(STEPS, _piecewise(knots))
    assert [round(p.level, 2) for p in plateaus] == [1.6, 1.4]
    assert transitions(plateaus)[0].drop == pytest.approx(0.2, abs=0.005)


def test_short_dip_does_not_split_or_add_a_plateau() -> None:
    """A 5-evaluation dip survives the median but is too short to count; the two halves of
    the plateau around it are merged (equal levels, gap < rho t_max)."""
    loss = _piecewise([(0, 1.7), (100, 1.5), (3000, 1.5)])
    dip = (STEPS >= 1500) & (STEPS < 1550)
    loss[dip] -= 0.05
    plateaus = detect_plateaus(STEPS, loss, rho=0.05)
    assert len(plateaus) == 1
    assert abs(plateaus[0].level - 1.5) < 0.003
    assert plateaus[0].t0 <= 300 and plateaus[0].t1 == 3000
    unmerged = detect_plateaus(STEPS, loss, merge_abs=0.0, merge_rel=0.0)
    assert len(unmerged) == 2  # the merge rule is what joins the halves


def test_running_median_truncates_at_the_ends() -> None:
    values = [5.0, 1.0, 2.0, 100.0, 3.0, 4.0]
    assert running_median(values, 3).tolist() == [3.0, 2.0, 2.0, 3.0, 4.0, 3.5]


def test_invalid_curves_are_refused() -> None:
    with pytest.raises(ValueError):
        detect_plateaus([0, 10, 10], [1.0, 0.9, 0.8])
    with pytest.raises(ValueError):
        detect_plateaus([0, 10], [1.0])


BASE = [1.5, 1.25, 1.0, 0.5]  # bands: k=1 [1.375, 1.52], k=2 [1.125, 1.27], k=3 [0.75, 1.02]


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (1.5, 1),
        (1.375, 1),
        (1.3749, None),
        (1.5199, 1),
        (1.5201, None),
        (1.2699, 2),
        (1.2701, None),
        (1.125, 2),
        (1.1249, None),
        (1.0199, 3),
        (1.0201, None),
        (0.75, 3),
        (0.7499, None),
        (0.5499, 4),
        (0.5501, None),
        (0.2, 4),
    ],
)
def test_assign_level_band_edges(level: float, expected: int | None) -> None:
    assert assign_level(level, BASE) == expected


@pytest.mark.parametrize("base", [[1.62559, 1.61115, 1.43261], [1.0, 0.99, 0.5], BASE])
@pytest.mark.parametrize("width", [0.0, 0.001, 0.0043, 0.02])
def test_level_calls_equal_the_calls_on_a_dense_grid(base: list[float], width: float) -> None:
    """The orders within +-width of a level, against `assign_level` read on a grid of 2,001
    points of [level - width, level + width]: none of these bands is narrower than the
    grid's spacing, so the grid finds every order and no other."""
    for level in np.linspace(base[-1] - 0.1, base[0] + 0.1, 53):
        calls = level_calls(level, base, width)
        grid = {assign_level(x, base) for x in np.linspace(level - width, level + width, 2001)}
        assert calls == grid
        assert assign_level(level, base) in calls


def test_a_level_call_within_the_standard_error_of_a_band_edge_is_not_firm() -> None:
    """On paper C Fig. 3's ci levels: seed 1's plateau at 1.62115 is in both the unigram and
    the bigram band and 0.0028 above the point (b_1 + b_2) / 2 = 1.61837 where the nearest
    baseline changes; it is called a unigram plateau by that margin, against a test-set
    standard error of 0.0043. Seed 3's at 1.63408 is firm."""
    base = [1.62559, 1.61115, 1.43261]
    assert assign_level(1.62115, base) == 1
    assert level_calls(1.62115, base, 0.0) == {1}
    assert level_calls(1.62115, base, 0.0043) == {1, 2}
    assert level_calls(1.63408, base, 0.0043) == {1}
    assert level_calls(1.56, base, 0.0043) == {2}
    assert level_calls(1.4826, base, 0.0043) == {3, None}
    with pytest.raises(ValueError, match="width"):
        level_calls(1.5, base, -0.1)


def test_assign_level_overlapping_bands_take_the_nearest_baseline() -> None:
    base = [1.0, 0.99, 0.5]  # k=1 band [0.995, 1.02], k=2 band [0.745, 1.01]
    assert assign_level(1.0, base) == 1
    assert assign_level(0.996, base) == 1
    assert assign_level(0.994, base) == 2
    with pytest.raises(ValueError):
        assign_level(1.0, [1.0, 1.1])


@pytest.mark.parametrize("length", [6000, 12000, 24000])
def test_a_flat_tail_keeps_the_plateaus_found_with_a_reference_length(length: int) -> None:
    """With thresholds relative to the run's own length, a flat tail that makes the run 4x
    or 8x longer removes both early plateaus of the staircase; with the length fixed
    (reference_steps) and the descent measured to a given floor, the tail changes neither
    threshold, so the same plateaus are found however long the run is."""
    steps = np.arange(0, length + 1, 10, dtype=np.float64)
    t, loss = zip(*STAIRCASE, strict=True)
    noisy = np.interp(steps, t, loss) + np.random.default_rng(0).normal(0.0, 0.002, steps.shape)
    fixed = detect_plateaus(steps, noisy, reference_steps=3000, floor=1.40)
    assert [round(p.level, 2) for p in fixed] == [1.60, 1.50, 1.40]
    assert [(p.t0, p.t1) for p in fixed[:2]] == [(170.0, 730.0), (1060.0, 1730.0)]
    relative = detect_plateaus(steps, noisy)
    if length >= 12000:
        assert [round(p.level, 2) for p in relative] == [1.40]


EARLY = [(0, 1.80), (40, 1.70), (160, 1.70), (260, 1.60), (800, 1.60), *STAIRCASE[3:]]
"""A fast first drop to a plateau at steps 40-160, then the staircase's three plateaus."""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_scale_finds_an_early_plateau_the_run_scale_misses(seed: int) -> None:
    """The plateau at steps 40-160 is shorter than rho t_max = 150 steps and narrower than
    the slope window (2 x 80 steps): judged on the scale of the steps elapsed it is found,
    and the run-scale rule's plateaus are kept as they are (the shape of paper C's Fig. 1
    unigram plateau, as read off it)."""
    loss = _piecewise(EARLY, seed=seed)
    run = detect_plateaus(STEPS, loss)
    local = detect_plateaus(STEPS, loss, local_scale=True)
    assert [round(p.level, 2) for p in run] == [1.60, 1.50, 1.40]
    assert round(local[0].level, 2) == 1.70 and local[0].t0 >= 40 and local[0].t1 <= 160
    assert local[1:] == run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_local_scale_adds_no_plateau_to_a_steady_descent(seed: int) -> None:
    """A steady descent falls at its own mean rate, twice the local flatness threshold: no
    plateau, or only the final one after convergence; a flat curve is one plateau."""
    assert (
        detect_plateaus(STEPS, _piecewise([(0, 1.7), (3000, 1.4)], seed=seed), local_scale=True)
        == []
    )
    converged = _piecewise([(0, 1.7), (2000, 1.4), (3000, 1.4)], seed=seed)
    assert [round(p.level, 2) for p in detect_plateaus(STEPS, converged, local_scale=True)] == [1.4]
    flat = detect_plateaus(STEPS, np.full(STEPS.shape, 1.7), local_scale=True)
    assert [(p.t0, p.t1) for p in flat] == [(0.0, 3000.0)]


def test_still_falling_needs_a_significant_and_sizeable_drop() -> None:
    """`still_falling`: a steady fall over the run's last third is learning; noise about a
    level, a rise, or a fall smaller than ``min_drop`` is not; too few evaluations cannot
    tell."""
    steps = np.arange(0, 6001, 300)
    noise = 0.001 * np.tile([1.0, -1.0, 0.5, -0.5], 6)[: len(steps)]
    level = 0.63 + noise
    falling = level + 0.03 * (1 - steps / 6000)  # 0.009 nats over the last evaluations
    assert still_falling(steps, falling, 1 / 3, 3.0, 0.005)
    assert not still_falling(steps, falling, 1 / 3, 3.0, 0.02)  # too small to matter
    assert not still_falling(steps, level, 1 / 3, 3.0, 0.0)
    assert not still_falling(steps, level[::-1] + 1e-6 * steps, 1 / 3, 3.0, 0.0)
    assert still_falling(steps[:5], level[:5], 0.25, 3.0, 0.0) is None  # cannot tell
