"""Workflow faults, through real `snakemake` runs in a scratch project: a deleted output is
remade by the claims targets; the advice a corrupt output's claims give works as written;
params.yaml's duplicate keys and syntax errors are named with their lines, a bad --config
value is blamed on --config; a full disk is one line naming the file.

The project holds two experiments that train nothing (paper A's and paper B's Table 1), built
once per session by `snakemake claims` (conftest's `built_training_free_workflow`; this
file's copy of it); each test leaves it as it found it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicate import claims
from replicate.claim_files import load_claims
from replicate.config import load_params, read_params_file
from replicate.params import ConfigError
from replicate.provenance import recorded_inputs

from .conftest import PARAMS_FILE, TRAINING_FREE, built_training_free_workflow

BIN = Path(sys.executable).parent
KEPT = TRAINING_FREE
TABLE1 = Path("results/ci/attn_markov/table1")

pytestmark = [
    pytest.mark.workflow(seconds=180),
    pytest.mark.skipif(
        not (BIN / "snakemake").exists(),
        reason="needs the snakemake executable of this environment",
    ),
]


def snakemake(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [str(BIN / "snakemake"), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def planned(root: Path, target: str) -> set[str]:
    """The rules `snakemake -n TARGET` would run."""
    res = snakemake(root, "-n", target)
    assert res.returncode == 0, res.stdout + res.stderr
    return set(re.findall(r"^(?:local)?rule (\w+):", res.stdout, flags=re.MULTILINE))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return built_training_free_workflow(
        tmp_path_factory, tmp_path_factory.mktemp("workflow_faults")
    )


@pytest.fixture
def built(project: Path) -> Iterator[Path]:
    """The built project; afterwards its params.yaml and results are as before, bytes and
    modification times (a test that reran something has rewritten them identically)."""
    files = [project / "params.yaml", *(project / "results").rglob("*.*")]
    saved = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    yield project
    for path, (data, mtime) in saved.items():
        path.write_bytes(data)
        os.utime(path, ns=(mtime, mtime))


# ----------------------------------------------------------------------------- a deleted output
@pytest.mark.parametrize("target", ["claims", "claims_report"])
def test_the_claims_targets_remake_a_deleted_output(built: Path, target: str) -> None:
    """Snakemake remakes a deleted file only for a target that lists it: the claims targets
    list every experiment output, so the deleted file's experiment and the claims rerun."""
    assert planned(built, target) <= {"claims"}  # current: at most the check
    deleted = built / TABLE1 / "table1.csv"
    before = deleted.read_bytes()
    deleted.unlink()
    assert planned(built, target) >= {"attn_markov_table1", "claims_evaluation"}
    res = snakemake(built, target)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert deleted.read_bytes() == before


# ----------------------------------------------------------------------------- a corrupt output
def _advice(root: Path, claim_experiment: str) -> str:
    """The command in the notes of ``claim_experiment``'s claims in claims.json (one)."""
    records = json.loads((root / "results/ci/claims.json").read_text())
    notes = {r["note"] for r in records if r["experiment"] == claim_experiment}
    commands = {m for note in notes for m in re.findall(r"`(snakemake [^`]*)`", note)}
    assert len(commands) == 1, notes
    return commands.pop()


@pytest.mark.parametrize(
    "corrupt", ['{"truncated": 1.0,\n', "{}"], ids=["truncated JSON", "empty object"]
)
def test_the_advice_for_a_corrupt_output_works_as_written(built: Path, corrupt: str) -> None:
    metrics = built / TABLE1 / "metrics.json"
    good = metrics.read_bytes()
    claims_before = (built / "results/ci/claims.json").read_bytes()
    metrics.write_text(corrupt)
    assert snakemake(built, "claims").returncode == 1  # the check fails on missing claims
    advice = _advice(built, "attn_markov_table1")
    assert advice == "snakemake claims --forcerun attn_markov_table1"
    assert planned(built, "attn_markov_table1") == set()  # the bare rule would do nothing
    command = shlex.split(advice)
    res = snakemake(built, *command[1:])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert metrics.read_bytes() == good
    assert (built / "results/ci/claims.json").read_bytes() == claims_before


def test_a_nan_metric_gives_the_advice(tmp_path: Path) -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    claim = next(c for c in load_claims(params).claims if c.experiment == KEPT[0])
    out = tmp_path / TABLE1
    out.mkdir(parents=True)
    (out / "metrics.json").write_text(f'{{"{claim.metric}": NaN}}')
    (out / "provenance.json").write_text(json.dumps(recorded_inputs(KEPT[0], params)))
    record = next(r for r in claims.evaluate(params, tmp_path) if r.id == claim.id)
    assert record.verdict == "missing"
    assert record.note.endswith(f"is NaN, not a finite number; {claims.rerun_advice(KEPT[0])}")


