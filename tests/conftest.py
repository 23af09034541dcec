"""Shared fixtures: the real params.yaml and claims, and a tiny copy for end-to-end runs."""

from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from filelock import FileLock

from replicate.config import read_params_file, read_yaml_file
from replicate.params import PAPERS

if TYPE_CHECKING:
    from replicate.verdicts import ClaimRecord

REPO = Path(__file__).resolve().parents[1]
PARAMS_FILE = REPO / "params.yaml"
CLAIMS_DIR = REPO / "claims"

# Small enough for seconds on one CPU core, large enough to exercise every code path.
TINY_TRAINING = {"steps": 30, "batch_size": 4, "seq_len": 32, "eval_every": 10, "test_sequences": 4}
# Counts set to 4 and nested blocks merged with tiny values wherever an experiment's ci
# settings have them (paper B's gradient-flow counts and flow / canonical-SGD blocks, ...).
TINY_COUNTS = (
    "inits_per_sigma",
    "grid_points",
    "common_inits",
    "check_points",
    "plane_inits",
    "random_rate_points",
    "plotted_per_axis",
    "plotted_trajectories",
)
TINY_BLOCKS = {"flow": {"t_max": 100.0}, "sgd": {"steps": 30, "seq_len": 32}}
TINY_SETTINGS = {
    # B1-prob's z-scores need cells with n P (1 - P) >= 1: 8 inits per sigma give 4 (P(I_*) =
    # 0.19 and 0.38 at sigma = 0.5 and 1 on the chains with p + q > 1), 4 inits none
    "local_global_fig1": {"inits_per_sigma": 8},
    # D-GD-4-level and D-GD-5-level read T = 64 (one more GD length, milliseconds)
    "two_layer_gd": {"lengths": [8, 64]},
}
"""Per experiment, tiny settings over the shared ones where a claim reads what those cannot
reach (every claim finds its metric in the tiny run, tests/test_end_to_end.py)."""
# Paper D (two_layer): its sampling, counting and GD sizes, in its experiments and in its
# derived experiments (which train too: Table 2's one-layer models, Tables 3-4's noisy models).


def pytest_configure(config: pytest.Config) -> None:
    """A cache of validated params of the session's own (`replicate.config.validated_dir`),
    for this process and the Snakemake and DVC processes it starts: what the tests see does
    not depend on what ran before them on this machine. DVC's usage reports are off."""
    cache = tempfile.mkdtemp(prefix="markov-replicate-tests-")
    os.environ["XDG_CACHE_HOME"] = cache
    # Each `dvc` command the tests start would otherwise spawn a detached `dvc daemon
    # analytics` process (a second Python start-up, about 0.8 s of CPU) to report its usage.
    os.environ["DVC_NO_ANALYTICS"] = "1"
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (addopts) gives the whole suite one worker per core; a run narrowed to a few
    tests (``-k``, or test ids ``file::test``) runs in this process instead, where starting
    the workers (each importing torch and Lightning) would cost more than they save. None:
    pytest-xdist's own count, the cores."""
    if config.option.keyword or any("::" in arg for arg in config.args):
        return 0
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first: pytest-xdist hands whole files to its workers in collection
    order, so the files that run the workflow start first, longest first, and both workers
    finish together; every other test keeps its place."""

    def order(item: pytest.Item) -> float:
        marker = item.get_closest_marker("workflow")
        return -marker.kwargs["seconds"] if marker else 0.0

    items.sort(key=order)


TINY_TWO_LAYER = {
    "lengths": [8, 16],
    "sequences": 4,
    "eval_sequences": 16,
    "steps_p": 3,
    "steps_a": 3,
    "frequency_sequences": 50,
    "frequency_length": 50,
    "brute_force_sequences": 2,
    "brute_force_length": 12,
    "floor_sequences": 32,
    "floor_lengths": [16],
    "ln_vectors": 16,
    "map_sequences": 4,
    "evaluation_set": {"sequences": 16, "map_sequences": 4},
    "ungated": {"lengths": [16, 32], "sequences": 2},
}


def _shrink_two_layer(ci: dict) -> None:
    if "training" in ci:
        ci["training"].update(TINY_TRAINING)
    if "seeds" in ci:
        ci["seeds"] = ci["seeds"][:2]
    for key, tiny in TINY_TWO_LAYER.items():
        if key in ci:
            ci[key] = {**ci[key], **tiny} if isinstance(tiny, dict) else tiny


# Paper C (subngrams): test, gradient and probe set sizes, and the Thm. 4.2 grid.
TINY_SUBNGRAMS = {
    "test_sequences": 64,
    "sequences": 64,
    "probe_sequences": 8,
    # Thm. 4.2's claims read T >= 128 (C-G2, C-G3, C-F30: c = 40 at T = 128; C-G4-trend-diagonal:
    # two lengths >= 64 on c = T/2, 64 and 128)
    "seq_lens": [16, 128],
    "diagonal_seq_lens": [64],
    "chunks": 16,
}


def _shrink_subngrams(ci: dict) -> None:
    ci.update({key: tiny for key, tiny in TINY_SUBNGRAMS.items() if key in ci})
    if "training" in ci and ci["training"].get("gradset_sequences"):
        ci["training"]["gradset_sequences"] = 16


@pytest.fixture
def params_dict() -> dict:
    """The repository's params.yaml, its claims folder given as an absolute path (so that a
    copy written elsewhere still reads the repository's claims)."""
    return {**read_params_file(PARAMS_FILE), "claims_dir": str(CLAIMS_DIR)}


