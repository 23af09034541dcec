"""Paper A, Figs. 1, 4, 5: run-level measures, heat-map assembly, group metrics, tiny runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from replicate import analysis, claims, plotting
from replicate.analysis import RunClass
from replicate.claim_files import load_claims
from replicate.config import load_params
from replicate.experiments.attn_markov import fig1, fig4, fig5
from replicate.experiments.attn_markov.common import BinaryRun, StateRun
from replicate.markov import symmetric_kernel
from replicate.settings import BinaryChainSettings

from .conftest import PARAMS_FILE, tiny_run_of_every_experiment

MINE = ("attn_markov_fig1", "attn_markov_fig4", "attn_markov_fig5")


def binary_run(
    p: float,
    q: float,
    tied: bool,
    seed: int,
    f0: float,
    run_class: RunClass,
    loss: list[float] | None = None,
) -> BinaryRun:
    """A hand-made run: unigram oracle 0.7, bigram oracle 0.6 (kappa from the last loss)."""
    loss_curve = np.array(loss if loss is not None else [0.69, 0.65])
    return BinaryRun(
        chain=BinaryChainSettings(p=p, q=q),
        tied=tied,
        seed=seed,
        steps=np.arange(loss_curve.size) * 10,
        test_loss=loss_curve,
        oracle_bigram=0.6,
        oracle_unigram=0.7,
        kappa=analysis.gap_closed(float(loss_curve[-1]), 0.6, 0.7),
        run_class=run_class,
        transition_means=np.array([[1 - f0, f0], [0.5, 0.5]]),
        sequence=np.zeros(4),
        prob_one=np.full(4, f0),
        norm_a=0.0,
        bias=0.0,
        mean_norm_z=0.0,
        mean_abs_a_dot_z=0.0,
    )


def state_run(p: float, tied: bool, seed: int, run_class: RunClass, stay: float) -> StateRun:
    means = np.full((5, 5), (1 - stay) / 4)
    np.fill_diagonal(means, stay)
    return StateRun(
        states=5,
        p=p,
        tied=tied,
        seed=seed,
        steps=np.array([0, 10]),
        test_loss=np.array([1.61, 1.5]),
        oracle_bigram=1.49,
        oracle_unigram=1.61,
        kappa=0.9,
        run_class=run_class,
        transition_means=means,
    )


# ----------------------------------------------------------------------------- analysis
def test_stay_probability_is_the_mean_diagonal() -> None:
    assert analysis.stay_probability(symmetric_kernel(5, 0.3)) == pytest.approx(0.7)
    assert analysis.stay_probability(np.full((5, 5), 0.2)) == pytest.approx(0.2)


# ----------------------------------------------------------------------------- Fig. 1
PLATEAU = fig1.PlateauSettings(window=3, kappa=0.5, rho=0.05)
ON_PLATEAU = [0.75] * 3 + [0.70] * 25 + list(np.linspace(0.68, 0.60, 5)) + [0.60] * 27
STRAIGHT = list(np.linspace(0.75, 0.60, 60))  # passes through H(pi) = 0.7 without stopping
STUCK = [0.75] * 3 + [0.70] * 57


def test_fig1_plateau_is_a_flat_stretch_at_the_unigram_followed_by_the_bigram() -> None:
    """Spec C §4.0's slope-based detector (shared): a descent through H(pi), however close,
    is no plateau; a stuck run has a plateau but no drop."""
    values = [
        fig1.run_metrics(binary_run(0.5, 0.8, True, 0, 0.5, cls, curve), PLATEAU)
        for curve, cls in (
            (ON_PLATEAU, RunClass.BIGRAM),
            (STRAIGHT, RunClass.BIGRAM),
            (STUCK, RunClass.UNIGRAM),
        )
    ]
    assert [v["plateau_then_drop"] for v in values] == [1.0, 0.0, 0.0]
    assert 200.0 <= values[0]["plateau_iters"] <= 260.0  # the 25 evaluations at 0.70
    assert values[0]["plateau_level_minus_unigram"] == pytest.approx(0.0)
    assert np.isnan(values[1]["plateau_iters"])  # no flat stretch in the unigram band
    assert np.isnan(values[2]["half_gap_step"])


def test_fig1_reads_fig3_runs_only_when_the_settings_coincide() -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    s, fig3 = params.settings("attn_markov_fig1"), params.settings("attn_markov_fig3")
    fig1._check_reusable(s, fig3)  # the ci settings are those of Fig. 3
    longer = fig3.training.model_copy(update={"steps": fig3.training.steps + 1})
    with pytest.raises(ValueError, match="training"):
        fig1._check_reusable(s, fig3.model_copy(update={"training": longer}))


def test_fig1_metrics_group_by_variant_and_depth() -> None:
    settings = load_params(PARAMS_FILE, scale="ci").settings("attn_markov_fig1")
    training = settings.training.model_copy(update={"steps": 600})
    s = settings.model_copy(update={"plateau": PLATEAU, "seeds": [0, 1], "training": training})
    stuck, drop = STUCK, ON_PLATEAU
    runs = {}
    for variant in s.variants:
        for depth in s.depths:
            curve, cls = (stuck, RunClass.UNIGRAM) if depth == 1 else (drop, RunClass.BIGRAM)
            runs[variant, depth] = [
                binary_run(0.5, 0.8, True, seed, 0.5, cls, curve) for seed in s.seeds
            ]
    m = fig1.fig1_metrics(s, runs)
    assert m["theory/l1/frac_unigram"] == 1.0 and m["gpt2/l1/frac_bigram"] == 0.0
    assert m["theory/deep/frac_bigram"] == 1.0
    assert m["gpt2/deep/frac_plateau_then_drop"] == 1.0
    assert m["theory/l2/seed1/class"] == float(RunClass.BIGRAM)
    assert m["theory/deep/l2/seed1/plateau_then_drop"] == 1.0  # the per-seed pool of the claims
    other = fig1.other_tying_metrics(s, {(v, 2): runs[v, 2] for v in s.variants})
    assert other["theory/untied_deep/frac_bigram"] == 1.0
    assert other["gpt2/untied_deep/l2/seed0/class"] == float(RunClass.BIGRAM)
    assert m["theory/l1/median_delta_unigram"] == pytest.approx(0.0)
    assert m["p0.5_q0.8/entropy_rate"] == pytest.approx(0.619015, abs=1e-6)


def test_fig1_settings_need_depth_one_and_a_deeper_one(params_dict: dict) -> None:
    ci = params_dict["derived_experiments"]["attn_markov_fig1"]["settings"]["ci"]
    with pytest.raises(ValueError, match="depths"):
        fig1.Fig1Settings.model_validate({**ci, "depths": [2, 4]})


# ----------------------------------------------------------------------------- Fig. 4
def _grid_runs() -> list[BinaryRun]:
    """Tied: (0.3,0.3) both BIGRAM; (0.7,0.7) one UNIGRAM (f0 = pi_1 = 0.5) and one BIGRAM;
    (0.3,0.7) and (0.7,0.3) are p+q=1 controls. Untied: every run BIGRAM at f0 = p."""
    runs = []
    for tied in (True, False):
        for p in (0.3, 0.7):
            for q in (0.3, 0.7):
                for seed in (0, 1):
                    stuck = tied and p == q == 0.7 and seed == 0
                    f0, cls = (0.5, RunClass.UNIGRAM) if stuck else (p, RunClass.BIGRAM)
                    runs.append(binary_run(p, q, tied, seed, f0, cls))
    return runs


def test_fig4_heatmap_assembly_from_runs() -> None:
    table = fig4.run_table(_grid_runs(), min_gap=0.015)
    assert len(table) == 16
    controls = table[table.side == "boundary"]
    assert set(controls.run_class) == {fig4.UNCLASSIFIED} and controls.kappa.isna().all()
    cells = fig4.cell_table(table)
    assert len(cells) == 8
    mean = fig4.heatmap_matrix(cells, "tied", "mean_f0", [0.3, 0.7], [0.3, 0.7])
    # rows are p, columns q; the stuck run pulls the (0.7, 0.7) average to (0.5 + 0.7) / 2
    np.testing.assert_allclose(mean, [[0.3, 0.3], [0.7, 0.6]])
    frac = fig4.heatmap_matrix(cells, "tied", "frac_unigram", [0.3, 0.7], [0.3, 0.7])
    assert frac[0, 0] == 0.0 and frac[1, 1] == 0.5
    assert np.isnan(frac[0, 1]) and np.isnan(frac[1, 0])  # controls: not classified
    untied = fig4.heatmap_matrix(cells, "untied", "mean_f0", [0.7, 0.3], [0.3, 0.7])
    np.testing.assert_allclose(untied, [[0.7, 0.7], [0.3, 0.3]])  # follows the row order


def test_fig4_group_metrics_behind_claims_a41_to_a44() -> None:
    table = fig4.run_table(_grid_runs(), min_gap=0.015)
    cells = fig4.cell_table(table)
    m = fig4.group_metrics(table, cells)
    assert m["untied/frac_bigram"] == 1.0 and m["untied/max_run_dev_f0"] == pytest.approx(0.0)
    assert m["tied/below/frac_bigram"] == 1.0
    assert m["tied/above/n_unigram"] == 1.0 and m["tied/above/frac_unigram"] == 0.5
    assert m["tied/above/max_cell_dev_f0"] == pytest.approx(0.1)
    assert m["tied/below/max_cell_dev_f0"] == pytest.approx(0.0)
    assert m["boundary/max_cell_dev_f0"] == pytest.approx(0.0)
    per_run = fig4.per_run_metrics(table)
    assert "p0.3_q0.7/tied/seed0/class" not in per_run  # controls never reach the class table
    assert per_run["p0.7_q0.7/tied/seed0/class"] == float(RunClass.UNIGRAM)
    # the per-seed pools behind the claims' bootstrap reproduce the group metrics
    params = load_params(PARAMS_FILE, scale="ci")
    for claim in (c for c in load_claims(params).claims if c.experiment == "attn_markov_fig4"):
        if claim.per_seed is not None and claim.metric in m:
            values, _ = claims.seed_matrix(per_run, claim.per_seed)
            assert float(claims.aggregate(values, claim.per_seed)) == pytest.approx(
                m[claim.metric]
            ), claim.id


def test_switching_boundary_is_a_staircase() -> None:
    # no p+q=1 cell: a single two-segment step around the (0.6, 0.6) cell
    assert sorted(plotting.switching_boundary([0.2, 0.6], [0.2, 0.6])) == [
        ((1, 1), (1, 2)),
        ((1, 1), (2, 1)),
    ]
    # the spec's 5x5 grid: the 5 anti-diagonal cells are fenced on every inner side
    grid = [0.1, 0.3, 0.5, 0.7, 0.9]
    assert len(plotting.switching_boundary(grid, grid)) == 16
    assert plotting.switching_boundary([0.1, 0.2], [0.1, 0.2]) == []


# ----------------------------------------------------------------------------- Fig. 5
def test_fig5_metrics_groups_and_stay_probabilities() -> None:
    s = load_params(PARAMS_FILE, scale="paper").settings("attn_markov_fig5")
    runs = [
        state_run(p, tied, seed, RunClass.BIGRAM, 1 - p)
        for p in s.ps
        for tied in (True, False)
        for seed in (0, 1)
        if not (tied and p == 0.9)
    ]
    runs += [
        state_run(0.9, True, 0, RunClass.UNIGRAM, 0.21),
        state_run(0.9, True, 1, RunClass.BIGRAM, 0.1),
        state_run(0.85, True, 0, RunClass.UNIGRAM, 0.2),
    ]
    m = fig5.fig5_metrics(s, runs)
    assert m["unigram_entropy"] == pytest.approx(np.log(5))
    assert m["p0.9/tied/frac_unigram"] == 0.5
    assert m["p0.9/tied/unigram_runs_max_dev_p_stay_uniform"] == pytest.approx(0.01)
    assert np.isnan(m["p0.9/untied/unigram_runs_max_dev_p_stay_uniform"])
    assert m["p0.3/untied/max_dev_p_stay"] == pytest.approx(0.0)
    assert m["p_below_0.9/frac_bigram"] == 1.0  # p in {0.1, 0.3, 0.6}, both tyings
    assert m["tied/below_threshold/frac_bigram"] == 1.0
    assert m["tied/above_threshold/frac_unigram"] == pytest.approx(2 / 3)  # 0.85 and 0.9
    assert "p0.85/untied/frac_bigram" not in m  # threshold probes are tied only


# ----------------------------------------------------------------------------- tiny real runs
@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Figs. 1, 4, 5 and Fig. 3 (Fig. 1 reads its theory depth-1 runs) of the session's tiny
    run of every experiment (conftest)."""
    root, metrics = tiny_run_of_every_experiment(tmp_path_factory)
    return root, {name: metrics[name] for name in ("attn_markov_fig3", *MINE)}


