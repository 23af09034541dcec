"""Paper B experiments: gradient-flow metrics on known answers, the full-model embedding and
initialisations, the low-rank measures, Fig. 4's analysis, and a tiny run of every rule.

Reference numbers are paper B's (docs/papers.md), as our replication plan for it distils them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lightning_modules import ChainMember, EnsembleGPT, GPTConfig, OptimConfig
from lightning_modules.canonical import EnsembleCanonical
from replicate.config import load_params
from replicate.experiments.local_global import canonical_sgd, fig2, fig4, fig5, flows, lowrank
from replicate.experiments.local_global import transformer as tf
from replicate.markov import binary_kernel, binary_stationary
from replicate.settings import BinaryChainSettings
from replicate.theory import local_global as lg
from replicate.training import TrainingPlan, gpt_ensemble, train_ensemble

from .conftest import PARAMS_FILE, tiny_run_of_every_experiment

ABOVE = BinaryChainSettings(p=0.5, q=0.8)
BELOW = BinaryChainSettings(p=0.2, q=0.3)
FLOW = flows.FlowSettings(t_max=3000.0, rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------------------- gradient flow
def test_outcome_table_on_spec_reference_limits() -> None:
    """Spec B §2.8: (0.5, -1) -> (0.789495, -1.269668) [*], (1, 1) -> (0, 0.652919) [min]."""
    inits = np.array([[0.5, -1.0], [1.0, 1.0]])
    table = flows.outcome_table(inits, flows.integrate(inits, ABOVE, FLOW), ABOVE, init_set="x")
    assert list(table.limit_class) == [lg.LimitClass.STAR, lg.LimitClass.MIN]
    assert list(table.basin) == list(table.limit_class)
    np.testing.assert_allclose(
        table[["e_lim", "w_lim"]], [[0.789495, -1.269668], [0, 0.652919]], atol=1e-6
    )
    assert table.limit_error.max() < 1e-7
    assert table.energy_drift.max() < 1e-6  # Lemma 1
    np.testing.assert_array_equal(table.energy0, [-0.75, 0.0])
    assert flows.theorem_loss_error(table, ABOVE).max() < 1e-10


def test_energy_drift_is_measured_not_assumed() -> None:
    """A flow integrated with a loose tolerance drifts measurably; the tight default does not."""
    inits = np.array([[1.2, -1.4], [0.4, 0.9]])
    loose = lg.integrate_gradient_flows(inits, BELOW.p, BELOW.q, rtol=1e-3, atol=1e-5)
    tight = flows.integrate(inits, BELOW, FLOW)
    assert max(r.energy_drift for r in loose) > 1e-5
    assert max(r.energy_drift for r in tight) < 1e-7


def test_near_separatrix_selects_by_energy() -> None:
    frame = pd.DataFrame({"energy0": [lg.ENERGY_SADDLE + 5e-4, lg.ENERGY_SADDLE - 2e-3]})
    assert list(flows.near_separatrix(frame, 1e-3)) == [True, False]


@pytest.mark.parametrize("chain", [ABOVE, BELOW])
def test_critical_points_of_thm_10_are_critical(chain: BinaryChainSettings) -> None:
    points = fig2.critical_points(chain, np.random.default_rng(0), 20)
    for label, sample in points.items():
        assert len(sample) == 20, label
        assert np.abs(lg.gradient_flow_velocity(sample, chain.p, chain.q)).max() < 1e-12
    assert all(fig2.station_is_saddle(x, chain, 1e-2) for x in points[lg.LimitClass.STATION])
    # a global minimum is not a saddle of L - H(x_{n+1}): every neighbour is below H_uni
    assert not fig2.station_is_saddle(points[lg.LimitClass.STAR][0], chain, 1e-2)


def test_rate_metrics_on_known_rates() -> None:
    """Spec B §4 F5-rate: (0.5, 0.8), w0 = 0.3 -> -0.167574; (0.2, 0.3), w0 = 0 -> +0.24."""
    settings = fig5.Fig5Settings(
        panels=[BELOW, ABOVE],
        chains=[ABOVE, BELOW],
        box=0.3,
        rate_points=[(0.3, 0.2), (0.0, 0.1), (-1.0, 0.2)],
        random_rate_points=0,
        e0=1e-4,
        rate_time=1.0,
        arrows_per_axis=2,
        plotted_trajectories=1,
        zoom_time=1.0,
        seed=0,
        flow=FLOW,
    )
    rates = fig5.rate_table(settings, np.random.default_rng(0))
    expected = {("p0.5_q0.8", 0.3): -0.167574, ("p0.2_q0.3", 0.0): 0.24}
    for (tag, w0), rate in expected.items():
        row = rates[(rates.chain == tag) & (rates.w0 == w0)].iloc[0]
        assert row.predicted_rate == pytest.approx(rate, abs=1e-6)
        assert row.measured_rate == pytest.approx(rate, rel=1e-4)
    # the plane e = 0 is classified by Lemma 8's Hessian, not by the flow: near the origin it
    # is made of maxima for p + q < 1 (the caption's "minima ... repellors") and minima for
    # p + q > 1; beyond w = -1/sqrt 2 the roles swap
    kinds = rates.set_index(["chain", "w0"]).critical
    assert kinds[("p0.2_q0.3", 0.0)] == "maximum" and kinds[("p0.2_q0.3", -1.0)] == "minimum"
    assert kinds[("p0.5_q0.8", 0.3)] == "minimum" and kinds[("p0.5_q0.8", -1.0)] == "maximum"
    metrics = fig5.rate_metrics(rates)
    assert metrics["rate_max_rel_error"] < 1e-4
    assert metrics["maxima_repel_fraction"] == metrics["minima_attract_fraction"] == 1.0
    assert metrics["minima_checks"] == metrics["maxima_checks"] == 3
    assert metrics["caption_repellers_frac_minima"] == 0.0  # the caption's label
    assert metrics["paper_m5_rate_min_rel_error"] == pytest.approx(0.5, abs=1e-4)  # App. M.5
    flipped = rates.assign(measured_rate=-rates.measured_rate)  # a flow that went the wrong way
    wrong = fig5.rate_metrics(flipped)
    assert wrong["maxima_repel_fraction"] == wrong["minima_attract_fraction"] == 0.0


# ----------------------------------------------------------------------------- transformer
def _model(ensemble: int = 1, n: int = 16) -> EnsembleGPT:
    model = EnsembleGPT(GPTConfig(n_embd=8, block_size=n, tied=True, variant="theory"), ensemble)
    model.init_members(list(range(ensemble)))
    return model


def test_uni_embedding_is_paper_b_logit_and_stays_pinned() -> None:
    """logit(1) - logit(0) = <e, z_n> + b with e = wte[1], and AdamW never moves wte[0], b_0."""
    model = _model()
    tf.pin_uni_embedding(model)
    tokens = torch.randint(0, 2, (1, 3, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(3):
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 2), tokens.roll(-1, -1).view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    wte = model.transformer["wte"].weight
    assert wte[:, 0].abs().max() == 0.0 and model.lm_head.bias[:, 0].abs().max() == 0.0
    traces: list[dict[str, torch.Tensor]] = []
    logits = model(tokens, traces)
    z = traces[-1]["z"]
    expected = z @ wte[0, 1] + model.lm_head.bias[0, 1]
    torch.testing.assert_close(logits[..., 1] - logits[..., 0], expected)


@pytest.mark.parametrize(("e", "w"), [(0.5, -1.0), (0.8, 0.7), (1.3, -0.2)])
def test_canonical_init_realises_the_canonical_logit(e: float, w: float) -> None:
    """Spec B §2.1 [Ours]: with W_V = 0 the full model's logit is Delta x_n + b - e^2/2."""
    model = _model()
    tf.initializer(["canonical"], [0], tf.InitOptions(canonical_point=(e, w)))(model)
    with torch.no_grad():
        model.transformer["h"][0].attn.c_attn.weight[0, 16:] = 0.0  # W_V = 0: attention off
        model.lm_head.bias[0, 1] = 0.37
    tokens = torch.randint(0, 2, (1, 2, 16))
    logits = model(tokens).detach().double()
    logit0, logit1 = lg.canonical_logits(e, w, 0.37)
    expected = np.where(tokens.numpy() == 1, logit1, logit0)
    np.testing.assert_allclose((logits[..., 1] - logits[..., 0]).numpy(), expected, atol=1e-5)


