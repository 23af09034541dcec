"""`python -m replicate stability` lists every claim whose verdict changes when the suite
reruns under a numerically neutral perturbation.

`compare` is tested on records with a flipped verdict (the check can fail); the whole
command runs in a scratch git project of two experiments that train nothing (paper A's and
paper B's Table 1, conftest's `built_training_free_workflow`), where a rerun with two torch
threads must change nothing, then with ``--papers`` for paper B alone. The record's checks
are tested in test_stability_record.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicate import stability as stability_module
from replicate.checkout import RefusedRecording
from replicate.claim_files import load_claims, read_stability, stability_file
from replicate.config import load_params
from replicate.params import ConfigError
from replicate.sources import paper_digest
from replicate.stability import REDRAWS, compare, stability, suites_at_once
from replicate.suite import _edit_params
from replicate.verdicts import ClaimRecord

from .conftest import PARAMS_FILE, built_training_free_workflow, git, synthetic_record

pytestmark = pytest.mark.workflow(seconds=70)

SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def _record(claim_id: str, verdict: str, measured: float) -> ClaimRecord:
    return synthetic_record(claim_id, "two_layer", verdict, measured)


def test_compare_names_each_changed_verdict_with_both_values() -> None:
    baseline = [_record("a", "holds", 0.30), _record("b", "does-not-reproduce", 0.04)]
    perturbed = [_record("a", "holds", 0.31), _record("b", "holds", 0.26)]
    result = compare(baseline, perturbed)
    assert result["claims"] == 2
    assert result["values_moved"] == 2
    [row] = result["verdicts_changed"]
    assert (row["id"], row["verdict"], row["perturbed_verdict"]) == (
        "b",
        "does-not-reproduce",
        "holds",
    )
    assert (row["measured"], row["perturbed_measured"]) == (0.04, 0.26)


def test_compare_counts_a_claim_absent_on_one_side_as_changed() -> None:
    result = compare([_record("a", "holds", 1.0)], [_record("z", "holds", 1.0)])
    assert [row["id"] for row in result["verdicts_changed"]] == ["a", "z"]
    assert result["values_moved"] == 0


def test_compare_of_identical_runs_finds_nothing() -> None:
    records = [_record("a", "holds", 1.0), _record("b", "holds", 2.0)]
    assert compare(records, records) == {"claims": 2, "values_moved": 0, "verdicts_changed": []}


def test_suites_whose_longest_chain_is_most_of_their_time_run_side_by_side() -> None:
    """Paper D at ci (1,218 s of rules, 1,012 s of them in its longest chain) keeps one of
    two cores busy: its four suites run two at a time. A suite that fills both cores (paper C:
    752 s, a chain of 287 s; or every paper) runs alone; so does every suite on one core, or
    where no timing is known."""
    assert suites_at_once(1218.0, 1012.0, suites=4, cores=2) == 2
    assert suites_at_once(752.0, 287.0, suites=4, cores=2) == 1
    assert suites_at_once(2572.0, 1012.0, suites=4, cores=2) == 1
    assert suites_at_once(1218.0, 1012.0, suites=4, cores=1) == 1
    assert suites_at_once(0.0, 0.0, suites=4, cores=2) == 1
    # Sixteen cores: four suites of a chain-bound paper all at once, four cores each.
    assert suites_at_once(1218.0, 1012.0, suites=4, cores=16) == 4
    assert suites_at_once(1218.0, 1012.0, suites=1, cores=16) == 1


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A committed scratch project whose claims are built (results and logs untracked)."""
    root = built_training_free_workflow(tmp_path_factory, tmp_path_factory.mktemp("stability"))
    (root / ".gitignore").write_text("results/\nlogs/\n.snakemake/\n__pycache__/\n")
    git(root, "init", "--quiet")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "scratch")
    return root


def _shifted_pairs(original: Any, shifted: Any, key: str = "") -> list[tuple[str, int, int]]:
    """(key, original, shifted) of every integer under a seed key of two parsed params files
    of one shape; AssertionError where anything else differs."""
    if isinstance(original, dict):
        assert list(original) == list(shifted)
        return [p for k in original for p in _shifted_pairs(original[k], shifted[k], k)]
    if isinstance(original, list):
        assert len(original) == len(shifted)
        return [
            p for a, b in zip(original, shifted, strict=True) for p in _shifted_pairs(a, b, key)
        ]
    seed_key = key.endswith(("seed", "seeds")) and type(original) is int
    assert seed_key or original == shifted, (key, original, shifted)
    return [(key, original, shifted)] if seed_key else []


