"""Paper D's per-seed values: every claim measured over seeds (min, max or mean over the
seeds of App. H.1-H.4's runs) finds its seeds' values, and their aggregate is its metric; and
the figure helpers that choose what is drawn (the one sequence of App. H.1 / Fig. 18, the
constructions' coinciding curves of Sec. 3-4)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from replicate import claims
from replicate.claim_files import load_claims
from replicate.config import load_params, read_params_file
from replicate.experiments.runner import run_experiment
from replicate.experiments.two_layer import plots
from replicate.experiments.two_layer.constructions import coinciding_curves
from replicate.experiments.two_layer.maps import order_figure
from replicate.experiments.two_layer.statistics import MapStats
from replicate.plotting import layout_problems

from .conftest import PARAMS_FILE, shrink

MEASURED_OVER_SEEDS = (
    "two_layer_maps",
    "two_layer_fig2",
    "two_layer_fig1",
    "two_layer_table2",
    "two_layer_table3",
    "two_layer_table4",
    "two_layer_bits",
)
"""Paper D's experiments with claims over the seeds of the trained models, in run order
(each derived one after its upstream)."""


@pytest.fixture(scope="module")
def tiny_paper_d(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, dict]]:
    """Those experiments at tiny settings (two seeds), run once: params and metrics."""
    root = tmp_path_factory.mktemp("tiny_paper_d")
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(shrink(read_params_file(PARAMS_FILE))))
    params = load_params(path, scale="ci", only=list(MEASURED_OVER_SEEDS))
    metrics = {name: run_experiment(name, params, root, False) for name in MEASURED_OVER_SEEDS}
    return params, metrics


def test_every_claim_over_seeds_reads_its_seeds(tiny_paper_d: tuple[Any, dict]) -> None:
    """The per-seed keys of every per-seed claim of these experiments exist for both seeds
    and aggregate to the claim's metric (as the claims engine checks it)."""
    params, metrics = tiny_paper_d
    checked = []
    for claim in load_claims(params).claims:
        if claim.experiment not in metrics or claim.per_seed is None:
            continue
        m = metrics[claim.experiment]
        measured, problem = claims.metric_value(m, claim.metric)
        assert not problem, f"{claim.id}: {problem}"
        values, seeds = claims.seed_matrix(m, claim.per_seed)
        assert seeds == [0, 1], claim.id
        pooled = float(claims.aggregate(values, claim.per_seed))
        assert math.isclose(pooled, measured, rel_tol=1e-12, abs_tol=1e-15), claim.id
        checked.append(claim.id)
    assert checked


def test_claims_without_seed_values_are_not_over_seeds(tiny_paper_d: tuple[Any, dict]) -> None:
    """Of these experiments' claims, only the excess ratios (a ratio of means over seeds,
    which no aggregate of per-seed values gives) have no per-seed values."""
    params, metrics = tiny_paper_d
    without = {
        c.id for c in load_claims(params).claims if c.experiment in metrics and c.per_seed is None
    }
    remark2 = {"D-BIT-R2-log-T", "D-BIT-R2-order", "D-BIT-R2-spec-budget"}  # constructions
    assert without == {"D-T2-2", "D-T2-3x"} | remark2


def test_table4_compares_table3_seed_by_seed(tiny_paper_d: tuple[Any, dict]) -> None:
    _, metrics = tiny_paper_d
    t4 = metrics["two_layer_table4"]
    for eps in (0.1, 0.25, 0.5):
        per_seed = [t4[f"t3_minus_t4/seed{s}/eps{eps:g}"] for s in (0, 1)]
        assert np.mean(per_seed) == pytest.approx(t4[f"t3_minus_t4/eps{eps:g}"], abs=1e-14)


def test_shown_sequence_skips_near_constant_sequences() -> None:
    tokens = np.array([[0] * 8, [0] * 7 + [1], [0, 1] * 4, [1, 0] * 4])
    assert plots.shown_sequence(tokens, 2) == 2  # the first with each symbol >= 8 / 4 times
    assert plots.shown_sequence(tokens[:2], 2) == 1  # none qualifies: the most balanced
    assert plots.shown_sequence(np.array([[0, 1, 2, 0, 1, 2]]), 3) == 0


def test_coinciding_construction_curves_are_drawn_once() -> None:
    c = [10.0, 100.0, 1000.0]
    worst = pd.DataFrame(
        {
            "construction": ["2l2h"] * 3 + ["2l1h"] * 3 + ["3l1h"] * 3,
            "c": c * 3,
            "max_error": [0.5, 1e-9, 0.0] * 2 + [0.5, 1e-3, 1e-20],
        }
    )
    curves = coinciding_curves(worst)
    assert [kinds for kinds, _, _ in curves] == [["2l2h", "2l1h"], ["3l1h"]]
    assert curves[0][2][-1] == 1e-17  # floored as drawn


def test_order_figure_draws_what_it_says(tmp_path: Path) -> None:
    """App. H.1's figure: nine panels, no empty slot, no layer-1 pseudo map, a sequence that
    is not constant, the loss labelled by its order, and no text over text."""
    gen = torch.Generator().manual_seed(0)
    drawn = torch.randint(0, 2, (3, 9), generator=gen)
    tokens = torch.cat([torch.zeros(1, 9, dtype=torch.long), drawn])
    maps = torch.rand(1, 4, 8, 8, generator=gen).tril()
    maps = maps / maps.sum(-1, keepdim=True)
    stats = MapStats(
        first=maps,
        last=maps,
        pseudo=maps[0],
        abar=np.zeros((1, 8)),
        mm=np.zeros(1),
        chance=0.0,
        mm_shifted=np.zeros(1),
        frobenius=np.zeros((1, 4)),
    )
    curves = pd.DataFrame({"order": 2, "seed": 0, "step": [0, 10], "test_loss": [0.7, 0.6]})
    fig = order_figure(2, 2, stats, tokens, 0.5, curves, "ci")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(titles) == 9
    assert not any("layer 1" in t and "pseudo" in t for t in titles)
    shown = plots.shown_sequence(tokens[:, :-1].numpy(), 2)
    assert shown > 0 and f"layer 2, sequence {shown}: model" in titles[-3]
    legend = fig.axes[2].get_legend()
    assert legend.get_texts()[0].get_text() == "k = 2"
    assert layout_problems(fig) == []