def test_rank_one_init_follows_the_authors_recipe() -> None:
    model = _model(ensemble=2)
    tf.initializer(["rank_one", "paper_literal"], [3, 4])(model)
    weights = tf.member_weights(dict(model.named_parameters()), 0)
    assert tf.top_share(weights.w1) == pytest.approx(1.0)
    assert tf.top_share(weights.w2) == pytest.approx(1.0)
    assert tf.hypercube_ratio(weights.e) == pytest.approx(1.0)
    np.testing.assert_allclose(
        weights.positional, np.broadcast_to(-weights.e / 2, (16, 8)), atol=1e-7
    )
    np.testing.assert_allclose(weights.w2, weights.w1.T, atol=1e-7)  # W_2 = W_1^T
    assert np.all(weights.value == 0.0)  # v_std = 0
    literal = tf.member_weights(dict(model.named_parameters()), 1)
    assert np.all(literal.e == 0.5) and np.all(literal.w1 == 1.0) and np.all(literal.w2 == -1.0)
    with pytest.raises(ValueError, match="recipes"):
        tf.initializer(["standard"], [0, 1])


def test_low_rank_measures_on_known_matrices() -> None:
    e = np.array([1.0, -1.0, 1.0, 1.0])
    rank_one = np.outer(np.arange(1.0, 17.0), e)
    assert tf.top_share(rank_one) == pytest.approx(1.0)
    assert tf.top_share(np.eye(4)) == pytest.approx(0.25)
    assert math.isnan(tf.top_share(np.zeros((3, 3))))
    assert tf.alignment(rank_one, e, "right") == pytest.approx(1.0)
    assert tf.alignment(rank_one.T, e, "left") == pytest.approx(1.0)
    orthogonal = np.array([1.0, 1.0, 1.0, -1.0])  # <orthogonal, e> = 0
    assert tf.alignment(np.outer(e, orthogonal), e, "right") == pytest.approx(0.0)
    assert tf.hypercube_ratio(np.array([0.5, -2.0, 1.0])) == pytest.approx(0.25)
    assert tf.positional_alignment(np.outer([-0.5, 0.5, 2.0], e), e) == pytest.approx(1.0)
    row = lowrank.measure(tf.member_weights(dict(_canonical_model().named_parameters()), 0))
    for key in ("rho1_W1", "rho1_W2", "cos_e_W1", "cos_e_W2", "hypercube", "positional_alignment"):
        assert row[key] == pytest.approx(1.0), key


