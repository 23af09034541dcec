"""Paper C's stage analysis on a synthetic two-stage curve (our detector; App. I.3, Fig. 6)."""

from __future__ import annotations

import itertools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch

from replicate import claims
from replicate.config import load_params
from replicate.experiments.subngrams.common import NO_EVENT, over_seeds, seed_column
from replicate.experiments.subngrams.fig1 import stage_calls
from replicate.experiments.subngrams.fig3 import AT_PLATEAU, _summary, seed_metrics
from replicate.experiments.subngrams.fig6 import gradient_metrics, stagewise
from replicate.experiments.subngrams.stages import (
    StageSettings,
    first_step_on,
    heads_on,
    masses_of,
    max_rise,
    stages,
    with_call_bounds,
)
from replicate.provenance import recorded_inputs
from replicate.verdicts import ClaimRecord

from .conftest import claim_dict, params_with_claims

SETTINGS = StageSettings(rho=0.05, threshold=0.4, dominance=2.0, reference_steps=4000, call_se=1.0)
LEVELS = [1.58, 1.51, 1.26]  # b_1 > b_2 > b_3, as paper C's Fig. 6 setting


def _curve() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fast fall to a bigram plateau (1.50), a jump at step 2000 to the trigram level (1.29);
    the gradient norm is 0.02 on the plateaus and peaks at 0.1 during the jump."""
    steps = np.arange(0, 4001, 16, dtype=float)
    loss = 1.29 + 0.21 / (1 + np.exp((steps - 2000) / 40)) + 0.1 * np.exp(-steps / 60)
    grad = 0.02 + 0.08 * np.exp(-(((steps - 2000) / 60) ** 2))
    return steps, loss, grad


def test_two_stage_curve_is_stagewise_with_a_gradient_spike() -> None:
    steps, loss, grad = _curve()
    stage = stages(steps, loss, LEVELS, SETTINGS, 0.0)
    assert stage.orders == [2, 3] and stagewise(stage, 3)
    assert stage.second_plateau(3) is stage.plateaus[0]
    values = gradient_metrics(steps, stage, grad, grad)
    assert values["grad_ratio"] < 0.3 and values["pop_grad_ratio"] < 0.3
    # the peak of the running median (9 evaluations) lies within half a window of 2000
    assert values["grad_peak_distance"] == 0.0 and abs(values["grad_peak_step"] - 2000) <= 4 * 16
    assert max_rise(loss) < 1e-9  # the curve never rises


def test_second_plateau_is_the_first_below_the_ngram_level_not_the_longest() -> None:
    """Paper C's second plateau is the one the escape ends: an early escape to a lower
    sub-n-gram plateau that lasts longer (seed 3 of Fig. 3 at ci) does not replace it."""
    steps = np.arange(0, 16385, 64, dtype=float)
    escape = 1.60 + 0.032 / (1 + np.exp((steps - 5500) / 60))  # 1.632 -> 1.600 at ~5,500
    loss = escape + 0.06 * np.exp(-steps / 150)
    settings = StageSettings(
        rho=0.05, threshold=0.4, dominance=2.0, reference_steps=16384, call_se=0.0
    )
    stage = stages(steps, loss, [1.626, 1.611, 1.433], settings, 0.0043)
    assert len(stage.plateaus) == 2 and 3 not in stage.orders
    first, after = stage.plateaus
    assert after.t1 - after.t0 > first.t1 - first.t0  # a "longest" reading would pick `after`
    assert stage.second_plateau(3) is first and first.t1 < 5500 < after.t0
    assert abs(first.level - 1.632) < 0.002


def test_a_call_within_the_noise_gives_every_reading_and_bounds_the_claims() -> None:
    """The curve's plateaus (1.50 and 1.29) lie 0.01 and more from every band edge and
    midpoint of b = (1.58, 1.51, 1.26), so a noise of 0.005 leaves both calls firm, while a
    noise of 0.1 reaches other bands. Readings: one per combination of the possible orders;
    bounds: the least and greatest value of a per-seed measure over them; call_se = 0
    ignores the noise."""
    steps, loss, _ = _curve()
    firm = stages(steps, loss, LEVELS, SETTINGS, 0.005)
    assert firm.calls == [frozenset({2}), frozenset({3})] and len(list(firm.readings())) == 1
    loose = stages(steps, loss, LEVELS, SETTINGS, 0.1)
    assert loose.orders == firm.orders and all(len(c) > 1 for c in loose.calls)
    readings = list(loose.readings())
    assert len(readings) == len(loose.calls[0]) * len(loose.calls[1])
    assert {tuple(r.orders) for r in readings} == set(itertools.product(*loose.calls))
    values = with_call_bounds(loose, lambda r: {"stagewise": float(stagewise(r, 3))}, ["stagewise"])
    assert values == {"stagewise": 1.0, "stagewise.lo": 0.0, "stagewise.hi": 1.0}
    values = with_call_bounds(firm, lambda r: {"stagewise": float(stagewise(r, 3))}, ["stagewise"])
    assert values == {"stagewise": 1.0, "stagewise.lo": 1.0, "stagewise.hi": 1.0}
    unscaled = StageSettings(**(SETTINGS.model_dump() | {"call_se": 0.0}))
    assert stages(steps, loss, LEVELS, unscaled, 0.1).calls == firm.calls


def test_spike_factor_tells_a_gradient_spike_from_noise() -> None:
    """F6b: on a noisy gradient norm without a spike, g_med / g_max is already well below
    0.8, so it cannot tell a spike from noise; the spike factor is ~1 there and large where
    the norm peaks at the transition."""
    steps, loss, grad = _curve()
    stage = stages(steps, loss, LEVELS, SETTINGS, 0.0)
    noise = 0.02 * np.exp(np.random.default_rng(0).normal(0.0, 0.5, steps.shape))
    assert gradient_metrics(steps, stage, noise, noise)["grad_ratio"] < 0.8
    assert 0.7 < gradient_metrics(steps, stage, noise, noise)["grad_spike_factor"] < 1.3
    assert gradient_metrics(steps, stage, grad + noise, grad)["grad_spike_factor"] > 1.4
    assert gradient_metrics(steps, stage, grad, grad)["grad_spike_factor"] > 2.0


def test_unordered_baselines_assign_nothing_and_no_transition_gives_nan() -> None:
    steps, loss, grad = _curve()
    flat = np.full_like(loss, 1.5)
    stage = stages(steps, flat, [1.5, 1.6, 1.2], SETTINGS, 0.005)  # a tiny test set: not decreasing
    assert all(o is None for o in stage.orders)
    values = gradient_metrics(steps, stage, grad, grad)
    assert math.isnan(values["grad_ratio"]) and math.isnan(values["grad_spike_factor"])


def test_heads_on_offsets_from_attention_maps() -> None:
    t = 16
    previous = torch.diag(torch.ones(t - 1), -1)
    previous[0, 0] = 1.0  # head on delta = 1
    uniform = torch.tril(torch.ones(t, t))
    uniform /= uniform.sum(-1, keepdim=True)
    masses = masses_of(torch.stack([previous, uniform]))
    assert heads_on(masses, SETTINGS) == {1}
    history = np.stack([masses_of(torch.stack([uniform, uniform])), masses])
    assert first_step_on(np.array([0.0, 10.0]), history, 1, SETTINGS) == 10.0
    assert first_step_on(np.array([0.0, 10.0]), history, 2, SETTINGS) == math.inf


def test_reference_length_is_the_papers_run_length(params_dict: dict) -> None:
    """Every paper C stage block, at both scales, measures plateaus against the paper's own
    run length: its experiment's (or its upstream's) paper-scale training steps."""
    experiments = {**params_dict["experiments"], **params_dict["derived_experiments"]}
    checked = 0
    for name, entry in experiments.items():
        if entry["paper"] != "subngrams" or "stage" not in entry["settings"]["ci"]:
            continue
        trained = experiments[f"subngrams_{entry['upstream']}"] if "upstream" in entry else entry
        steps = trained["settings"]["paper"]["training"]["steps"]
        for scale in ("paper", "ci"):
            assert entry["settings"][scale]["stage"]["reference_steps"] == steps, (name, scale)
        checked += 1
    assert checked == 6


def test_summaries_over_seeds_skip_seeds_without_the_event_and_do_not_warn() -> None:
    """A seed without the event (no plateau: NaN, or no value at all) is left out of the
    fraction, median and maximum over seeds; with none left, the summary is NaN, silently."""
    per_seed = [{"frac": 1.0, "level": 1.6}, {"frac": math.nan}, {"frac": 0.0, "level": 1.5}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert over_seeds(np.nanmean, seed_column(per_seed, "frac")) == 0.5
        assert over_seeds(np.nanmedian, seed_column(per_seed, "level")) == 1.55
        assert over_seeds(np.nanmax, seed_column(per_seed, "level")) == 1.6
        for reduce in (np.nanmean, np.nanmedian, np.nanmax):
            assert math.isnan(over_seeds(reduce, seed_column(per_seed[1:2], "level")))


def _short_run_seed() -> dict[str, float]:
    """Fig. 3's per-seed values of a run of 30 steps: shorter than any plateau (rho t_ref =
    200 steps here), so it has no second plateau."""
    steps = np.array([0.0, 10.0, 20.0, 30.0])
    masses = np.full((4, 2, 4), 0.25)  # two heads attending uniformly: on no offset
    distances = np.full((4, 3, 2), 0.1)
    loss = np.array([1.60, 1.59, 1.58, 1.57])
    return seed_metrics(
        0, steps, loss, masses, np.ones(4), distances, np.array(LEVELS), 0.0, SETTINGS
    )


def test_an_absent_event_is_an_outcome_of_its_claims_never_missing(
    tmp_path: Path, params_dict: dict
) -> None:
    """A seed without the second plateau (a short run) says so (``has_second_plateau`` = 0)
    and has finite measures there (`NO_EVENT`); C-F3b-bigram-estimator and C-F3c then read
    the seeds with one, and with none have no subject (``inconclusive``), not ``missing``."""
    short = _short_run_seed()
    assert short["has_second_plateau"] == 0.0
    assert all(short[key] == NO_EVENT for key in AT_PLATEAU)
    calls = stage_calls(
        stages(np.array([0.0, 10.0, 20.0, 30.0]), np.ones(4), LEVELS, SETTINGS, 0.0), len(LEVELS)
    )
    assert (calls["has_stage"], calls["first_order"]) == (0.0, NO_EVENT)
    # A model that learns nothing: one plateau from start to end, which it never leaves, so no
    # stage of training (F1b, the negative control).
    flat = np.arange(0.0, 6145.0, 16.0)
    untrained = stages(flat, np.full(len(flat), LEVELS[0]), LEVELS, SETTINGS, 0.0)
    assert len(untrained.plateaus) == 1
    assert stage_calls(untrained, len(LEVELS))["has_stage"] == 0.0
    at_plateau = {"has_second_plateau": 1.0, "plateau_nearest_bigram": 1.0, "plateau_level": 1.63}
    ids = ["C-F3b-bigram-estimator", "C-F3c-plateau-level"]
    path = params_with_claims(tmp_path, params_dict, [claim_dict(i) for i in ids])
    params = load_params(path, scale="ci")
    out = tmp_path / "results/ci/subngrams/fig3"
    out.mkdir(parents=True)
    (out / "provenance.json").write_text(json.dumps(recorded_inputs("subngrams_fig3", params)))

    def verdicts(per_seed: dict[int, dict[str, float]]) -> dict[str, ClaimRecord]:
        metrics = _summary(per_seed, np.array(LEVELS), params.settings("subngrams_fig3"))
        (out / "metrics.json").write_text(json.dumps(metrics))
        return {r.id: r for r in claims.evaluate(params, tmp_path)}

    some = verdicts({1: short | at_plateau, 2: short, 3: short | at_plateau})
    estimator = some["C-F3b-bigram-estimator"]
    assert (estimator.verdict, estimator.measured) == ("holds", 1.0)
    assert estimator.seed_values == {"1": 1.0, "3": 1.0}  # seed 2 has no plateau
    assert some["C-F3c-plateau-level"].verdict == "holds"
    for record in verdicts({1: short, 2: short}).values():
        assert record.verdict == "inconclusive" and "no subject" in record.note, record.id
