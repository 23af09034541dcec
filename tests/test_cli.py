"""The command line and the Snakemake workflow reject bad input clearly and leave results alone."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from replicate.cli import main

from .conftest import REPO

pytestmark = pytest.mark.workflow(seconds=40)


def test_unknown_experiment(capsys) -> None:
    assert main(["--params", str(REPO / "params.yaml"), "run", "attn_markov_fig42"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'attn_markov_fig42'" in err and "attn_markov_fig3" in err


def test_bad_params_leave_results_untouched(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "results/ci/attn_markov/fig3"
    out.mkdir(parents=True)
    (out / "metrics.json").write_text('{"old": 1.0}')
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["experiments"]["attn_markov_fig3"]["settings"]["ci"]["chains"][0]["p"] = 1.5
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "attn_markov_fig3"]) == 2
    assert "chains.0.p = 1.5" in capsys.readouterr().err
    assert (out / "metrics.json").read_text() == '{"old": 1.0}'


def test_list(capsys) -> None:
    assert main(["--params", str(REPO / "params.yaml"), "list"]) == 0
    assert "attn_markov_fig3" in capsys.readouterr().out


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    """A copy of the workflow files (not results) in a scratch directory."""
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    for pkg in ("replicate", "lightning_modules", "claims"):
        shutil.copytree(REPO / pkg, tmp_path / pkg)
    return tmp_path


def _snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_snakemake_plans_paper_scale(workflow: Path) -> None:
    res = _snakemake(workflow, "-n", "attn_markov_fig3", "--config", "scale=paper")
    assert res.returncode == 0, res.stderr
    assert "attn_markov_fig3" in res.stdout
    res = _snakemake(workflow, "-n", "fig3")
    assert res.returncode == 0 and "fig3" in res.stdout


def test_the_gpu_profile_runs_the_paper_scale_one_training_at_a_time(workflow: Path) -> None:
    """profiles/gpu: the paper's scale and its own results tree, one GPU that the training
    jobs share, with profiles/default read as well."""
    shutil.copytree(REPO / "profiles", workflow / "profiles")
    res = _snakemake(workflow, "-n", "--profile", "profiles/gpu", "attn_markov_fig3", "fig2")
    assert res.returncode == 0, res.stderr
    assert "profiles/gpu and workflow specific profile profiles/default" in res.stderr
    assert "results/paper/attn_markov/fig3/metrics.json" in res.stdout
    assert "results/ci/" not in res.stdout
    assert re.search(r"rule attn_markov_fig3:(?:\n .*)*\n    resources: .*gpu=1", res.stdout)
    assert re.search(r"rule local_global_fig2:(?:\n .*)*\n    resources: .*gpu=0", res.stdout)


def test_snakemake_unknown_target_and_bad_scale(workflow: Path) -> None:
    res = _snakemake(workflow, "-n", "attn_markov_fig42")
    assert res.returncode != 0 and "attn_markov_fig42" in res.stdout + res.stderr
    res = _snakemake(workflow, "-n", "fig3", "--config", "scale=huge")
    assert res.returncode != 0 and "huge" in res.stdout + res.stderr


def test_snakemake_rules_run_their_own_experiment(workflow: Path) -> None:
    """Regression: each generated rule must run its own experiment, not the loop's last one."""
    import json

    targets = ["attn_markov_table1", "attn_markov_fig2"]
    res = _snakemake(workflow, *targets)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    for name in targets:
        item = name.removeprefix("attn_markov_")
        prov = json.loads((workflow / f"results/ci/attn_markov/{item}/provenance.json").read_text())
        assert prov["experiment"] == name