def _canonical_model() -> EnsembleGPT:
    model = _model()
    tf.initializer(["canonical"], [0])(model)
    return model


def test_snapshot_steps_include_logs_shown_and_last() -> None:
    settings = load_params(PARAMS_FILE).settings("local_global_fig3")
    changed = settings.model_copy(
        update={
            "training": settings.training.model_copy(update={"steps": 250}),
            "log_every": 100,
            "shown_steps": [1, 200, 800],
        }
    )
    assert lowrank.snapshot_steps(changed) == (0, 1, 100, 200, 250)


# ----------------------------------------------------------------------------- Fig. 4 pieces
def test_evaluate_snapshot_uses_then_restores_parameters() -> None:
    members = [ChainMember(binary_kernel(0.5, 0.8), binary_stationary(0.5, 0.8), 0)]
    plan = TrainingPlan(
        steps=6,
        batch_size=2,
        seq_len=16,
        eval_every=3,
        test_sequences=2,
        test_seed=1,
        snapshot_steps=(3,),
    )
    model = gpt_ensemble(GPTConfig(n_embd=8, block_size=16), [0], tf.initializer(["standard"], [0]))
    trained = train_ensemble(model, members, plan, OptimConfig(), "t")
    before = trained.module.model.transformer["wpe"].weight.detach().clone()
    at_three = fig4.evaluate_snapshot(trained, 3)
    assert at_three is not None and at_three.loss[0] == pytest.approx(trained.test_loss[0, 1])
    assert torch.equal(trained.module.model.transformer["wpe"].weight, before)
    assert fig4.evaluate_snapshot(trained, 99) is None


