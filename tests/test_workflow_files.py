"""dvc.yaml, the Snakefile and params.yaml describe the same experiments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from replicate.config import load_params
from replicate.dvcfile import render
from replicate.verdicts import verdict_summary_paths

from .conftest import REPO, params_with_claims, repository_claims


def _dvc() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())


def test_dvc_yaml_is_generated_from_params() -> None:
    """dvc.yaml is `python -m replicate.dvcfile`'s output for the committed params.yaml."""
    params = load_params(REPO / "params.yaml", only=[])
    assert (REPO / "dvc.yaml").read_text() == render(params), (
        "dvc.yaml is out of date: run `python -m replicate.dvcfile`"
    )


def test_dvc_stages_read_exactly_their_rules_inputs() -> None:
    """One stage per paper plus the claims; a paper's stage runs its Snakemake target, reads
    every key its experiments' rules read (settings at a templated scale, the shared
    sections only where an experiment declares them) and its paper's code, and keeps each
    experiment's folder through `dvc repro`; the claims depend on every experiment's outputs
    and the claims code."""
    from replicate.experiments import code_paths

    params = load_params(REPO / "params.yaml", only=[])
    stages = _dvc()["stages"]
    papers = {entry.paper for entry in params.experiments.values()}
    assert set(stages) == {*papers, "claims"}
    for paper in papers:
        stage = stages[paper]
        names = [n for n, e in params.experiments.items() if e.paper == paper]
        assert stage["cmd"] == f"snakemake --cores all {paper} --config scale=${{scale}}"
        assert stage["deps"] == code_paths(paper)
        assert stage["outs"] == [
            {str(params.experiment(n).directory): {"persist": True}} for n in names
        ]
        for name in names:
            assert f"{params.section_of(name)}.{name}.settings.${{scale}}" in stage["params"]
        reads_classification = any("classification" in params.experiment(n).reads for n in names)
        assert ("classification" in stage["params"]) == reads_classification
        assert len(stage["params"]) == len(set(stage["params"]))
        assert "scale" not in stage["params"]
    claims = stages["claims"]
    assert {str(e.directory) for e in params.experiments.values()} <= set(claims["deps"])
    assert {"replicate/claims.py", "params.yaml"} <= set(claims["deps"])


def test_dvc_metrics_are_the_verdict_summaries() -> None:
    metrics = _dvc()["stages"]["claims"]["metrics"]
    assert metrics == [{str(p): {"cache": False}} for p in verdict_summary_paths()]


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
    expected = {"all", "claims", "claims_evaluation", "claims_report"}
    for name, entry in params.experiments.items():
        expected |= {name, entry.item, entry.paper}
    assert _target_rules(REPO) == expected
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    del data["experiments"]["local_global_table1"]
    kept = repository_claims(lambda c: c["experiment"] != "local_global_table1")
    params_with_claims(tmp_path, data, kept)
    assert _target_rules(tmp_path) == expected - {"local_global_table1"}
