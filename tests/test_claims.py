"""The claims checker: pass, fail, missing, NaN, stale scale, unexpected pass; report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicate import claims
from replicate.cli import main
from replicate.config import load_params

from .conftest import PARAMS_FILE

CLAIM_ID = "A3a-tied-stuck"  # metric p0.5_q0.8/tied/frac_unigram, ge 0.6, expected holds


def _write_outputs(root: Path, metrics: dict, scale: str = "ci") -> None:
    out = root / "results/attn_markov/fig3"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics))
    (out / "provenance.json").write_text(json.dumps({"scale": scale, "settings": {}}))


def _record(root: Path) -> claims.ClaimRecord:
    params = load_params(PARAMS_FILE, scale="ci")
    return next(r for r in claims.evaluate(params, root) if r.id == CLAIM_ID)


@pytest.mark.parametrize(
    ("comparison", "measured", "reference", "tol", "holds"),
    [
        ("le", 0.011, 0.0, 0.01, False),
        ("le", 0.01, 0.0, 0.01, True),
        ("ge", 0.59, 0.6, 0.0, False),
        ("ge", 0.6, 0.6, 0.0, True),
        ("close", 0.62, 0.619, 0.005, True),
        ("close", 0.63, 0.619, 0.005, False),
    ],
)
def test_compare(
    comparison: str, measured: float, reference: float, tol: float, holds: bool
) -> None:
    assert claims.compare(measured, reference, comparison, tol) is holds


def test_expected_pass(tmp_path: Path) -> None:
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 1.0})
    r = _record(tmp_path)
    assert (r.verdict, r.expected, r.matches_expectation) == ("holds", "holds", True)
    assert r.measured == 1.0 and r.reference == 0.6 and r.scale == "ci"


def test_unexpected_failure(tmp_path: Path) -> None:
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 0.2})
    r = _record(tmp_path)
    assert r.verdict == "does-not-reproduce" and not r.matches_expectation


def test_unexpected_pass(tmp_path: Path, params_dict: dict) -> None:
    """A claim expected not to reproduce that suddenly holds must also fail the check."""
    import yaml

    data = params_dict
    claim = next(c for c in data["claims"] if c["id"] == CLAIM_ID)
    claim["expected"]["ci"] = {"verdict": "does-not-reproduce", "basis": "test", "reason": "test"}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 1.0})
    params = load_params(path, scale="ci")
    r = next(r for r in claims.evaluate(params, tmp_path) if r.id == CLAIM_ID)
    assert r.verdict == "holds" and not r.matches_expectation


def test_missing_metric_and_nan(tmp_path: Path) -> None:
    _write_outputs(tmp_path, {"something/else": 1.0})
    r = _record(tmp_path)
    assert r.verdict == "missing" and not r.matches_expectation and "absent" in r.note
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": None})
    r = _record(tmp_path)
    assert r.verdict == "missing" and "NaN" in r.note


def test_missing_outputs_and_stale_scale(tmp_path: Path) -> None:
    r = _record(tmp_path)
    assert r.verdict == "missing" and "not found" in r.note
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 1.0}, scale="paper")
    r = _record(tmp_path)
    assert r.verdict == "missing" and "scale 'paper'" in r.note


def test_claims_files_report_and_check_exit_codes(tmp_path: Path, monkeypatch) -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 1.0})
    records = claims.evaluate(params, tmp_path)
    claims.write_claims(records, params, tmp_path)
    saved = json.loads((tmp_path / "results/claims.json").read_text())
    assert len(saved) == len(params.claims)
    assert set(saved[0]) >= {
        "id",
        "paper",
        "figure",
        "metric",
        "measured",
        "reference",
        "tolerance",
        "scale",
        "verdict",
        "expected",
        "provenance",
    }
    report = (tmp_path / "results/REPORT.md").read_text()
    assert CLAIM_ID in report and "UNEXPECTED" in report  # the other claims are missing
    monkeypatch.chdir(tmp_path)
    args = ["--params", str(PARAMS_FILE), "--scale", "ci", "check"]
    assert main(args) == 1  # every other claim is missing its metrics


def test_check_does_not_trust_a_stored_claims_file(tmp_path: Path, monkeypatch) -> None:
    """A claims.json saying 'all as expected' cannot pass when the metrics are gone."""
    params = load_params(PARAMS_FILE, scale="ci")
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 1.0})
    records = claims.evaluate(params, tmp_path)
    for r in records:  # forge a file that claims everything matched
        r.verdict, r.matches_expectation = r.expected, True
    claims.write_claims(records, params, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["--params", str(PARAMS_FILE), "--scale", "ci", "check"]) == 1


def test_check_passes_when_every_verdict_matches(
    tmp_path: Path, params_dict: dict, monkeypatch
) -> None:
    import yaml

    data = params_dict
    data["claims"] = [c for c in data["claims"] if c["id"] == CLAIM_ID]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 1.0})
    monkeypatch.chdir(tmp_path)
    assert main(["--params", str(path), "--scale", "ci", "claims"]) == 0
    assert main(["--params", str(path), "--scale", "ci", "check"]) == 0
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": 0.0})  # metrics changed since
    assert main(["--params", str(path), "--scale", "ci", "check"]) == 1
