"""A tiny real run of every experiment through the runner, then the claims evaluation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from replicate import claims
from replicate.claim_files import load_claims
from replicate.config import load_params
from replicate.experiments.runner import run_experiment

from .conftest import tiny_run_of_every_experiment

pytestmark = pytest.mark.workflow(seconds=100)

EMPTY_TABLES = {
    "results/ci/subngrams/fig1/plateaus.csv": "one row per plateau: a 30-step run has none, "
    "shorter than the least plateau of both of the detector's rules: rho x 6,144 = 184 steps "
    "on the paper's run length, rho x 1,600 = 48 steps on the local scale (whose shortest "
    "time scale is 4 evaluation intervals of 10 steps / slope_span 0.025)",
}
"""The output tables a tiny run may leave with a header and no row, and why."""


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    return tiny_run_of_every_experiment(tmp_path_factory)


def test_outputs_written(tiny_run) -> None:
    """Every declared output is a readable file of its kind, with the run's own content."""
    root, metrics = tiny_run
    params = load_params(root / "params.yaml", scale="ci")
    for name in params.experiments:
        stored = json.loads((root / params.directory(name) / "metrics.json").read_text())
        assert stored.keys() == metrics[name].keys(), name
        assert all(v is None or isinstance(v, (int, float)) for v in stored.values()), name
        for path in params.output_paths(name):
            data = (root / path).read_bytes()
            if path.suffix == ".png":
                assert data.startswith(b"\x89PNG\r\n\x1a\n"), path
            elif path.suffix == ".pdf":
                assert data.startswith(b"%PDF"), path
            elif path.suffix == ".csv":
                table = pd.read_csv(root / path)
                assert len(table.columns) > 0, path
                assert len(table) > 0 or str(path) in EMPTY_TABLES, path
            else:
                assert data.strip(), path
        prov = json.loads((root / params.directory(name) / "provenance.json").read_text())
        assert prov["scale"] == "ci"
        assert prov["settings"] == params.settings(name).model_dump(mode="json"), name


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
    curves = pd.read_csv(root / "results/ci/attn_markov/fig3/curves.csv")
    assert set(curves.columns) >= {"chain", "tying", "seed", "step", "test_loss"}
    assert curves.step.max() == 30 and curves.step.min() == 0
    probs = pd.read_csv(root / "results/ci/attn_markov/fig3/probabilities.csv")
    assert probs.prob_next_one.between(0, 1).all()


def test_claims_evaluate_on_tiny_run(tiny_run) -> None:
    """No claim is missing: every claim finds its metric, and one about an event the run
    does not reach (a plateau) has no subject; exact checks hold; 30 iterations learn no
    bigram."""
    root, _ = tiny_run
    params = load_params(root / "params.yaml", scale="ci")
    records = {r.id: r for r in claims.evaluate(params, root)}
    assert len(records) == len(load_claims(params).claims)
    missing = {i: r.note for i, r in records.items() if r.verdict == "missing"}
    assert not missing, missing
    # no plateau in 30 iterations (EMPTY_TABLES): the plateau's level is an outcome, not a fault
    level = records["C-F3c-plateau-level"]
    assert level.verdict == "inconclusive" and "no subject" in level.note, level.note
    # a claim whose effect comes after the run's last step is not tested, NaN metric or not;
    # nor is one about the end of training whose runs have too few evaluations to tell
    # whether they were still learning (`converged`: a flag of NaN)
    untested = {i for i, r in records.items() if r.verdict == "not-tested"}
    claimed = load_claims(params).claims
    with_effect = {c.id for c in claimed if c.effect is not None}
    converging = {c.id for c in claimed if c.converged is not None}
    assert untested == with_effect | converging and "C-F7b-gradient-spike" in untested
    for claim in (c for c in claimed if c.converged is not None):  # too few: NaN, not 0 or 1
        stored = json.loads(
            (root / params.directory(claim.experiment) / "metrics.json").read_text()
        )
        pattern = re.escape(claim.converged.pattern).replace(re.escape("{seed}"), r"\d+")
        flags = [v for k, v in stored.items() if re.fullmatch(pattern, k)]
        assert flags and all(v is None for v in flags), (claim.id, flags)
    # training-free, exact checks cannot depend on the training length
    for claim_id in ("A-T1-kernel", "A-T2-stationary", "A-L1-identity", "B1-energy", "B5-rate"):
        assert records[claim_id].verdict == "holds", claim_id
    # 30 tiny iterations cannot reach the bigram on p = 0.2, q = 0.3, so these must fail
    for claim_id in ("A3b-tied-learns", "A3b-untied-learns", "B3-loss"):
        assert records[claim_id].verdict == "does-not-reproduce", claim_id
    # multi-seed claims carry both seeds' verdicts (shrink keeps two), but a claim about the
    # stuck runs (per_seed.only) only its stuck seeds', paper B's Fig. 4 trains its extra
    # chain (p = 0.2, q = 0.3) with one seed (extra_seeds), and paper C's Fig. 7 one seed
    about_some = {c.id for c in load_claims(params).claims if c.per_seed and c.per_seed.only}
    seeded = [r for r in records.values() if r.interval is not None]
    assert seeded and all(1 <= len(r.seed_verdicts) <= 2 for r in seeded)
    fewer = {r.id for r in seeded if len(r.seed_verdicts) < 2}
    extra = {
        r.id
        for r in seeded
        if (r.experiment == "local_global_fig4" and "p0.2_q0.3" in r.metric)
        or len(params.experiment(r.experiment).settings["ci"].get("seeds", [0, 1])) == 1
    }
    assert fewer <= about_some | extra and extra <= fewer


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