@pytest.mark.parametrize("per_seed", [True, False], ids=["b_per_seed", "a_per_init"])
def test_fig4_loss_panels_name_their_runs(per_seed: bool) -> None:
    """Panel (b)'s legend names each seed ("seed 0", not a bare "0"); (a)'s each init."""
    import matplotlib.pyplot as plt

    from replicate import plotting

    s = load_params(PARAMS_FILE).settings("local_global_fig4")
    curves = pd.DataFrame(
        [
            {"chain": s.chain.tag, "init": init, "seed": seed, "step": step,
             "test_loss": 0.66 - 1e-5 * step * (k + 1)}
            for k, init in enumerate(s.inits)
            for seed in s.seeds
            for step in (0, 250, 500)
        ]
    )  # fmt: skip
    table = pd.DataFrame(
        {"chain": s.chain.tag, "oracle_bigram": 0.6503, "oracle_unigram": 0.6581}, index=[0]
    )
    fig, (ax,) = plotting.figure(1, 1)
    fig4._loss_panel(ax, curves, table, s.chain, s, per_seed=per_seed)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    runs = [f"seed {seed}" for seed in s.seeds] if per_seed else list(s.inits)
    assert legend == [*runs, "unigram oracle = 0.6581", "bigram oracle = 0.6503"]
    plt.close(fig)


def _sgd_settings() -> canonical_sgd.CanonicalSGDSettings:
    return canonical_sgd.CanonicalSGDSettings(
        chains=[ABOVE],
        inits=[(0.5, -1.0), (0.3, -0.3)],
        lr=0.1,
        batch_size=2,
        seq_len=8,
        steps=2,
        record_every=1,
        seed=0,
        e_tol=0.01,
        gap_tol=0.05,
    )


def test_sgd_classifier_on_known_end_points() -> None:
    """(0.5, -1) is in I_* and (0.3, -0.3) in I_min for p+q>1 (Thm 2)."""
    c_star = lg.chain_constants(ABOVE.p, ABOVE.q).c_star
    e_star = float(lg.global_min_locus_e(-1.3, ABOVE.p, ABOVE.q))
    rows = [("(0.5, -1)", e_star, -1.3), ("(0.3, -0.3)", 0.001, -0.33)]
    paths = pd.DataFrame(
        [
            {
                "chain": ABOVE.tag,
                "init": init,
                "step": 10,
                "e": e,
                "w": w,
                "gap": float(lg.logit_gap(e, w)),
                "loss": 0.0,
            }
            for init, e, w in rows
        ]
    )
    metrics = canonical_sgd.sgd_metrics(_sgd_settings(), paths)
    assert metrics["sgd/class_agreement"] == 1.0
    assert metrics["sgd/p0.5_q0.8/e0.5_w-1/final_gap"] == pytest.approx(c_star)
    swapped = paths.assign(init=paths.init[::-1].to_numpy())
    assert canonical_sgd.sgd_metrics(_sgd_settings(), swapped)["sgd/class_agreement"] == 0.0


def test_canonical_model_logits_and_sgd_path() -> None:
    model = EnsembleCanonical(np.array([0.5, 1.0]), np.array([-1.0, 0.5]), np.array([0.1, -0.2]))
    tokens = torch.tensor([[[0, 1, 1]], [[1, 0, 1]]])
    logits = model(tokens).detach().numpy()
    for i, (e, w, b) in enumerate([(0.5, -1.0, 0.1), (1.0, 0.5, -0.2)]):
        logit0, logit1 = lg.canonical_logits(e, w, b)
        np.testing.assert_allclose(logits[i, 0], np.where(tokens[i, 0] == 1, logit1, logit0))
    with pytest.raises(ValueError, match="vectors"):
        EnsembleCanonical(np.zeros(2), np.zeros(3), np.zeros(2))