def claim_dict(claim_id: str) -> dict:
    """A fresh copy of one claim of the repository's claims files, as written there."""
    (claim,) = repository_claims(lambda c: c["id"] == claim_id)
    return claim


def repository_claims(keep: Callable[[dict], bool] = lambda claim: True) -> list[dict]:
    """The repository's claims as written in their files, those ``keep`` accepts."""
    return [
        claim
        for paper in PAPERS
        for claim in read_yaml_file(CLAIMS_DIR / f"{paper}.yaml")["claims"]
        if keep(claim)
    ]


def head_commit(root: Path = REPO) -> str:
    """The short hash of ``root``'s HEAD; a made-up one where ``root`` is no git checkout."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else "0000000"


def git(root: Path, *args: str) -> None:
    """Run git in ``root`` as a test user (commits need a name and an address)."""
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def synthetic_record(claim_id: str, paper: str, verdict: str, measured: float) -> ClaimRecord:
    """A `ClaimRecord` of ``claim_id`` with just the verdict and value the stability check
    compares (the rest placeholders)."""
    from replicate.verdicts import ClaimRecord

    return ClaimRecord(
        id=claim_id,
        paper=paper,
        experiment="",
        figure="",
        statement="",
        metric="",
        comparison="ge",
        measured=measured,
        reference=0.0,
        tolerance=0.0,
        scale="ci",
        verdict=verdict,
        expected=verdict,
        expected_reason=None,
        expected_basis="",
        matches_expectation=True,
        provenance="paper",
        source="",
        reference_source="",
        note="",
        seed_values={"0": measured},
    )


def stability_record(
    folder: Path,
    changed: Mapping[str, Collection[str]],
    scale: str = "ci",
    commit: str | None = None,
    perturbation: str = "aten-default",
) -> Path:
    """``folder``/stability.json as `python -m replicate stability` writes it
    (`replicate.stability.paper_check` and `merge`, `write_stability`): ``perturbation``,
    run at ``commit`` (default `head_commit`) on the code here, flipped the verdict of each
    claim ``changed`` lists under its paper (synthetic values: holds at 1.0, inconclusive
    at 0.5)."""
    from replicate.claim_files import stability_file, write_stability
    from replicate.sources import paper_digest
    from replicate.stability import merge, paper_check

    run = {"commit": commit or head_commit(), "date": "2026-11-28", "cpu": "test", "seconds": 1}
    checks = {
        paper: paper_check(
            paper,
            run,
            paper_digest(paper),
            [synthetic_record(i, paper, "holds", 1.0) for i in ids],
            [synthetic_record(i, paper, "inconclusive", 0.5) for i in ids],
        )
        for paper, ids in changed.items()
    }
    return write_stability(stability_file(folder), merge(None, scale, perturbation, checks))


def params_with_claims(
    root: Path, params: dict, claims: list[dict], recorded: bool = False
) -> Path:
    """``params`` as ``root``/params.yaml whose claims folder, ``root``/claims, holds just
    ``claims``, each in its paper's file (``recorded``: with the repository's recordings of
    them; else none), and where some are marked ``cpu_dependent`` (at one scale), a stability
    record that backs them (`stability_record`). Returns the params file."""
    folder = root / "claims"
    folder.mkdir(exist_ok=True)
    experiments = {**params["experiments"], **params.get("derived_experiments", {})}
    marked: dict[str, list[str]] = {}
    for claim in (c for c in claims if c.get("cpu_dependent")):
        marked.setdefault(experiments[claim["experiment"]]["paper"], []).append(claim["id"])
    scales = {scale for c in claims for scale in c.get("cpu_dependent") or {}}
    assert len(scales) <= 1, f"cpu_dependent marks at several scales: {sorted(scales)}"
    if marked:
        stability_record(folder, marked, scale=scales.pop())
    if recorded:
        ids = {c["id"] for c in claims}
        everything = json.loads((CLAIMS_DIR / "recorded.json").read_text())
        mine = {k: v for k, v in everything.items() if k in ids}
        (folder / "recorded.json").write_text(json.dumps(mine, indent=2))
    for paper in PAPERS:
        mine = [c for c in claims if experiments[c["experiment"]]["paper"] == paper]
        if mine:
            document = {"paper": paper, "title": paper, "claims": mine}
            (folder / f"{paper}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump({**params, "claims_dir": "claims"}, sort_keys=False))
    return path


def shrink(data: dict) -> dict:
    """A copy of params with every ci training block reduced to TINY_TRAINING; its claims are
    the repository's (an absolute ``claims_dir``, so the copy can be written anywhere)."""
    data = copy.deepcopy(data)
    data["claims_dir"] = str(CLAIMS_DIR)
    entries = [*data["experiments"].values(), *data.get("derived_experiments", {}).values()]
    for entry in entries:
        ci = entry["settings"]["ci"]
        if "training" in ci:
            ci["training"].update(TINY_TRAINING)
        if "seeds" in ci:
            ci["seeds"] = ci["seeds"][:2]
        if "probability_positions" in ci:
            ci["probability_positions"] = 5
        ci.update({key: 4 for key in TINY_COUNTS if key in ci})
        for key, tiny in TINY_BLOCKS.items():
            if key in ci:
                ci[key].update(tiny)
    named = {**data["experiments"], **data.get("derived_experiments", {})}
    for name, entry in named.items():
        if entry["paper"] == "two_layer":
            _shrink_two_layer(entry["settings"]["ci"])
        if entry["paper"] == "subngrams":
            _shrink_subngrams(entry["settings"]["ci"])
        entry["settings"]["ci"].update(TINY_SETTINGS.get(name, {}))
    return data


