"""Negative controls: learning switched off keeps every model at its initialisation, the
record of the controls is checked, and the claims check fails on a claim that cannot fail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate import claims
from replicate.claim_files import load_claims
from replicate.cli import main
from replicate.config import load_params, read_params_file
from replicate.control_record import (
    CONTROLS_FILE,
    NOT_RUN,
    NOT_TRAINED,
    STALE,
    control_problem,
    control_status,
    definition_digest,
    read_controls,
    reads_training,
    write_controls,
)
from replicate.markov import binary_kernel, binary_stationary
from replicate.params import PAPERS, ConfigError
from replicate.provenance import LEARNING, LEARNING_ENV, recorded_inputs
from replicate.sources import paper_digest
from replicate.training import TrainingPlan, gpt_ensemble, train_ensemble

from .conftest import PARAMS_FILE, claim_dict, params_with_claims

CLAIM_ID = "A3a-tied-stuck"  # paper A, Fig. 3: metric p0.5_q0.8/tied/frac_unigram >= 0.6
PLAN = TrainingPlan(steps=12, batch_size=4, seq_len=16, eval_every=4, test_sequences=4, test_seed=9)


def _trained_weights(learning: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """Initial and final weights of a two-member GPT ensemble trained with ``learning``."""
    monkeypatch.setenv(LEARNING_ENV, learning)
    model = gpt_ensemble(GPTConfig(block_size=PLAN.seq_len), [0, 1])
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    members = [ChainMember(binary_kernel(0.3, 0.2), binary_stationary(0.3, 0.2), s) for s in (0, 1)]
    optim = OptimConfig(lr=1e-2, weight_decay=0.1)
    trained = train_ensemble(model, members, PLAN, optim, "control")
    return initial, trained.model.state_dict()


def test_learning_switched_off_keeps_every_weight_at_its_initialisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    initial, final = _trained_weights("off", monkeypatch)
    assert all(torch.equal(initial[k], final[k]) for k in initial)
    initial, final = _trained_weights("on", monkeypatch)
    assert not all(torch.equal(initial[k], final[k]) for k in initial)


def test_an_unknown_learning_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEARNING_ENV, "of")
    with pytest.raises(ConfigError, match=f"{LEARNING_ENV} = 'of'"):
        _trained_weights("of", monkeypatch)


def _outputs(root: Path, metrics: dict, learning: str = "on") -> None:
    """Paper A Fig. 3's outputs as params.yaml produces them at ci scale, with ``learning``."""
    out = root / "results/ci/attn_markov/fig3"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics))
    params = load_params(PARAMS_FILE, scale="ci", only=["attn_markov_fig3"])
    provenance = recorded_inputs("attn_markov_fig3", params)
    if learning == "off":
        provenance[LEARNING] = "off"
    (out / "provenance.json").write_text(json.dumps(provenance))


def _stuck_everywhere() -> dict:
    """CLAIM_ID's metric (every seed stuck at the unigram: holds) and its per-seed classes."""
    classes = {f"p0.5_q0.8/tied/seed{s}/class": -1.0 for s in range(3)}
    return {"p0.5_q0.8/tied/frac_unigram": 1.0, **classes}


def _project(root: Path, claim: dict, control_verdict: str | None) -> Path:
    """A project whose only claim is ``claim``, with a controls record giving it
    ``control_verdict`` at ci scale (None: no record)."""
    path = params_with_claims(root, read_params_file(PARAMS_FILE), [claim])
    if control_verdict is not None:
        loaded = load_params(path, scale="ci")
        (parsed,) = load_claims(loaded).claims
        entry = {
            "commit": "0" * 40,
            "date": "2026-11-28",
            "cpu": "test",
            "seconds": 0,
            "code": {paper: paper_digest(paper) for paper in PAPERS},
            "claims": {
                parsed.id: {
                    "definition": definition_digest(parsed),
                    "reads_training": True,
                    "verdict": control_verdict,
                    "measured": 1.0,
                    "seed_values": {},
                }
            },
        }
        write_controls(root / "claims" / CONTROLS_FILE, "ci", entry)
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    _outputs(tmp_path, _stuck_everywhere())
    return tmp_path


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    assert main(["--params", str(path), "--scale", "ci", "claims"]) == 0
    code = main(["--params", str(path), "--scale", "ci", "check"])
    return code, capsys.readouterr().err


