"""dvc.yaml, the Snakefile and params.yaml describe the same experiments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from replicate.config import load_params

from .conftest import REPO


def _dvc() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())


def test_dvc_metrics_and_plots_cover_every_experiment() -> None:
    params = load_params(REPO / "params.yaml")
    dvc = _dvc()
    expected = {f"{e.directory}/metrics.json" for e in params.experiments.values()}
    assert set(dvc["metrics"]) == expected
    plotted = {next(iter(p)) if isinstance(p, dict) else p for p in dvc["plots"]}
    for path in plotted:
        assert any(path.startswith(f"{e.directory}/") for e in params.experiments.values()), path


def test_dvc_claims_stage_depends_on_every_paper_with_experiments() -> None:
    params = load_params(REPO / "params.yaml")
    deps = set(_dvc()["stages"]["claims"]["deps"])
    papers = {f"results/{e.paper}" for e in params.experiments.values()}
    assert papers <= deps


def test_dvc_stage_is_templated_not_restated() -> None:
    stage = _dvc()["stages"]["experiment"]
    assert stage["foreach"] == "${experiments}"
    assert "${key}" in stage["do"]["cmd"] and "scale=${scale}" in stage["do"]["cmd"]
    assert "experiments.${key}" in stage["do"]["params"]


def _target_rules(directory: Path) -> set[str]:
    """The rules Snakemake builds from ``directory``/params.yaml with the repository's Snakefile."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
    done = subprocess.run(
        [*command, "--directory", str(directory), "--list-target-rules"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return set(done.stdout.split())


def test_snakefile_rules_come_from_params(tmp_path: Path) -> None:
    """One rule per experiment, item and paper of params.yaml, and nothing else: removing an
    experiment from params.yaml removes its rule (the Snakefile restates no experiment)."""
    params = load_params(REPO / "params.yaml")
    expected = {"all", "claims", "claims_report"}
    for name, entry in params.experiments.items():
        expected |= {name, entry.item, entry.paper}
    assert _target_rules(REPO) == expected
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    del data["experiments"]["local_global_table1"]
    data["claims"] = [c for c in data["claims"] if c["experiment"] != "local_global_table1"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    assert _target_rules(tmp_path) == expected - {"local_global_table1"}
