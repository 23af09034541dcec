"""Snakemake and DVC name the same stale stages after every kind of edit.

A scratch project with four experiments (paper A's Fig. 3, its derived Table 2, paper A's
Table 1, paper B's Fig. 5; tiny trainings) and their claims is built once by
`snakemake claims_report`, whose ``onsuccess`` records it in dvc.lock. Then each edit of one
setting or one module is made on its own, and the rules `snakemake -n` would
run are compared with the stages `dvc status` calls changed plus everything downstream of
them in dvc.yaml (DVC reports a changed stage only, Snakemake plans its consumers too): the
rules one by one, the stages as the papers those rules belong to (one DVC stage per paper,
replicate/dvcfile.py). After each edit the file is restored, content and modification time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from replicate.checkout import current_experiments, pipeline_file
from replicate.config import load_params
from replicate.record import current_stages, record

from .conftest import REPO, scratch_workflow

BIN = Path(sys.executable).parent
KEPT = (
    "attn_markov_fig3",
    "attn_markov_table2",
    "attn_markov_table1",
    "local_global_fig5",
    "local_global_fig2",
)
"""Paper A's Table 1 trains nothing, as its theorems do, but runs in seconds, not 16 s.
Paper B's Fig. 2 runs at its ci settings (20 s of flows), not tiny ones: its trajectories
are an output over 1 MB, which Snakemake checksums only as the project's profile asks."""
LARGE = "results/ci/local_global/fig2/trajectories.csv"
BUILD = "claims_report"
"""Every experiment and the claims; not `all`, whose check fails on tiny trainings' verdicts."""
WRITER = "claims_evaluation"
"""The rule that writes the claims files: DVC's stage `claims`."""

pytestmark = [
    pytest.mark.workflow(seconds=140),
    pytest.mark.skipif(
        not (BIN / "dvc").exists() or not (BIN / "snakemake").exists(),
        reason="needs the dvc and snakemake executables of this environment",
    ),
]