# ----------------------------------------------------------------------------- tiny runs
@pytest.fixture(scope="module")
def tiny_paper_b(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Paper B's experiments of the session's tiny run of every experiment (conftest)."""
    root, metrics = tiny_run_of_every_experiment(tmp_path_factory)
    params = load_params(root / "params.yaml", scale="ci")
    names = [n for n, e in params.experiments.items() if e.paper == "local_global"]
    return root, {n: metrics[n] for n in names}


def test_every_paper_b_rule_runs_at_tiny_size(tiny_paper_b: tuple[Path, dict]) -> None:
    root, metrics = tiny_paper_b
    assert set(metrics) == {
        f"local_global_{i}"
        for i in ("fig1", "fig2", "fig3", "fig4", "fig5", "fig6", "table1", "table2")
    }
    for name in metrics:
        provenance = json.loads(
            (root / f"results/ci/local_global/{name[13:]}/provenance.json").read_text()
        )
        assert provenance["scale"] == "ci"
    fig1_metrics = metrics["local_global_fig1"]
    assert fig1_metrics["max_energy_drift"] < 1e-6 and fig1_metrics["bias_max_error"] < 1e-6
    assert metrics["local_global_fig5"]["maxima_repel_fraction"] == 1.0
    assert metrics["local_global_table2"]["iterations"] == 30  # read from fig4's provenance


def test_tiny_training_rules_report_their_measures(tiny_paper_b: tuple[Path, dict]) -> None:
    root, metrics = tiny_paper_b
    fig6_metrics = metrics["local_global_fig6"]
    structure = pd.read_csv(root / "results/ci/local_global/fig6/structure.csv")
    assert set(structure.step) == {0, 1, 30}  # init, the shown iteration 1, the last
    start = structure[structure.step == 0]
    # the paper's init: W_V = alpha v^T is a random rank-one matrix, not zero
    assert np.allclose(start.rho1_WV, 1.0)
    assert np.allclose(start.rho1_W1, 1.0) and np.allclose(start.hypercube, 1.0)
    for name in ("rho1_WV", "cos_e_WV", "hypercube"):  # the claims' numbers are the CSV's
        assert fig6_metrics[f"all_steps/min_{name}"] == pytest.approx(structure[name].min())
        per_seed = [fig6_metrics[f"p0.2_q0.3/seed{s}/all_steps/min_{name}"] for s in (0, 1)]
        assert min(per_seed) == fig6_metrics[f"all_steps/min_{name}"]
    variant = pd.read_csv(root / "results/ci/local_global/fig6/structure_wv_zero.csv")
    assert variant.loc[variant.step == 0, "rho1_WV"].isna().all()  # the authors' W_V = 0
    assert "wv_zero/all_steps/min_rho1_WV" in fig6_metrics
    fig4_metrics = metrics["local_global_fig4"]
    assert math.isnan(fig4_metrics["p0.5_q0.8/standard/max_abs_delta_unigram_at_250"])
    assert "sgd/class_agreement" in fig4_metrics
    runs = pd.read_csv(root / "results/ci/local_global/fig4/runs.csv")
    assert len(runs) == 2 * 3 + 2  # shrink keeps 2 seeds x 3 inits, plus the extra chain
    starts = runs.groupby("init").initial_loss.min()
    assert starts["paper_literal"] > 10.0 > 1.0 > starts["standard"]  # Delta = -510 at init


# ----------------------------------------------------------------------------- with bias
def test_bias_checks_hold_and_catch_a_wrong_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lemmas 2, 3, 4, 6 and Thm 7 hold to rounding; a perturbed loss formula is caught."""
    from replicate.experiments.local_global import bias_checks as bc

    chains = [BELOW, ABOVE]
    m = bc.bias_checks(chains, np.random.default_rng(0), 5)
    assert m["lemma2_max_error"] < 1e-12 and m["lemma6_max_error"] < 1e-9
    assert m["lemma3_max_fd_error"] < 1e-6 and m["lemma4_max_error"] < 1e-5
    assert m["thm7_max_gradient_norm"] < 1e-10 and m["thm7_max_loss_error"] < 1e-10
    # the enumeration uses the chain's law, not Lemma 2: a shifted pair formula is caught
    real = lg.loss_with_bias
    monkeypatch.setattr(bc.lg, "loss_with_bias", lambda *a, **k: real(*a, **k) + 1e-3)
    assert bc.lemma2_error(BELOW, np.random.default_rng(0), length=4) > 5e-4
    assert bc.thm7_errors(BELOW, np.random.default_rng(0), 5)[1] > 5e-4  # L != H there


def test_thm6_root_residual_holds_and_catches_a_wrong_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every solver root lies in Gamma_* U Gamma_min U Gamma_sad; a wrong c* is caught."""
    from dataclasses import replace

    from replicate.experiments.local_global import bias_checks as bc

    assert (
        bc.thm6_checks([BELOW, ABOVE], np.random.default_rng(0), 10)["thm6_root_max_set_residual"]
        < 1e-6
    )
    real = lg.chain_constants
    monkeypatch.setattr(
        bc.lg, "chain_constants", lambda p, q: replace(real(p, q), c_star=real(p, q).c_star + 0.1)
    )
    assert bc.thm6_root_residual(BELOW, np.random.default_rng(0), 10) > 1e-3


def test_thm9_checks_hold_and_catch_a_wrong_formula(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thm 9's sets are critical with the stated losses, and contain every solver root; a
    Gamma_* with the wrong bias equation (Eq. 46) is caught by both checks."""
    from replicate.experiments.local_global import attention_bias_checks as ab

    m = ab.thm9_checks([BELOW, ABOVE], np.random.default_rng(0), 10)
    assert m["thm9_max_gradient_norm"] < 1e-10 and m["thm9_max_loss_error"] < 1e-10
    assert m["thm9_root_max_set_residual"] < 1e-6 and m["thm9_roots_found"] >= 10
    assert ab.set_residual(np.array([0.0, 0.4, math.log(0.2 / 0.3) + 0.01, 1.0]), BELOW)[0] > 5e-3
    real = ab.star_bias
    monkeypatch.setattr(ab, "star_bias", lambda *args: real(*args) + 0.01)  # Eq. (46) off
    wrong = ab.thm9_checks([BELOW], np.random.default_rng(0), 10)
    assert wrong["thm9_max_gradient_norm"] > 1e-4
    assert wrong["thm9_root_max_set_residual"] > 1e-3


def test_full_model_checks_hold_and_catch_a_wrong_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thms 4 and 5 (ii)-(iv) hold to rounding in the full model; a wrong b on Gamma_* or a
    wrong marginal / entropy is caught."""
    from dataclasses import replace

    from replicate.experiments.local_global import full_model_checks as fm

    m = fm.full_model_checks([BELOW, ABOVE], np.random.default_rng(0))
    assert all(value < 1e-12 for value in m.values())
    shifted = [(e, w, b + 1e-3) for e, w, b in fm.thm4_points(BELOW)]
    prediction, loss, gradient = fm._errors(
        BELOW, shifted, lg.chain_constants(0.2, 0.3).bigram_loss
    )
    assert prediction > 1e-5 and loss > 1e-8 and gradient > 1e-5
    real = lg.chain_constants

    def wrong(p: float, q: float) -> lg.ChainConstants:
        c = real(p, q)
        return replace(c, pi1=c.pi1 + 1e-3, unigram_loss=c.unigram_loss + 1e-3)

    monkeypatch.setattr(fm.lg, "chain_constants", wrong)
    wrong_m = fm.full_model_checks([ABOVE], np.random.default_rng(0))
    assert wrong_m["thm5_max_prediction_error"] > 5e-4 and wrong_m["thm5_max_loss_error"] > 5e-4


def test_appendix_c_prediction_is_the_model_and_a_swapped_count_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """App. C's closed form equals the full forward pass; with beta and r - beta swapped in
    Eq. (17) the check fails."""
    from replicate.experiments.local_global import full_model_checks as fm

    assert fm.appendix_c_error(np.random.default_rng(1), 5) < 1e-12
    real = lg.low_rank_predictions
    monkeypatch.setattr(
        fm.lg,
        "low_rank_predictions",
        lambda e, p, w, b, beta, r, d: real(e, p, w, b, r - beta, r, d),
    )
    assert fm.appendix_c_error(np.random.default_rng(1), 5) > 1e-3
