"""The workflow on a real (single-node) SLURM cluster, its profiles, and Snakemake's report.

`scripts/slurm-local.sh` starts munged, slurmctld and slurmd on this machine; one cheap
figure, one table and the claims then run through `snakemake --profile profiles/slurm` and
must write exactly the bytes of the same targets run locally. Where SLURM cannot start (not
root, packages or the executor plugin missing) those tests skip and say why.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .conftest import PARAMS_FILE, REPO, params_with_claims, repository_claims

pytestmark = pytest.mark.workflow(seconds=115)

EXPERIMENTS = ("attn_markov_fig2", "attn_markov_table1")
TARGETS = (*EXPERIMENTS, "claims")
SLURM_SCRIPT = REPO / "scripts" / "slurm-local.sh"


def _workspace(root: Path, experiments: tuple[str, ...] | None) -> Path:
    """The workflow files in ``root``; params.yaml cut down to ``experiments`` (None: all)."""
    root.mkdir(parents=True)
    for name in ("Snakefile",):
        shutil.copy(REPO / name, root / name)
    for folder in ("profiles", "report", "replicate", "lightning_modules"):
        shutil.copytree(REPO / folder, root / folder)
    data = yaml.safe_load(PARAMS_FILE.read_text())
    if experiments is not None:
        data["experiments"] = {k: v for k, v in data["experiments"].items() if k in experiments}
        data["derived_experiments"] = {}
    names = {*data["experiments"], *data["derived_experiments"]}
    params_with_claims(root, data, repository_claims(lambda c: c["experiment"] in names), True)
    return root


def _snakemake(cwd: Path, *args: str, env: dict[str, str] | None = None):
    res = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )
    return res


def _outputs(cwd: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(cwd)): p.read_bytes()
        for p in sorted((cwd / "results").rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The targets run locally with no flags: the workflow profile supplies the cores."""
    work = _workspace(tmp_path_factory.mktemp("local") / "w", EXPERIMENTS)
    res = _snakemake(work, *TARGETS)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return work


def test_bare_snakemake_runs_with_logs_and_benchmarks(local_run: Path) -> None:
    for name in EXPERIMENTS:
        assert (local_run / "logs/ci" / f"{name}.log").exists()
        bench = (local_run / "logs/ci/benchmarks" / f"{name}.tsv").read_text().splitlines()
        assert bench[0].split("\t")[:2] == ["s", "h:m:s"] and len(bench) == 2
    assert (local_run / "results/ci/claims.json").exists()


def test_report_shows_figures_captions_and_claims(local_run: Path) -> None:
    res = _snakemake(local_run, "--report", "report.html")
    assert res.returncode == 0, res.stderr[-3000:]
    html = (local_run / "report.html").read_text()
    params = yaml.safe_load((local_run / "params.yaml").read_text())
    for name in EXPERIMENTS:
        assert params["experiments"][name]["title"] in html
    for claim in repository_claims(lambda c: c["experiment"] in EXPERIMENTS):
        assert claim["id"] in html
    assert "figure.png" in html and "claims.json" in html


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip('snakemake-executor-plugin-slurm is not installed (pip install -e ".[slurm]")')
    state = tmp_path_factory.mktemp("slurm")
    res = subprocess.run(
        ["bash", str(SLURM_SCRIPT), "start", str(state)], capture_output=True, text=True
    )
    if res.returncode == 2:
        pytest.skip(res.stderr.strip())
    assert res.returncode == 0, res.stderr
    try:
        yield {"SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop", str(state)], check=False)


def test_slurm_run_equals_local_run(slurm: dict[str, str], local_run: Path, tmp_path: Path) -> None:
    work = _workspace(tmp_path / "w", EXPERIMENTS)
    res = _snakemake(
        work,
        "--profile",
        "profiles/slurm",
        # The local cluster has no accounts and no accounting database; poll it quickly.
        "--slurm-no-account",
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--seconds-between-status-checks",
        "1",
        "--slurm-keep-successful-logs",
        *TARGETS,
        env=slurm,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # Every experiment and the claims report ran as a SLURM job (sbatch's own logs).
    for rule in (*EXPERIMENTS, "claims_evaluation"):
        assert list((work / "logs" / "slurm").glob(f"rule_{rule}/**/*.log")), rule
    want, got = _outputs(local_run), _outputs(work)
    assert sorted(got) == sorted(want)
    assert [name for name in want if got[name] != want[name]] == []


def test_paper_scale_plans_every_job_with_its_resources(tmp_path: Path) -> None:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip('snakemake-executor-plugin-slurm is not installed (pip install -e ".[slurm]")')
    work = _workspace(tmp_path / "w", None)
    res = _snakemake(work, "-n", "--profile", "profiles/slurm", "all", "--config", "scale=paper")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    params = yaml.safe_load((work / "params.yaml").read_text())
    names = [*params["experiments"], *params.get("derived_experiments", {})]
    blocks = {b.split("\n", 1)[0]: b for b in res.stdout.split("\nrule ")[1:]}
    for name in names:
        block = blocks[f"{name}:"]
        assert "mem_mb=" in block and "runtime=" in block and "gpu=" in block, block
    assert "gpu=1" in blocks["attn_markov_fig3:"] and "gpu=0" in blocks["attn_markov_table1:"]
    # Rules that train nothing ask for no GPU, in papers C and D too (derived ones included).
    for name in ("subngrams_fig2", "subngrams_fig5", "two_layer_constructions", "two_layer_bits"):
        assert "gpu=0" in blocks[f"{name}:"], name
