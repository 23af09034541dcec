"""SIGINT to the `snakemake` process alone (a scheduler's or `kill -INT`'s, not a terminal's
Ctrl-C to the whole process group) stops the run within seconds and leaves nothing marked
incomplete: the Snakefile passes the signal on to the running jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from .conftest import scratch_workflow

pytestmark = pytest.mark.workflow(seconds=40)

BIN = Path(sys.executable).parent
EXPERIMENT = "attn_markov_fig3"
LONG = {"steps": 100_000, "eval_every": 1_000}
"""Far more steps than the test waits for: the job is mid-training when the signal comes."""


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _command_line(process: psutil.Process) -> str:
    """``process``'s command line; empty where it ended meanwhile (Snakemake starts short-lived
    helpers: one that exits between the listing and the read is a zombie or gone)."""
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:  # ZombieProcess included
        return ""


def _job_started(snakemake: psutil.Process) -> bool:
    return any(
        EXPERIMENT in line and "replicate" in line
        for line in map(_command_line, snakemake.children(recursive=True))
    )


def test_sigint_to_snakemake_alone_stops_the_jobs_promptly(tmp_path: Path) -> None:
    scratch_workflow(tmp_path, (EXPERIMENT,))
    params = tmp_path / "params.yaml"
    data = yaml.safe_load(params.read_text())
    data["experiments"][EXPERIMENT]["settings"]["ci"]["training"].update(LONG)
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    run = subprocess.Popen(
        [str(BIN / "snakemake"), "--cores", "1", EXPERIMENT],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the signal reaches it alone
    )
    snakemake = psutil.Process(run.pid)
    try:
        deadline = time.monotonic() + 120
        while not _job_started(snakemake):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
            time.sleep(0.2)
        time.sleep(3)  # the job past its start-up, training
        sent = time.monotonic()
        os.kill(run.pid, signal.SIGINT)
        code = run.wait(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if run.poll() is None:  # a failed test leaves no training running
            os.killpg(run.pid, signal.SIGKILL)
    err = run.stderr.read()
    assert code != 0 and waited < 5, (waited, err[-2000:])
    assert not any(p.is_running() for p in psutil.process_iter() if p.pid == run.pid)
    folder = tmp_path / "results/ci/attn_markov/fig3"
    assert not (folder / "metrics.json").exists()  # nothing half-written is left as done
    plan = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--cores", "1", EXPERIMENT],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert plan.returncode == 0 and "incomplete" not in plan.stdout + plan.stderr, plan.stdout


def test_a_child_that_ends_while_the_jobs_are_listed_is_no_error() -> None:
    """A child that has exited but is not yet reaped (a zombie) has no command line to read:
    the listing passes over it instead of failing the test above at random."""
    child = subprocess.Popen(["true"])
    process = psutil.Process(child.pid)
    deadline = time.monotonic() + 10
    while process.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        with pytest.raises(psutil.ZombieProcess):
            process.cmdline()
        assert _command_line(process) == ""
    finally:
        child.wait()
    assert _command_line(process) == ""  # reaped: gone