def test_the_check_fails_on_a_paper_claim_that_holds_untrained(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _project(project, claim_dict(CLAIM_ID), "holds")
    code, err = _check(path, capsys)
    assert code == 1
    assert f"CANNOT FAIL {CLAIM_ID}: it holds for models that learned nothing" in err
    report = (project / "results/ci/REPORT.md").read_text()
    assert "❌ CANNOT FAIL" in report and "| holds (1) |" in report


def test_the_check_passes_a_claim_whose_control_fails(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _project(project, claim_dict(CLAIM_ID), "does-not-reproduce")
    code, err = _check(path, capsys)
    assert code == 0, err
    assert "| does-not-reproduce (1) |" in (project / "results/ci/REPORT.md").read_text()


def test_a_claim_meant_to_hold_untrained_says_why(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = {**claim_dict(CLAIM_ID), "holds_untrained": "a statement about the initialisation"}
    path = _project(project, claim, "holds")
    code, err = _check(path, capsys)
    assert code == 0, err
    assert "a statement about the initialisation" in (project / "results/ci/REPORT.md").read_text()


def test_a_changed_definition_makes_the_control_stale(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _project(project, claim_dict(CLAIM_ID), "does-not-reproduce")
    claims_file = project / "claims" / "attn_markov.yaml"
    claims_file.write_text(claims_file.read_text().replace("reference: 0.6", "reference: 0.5"))
    code, err = _check(path, capsys)
    assert code == 1
    assert f"CANNOT FAIL {CLAIM_ID}: its negative control was run for another definition" in err


def test_an_edited_control_record_is_refused(project: Path) -> None:
    path = _project(project, claim_dict(CLAIM_ID), "does-not-reproduce")
    record = project / "claims" / CONTROLS_FILE
    data = json.loads(record.read_text())
    data["ci"]["claims"][CLAIM_ID]["verdict"] = "holds"
    record.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="digest does not match"):
        load_claims(load_params(path, scale="ci"))


def test_outputs_of_a_control_run_are_not_read_as_a_training(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _outputs(project, _stuck_everywhere(), learning="off")
    path = _project(project, claim_dict(CLAIM_ID), None)
    (record,) = claims.evaluate(load_params(path, scale="ci"), project)
    assert record.verdict == "missing"
    assert "produced with learning off" in record.note


def test_status_and_problem_by_provenance_and_record() -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    claimset = load_claims(params)
    by_id = {c.id: c for c in claimset.claims}
    trained = by_id[CLAIM_ID]
    assert reads_training(params, trained.experiment, "ci")
    untrained = next(c for c in claimset.claims if not reads_training(params, c.experiment, "ci"))
    assert control_status(untrained, {}, params, claimset.code) == (NOT_TRAINED, None)
    assert control_status(trained, {}, params, claimset.code) == (NOT_RUN, None)
    row = {"definition": definition_digest(trained), "verdict": "holds", "measured": 1.0}
    record = {
        "ci": {"claims": {CLAIM_ID: row}, "code": {"attn_markov": paper_digest("attn_markov")}}
    }
    assert control_status(trained, record, params, claimset.code) == ("holds", 1.0)
    record["ci"]["code"]["attn_markov"] = "other code"
    assert control_status(trained, record, params, claimset.code) == (STALE, None)
    record["ci"]["code"]["attn_markov"] = paper_digest("attn_markov")
    row["definition"] = "another definition"
    assert control_status(trained, record, params, claimset.code) == (STALE, None)
    assert control_problem(trained, NOT_RUN) == ""
    assert "another definition" in control_problem(trained, STALE)
    proposal = trained.model_copy(update={"provenance": "proposal"})
    assert control_problem(proposal, "holds") == ""
    assert "learned nothing" in control_problem(trained, "holds")


def test_a_missing_record_reads_as_no_scale(tmp_path: Path) -> None:
    assert read_controls(tmp_path / CONTROLS_FILE) == {}


def test_a_model_predicting_uniformly_has_not_reached_the_unigram_solution() -> None:
    """Paper A's stuck runs sit at the unigram solution (predict pi); a model at its
    initialisation predicts uniformly, which is UNLEARNED where pi is not uniform, so the
    claims about stuck runs can fail for a model that learned nothing."""
    from replicate.analysis import RunClass, classify, gap_closed, oracle_losses
    from replicate.markov import sample_chain

    p, q = 0.5, 0.8
    kernel = binary_kernel(p, q)
    generator = torch.Generator().manual_seed(0)
    initial = torch.from_numpy(binary_stationary(p, q))
    tokens = sample_chain(torch.from_numpy(kernel), initial, 64, 257, generator)
    bigram, unigram = oracle_losses(tokens, kernel)
    thresholds = load_params(PARAMS_FILE, scale="ci").raw.classification
    uniform = float(np.log(2))
    assert classify(gap_closed(uniform, bigram, unigram), thresholds) is RunClass.UNLEARNED
    assert classify(gap_closed(unigram, bigram, unigram), thresholds) is RunClass.UNIGRAM
    assert classify(gap_closed(bigram, bigram, unigram), thresholds) is RunClass.BIGRAM