def test_the_redraw_shifts_every_seed_and_nothing_else(tmp_path: Path) -> None:
    """The redraw's clone: every seed of params.yaml (each kind: ``seed``, ``seeds``,
    ``extra_seeds``, ``test_seed``) moved by the offset, every other value as it was, and
    the file still valid at both scales."""
    perturbation = REDRAWS["redraw"]
    clone = tmp_path / "params.yaml"
    clone.write_text(PARAMS_FILE.read_text())
    _edit_params(clone, perturbation)
    pairs = _shifted_pairs(
        yaml.safe_load(PARAMS_FILE.read_text()), yaml.safe_load(clone.read_text())
    )
    assert {key for key, _, _ in pairs} == {"seed", "seeds", "extra_seeds", "test_seed"}
    assert all(after - before == perturbation.seed_offset for _, before, after in pairs)
    for scale in ("ci", "paper"):
        assert load_params(clone, scale=scale).experiments


@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="needs this environment's snakemake")
def test_a_neutral_rerun_of_code_that_trains_nothing_changes_no_verdict(
    project: Path, tmp_path: Path
) -> None:
    params = load_params(project / "params.yaml", scale="ci")
    # The native and the perturbed suite side by side, one core each.
    path = stability(params, ["threads-2"], root=project, workdir=tmp_path, cores="2", at_once=2)
    assert path == stability_file(params.claims_dir)
    for name in ("native", "threads-2"):
        assert "\nProvided cores: 1 " in (project / f"logs/stability/{name}.log").read_text()
    record = read_stability(path)  # as the command wrote it: its digest matches
    entry = record.perturbations["threads-2"]
    claims = json.loads((project / "results/ci/claims.json").read_text())
    assert sorted(entry.papers) == ["attn_markov", "local_global"]
    assert sum(check.claims for check in entry.papers.values()) == len(claims) > 0
    for paper, check in entry.papers.items():
        assert (check.values_moved, check.verdicts_changed) == (0, [])
        assert check.code_sha256 == paper_digest(paper, project)
        assert len(check.commit) >= 7
    assert (record.scale, entry.threads) == ("ci", 2)
    clone_params = yaml.safe_load((tmp_path / "threads-2" / "params.yaml").read_text())
    assert clone_params["runtime"]["threads"] == 2
    assert len(load_claims(params).claims) == len(claims)  # the claims folder still loads
    # `--papers local_global` runs that paper's target alone and keeps paper A's entry.
    before = json.loads(path.read_text())["perturbations"]["threads-2"]["papers"]
    stability(params, ["threads-2"], ["local_global"], project, tmp_path, "1")
    after = json.loads(path.read_text())["perturbations"]["threads-2"]["papers"]
    assert after["attn_markov"] == before["attn_markov"]
    assert after["local_global"]["claims"] == before["local_global"]["claims"]
    assert not (tmp_path / "threads-2/results/ci/attn_markov").exists()
    assert (tmp_path / "threads-2/results/ci/local_global").is_dir()


@pytest.mark.parametrize("caller", ["open", "blocked", "ignored"])
def test_a_failed_suite_stops_the_suite_running_beside_it(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caller: str
) -> None:
    """The native suite fails while the perturbed one runs beside it: the check stops the
    running one (SIGINT, as Ctrl-C) instead of waiting for it, and reports the failure; also
    where the caller has SIGINT blocked or ignored (as a command started in the background
    by a non-interactive shell has): a process keeps both across exec, and would run to its
    end. The caller's own disposition is as before afterwards."""
    params = load_params(project / "params.yaml", scale="ci")
    running, codes = threading.Event(), []

    def run(suite: object, clone: Path, name: str, perturbation: object) -> list[ClaimRecord]:
        if name == "native":
            assert running.wait(60)
            raise RuntimeError("the suite under native failed")
        beside = subprocess.Popen(["sleep", "60"])
        running.set()
        codes.append(beside.wait())
        return []

    monkeypatch.setattr(stability_module._Suite, "run", run)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT} if caller == "blocked" else ())
    handler = signal.getsignal(signal.SIGINT)
    if caller == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(RuntimeError, match="under native failed"):
            stability(params, ["threads-2"], root=project, workdir=tmp_path, cores="2", at_once=2)
        assert signal.getsignal(signal.SIGINT) == (
            signal.SIG_IGN if caller == "ignored" else handler
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
    assert codes == [-signal.SIGINT]


@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="needs this environment's snakemake")
def test_refusals_name_the_problem(project: Path, tmp_path: Path) -> None:
    params = load_params(project / "params.yaml", scale="ci")
    with pytest.raises(ConfigError, match="unknown perturbation avx9"):
        stability(params, ["avx9"], root=project, workdir=tmp_path)
    with pytest.raises(ConfigError, match="unknown paper two_layer; choose from attn_markov, "):
        stability(params, ["threads-2"], ["two_layer"], root=project, workdir=tmp_path)
    stray = project / "stray.txt"
    stray.write_text("not committed")
    try:
        with pytest.raises(RefusedRecording, match=r"stray\.txt"):
            stability(params, ["threads-2"], root=project, workdir=tmp_path)
    finally:
        stray.unlink()
