"""Paper A's training-free experiments: theorems table, Fig. 2b data check, Tables 1-2, App. D.

The App. D analysis is tested on a model with a planted App. D structure (the refit must
recover the planted constants and Eq. 26 must equal the network's output); the tables
against Table 1's numbers; the data check on samplers with known (and deliberately wrong)
laws; each experiment through the real runner in a temporary results tree.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_modules import EnsembleGPT, GPTConfig
from replicate import io
from replicate.config import load_params
from replicate.experiments.attn_markov import appendix_d, fig2, tables, theorems
from replicate.experiments.runner import run_experiment
from replicate.markov import binary_kernel, binary_stationary, sample_chain
from replicate.settings import BinaryChainSettings
from replicate.theory import attn_markov as am

from .conftest import PARAMS_FILE

CHAIN = BinaryChainSettings(p=0.2, q=0.3)
PLANTED = am.AppendixDConstants(e=0.45, p=-0.25, w_1=0.2, b=-0.1, beta=6, d=4, r=16)
V = torch.tensor([1.0, 1.0, -1.0, 1.0])  # not alternating: the refit must find v itself
W = torch.tensor([1.0] * 6 + [-1.0] * 10)[  # beta = 6 of r = 16, in shuffled order
    torch.randperm(16, generator=torch.Generator().manual_seed(3))
]


# ----------------------------------------------------------------------------- App. D
def planted_checkpoint(n_positions: int = 24, sequences: int = 6, sign_w2: float = 1.0) -> dict:
    """A tied theory-variant model with exactly App. D's structure (Eqs. 14, 15, 18, 19)."""
    c = PLANTED
    cfg = GPTConfig(vocab_size=2, n_embd=c.d, block_size=n_positions, tied=True)
    model = EnsembleGPT(cfg, 1)
    model.init_members([0])  # keeps W_Q, W_K, W_V random: irrelevant once W_O = 0
    w_1 = c.w_1 * torch.outer(W, V)
    with torch.no_grad():
        model.transformer["wte"].weight[0] = torch.stack([torch.zeros(c.d), c.e * V])
        model.transformer["wpe"].weight[0] = c.p * V
        block = model.transformer["h"][0]
        block.attn.c_proj.weight.zero_()
        block.mlp.c_fc.weight[0] = w_1
        block.mlp.c_proj.weight[0] = sign_w2 * w_1.T
        model.lm_head.bias[0] = torch.tensor([0.0, c.b])
    pi = binary_stationary(CHAIN.p, CHAIN.q)
    tokens = sample_chain(
        torch.from_numpy(binary_kernel(CHAIN.p, CHAIN.q)),
        torch.from_numpy(pi),
        sequences,
        n_positions + 1,
        torch.Generator().manual_seed(0),
    )
    return {
        "config": dataclasses.asdict(cfg),
        "members": [{"p": CHAIN.p, "q": CHAIN.q, "seed": 7}],
        "state_dict": model.state_dict(),
        "test_tokens": tokens.unsqueeze(0),
    }


def test_refit_recovers_planted_constants() -> None:
    theta = appendix_d.theory_params(planted_checkpoint()["state_dict"], 0)
    refit = appendix_d.refit_constants(theta)
    for name in ("e", "p", "w_1", "b"):
        assert getattr(refit, name) == pytest.approx(getattr(PLANTED, name), abs=1e-6), name
    assert refit.beta == PLANTED.beta and (refit.d, refit.r) == (4, 16)
    s = appendix_d.structure_metrics(theta, refit)
    assert s["position_variation"] == pytest.approx(0.0, abs=1e-12)
    for name in ("cos_e_v", "rank_one_fraction", "cos_w1_refit", "cos_w2_w1t", "w2_scale"):
        assert s[name] == pytest.approx(1.0, abs=1e-6), name
    assert s["cos_e_pbar"] == pytest.approx(-1.0, abs=1e-6)
    assert s["sign_margin"] == pytest.approx(0.2, abs=1e-6)  # min(-p, e + p)


def test_eq26_equals_planted_network_and_attention_vanishes() -> None:
    checkpoint = planted_checkpoint()
    theta = appendix_d.theory_params(checkpoint["state_dict"], 0)
    formula = appendix_d.eq26_probabilities(appendix_d.refit_constants(theta))
    (pred,) = appendix_d.predict(checkpoint, [0], sequences=6)
    assert np.abs(pred.prob_one - formula[pred.tokens]).max() < 1e-5
    assert pred.ratio_per_position.max() == 0.0  # W_O = 0
    skip = appendix_d.skip_only_probabilities(theta)
    np.testing.assert_allclose(skip, formula, atol=1e-6)
    m = appendix_d.prediction_metrics(pred, CHAIN, formula, skip)
    assert m["formula_error"] < 1e-5 and m["attention_ratio"] == 0.0