def _run(root: Path, *cmd: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, f"{' '.join(cmd)}:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def snakemake_plan(root: Path, *config: str, snakemake: tuple[str, ...] = ()) -> set[str]:
    """The DVC stages of the rules `snakemake -n` would run (`all`, the default target, writes
    nothing: it is no stage); ``config``: ``--config`` values (``scale=paper``);
    ``snakemake``: the command that runs Snakemake (default: this environment's)."""
    options = ["--config", *config] if config else []
    command = snakemake or (str(BIN / "snakemake"),)
    out = _run(root, *command, "-n", "--cores", "1", "all", *options)
    rules = set(re.findall(r"^(?:local)?rule (\w+):", out, flags=re.MULTILINE))
    return {"claims" if r == WRITER else r for r in rules - {"all"}}


def dvc_status(root: Path, scale: str = "ci") -> set[str]:
    """The stages of ``scale``'s pipeline file that `dvc status` calls changed."""
    file = str(pipeline_file(scale))
    changed = json.loads(_run(root, str(BIN / "dvc"), "status", "--json", file))
    return {name.rpartition(":")[2] for name in changed}  # "scales/paper/dvc.yaml:claims"


def dvc_plan(root: Path, scale: str = "ci") -> set[str]:
    """The stages `dvc status` calls changed, closed under the dependency edges of
    ``scale``'s pipeline file."""
    changed = dvc_status(root, scale)
    stages = yaml.safe_load((root / pipeline_file(scale)).read_text())["stages"]
    grew = True
    while grew:
        # An output is a path, or a path with its options (``{path: {persist: true}}``).
        outs = {str(next(iter(o))) if isinstance(o, dict) else o
                for name in changed for o in stages[name]["outs"]}  # fmt: skip
        downstream = {
            name
            for name, stage in stages.items()
            if any(d == o or d.startswith(f"{o}/") for d in stage.get("deps", []) for o in outs)
        }
        grew = not downstream <= changed
        changed |= downstream
    return changed


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("staleness")
    scratch_workflow(root, KEPT)
    repository = yaml.safe_load((REPO / "params.yaml").read_text())["experiments"]
    full = repository["local_global_fig2"]["settings"]["ci"]
    _edit_yaml("experiments.local_global_fig2.settings.ci", lambda tiny: full)(root)
    _run(root, sys.executable, "-m", "replicate.dvcfile")
    _run(root, str(BIN / "dvc"), "init", "--no-scm", "--quiet")
    out = _run(root, str(BIN / "snakemake"), "--cores", "2", BUILD)
    assert "recorded 3 stage(s) in dvc.lock" in out  # papers A and B, the claims
    assert (root / LARGE).stat().st_size > 10**6
    assert not re.search(r"[&*]id\d", (root / "dvc.lock").read_text())  # written in full
    return root


def as_stages(rules: set[str]) -> set[str]:
    """The DVC stages that record ``rules``' outputs: an experiment's paper, or the claims."""
    return {rule if rule == "claims" else PAPER_OF[rule] for rule in rules}


def _edit_yaml(key: str, change: Callable[[object], object]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        data = yaml.safe_load((root / "params.yaml").read_text())
        *path, last = key.split(".")
        node = data
        for part in path:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[last] = change(node[last])
        (root / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    return edit


def _edit_claim(paper: str, key: str, change: Callable[[object], object]) -> Callable[[Path], None]:
    """Change ``key`` (a dotted path) of the first claim in ``claims/<paper>.yaml``."""

    def edit(root: Path) -> None:
        path = root / "claims" / f"{paper}.yaml"
        data = yaml.safe_load(path.read_text())
        *keys, last = key.split(".")
        node = data["claims"][0]
        for part in keys:
            node = node[part]
        node[last] = change(node[last])
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    return edit


def _edit_recording(root: Path) -> None:
    """Change the basis recorded for one claim (as `python -m replicate expect` would)."""
    path = root / "claims" / "recorded.json"
    recorded = json.loads(path.read_text())
    first = recorded[next(iter(recorded))]
    first["ci"]["basis"] += " (recorded again)"
    path.write_text(json.dumps(recorded, indent=2))


def _edit_module(path: str, text: str = "\nEDITED = True\n") -> Callable[[Path], None]:
    """Append ``text`` to a module: by default a statement, a change of the code's meaning."""

    def edit(root: Path) -> None:
        with (root / path).open("a") as f:
            f.write(text)

    return edit


def _rewrite_unchanged(path: str) -> Callable[[Path], None]:
    """Write a file again with its own content, newer than every output (as a checkout, a
    stash or a run that reproduced it does)."""

    def rewrite(root: Path) -> None:
        file = root / path
        file.write_bytes(file.read_bytes())
        later = time.time_ns() + 10**9
        os.utime(file, ns=(later, later))

    return rewrite


A = {"attn_markov_fig3", "attn_markov_table2", "attn_markov_table1"}
PAPER_OF = {name: "attn_markov" if name in A else "local_global" for name in KEPT}
EVERYTHING = {*KEPT, "claims"}
CI = "experiments.attn_markov_fig3.settings"
EDITS: dict[str, tuple[Callable[[Path], None], set[str]]] = {
    "nothing": (lambda root: None, set()),
    # Experiments read their settings at the active scale only; the claims step reads the
    # whole of params.yaml (it validates both scales).
    "paper-scale setting": (
        _edit_yaml(f"{CI}.paper.training.steps", lambda v: v + 1),
        {"claims"},
    ),
    "ci setting": (
        _edit_yaml(f"{CI}.ci.training.steps", lambda v: v + 1),
        {"attn_markov_fig3", "attn_markov_table2", "claims"},
    ),
    "thread count": (_edit_yaml("runtime.threads", lambda v: v + 1), EVERYTHING),
    # Each scale has its own results tree and pipeline file: a change of the default scale
    # plans the paper scale's, never run here, whole (and leaves the ci one's as it was,
    # `test_each_scale_has_its_own_tree_and_records`).
    "scale": (_edit_yaml("scale", lambda v: "paper"), EVERYTHING),
    "classification": (
        _edit_yaml("classification.bigram_kappa_min", lambda v: v / 2),
        {"attn_markov_fig3", "attn_markov_table2", "claims"},
    ),
    # The claims live in claims/<paper>.yaml and claims/recorded.json: only the claims rerun.
    "a claim's tolerance": (
        _edit_claim("local_global", "tolerance.ci", lambda v: v / 2),
        {"claims"},
    ),
    "a claim's statement": (
        _edit_claim("attn_markov", "statement", lambda v: f"{v} (edited)"),
        {"claims"},
    ),
    "a recorded measurement": (_edit_recording, {"claims"}),
    "paper A module": (_edit_module("replicate/experiments/attn_markov/common.py"), A | {"claims"}),
    # Only the experiments that import a module depend on it: Fig. 3 does not import the
    # hyperparameter tables, paper B's Fig. 5 imports no module of paper A.
    "paper A's Fig. 3 module": (
        _edit_module("replicate/experiments/attn_markov/fig3.py"),
        A | {"claims"},
    ),
    "a module no kept experiment imports": (
        _edit_module("replicate/experiments/two_layer/maps.py"),
        {"claims"},  # the claims step validates every experiment's settings schema
    ),
    "an untracked file beside the code": (
        lambda root: (root / "replicate/experiments/attn_markov/notes.txt").write_text("x"),
        set(),
    ),
    # Snakemake compares a newer input's checksum with the one it recorded; DVC hashes it.
    "paper A module rewritten unchanged": (
        _rewrite_unchanged("replicate/experiments/attn_markov/common.py"),
        set(),
    ),
    "hyperparameter tables": (
        _edit_module("replicate/experiments/hyperparameter_tables.py"),
        {"attn_markov_table1", "attn_markov_table2", "claims"},
    ),
    "claims code": (_edit_module("replicate/claims.py"), {"claims"}),
    # Snakemake checks a newer input's checksum, DVC its hash: an output rewritten with its
    # own bytes (a checkout, a rerun that reproduced it) changes nothing, at any size.
    "an output over 1 MB rewritten unchanged": (_rewrite_unchanged(LARGE), set()),
    "a deleted provenance.json": (
        lambda root: (root / "results/ci/attn_markov/table1/provenance.json").unlink(),
        {"attn_markov_table1", "claims"},
    ),
}


@pytest.fixture
def restoring(built: Path) -> Iterator[Path]:
    """Yields the built project; afterwards every file is back, bytes and mtime."""
    files = [p for p in built.rglob("*") if p.is_file() and p.suffix in {".py", ".yaml", ".json"}]
    files += [p for p in (built / "results").rglob("*") if p.is_file()]
    saved = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    code = {p for p in (built / "replicate").rglob("*") if p.is_file()}
    yield built
    for path in {p for p in (built / "replicate").rglob("*") if p.is_file()} - code:
        path.unlink()  # a file an edit added
    for path, (data, mtime) in saved.items():
        if not path.exists() or path.read_bytes() != data or path.stat().st_mtime_ns != mtime:
            path.parent.mkdir(parents=True, exist_ok=True)  # a folder deleted whole
            path.write_bytes(data)
            os.utime(path, ns=(mtime, mtime))


@pytest.mark.parametrize("edit", list(EDITS))
def test_snakemake_and_dvc_agree(restoring: Path, edit: str) -> None:
    change, expected = EDITS[edit]
    change(restoring)
    scale = yaml.safe_load((restoring / "params.yaml").read_text())["scale"]
    assert snakemake_plan(restoring) == expected
    assert dvc_plan(restoring, scale) == as_stages(expected)


def test_a_comment_retrains_nothing_and_a_record_settles_dvc(restoring: Path) -> None:
    """DVC hashes bytes: after a comment in a module, `dvc status` names the paper's stage
    (and the claims after it) while Snakemake, which compares syntax trees, plans nothing;
    `python -m replicate record` then records the new bytes and runs no job."""
    _edit_module("replicate/experiments/attn_markov/common.py", "\n# a comment\n")(restoring)
    assert snakemake_plan(restoring) == set()
    assert dvc_plan(restoring) == {"attn_markov", "claims"}
    lock = restoring / "dvc.lock"
    recorded = lock.read_bytes()
    results = _contents(restoring / "results")
    try:
        _run(restoring, sys.executable, "-m", "replicate", "record")
        assert dvc_plan(restoring) == set() and snakemake_plan(restoring) == set()
        assert _contents(restoring / "results") == results  # DVC relinks them, mtimes move
    finally:
        lock.write_bytes(recorded)


def test_the_record_step_sees_what_snakemake_sees_of_a_rewritten_module(restoring: Path) -> None:
    """A module written again with its own content leaves every experiment current for the
    record step too (the code digest in provenance.json), so a record missed before is made
    by the next run; an edit leaves the paper's experiments stale."""
    params = load_params(restoring / "params.yaml", scale="ci")
    assert set(current_experiments(params, restoring)) == set(KEPT)
    _rewrite_unchanged("replicate/experiments/attn_markov/common.py")(restoring)
    assert set(current_experiments(params, restoring)) == set(KEPT)
    assert current_stages(params, restoring) == ["attn_markov", "local_global", "claims"]
    _edit_module("replicate/experiments/attn_markov/common.py")(restoring)
    assert set(current_experiments(params, restoring)) == set(KEPT) - A
    assert current_stages(params, restoring) == ["local_global"]


def test_a_paper_is_recorded_without_the_experiment_deleted_since(restoring: Path) -> None:
    """An experiment's folder deleted whole goes into dvc.lock as a bare path, not with the
    hash of its last record (which params.yaml may no longer match): `dvc status` calls it
    deleted and plans its paper, as `snakemake -n` plans the experiment."""
    lock = restoring / "dvc.lock"
    recorded = lock.read_bytes()
    params = load_params(restoring / "params.yaml", scale="ci")
    try:
        shutil.rmtree(restoring / "results/ci/attn_markov/table1")
        assert record(params, restoring) == ["attn_markov", "local_global"]
        outs = yaml.safe_load(lock.read_text())["stages"]["attn_markov"]["outs"]
        hashed = {out["path"]: "md5" in out for out in outs}
        assert hashed == {
            "results/ci/attn_markov/fig3": True,
            "results/ci/attn_markov/table1": False,
            "results/ci/attn_markov/table2": True,
        }
        assert snakemake_plan(restoring) == {"attn_markov_table1", "claims"}
        assert dvc_plan(restoring) == {"attn_markov", "claims"}
    finally:
        lock.write_bytes(recorded)


def test_dvc_repro_reruns_only_the_stale_experiment_of_a_paper(tmp_path: Path) -> None:
    """`dvc repro` of a paper's stage runs the paper's Snakemake target over its outputs kept
    in place (``persist``): the experiment whose setting changed reruns, the other is left
    as it was, and then neither DVC nor Snakemake finds anything to do."""
    root = tmp_path
    scratch_workflow(root, ("attn_markov_table1", "attn_markov_theorems"))
    _run(root, sys.executable, "-m", "replicate.dvcfile")
    _run(root, str(BIN / "dvc"), "init", "--no-scm", "--quiet")
    _run(root, str(BIN / "snakemake"), "--cores", "1", "attn_markov")

    def times(item: str) -> dict[Path, int]:
        return {p: p.stat().st_mtime_ns for p in (root / "results/ci/attn_markov" / item).iterdir()}

    table1, theorems = times("table1"), times("theorems")
    _edit_yaml("experiments.attn_markov_theorems.settings.ci.probe_directions", lambda v: v + 1)(
        root
    )
    assert dvc_status(root) == {"attn_markov", "claims"}  # the claims: never built here
    _run(root, str(BIN / "dvc"), "repro", "attn_markov")
    assert times("table1") == table1
    assert all(times("theorems")[p] > t for p, t in theorems.items())
    assert dvc_status(root) == {"claims"}
    assert "Nothing to be done" in _run(root, str(BIN / "snakemake"), "-n", "attn_markov")


def _files(folder: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def _contents(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _venv_elsewhere(place: Path) -> Path:
    """This environment's interpreter seen from another path (a venv whose ``lib`` is this
    one's): its ``sys.executable`` differs, its packages are the same."""
    (place / "bin").mkdir(parents=True)
    (place / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    shutil.copy(Path(sys.prefix) / "pyvenv.cfg", place / "pyvenv.cfg")
    (place / "lib").symlink_to(Path(sys.prefix) / "lib")
    return place / "bin" / "python"


def test_a_copied_checkout_and_a_moved_environment_plan_nothing(
    built: Path, tmp_path: Path
) -> None:
    """A rule's command names no absolute path: the project copied elsewhere (mtimes kept)
    and run by an interpreter at another path plans no job."""
    if not (Path(sys.prefix) / "pyvenv.cfg").exists():
        pytest.skip("needs to run in a virtual environment")
    root = tmp_path / "copy"
    shutil.copytree(built, root, symlinks=True)
    python = _venv_elsewhere(tmp_path / "venv")
    assert snakemake_plan(root, snakemake=(str(python), "-m", "snakemake")) == set()


def test_each_scale_has_its_own_tree_and_records(built: Path, tmp_path: Path) -> None:
    """A paper-scale run writes results/paper/ and scales/paper/dvc.lock only: the ci tree,
    its dvc.lock and its staleness stay as they were, and each scale's `snakemake -n` and
    `dvc status` agree. (Paper A's Table 1 trains nothing and has the same settings at both
    scales, so the paper-scale run takes seconds.)"""
    root = tmp_path / "copy"
    shutil.copytree(built, root, symlinks=True)
    ci_before, lock_before = _files(root / "results/ci"), (root / "dvc.lock").read_bytes()
    out = _run(
        root,
        str(BIN / "snakemake"),
        "--cores",
        "1",
        "attn_markov_table1",
        "--config",
        "scale=paper",
    )
    assert "recorded 1 stage(s) in scales/paper/dvc.lock" in out
    assert _files(root / "results/ci") == ci_before
    assert (root / "dvc.lock").read_bytes() == lock_before
    assert (root / "results/paper/attn_markov/table1/table1.md").exists()
    assert snakemake_plan(root) == set() and dvc_plan(root) == set()
    paper_lock = yaml.safe_load((root / "scales/paper/dvc.lock").read_text())["stages"]
    outs = {out["path"]: "md5" in out for out in paper_lock["attn_markov"]["outs"]}
    assert outs == {
        "results/paper/attn_markov/fig3": False,
        "results/paper/attn_markov/table1": True,
        "results/paper/attn_markov/table2": False,
    }
    planned = snakemake_plan(root, "scale=paper")
    assert planned == {*KEPT, "claims"} - {"attn_markov_table1"}
    assert dvc_plan(root, "paper") == as_stages(planned)
