"""A tiny real run of every experiment through the runner, then the claims evaluation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from replicate import claims
from replicate.config import load_params
from replicate.experiments import run_experiment


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    import yaml

    from .conftest import PARAMS_FILE, shrink

    root = tmp_path_factory.mktemp("run")
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(shrink(yaml.safe_load(PARAMS_FILE.read_text()))))
    params = load_params(path, scale="ci")
    metrics = {
        name: run_experiment(name, params, root, progress=False) for name in params.experiments
    }
    return root, metrics


def test_outputs_written(tiny_run) -> None:
    root, _ = tiny_run
    params = load_params(root / "params.yaml", scale="ci")
    for entry in params.experiments.values():
        for path in entry.output_paths:
            assert (root / path).stat().st_size > 0, path
        prov = json.loads((root / entry.directory / "provenance.json").read_text())
        assert prov["scale"] == "ci"
    assert (root / "logs/timings.jsonl").exists()


def test_fig3_metrics_and_curves(tiny_run) -> None:
    root, metrics = tiny_run
    m = metrics["attn_markov_fig3"]
    for key in (
        "p0.5_q0.8/tied/frac_unigram",
        "p0.5_q0.8/untied/max_delta_bigram",
        "p0.2_q0.3/max_dev_x0",
        "p0.5_q0.8/tied/seed0/kappa",
        "p0.5_q0.8/entropy_rate",
        "p0.5_q0.8/oracle_bigram",
    ):
        assert key in m
    assert m["p0.5_q0.8/entropy_rate"] == pytest.approx(0.619015, abs=1e-6)
    # on-batch oracles bracket each other the right way round
    assert m["p0.5_q0.8/oracle_bigram"] < m["p0.5_q0.8/oracle_unigram"]
    curves = pd.read_csv(root / "results/attn_markov/fig3/curves.csv")
    assert set(curves.columns) >= {"chain", "tying", "seed", "step", "test_loss"}
    assert curves.step.max() == 30 and curves.step.min() == 0
    probs = pd.read_csv(root / "results/attn_markov/fig3/probabilities.csv")
    assert probs.prob_next_one.between(0, 1).all()


def test_claims_evaluate_on_tiny_run(tiny_run) -> None:
    root, _ = tiny_run
    params = load_params(root / "params.yaml", scale="ci")
    records = claims.evaluate(params, root)
    assert len(records) == len(params.claims)
    assert all(r.verdict in {"holds", "does-not-reproduce", "missing"} for r in records)
    # 30 steps cannot train anything: the bigram claims must not all hold
    assert any(r.verdict != "holds" for r in records)


def test_rerun_is_deterministic(tiny_run, tmp_path: Path) -> None:
    root, metrics = tiny_run
    params = load_params(root / "params.yaml", scale="ci")
    again = run_experiment("attn_markov_fig3", params, tmp_path, progress=False)
    np.testing.assert_equal(again, metrics["attn_markov_fig3"])  # NaN == NaN here


def test_torch_outputs_are_byte_deterministic(tmp_path: Path) -> None:
    import torch

    from replicate import io

    obj = {"weights": torch.arange(6.0).view(2, 3), "members": [{"seed": 0}]}
    io.write_torch(tmp_path / "a.pt", obj)
    first = (tmp_path / "a.pt").read_bytes()
    io.write_torch(tmp_path / "a.pt", obj)
    assert (tmp_path / "a.pt").read_bytes() == first
    assert torch.equal(torch.load(tmp_path / "a.pt")["weights"], obj["weights"])