def test_wrong_sign_of_w2_is_detected() -> None:
    theta = appendix_d.theory_params(planted_checkpoint(sign_w2=-1.0)["state_dict"], 0)
    refit = appendix_d.refit_constants(theta)
    assert appendix_d.structure_metrics(theta, refit)["cos_w2_w1t"] == pytest.approx(-1.0, abs=1e-6)
    network = appendix_d.skip_only_probabilities(theta)  # exact for W_O = 0, constant p_n
    assert np.abs(network - appendix_d.eq26_probabilities(refit)).max() > 0.05


def test_theory_coordinates_reproduce_a_random_network() -> None:
    """The App. A mapping (e, p_n, a = e, b, W_*) of a trained-like random model."""
    cfg = GPTConfig(vocab_size=2, n_embd=4, block_size=8, tied=True, init_std=0.5)
    model = EnsembleGPT(cfg, 2)
    model.init_members([1, 2])
    with torch.no_grad():
        model.lm_head.bias.normal_(generator=torch.Generator().manual_seed(0))
    x = am.all_sequences(2, 8)
    with torch.no_grad():
        logits = model(x.expand(2, *x.shape)).double()
    for member in range(2):
        theta = appendix_d.theory_params(model.state_dict(), member)
        expected = logits[member, ..., 1] - logits[member, ..., 0]
        torch.testing.assert_close(am.theory_logits(theta, x), expected, atol=1e-5, rtol=1e-5)


def test_averaged_refit_is_the_mean_of_the_runs() -> None:
    other = dataclasses.replace(PLANTED, e=0.55, beta=8)
    mean = appendix_d.averaged_refit([PLANTED, other])
    assert mean.e == pytest.approx(0.5) and mean.beta == pytest.approx(7.0)
    gap = appendix_d.averaged_metrics(am.APPENDIX_D, CHAIN)["kernel_gap"]
    assert gap == pytest.approx(0.00596, abs=1e-5)  # Eq. (29): |0.6940 - 0.7|


# ----------------------------------------------------------------------------- Table 1
@pytest.fixture
def table1_settings() -> tables.Table1Settings:
    return tables.Table1Settings(n_embd=4, seq_len=1024, n_layers=[1, 2])


def test_table1_names_shapes_and_counts(table1_settings: tables.Table1Settings) -> None:
    tied = tables.parameter_rows(table1_settings, 1, tied=True)
    untied = tables.parameter_rows(table1_settings, 1, tied=False)
    assert set(tied.status) == {"matches", "extra (explained)"}
    assert tied.loc[tied.status == "extra (explained)", "parameter"].tolist() == ["lm_head.bias"]
    assert int(tied["count"].sum()) == 4310 and int(untied["count"].sum()) == 4318
    assert tables.listed_total(table1_settings, 1) == 4308
    assert tables.listed_total(table1_settings, 2) - tables.listed_total(table1_settings, 1) == 200
    assert tables.missing_lines(tied, 1) == 0
    two = tables.parameter_rows(table1_settings, 2, tied=True)
    assert (two.table1 == "transformer.h.attn.c_attn").sum() == 2


