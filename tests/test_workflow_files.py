"""dvc.yaml, the Snakefile and params.yaml describe the same experiments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replicate.checkout import PIPELINE_FILES, pipeline_file
from replicate.config import load_params
from replicate.dvcfile import render_all
from replicate.params import SCALES
from replicate.verdicts import ClaimsOutputs

from .conftest import REPO, params_with_claims, repository_claims


def _dvc(scale: str) -> dict:
    return yaml.safe_load((REPO / pipeline_file(scale)).read_text())


def test_the_pipeline_files_are_generated_from_params() -> None:
    """dvc.yaml (ci) and scales/paper/dvc.yaml are `python -m replicate.dvcfile`'s output
    for the committed params.yaml."""
    assert set(PIPELINE_FILES) == set(SCALES)
    for file, text in render_all(REPO / "params.yaml").items():
        assert (REPO / file).read_text() == text, (
            f"{file} is out of date: run `python -m replicate.dvcfile`"
        )


@pytest.mark.parametrize("scale", SCALES)
def test_dvc_stages_read_exactly_their_rules_inputs(scale: str) -> None:
    """Per scale, one stage per paper plus the claims; a paper's stage runs its Snakemake
    target at that scale from the project root, reads every key its experiments' rules read
    (settings at that scale, the shared sections only where an experiment declares them)
    and the source files its experiments' jobs import, and keeps each experiment's folder
    of that scale's results tree through `dvc repro`; the claims depend on every
    experiment's outputs and the claims code."""
    from replicate.sources import claims_sources, paper_sources

    params = load_params(REPO / "params.yaml", scale=scale, only=[])
    stages = _dvc(scale)["stages"]
    papers = {entry.paper for entry in params.experiments.values()}
    assert set(stages) == {*papers, "claims"}
    wdir = os.path.relpath(REPO, (REPO / pipeline_file(scale)).parent)
    for paper in papers:
        stage = stages[paper]
        names = [n for n, e in params.experiments.items() if e.paper == paper]
        assert stage["cmd"] == f"snakemake --cores all {paper} --config scale={scale}"
        assert stage.get("wdir", ".") == wdir
        assert stage["deps"] == list(paper_sources(names, REPO))  # the files its jobs import
        assert stage["outs"] == [
            {f"results/{scale}/{paper}/{params.experiment(n).item}": {"persist": True}}
            for n in names
        ]
        for name in names:
            assert f"{params.section_of(name)}.{name}.settings.{scale}" in stage["params"]
        reads_classification = any("classification" in params.experiment(n).reads for n in names)
        assert ("classification" in stage["params"]) == reads_classification
        assert len(stage["params"]) == len(set(stage["params"]))
        assert "scale" not in stage["params"]
    claims = stages["claims"]
    assert {str(params.directory(n)) for n in params.experiments} <= set(claims["deps"])
    assert {*claims_sources(REPO), "params.yaml"} <= set(claims["deps"])
    assert claims["outs"] == [f"results/{scale}/claims.json", f"results/{scale}/REPORT.md"]


@pytest.mark.parametrize("scale", SCALES)
def test_dvc_metrics_are_the_verdict_summaries(scale: str) -> None:
    metrics = _dvc(scale)["stages"]["claims"]["metrics"]
    assert metrics == [{str(p): {"cache": False}} for p in ClaimsOutputs(scale).summaries()]


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
