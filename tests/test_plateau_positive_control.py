"""Positive control of paper C's stage analysis (our detector): on the paper's own curves,
as we read them off Figs. 1 and 4 (`paper_readings`), with the settings params.yaml
gives each figure at paper scale, the plateaus the figures show are found at their k-gram
levels; a steady descent through the same losses gives none, a flat curve one."""

from __future__ import annotations

import numpy as np
import pytest

from replicate.analysis import assign_level, detect_plateaus
from replicate.config import load_params
from replicate.experiments.subngrams.fig1 import stage_calls
from replicate.experiments.subngrams.paper_readings import (
    FIG1,
    FIG4,
    FigureReadings,
    PaperPlateau,
    standard_error,
)
from replicate.experiments.subngrams.stages import Stages, stages
from replicate.params import Params

from .conftest import PARAMS_FILE

NOISE_SEEDS = [None, 0, 1]
"""None: the readings as they are; a seed: plus noise at the test loss's standard error."""


@pytest.fixture(scope="module")
def paper() -> Params:
    return load_params(PARAMS_FILE, scale="paper")


def _curve(
    paper: Params, figure: FigureReadings, seed: int | None
) -> tuple[np.ndarray, np.ndarray, float]:
    """The figure's readings at its paper-scale evaluation cadence, with noise at the
    standard error of a loss on its paper-scale test set when ``seed`` is not None; and that
    standard error."""
    training = paper.settings(figure.experiment).training
    noise = standard_error(training.test_sequences)
    steps, loss = figure.curve(training.eval_every, 0.0 if seed is None else noise, seed or 0)
    return steps, loss, noise


def _analyse(paper: Params, figure: FigureReadings, steps: np.ndarray, loss: np.ndarray) -> Stages:
    """`stages` with the figure's paper-scale settings and baselines, as its experiment runs
    it; the call width is the standard error of a loss on its paper-scale test set."""
    settings = paper.settings(figure.experiment)
    noise = standard_error(settings.training.test_sequences)
    return stages(steps, loss, figure.baselines, settings.stage, noise)


def _covers(found: Stages, shown: PaperPlateau) -> bool:
    """A plateau firmly called at the shown plateau's order contains the shown one's middle."""
    middle = 0.5 * (shown.t0 + shown.t1)
    return any(
        call == {shown.order} and p.t0 <= middle <= p.t1
        for p, call in zip(found.plateaus, found.calls, strict=True)
    )


@pytest.mark.parametrize("seed", NOISE_SEEDS)
def test_fig1_readings_give_the_unigram_bigram_and_trigram_plateaus(
    paper: Params, seed: int | None
) -> None:
    """Paper C, Fig. 1: unigram (~20-250), bigram (~450-1,650), then trigram plateaus;
    claims `C-F1a-stages`, `C-F1b-first-plateau` hold on the paper's own curve."""
    steps, loss, _ = _curve(paper, FIG1, seed)
    found = _analyse(paper, FIG1, steps, loss)
    assert found.orders == [1, 2, 3]
    assert all(_covers(found, shown) for shown in FIG1.plateaus)
    calls = stage_calls(found, len(FIG1.baselines))
    assert calls["strict_stages"] == 1.0 and calls["first_order"] == 1.0


@pytest.mark.parametrize("seed", NOISE_SEEDS)
def test_fig4_readings_give_the_bigram_plateau_before_the_transition(
    paper: Params, seed: int | None
) -> None:
    """Paper C, Fig. 4: a bigram plateau (~200-320) holding the paper's highlighted step on
    it in Fig. 4 (a) (params.yaml ``marked_steps``), then the drop to the trigram level."""
    steps, loss, _ = _curve(paper, FIG4, seed)
    found = _analyse(paper, FIG4, steps, loss)
    (shown,) = FIG4.plateaus
    assert _covers(found, shown)
    bigram = next(p for p, o in zip(found.plateaus, found.orders, strict=True) if o == 2)
    assert bigram.t0 <= paper.settings(FIG4.experiment).marked_steps["onehot"] <= bigram.t1
    after = loss[steps > bigram.t1]
    assert assign_level(float(after[-1]), FIG4.baselines) == 3


def test_the_run_scale_rule_alone_misses_the_early_plateaus(paper: Params) -> None:
    """Why `detect_plateaus` has ``local_scale``: with one scale for the whole run (steps
    1-4 alone), Fig. 1's unigram plateau is narrower than the slope window and Fig. 4's
    bigram plateau shorter than rho t_ref, so neither is found on the paper's own curves."""
    found = {}
    for figure in (FIG1, FIG4):
        settings = paper.settings(figure.experiment)
        steps, loss = figure.curve(settings.training.eval_every)
        plateaus = detect_plateaus(
            steps,
            loss,
            rho=settings.stage.rho,
            reference_steps=settings.stage.reference_steps,
            floor=figure.baselines[-1],
        )
        found[figure.experiment] = [assign_level(p.level, figure.baselines) for p in plateaus]
    assert found == {FIG1.experiment: [2, 3], FIG4.experiment: []}


@pytest.mark.parametrize("seed", NOISE_SEEDS)
@pytest.mark.parametrize("figure", [FIG1, FIG4], ids=["fig1", "fig4"])
def test_a_steady_descent_through_the_same_losses_has_no_intermediate_plateau(
    paper: Params, figure: FigureReadings, seed: int | None
) -> None:
    """The figure's first reading to its last at a constant rate (its stages removed), with
    the same noise as the readings: no plateau but, at most, a last one."""
    steps, _, noise = _curve(paper, figure, None)
    (first_step, first), (last_step, last) = figure.readings[0], figure.readings[-1]
    loss = np.interp(steps, [first_step, last_step], [first, last])
    if seed is not None:
        loss += np.random.default_rng(seed).normal(0.0, noise, steps.shape)
    assert _analyse(paper, figure, steps, loss).intermediate == []


@pytest.mark.parametrize("figure", [FIG1, FIG4], ids=["fig1", "fig4"])
def test_an_untrained_model_gives_one_plateau_spanning_the_run(
    paper: Params, figure: FigureReadings
) -> None:
    """A curve flat at its first loss (a model that does not learn: the same loss at every
    evaluation) is at most one plateau, and it spans the run: here exactly one."""
    steps, loss, _ = _curve(paper, figure, None)
    found = _analyse(paper, figure, steps, np.full_like(loss, loss[0]))
    assert [(p.t0, p.t1) for p in found.plateaus] == [(steps[0], steps[-1])]