def test_table1_flags_a_wrong_shape_and_a_missing_line(
    table1_settings: tables.Table1Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = tuple(
        dataclasses.replace(r, shape=lambda d, n: (3 * d, d))
        if r.name == "transformer.h.mlp.c_fc"
        else r
        for r in tables.TABLE1
    )
    extra = tables.Table1Row("transformer.h.attn.bias", "d × 1", lambda d, n: (d, 1), True)
    monkeypatch.setattr(tables, "TABLE1", (*wrong, extra))
    frame = tables.parameter_rows(table1_settings, 2, tied=True)
    assert set(frame.loc[frame.status == "wrong shape", "table1"]) == {"transformer.h.mlp.c_fc"}
    assert tables.missing_lines(frame, 2) == 2


def test_table1_name_and_tying(table1_settings: tables.Table1Settings) -> None:
    assert tables.table1_name("transformer.h.11.mlp.c_proj.weight") == "transformer.h.mlp.c_proj"
    assert tables.table1_name("lm_head.bias") == "lm_head"
    m = tables.tying_metrics(table1_settings)
    assert m["tied/shares_storage"] == 1.0 and m["tied/optimizer_wte_entries"] == 1.0
    assert m["tied/optimizer_numel"] == 4310 and m["tied/wte_decayed"] == 0.0


# ----------------------------------------------------------------------------- Table 2
@pytest.mark.parametrize(
    ("scale", "disagreeing"),
    [("paper", {"Architecture"}), ("ci", {"Architecture", "# Iterations", "Sequence length"})],
)
def test_table2_against_fig3_settings(scale: str, disagreeing: set[str]) -> None:
    fig3 = load_params(PARAMS_FILE, scale=scale).settings("attn_markov_fig3")
    frame = tables.table2_frame(fig3, scale)  # type: ignore[arg-type]
    assert len(frame) == len(tables.TABLE2) == 16
    assert set(frame.loc[frame.agrees == "no", "item"]) == disagreeing


def test_table2_rows_measure_the_instantiated_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropout and mask window are read off the model the runs build; each check can fail."""
    from replicate.experiments import hyperparameter_tables as hp

    fig3 = load_params(PARAMS_FILE, scale="ci").settings("attn_markov_fig3")
    assert hp.dropout_free(fig3)[1] is True and hp.mask_window(fig3)[1] is True
    frame = tables.table2_frame(fig3, "ci")
    unchecked = set(frame.loc[frame.agrees == hp.NOT_CHECKED, "item"])
    assert unchecked == {"Dataset", "Accumulation steps"}

    real = hp.instantiated

    class Noisy(torch.nn.Module):  # a model with dropout-like noise in training mode
        def __init__(self) -> None:
            super().__init__()
            self.inner = real(fig3)

        def forward(self, tokens: torch.Tensor, traces: list | None = None) -> torch.Tensor:
            out = self.inner(tokens, traces)
            return out + torch.rand_like(out) if self.training else out

    monkeypatch.setattr(hp, "instantiated", lambda s: Noisy())
    assert hp.dropout_free(fig3)[1] is False

    class Uncausal(Noisy):  # attends to the future
        def forward(self, tokens: torch.Tensor, traces: list | None = None) -> torch.Tensor:
            out = self.inner(tokens, traces)
            if traces is not None:
                traces[0]["attention"] = torch.full_like(traces[0]["attention"], 0.1)
            return out

    monkeypatch.setattr(hp, "instantiated", lambda s: Uncausal())
    assert hp.mask_window(fig3)[1] is False


def test_frame_to_markdown_escapes_pipes() -> None:
    import pandas as pd

    text = tables.frame_to_markdown(pd.DataFrame({"a": ["x|y"], "b": [0.123456]}))
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | 0.1235 |"]


# ----------------------------------------------------------------------------- Fig. 2b
def test_transition_and_marginal_frequencies_count_correctly() -> None:
    tokens = torch.tensor([[0, 0, 1, 1, 0], [1, 0, 1, 0, 0]])
    freq = fig2.transition_frequencies(tokens, 2)
    # from 0: 0->0 twice, 0->1 twice; from 1: 1->1 once, 1->0 three times
    np.testing.assert_allclose(freq, [[0.5, 0.5], [0.75, 0.25]])
    np.testing.assert_allclose(fig2.marginal_frequencies(tokens, 2)[:, 1], [0.5, 0, 1, 0.5, 0])
    z = fig2.marginal_z(np.array([[0.5]]), np.array([0.4]), sequences=24)
    assert z[0, 0] == pytest.approx(1.0)
    assert fig2.checked_positions(1024) == [1, 512, 1024]


def _settings(**overrides) -> fig2.Fig2Settings:
    base = {
        "binary_chains": [{"p": 0.5, "q": 0.8}],
        "symmetric_chains": [{"n_states": 5, "p": 0.3}],
        "sequences": 256,
        "seq_len": 256,
        "seed": 0,
    }
    return fig2.Fig2Settings.model_validate({**base, **overrides})


def test_binary_check_accepts_the_sampler() -> None:
    s = _settings()
    metrics, marginal = fig2.binary_check(s.binary_chains[0], s, 0)
    assert metrics["transition_error"] < 0.01 and metrics["marginal_max_z"] < 5
    assert marginal.shape == (256,)
    sym = fig2.symmetric_check(s.symmetric_chains[0], s, 1)
    assert sym["stay_error"] < 0.01 and sym["offdiag_error"] < 0.01 and sym["marginal_max_z"] < 5


def test_z_score_catches_a_wrong_initial_law(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bug of the authors' code, `Markov-LLM-k`: x_1 ~ Bernoulli(pi_0) instead of pi_1.
    monkeypatch.setattr(
        fig2, "initial_law", lambda chain, law: binary_stationary(chain.p, chain.q)[::-1].copy()
    )
    s = _settings()
    metrics, _ = fig2.binary_check(s.binary_chains[0], s, 0)
    assert metrics["marginal_max_z"] > 5
    assert metrics["transition_error"] < 0.01  # the kernel alone cannot see it


# ----------------------------------------------------------------------------- theorems
def _row(check_id: str, *measurements: am.Measurement) -> am.CheckRow:
    return am.CheckRow(check_id, "test", measurements)


def test_theorem_extremes_filter_and_reduce() -> None:
    rows = [
        _row(
            "A-T3.saddle.untied.p0.5_q0.8",
            am.Measurement("hessian_min_eig", -0.1, "<=", -1e-6),
            am.Measurement("descent_delta", -1e-5, "<", 0.0),
        ),
        _row(
            "A-T3.saddle.untied.p0.2_q0.3",
            am.Measurement("hessian_min_eig", -0.01, "<=", -1e-6),
            am.Measurement("descent_delta", -2e-5, "<", 0.0),
        ),
        _row("A-T1.eq7.tied.p0.2_q0.3", am.Measurement("loss", 0.6, "near", 1e-10, 0.5)),
        _row("A-MS.tied.S5.p0.9", am.Measurement("n_negative", 3, "==", 0)),
    ]
    m = theorems.theorem_metrics(rows)
    assert m["A-T3.saddle.max_hessian_min_eig"] == -0.1  # p + q < 1 rows are left out
    assert m["A-T3.saddle.max_descent_delta"] == -1e-5
    assert m["A-T1.max_loss_error"] == pytest.approx(0.1)  # |value - target| for "near"
    assert math.isnan(m["A-T2.local_min.min_probe_delta"])  # no such check
    assert m["A-MS.tied.n_negative_mismatches"] == 1.0
    assert m["A-MS.tied.S5.p0.9.n_negative.expected"] == 0.0
    assert m["checks.n_failed"] == 2.0 and m["A-T1.eq7.tied.p0.2_q0.3.passed"] == 0.0
    assert theorems._switching("A-T2.saddle.tied.p0.2_q0.3.pn_zero") == pytest.approx(0.5)


def test_theorem_tables_escape_criteria() -> None:
    rows = [_row("A-L1.identity.p0.5_q0.8", am.Measurement("eq1_loss", 1.0, "near", 1e-12, 1.0))]
    text = theorems.markdown_table(rows)
    assert "\\|eq1_loss - 1\\| <= 1e-12" in text and "✅" in text
    assert theorems.measurement_table(rows).passed.tolist() == [True]


# ----------------------------------------------------------------------------- the runner
@pytest.fixture
def planted_fig3(tmp_path: Path) -> Path:
    """A results tree whose fig3 holds the planted model and params.yaml's fig3 settings."""
    upstream = tmp_path / "results/ci/attn_markov/fig3"
    io.write_torch(upstream / "models.pt", {"tied": planted_checkpoint()})
    fig3 = load_params(PARAMS_FILE, scale="ci").settings("attn_markov_fig3")
    io.write_json(upstream / "provenance.json", {"settings": fig3.model_dump(mode="json")})
    return tmp_path


def test_appendix_d_and_table2_through_the_runner(planted_fig3: Path) -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    m = run_experiment("attn_markov_appD", params, planted_fig3, progress=False)
    assert m["seed7/refit_beta"] == 6 and m["max_attention_ratio"] == 0.0
    assert m["max_formula_error"] < 1e-5 and m["min_rank_one_fraction"] == pytest.approx(1.0)
    assert m["A-D.eq26.arithmetic.logit_x0"] == pytest.approx(-1.3897, abs=1e-4)
    table = (planted_fig3 / "results/ci/attn_markov/appD/structure.md").read_text()
    assert "seed 7" in table and "0.3618 (Eq. 27)" in table
    t2 = run_experiment("attn_markov_table2", params, planted_fig3, progress=False)
    assert t2 == {
        "mismatches/optimization": 0.0,
        "mismatches/grid": 0.0,
        "mismatches/iterations": 1.0,
        "mismatches/seq_len": 1.0,
        "mismatches/architecture": 1.0,
        "iterations": 600.0,
        "seq_len": 128.0,
        "lines_checked": 14.0,  # 16 lines; accumulation and dataset: nothing to compare
    }


@pytest.mark.parametrize("name", ["attn_markov_theorems", "attn_markov_fig2", "attn_markov_table1"])
def test_training_free_experiments_through_the_runner(name: str, tmp_path: Path) -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    metrics = run_experiment(name, params, tmp_path, progress=False)
    directory = tmp_path / params.directory(name)
    assert json.loads((directory / "metrics.json").read_text()).keys() == metrics.keys()
    expected = {
        "attn_markov_theorems": ("checks.n_failed", 0.0),
        "attn_markov_fig2": ("binary/max_marginal_z", pytest.approx(3.88, abs=0.01)),
        "attn_markov_table1": ("l1/tied/total", 4310.0),
    }[name]
    assert metrics[expected[0]] == expected[1]
