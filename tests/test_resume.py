"""Resumable training: SIGKILL mid-training, rerun, byte-identical outputs.

Paper A's Fig. 3 at a small scale trains two ensembles (tied, untied) one after the other.
The run is killed while the second one is part-way, with the first one finished: the rerun
must restore the first from its final checkpoint, resume the second from its latest one, and
write exactly the bytes of an uninterrupted run without checkpoints; the checkpoints are
then removed. Both are Lightning's own: ``ModelCheckpoint(save_last=True)`` writes each
training's ``last.ckpt``, ``fit(ckpt_path="last")`` resumes from it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from .conftest import PARAMS_FILE, params_with_claims, repository_claims

pytestmark = pytest.mark.workflow(seconds=30)

EXPERIMENT = "attn_markov_fig3"
CHECKPOINT_EVERY = 20
TRAINING = {"steps": 200, "batch_size": 4, "seq_len": 32, "eval_every": 10, "test_sequences": 8}


def _workspace(root: Path, checkpoint_every: int) -> Path:
    """A folder with a params.yaml holding only the small Fig. 3 and its claims."""
    data = yaml.safe_load(PARAMS_FILE.read_text())
    entry = data["experiments"][EXPERIMENT]
    ci = entry["settings"]["ci"]
    ci["training"].update(TRAINING)
    ci["seeds"] = ci["seeds"][:2]
    ci["probability_positions"] = 5
    data["experiments"] = {EXPERIMENT: entry}
    data["derived_experiments"] = {}
    data.setdefault("cluster", {})["checkpoint_every"] = {"ci": checkpoint_every, "paper": 500}
    root.mkdir(parents=True)
    params_with_claims(root, data, repository_claims(lambda c: c["experiment"] == EXPERIMENT))
    return root


def _command() -> list[str]:
    return [sys.executable, "-m", "replicate", "--scale", "ci", "run", EXPERIMENT, "--no-progress"]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _run(cwd: Path) -> subprocess.CompletedProcess:
    res = subprocess.run(
        _command(), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _step(path: Path) -> int:
    """The training step a checkpoint holds (0 while it cannot be read yet)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])
    except (OSError, RuntimeError, EOFError, KeyError):
        return 0


def _kill_mid_second_training(cwd: Path) -> None:
    """Start the run; SIGKILL it once the second training has an intermediate checkpoint."""
    checkpoints = cwd / "checkpoints" / EXPERIMENT
    proc = subprocess.Popen(
        _command(), cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            second = checkpoints.glob("001-*/last.ckpt")
            if any(0 < _step(p) < TRAINING["steps"] for p in second):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return
            if proc.poll() is not None:
                pytest.fail(
                    "the run ended before it could be killed: "
                    + proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
                )
            time.sleep(0.02)
        pytest.fail("no checkpoint of the second training appeared in time")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _outputs(cwd: Path) -> dict[str, bytes]:
    folder = cwd / "results" / "ci" / "attn_markov" / "fig3"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_killed_run_resumes_to_identical_outputs(tmp_path: Path) -> None:
    reference = _workspace(tmp_path / "uninterrupted", checkpoint_every=0)
    _run(reference)
    assert not (reference / "checkpoints").exists()

    work = _workspace(tmp_path / "killed", checkpoint_every=CHECKPOINT_EVERY)
    _kill_mid_second_training(work)
    folders = sorted((work / "checkpoints" / EXPERIMENT).iterdir())
    assert [p.name for p in folders[0].iterdir()] == ["last.ckpt"]
    assert [p.name for p in folders[1].iterdir()] == ["last.ckpt"]
    first, second = (_step(folder / "last.ckpt") for folder in folders)
    assert first == TRAINING["steps"], "the finished training keeps its final checkpoint"
    assert 0 < second < TRAINING["steps"]
    assert not (work / "results" / "ci" / "attn_markov" / "fig3" / "metrics.json").exists()

    rerun = _run(work)
    for folder in folders:
        checkpoint = folder.relative_to(work) / "last.ckpt"
        assert f"resuming from checkpoint {checkpoint}" in rerun.stderr, rerun.stderr[-2000:]
    assert not (work / "checkpoints" / EXPERIMENT).exists(), "checkpoints outlived the outputs"

    want, got = _outputs(reference), _outputs(work)
    assert sorted(got) == sorted(want)
    differing = [name for name in want if got[name] != want[name]]
    assert not differing, f"outputs differ after resuming: {differing}"
