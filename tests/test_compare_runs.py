"""`benchmarks/compare_runs.py` on two made-up checkouts: it sums rule CPU per paper, counts
byte-identical result files, and finds each moved metric and each changed verdict (and
nothing where the runs agree)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import compare_runs

EXPERIMENTS = {"attn_markov_fig3": "attn_markov", "two_layer_maps": "two_layer"}


def _checkout(root: Path, cpu: float, metric: float, verdict: str) -> Path:
    experiments = {name: {"paper": paper} for name, paper in EXPERIMENTS.items()}
    root.mkdir()
    (root / "params.yaml").write_text(yaml.safe_dump({"experiments": experiments}))
    for name, paper in EXPERIMENTS.items():
        bench = root / "logs/ci/benchmarks" / f"{name}.tsv"
        bench.parent.mkdir(parents=True, exist_ok=True)
        bench.write_text(f"s\tcpu_time\n1.0\t{cpu}\n")
        out = root / "results/ci" / paper / name.split("_")[-1]
        out.mkdir(parents=True)
        (out / "metrics.json").write_text(json.dumps({"loss": metric, "steps": 10}))
        (out / "provenance.json").write_text(json.dumps({"commit": str(root)}))
    claims = [{"id": "A1", "verdict": verdict}, {"id": "D1", "verdict": "holds"}]
    (root / "results/ci/claims.json").write_text(json.dumps(claims))
    return root


def test_a_change_that_moves_a_metric_and_a_verdict_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _checkout(tmp_path / "old", cpu=10.0, metric=0.5, verdict="holds")
    new = _checkout(tmp_path / "new", cpu=7.0, metric=0.5 + 1e-3, verdict="inconclusive")
    compare_runs.print_cpu(old, new, "ci")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["attn_markov", "10.0", "->", "7.0", "0.70"]
    assert lines[3].split() == ["all", "20.0", "->", "14.0", "0.70"]
    moved = compare_runs.moved_metrics(old, new, "ci", 1e-6)
    loss = ("loss", 0.5, 0.501)
    assert moved == [("attn_markov/fig3", *loss), ("two_layer/maps", *loss)]
    assert compare_runs.changed_verdicts(old, new, "ci") == [("A1", "holds", "inconclusive")]


def test_identical_runs_move_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _checkout(tmp_path / "old", cpu=10.0, metric=0.5, verdict="holds")
    new = _checkout(tmp_path / "new", cpu=10.0, metric=0.5 * (1 + 1e-9), verdict="holds")
    assert compare_runs.moved_metrics(old, new, "ci", 1e-6) == []
    assert compare_runs.changed_verdicts(old, new, "ci") == []
    compare_runs.print_bytes(old, new, "ci")
    # the metrics differ in their last bits: not byte-identical, though not moved either
    assert "byte-identical: 0; differing or absent in the new run: 2" in capsys.readouterr().out
