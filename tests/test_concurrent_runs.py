"""Two `snakemake` runs of different targets in one checkout.

Snakemake allows them (their outputs differ); their DVC records then meet at DVC's
repository lock. A record waits for the lock (bounded) and never fails its run: a record
that gives up is one warning line, and the next record commits what it missed.

To make the meeting certain rather than a matter of timing, a third process holds DVC's
lock (DVC's own `Repo.lock`) while both runs finish their jobs, for longer than DVC waits
by itself; when it lets go, both records take the lock in turn.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from replicate.config import load_params
from replicate.record import record_in_dvc

from .conftest import scratch_workflow

BIN = Path(sys.executable).parent
KEPT = ("attn_markov_table1", "local_global_table1")
"""Two experiments of different papers that train nothing: seconds each."""
STAGES = {"attn_markov", "local_global"}
"""Their DVC stages: one per paper (replicate/dvcfile.py), here one experiment each."""
HOLD_LOCK = (
    "import sys\n"
    "from dvc.repo import Repo\n"
    "repo = Repo('.')\n"
    "repo.lock.lock()\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)
"""Takes DVC's repository lock, says so, keeps it until its stdin closes."""

pytestmark = [
    pytest.mark.workflow(seconds=40),
    pytest.mark.skipif(
        not (BIN / "dvc").exists() or not (BIN / "snakemake").exists(),
        reason="needs the dvc and snakemake executables of this environment",
    ),
]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _dvc_project(root: Path) -> Path:
    scratch_workflow(root, KEPT)
    for command in ([sys.executable, "-m", "replicate.dvcfile"], ["dvc", "init", "--no-scm", "-q"]):
        subprocess.run(command, cwd=root, env=_env(), check=True, capture_output=True)
    return root


@pytest.fixture
def lock_holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding DVC's lock of the project in ``tmp_path``; stopped afterwards."""
    _dvc_project(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    yield holder
    if holder.poll() is None:
        _release(holder)


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0


def _changed_stages(root: Path) -> set[str]:
    res = subprocess.run(
        ["dvc", "status", "--json", "dvc.yaml"],  # the ci scale's stages
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    return set(json.loads(res.stdout))


def _locked_stages(root: Path) -> set[str]:
    lock = root / "dvc.lock"
    return set(yaml.safe_load(lock.read_text())["stages"]) if lock.exists() else set()


def test_two_concurrent_runs_both_succeed_and_both_are_recorded(
    tmp_path: Path, lock_holder: subprocess.Popen[str]
) -> None:
    start = time.monotonic()
    logs = {name: (tmp_path / f"{name}.err").open("w+") for name in KEPT}
    runs = {
        name: subprocess.Popen(
            [str(BIN / "snakemake"), "--cores", "1", name],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=logs[name],
            text=True,
            env=_env(),
        )
        for name in KEPT
    }
    # Both jobs done and both records waiting for the lock, DVC's own 3 s of retries past.
    deadline = time.monotonic() + 240
    while not all("waiting up to" in (tmp_path / f"{n}.err").read_text() for n in KEPT):
        assert time.monotonic() < deadline and all(r.poll() is None for r in runs.values())
        time.sleep(0.5)
    _release(lock_holder)
    codes = {name: run.wait(timeout=240) for name, run in runs.items()}
    wall = time.monotonic() - start
    errs = {name: (tmp_path / f"{name}.err").read_text() for name in KEPT}
    assert codes == dict.fromkeys(KEPT, 0), errs
    for err in errs.values():
        assert "LockError" not in err and "Traceback" not in err
        assert "s waiting for DVC's lock)" in err
    assert _locked_stages(tmp_path) == STAGES
    assert _changed_stages(tmp_path) == {"claims"}  # never built; both experiments recorded
    recorded = [line for err in errs.values() for line in err.splitlines() if "recorded" in line]
    print(f"two concurrent runs: {wall:.0f} s wall; {recorded}")


def test_a_record_that_gives_up_is_a_warning_and_the_next_records_it(
    tmp_path: Path, lock_holder: subprocess.Popen[str], monkeypatch, capsys
) -> None:
    subprocess.run(
        [sys.executable, "-m", "replicate", "run", KEPT[0]], cwd=tmp_path, env=_env(), check=True
    )
    monkeypatch.chdir(tmp_path)
    params = load_params(tmp_path / "params.yaml")
    started = time.monotonic()
    assert record_in_dvc(params, tmp_path, wait=5) == []
    assert time.monotonic() - started < 30
    lock_file = re.escape(str(tmp_path / ".dvc" / "tmp" / "lock"))
    assert re.fullmatch(
        rf"warning: dvc\.lock not updated \(another DVC process held {lock_file} for \d+ s\); "
        r"the next `snakemake` run that runs a job records it, or `python -m replicate record`",
        capsys.readouterr().err.splitlines()[-1],
    )
    assert _locked_stages(tmp_path) == set()
    _release(lock_holder)
    assert record_in_dvc(params, tmp_path) == ["attn_markov"]
    assert _locked_stages(tmp_path) == {"attn_markov"}