@pytest.fixture
def tiny_params_file(tmp_path: Path, params_dict: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(shrink(params_dict), sort_keys=False))
    return path


def scratch_workflow(root: Path, kept: Collection[str]) -> None:
    """The workflow (code, Snakefile, profiles, report templates) in ``root``, with a
    params.yaml cut to the experiments ``kept`` (tiny settings) and their claims, recorded."""
    for name in ("Snakefile", ".dvcignore"):
        shutil.copy(REPO / name, root / name)
    for folder in ("replicate", "lightning_modules", "profiles", "report"):
        shutil.copytree(REPO / folder, root / folder)
    data = shrink(read_params_file(PARAMS_FILE))
    for section in ("experiments", "derived_experiments"):
        data[section] = {k: v for k, v in data[section].items() if k in kept}
    params_with_claims(root, data, repository_claims(lambda c: c["experiment"] in kept), True)


def session_folder(
    factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """A folder ``name`` that ``build`` fills once per test session, shared by the xdist
    workers (pytest-xdist's documented pattern: the session's temporary folder, whose
    subfolders are the workers', and a file lock); the first worker to ask builds it, the
    others wait and reuse it. Readers must not change it: a test that does copies it."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder, done = base / name, base / f"{name}.built"
    with FileLock(base / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


LAYOUT_PROBLEMS = "layout_problems.json"
"""In the tiny run's folder: per experiment, its figures' layout problems
(`RunContext.layout_problems`)."""


def _run_every_experiment(root: Path) -> None:
    from replicate.config import load_params
    from replicate.experiments.runner import run_in_context

    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(shrink(read_yaml_file(PARAMS_FILE))))
    params = load_params(path, scale="ci")
    runs = {name: run_in_context(name, params, root, progress=False) for name in params.experiments}
    metrics = {name: m for name, (m, _) in runs.items()}
    (root / "metrics.pickle").write_bytes(pickle.dumps(metrics))
    layout = {name: ctx.layout_problems for name, (_, ctx) in runs.items()}
    (root / LAYOUT_PROBLEMS).write_text(json.dumps(layout, indent=1))


def tiny_run_of_every_experiment(factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Every experiment of params.yaml, shrunk, run once per session through the runner in
    one folder (in the order of `Params.experiments`: a derived one after its upstream), and the
    metrics each run returned. The folder is shared: read it, never write to it."""
    root = session_folder(factory, "tiny_run", _run_every_experiment)
    return root, pickle.loads((root / "metrics.pickle").read_bytes())


TRAINING_FREE = ("attn_markov_table1", "local_global_table1")
"""Two experiments of two papers that train nothing (seconds each): the scratch project of the
tests that run Snakemake on an already built project."""


def _build_training_free(root: Path) -> None:
    scratch_workflow(root, TRAINING_FREE)
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        [str(bin_dir / "snakemake"), "claims"], cwd=root, capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def built_training_free_workflow(factory: pytest.TempPathFactory, destination: Path) -> Path:
    """A copy, in ``destination``, of a scratch project of TRAINING_FREE (tiny settings, their
    claims recorded) that `snakemake claims` built once per session; the copy keeps the
    files' modification times and Snakemake's records (.snakemake/), so Snakemake finds every
    output current."""
    folder = session_folder(factory, "training_free", _build_training_free)
    shutil.copytree(folder, destination, dirs_exist_ok=True)
    return destination
