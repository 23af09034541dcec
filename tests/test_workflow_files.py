"""dvc.yaml, the Snakefile and params.yaml describe the same experiments."""

from __future__ import annotations

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


def test_snakefile_reads_params_and_restates_nothing() -> None:
    text = (REPO / "Snakefile").read_text()
    assert 'configfile: "params.yaml"' in text
    for setting in ("0.5", "0.8", "8000", "1024", "seeds"):
        assert setting not in text