# ------------------------------------------------------------------ bad settings, a full disk
def test_a_key_given_twice_stops_snakemake_naming_both_lines(built: Path) -> None:
    path = built / "params.yaml"
    lines = path.read_text().splitlines()
    first = lines.index("  threads: 1") + 1
    lines.insert(first, "  threads: 2")
    path.write_text("\n".join(lines) + "\n")
    res = snakemake(built, "-n", "attn_markov_table1")
    assert res.returncode != 0
    assert res.stderr.splitlines()[-1] == (
        f"error: params.yaml is not valid YAML: line {first + 1}, column 3: "
        f"duplicate key 'threads' (first given at line {first})"
    )


def test_a_live_run_in_the_folder_is_named_before_snakemake_advises_unlock(
    built: Path, tmp_path: Path
) -> None:
    """Snakemake refusing its lock advises `--unlock`, which, while the run holding the lock
    is alive, lets two runs write the same outputs: a run started in a folder where another
    Snakemake process works names that process first. (A stand-in named snakemake plays the
    live run.)"""
    stand_in = tmp_path / "snakemake"
    stand_in.write_text("import time\ntime.sleep(300)\n")
    live = subprocess.Popen([sys.executable, str(stand_in)], cwd=built)
    try:
        res = snakemake(built, "-n", "attn_markov_table1")
    finally:
        live.kill()
        live.wait()
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"note: another Snakemake run is live in this folder (pid {live.pid})." in res.stderr
    assert "`--unlock` would let both write the same outputs" in res.stderr
    alone = snakemake(built, "-n", "attn_markov_table1")
    assert alone.returncode == 0 and "another Snakemake run" not in alone.stderr


def test_a_yaml_syntax_error_seen_by_snakemake_has_its_line(built: Path) -> None:
    path = built / "params.yaml"
    lines = path.read_text().splitlines()
    broken = lines.index("  threads: 1") + 1
    lines[broken - 1] = "  threads: [1"
    path.write_text("\n".join(lines) + "\n")
    res = snakemake(built, "-n", "attn_markov_table1")
    assert res.returncode != 0
    last = res.stderr.splitlines()[-1]
    assert last.startswith(f"error: params.yaml is not valid YAML: line {broken + 1}, column")
    assert last.endswith(f"(while parsing a flow sequence, line {broken})")


def test_a_bad_config_value_is_blamed_on_the_option(built: Path) -> None:
    res = snakemake(built, "-n", "attn_markov_table1", "--config", "scale=huge")
    assert res.returncode != 0
    assert res.stderr.splitlines()[-2:] == [
        "error: --config: invalid parameters",
        "  scale = 'huge': Input should be 'ci' or 'paper'",
    ]
    res = snakemake(built, "-n", "attn_markov_table1", "--config", "scale=paper")
    assert res.returncode == 0 and "--scale paper run attn_markov_table1" in res.stdout


def test_a_missing_key_is_named_without_its_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = read_params_file(PARAMS_FILE)
    del data["runtime"]["threads"]
    monkeypatch.chdir(tmp_path)  # no params.yaml here to take a line from
    with pytest.raises(ConfigError) as error:
        load_params(data)
    assert str(error.value).splitlines() == [
        "params.yaml: invalid parameters",
        "  runtime.threads: missing (required)",
    ]


def test_a_full_disk_is_one_line_naming_the_file(built: Path, tmp_path: Path) -> None:
    """The outputs go to a 4 KiB tmpfs (a private mount: `unshare`)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    for name in ("params.yaml", "claims"):
        (shutil.copytree if name == "claims" else shutil.copy)(built / name, tmp_path / name)
    (tmp_path / "results/ci").mkdir(parents=True)
    script = (
        "mount -t tmpfs -o size=4k tmpfs results/ci || exit 77; "
        f"{shlex.quote(sys.executable)} -m replicate run {KEPT[0]}; echo rc=$?; "
        f"ls -A {TABLE1}"
    )
    res = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if res.returncode == 77 or "unshare:" in res.stderr:
        pytest.skip(f"cannot mount a private tmpfs here: {res.stderr.strip()}")
    assert res.stderr.splitlines() == [f"error: {TABLE1}/table1.csv: No space left on device"], (
        res.stderr
    )
    assert res.stdout.splitlines() == ["rc=1"]  # exit 1, and no temporary file left behind
