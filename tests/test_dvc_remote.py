"""The default DVC remote round-trips results: push, fresh clone, pull, nothing left to run.

A scratch git repository is built from a clone of this one and the working tree (tracked and
untracked, non-ignored files); one experiment that trains nothing is run with Snakemake,
which records its outputs in dvc.lock when it succeeds; they are pushed to the default remote
(`dvc-storage/`, inside the project and ignored by git) and pulled into a `git clone` whose
remote is pointed at the first copy's storage with `dvc remote modify --local`
(docs/staleness-and-dvc.md, "The DVC remote").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.workflow(seconds=45)

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXPERIMENT = "attn_markov_table1"  # trains nothing: about 3 s
OUTPUT = "results/ci/attn_markov/table1"
GIT_USER = ["-c", "user.name=test", "-c", "user.email=test@example.invalid"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _run(cwd: Path, *command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _ok(cwd: Path, *command: str | Path) -> str:
    done = _run(cwd, *command)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _copy_working_tree(destination: Path) -> None:
    listed = _ok(REPO, "git", "ls-files", "-co", "--exclude-standard", "-z")
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@dataclass
class RoundTrip:
    origin: Path
    clone: Path
    unpushed_status: int  # `dvc status -c -q` before `dvc push`
    pushed_status: int  # and after it
    pull_from_empty_remote: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory) -> RoundTrip:
    root = tmp_path_factory.mktemp("dvc_remote")
    origin, clone, empty = root / "origin", root / "clone", root / "empty-storage"
    empty.mkdir()
    # A clone, so that the history holds the commits the claims folder's records name (the
    # stability record's commit must be one of this history's), then the working tree on top.
    _ok(root, "git", "clone", "-q", REPO, origin)
    _copy_working_tree(origin)
    # A project with nothing recorded yet: the committed dvc.lock (half a megabyte, most of it
    # the claims stage's params) would make every dvc command below several times slower.
    (origin / "dvc.lock").unlink(missing_ok=True)
    _ok(origin, "git", "add", "-A")
    _ok(origin, "git", *GIT_USER, "commit", "-q", "--allow-empty", "-m", "working tree")

    _ok(origin, BIN / "snakemake", "--cores", "1", EXPERIMENT)  # records it in dvc.lock
    unpushed = _run(origin, BIN / "dvc", "status", "-c", "-q", OUTPUT).returncode
    _ok(origin, BIN / "dvc", "push", OUTPUT)
    pushed = _run(origin, BIN / "dvc", "status", "-c", "-q", OUTPUT).returncode
    _ok(origin, "git", "add", "-A")
    _ok(origin, "git", *GIT_USER, "commit", "-q", "-m", "record and push")

    _ok(root, "git", "clone", "-q", origin, clone)
    _ok(clone, BIN / "dvc", "remote", "modify", "--local", "storage", "url", empty)
    from_empty = _run(clone, BIN / "dvc", "pull", OUTPUT)
    _ok(clone, BIN / "dvc", "remote", "modify", "--local", "storage", "url", origin / "dvc-storage")
    _ok(clone, BIN / "dvc", "pull", OUTPUT)
    return RoundTrip(origin, clone, unpushed, pushed, from_empty)


def test_one_experiment_is_recorded_before_the_rest_of_its_paper(round_trip: RoundTrip) -> None:
    """Paper A's stage is recorded after its one experiment run: that experiment's folder
    with its hash, the others (never run) as bare paths, which `dvc status` calls deleted."""
    lock = yaml.safe_load((round_trip.origin / "dvc.lock").read_text())["stages"]
    assert set(lock) == {"attn_markov"}
    hashed = [out["path"] for out in lock["attn_markov"]["outs"] if "md5" in out]
    bare = [out["path"] for out in lock["attn_markov"]["outs"] if "md5" not in out]
    assert hashed == [OUTPUT]
    assert bare and all(path.startswith("results/ci/attn_markov/") for path in bare)
    status = _run(round_trip.origin, BIN / "dvc", "status", "attn_markov")
    assert status.returncode == 0
    assert all(f"deleted:            {path}" in status.stdout for path in bare), status.stdout


def test_default_remote_lies_in_the_project_and_out_of_git(round_trip: RoundTrip) -> None:
    assert any((round_trip.origin / "dvc-storage" / "files" / "md5").rglob("*"))
    tracked = _ok(round_trip.origin, "git", "ls-files").splitlines()
    assert not [name for name in tracked if name.startswith("dvc-storage/")]
    assert not (round_trip.clone / "dvc-storage").exists()


def test_pull_into_a_fresh_clone_leaves_nothing_to_run(round_trip: RoundTrip) -> None:
    pulled = _files(round_trip.clone / OUTPUT)
    assert pulled
    assert pulled == _files(round_trip.origin / OUTPUT)
    plan = _ok(round_trip.clone, BIN / "snakemake", "-n", EXPERIMENT)
    reasons = [line.strip() for line in plan.splitlines() if line.strip().startswith("reason:")]
    assert "Nothing to be done" in plan, reasons


def test_cloud_status_flags_outputs_not_yet_pushed(round_trip: RoundTrip) -> None:
    assert round_trip.unpushed_status == 1
    assert round_trip.pushed_status == 0


def test_pull_fails_when_the_remote_lacks_the_data(round_trip: RoundTrip) -> None:
    failed = round_trip.pull_from_empty_remote
    assert failed.returncode != 0
    assert OUTPUT in failed.stderr