def test_tiny_runs_write_their_tables(tiny) -> None:
    root, metrics = tiny
    base = root / "results/ci/attn_markov"
    curves = pd.read_csv(base / "fig1/curves.csv")
    assert set(curves.variant) == {"theory", "gpt2"} and set(curves.depth) == {1, 2}
    assert set(pd.read_csv(base / "fig1/runs.csv")["class"]) <= {c.name for c in RunClass}
    cells = pd.read_csv(base / "fig4/cells.csv")
    assert len(cells) == 8 and cells.mean_f0.between(0, 1).all()
    stay = pd.read_csv(base / "fig5/stay.csv")
    assert stay.p_stay.between(0, 1).all() and set(stay.p) == {
        0.6,
        0.7,
        0.85,
        0.9,
    }  # with the threshold probes
    assert metrics["attn_markov_fig5"]["unigram_entropy"] == pytest.approx(np.log(5))
    assert json.loads((base / "fig1/provenance.json").read_text())["scale"] == "ci"
    fig1_runs = metrics["attn_markov_fig1"]
    fig3_runs = metrics["attn_markov_fig3"]
    for seed in (0, 1):  # read from Fig. 3, not trained again
        assert (
            fig1_runs[f"theory/l1/seed{seed}/kappa"]
            == fig3_runs[f"p0.5_q0.8/tied/seed{seed}/kappa"]
        )
    assert "theory/untied_deep/frac_bigram" in fig1_runs


def test_every_claim_of_these_figures_names_a_produced_metric(tiny) -> None:
    root, _ = tiny
    params = load_params(root / "params.yaml", scale="ci")
    records = [r for r in claims.evaluate(params, root) if r.experiment in MINE]
    assert records
    for r in records:
        assert "absent" not in r.note, (r.id, r.note)
