"""Each fault is reproduced here and leaves a repairable state.

Non-finite metrics are `missing` (naming file and key); a malformed metrics file is one line
of error and never costs the previous claims.json/REPORT.md; temporary files of a killed
writer are recognisable and removed; outputs get the user's file mode; the command line
takes options after the subcommand, prints its version, names a missing upstream output,
survives a closed pipe and says "missing" for a missing claims.json; the per-paper verdict
summaries count the records.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from replicate import claims, io, verdicts
from replicate.claim_files import load_claims
from replicate.cli import _parser, main
from replicate.config import load_params

from .conftest import PARAMS_FILE, REPO, claim_dict, params_with_claims
from .test_claims import CLAIM_ID, _stuck, _write_outputs

pytestmark = pytest.mark.workflow(seconds=45)

OUTPUTS = verdicts.ClaimsOutputs("ci")
FIG3 = "results/ci/attn_markov/fig3"
METRIC = "p0.5_q0.8/tied/frac_unigram"  # CLAIM_ID's metric (ge 0.6, expected holds)
CLI = ["--params", str(PARAMS_FILE), "--scale", "ci"]


def _evaluate(root: Path) -> dict[str, verdicts.ClaimRecord]:
    params = load_params(PARAMS_FILE, scale="ci")
    return {r.id: r for r in claims.evaluate(params, root)}


def _fig3_metrics_text(value: str) -> str:
    """Fig. 3's metrics with CLAIM_ID's metric spelled ``value`` (raw JSON text)."""
    metrics = _stuck(1.0)
    text = json.dumps(metrics)
    return text.replace(f'"{METRIC}": {json.dumps(metrics[METRIC])}', f'"{METRIC}": {value}')


# ----------------------------------------------------------------------------- non-finite metrics
@pytest.mark.parametrize(
    ("value", "described"),
    [
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
        ("NaN", "NaN"),
        ("null", "null"),
        ('"1.0"', "a string"),
        ("true", "a boolean"),
        ("[1.0]", "an array"),
        ("1e999", "Infinity"),
    ],
)
def test_a_metric_that_is_not_a_finite_number_is_missing(
    tmp_path: Path, value: str, described: str
) -> None:
    """Infinity used to be read by Python's json and pass `ge 0.6` as holds."""
    _write_outputs(tmp_path, _stuck(1.0))
    before = _evaluate(tmp_path)
    assert before[CLAIM_ID].verdict == "holds"
    (tmp_path / FIG3 / "metrics.json").write_text(_fig3_metrics_text(value))
    after = _evaluate(tmp_path)
    r = after[CLAIM_ID]
    assert (r.verdict, r.measured, r.matches_expectation) == ("missing", None, False)
    assert f"{FIG3}/metrics.json" in r.note and repr(METRIC) in r.note and described in r.note
    # every other claim's record is unchanged
    assert {k: v for k, v in after.items() if k != CLAIM_ID} == {
        k: v for k, v in before.items() if k != CLAIM_ID
    }


@pytest.mark.parametrize("value", ["Infinity", "-Infinity"])
def test_an_infinite_metric_of_a_one_off_claim_no_longer_holds(
    tmp_path: Path, params_dict: dict, value: str
) -> None:
    """The reported fault: without per-seed evidence, `ge 0.6` held for Infinity, and a
    `le` claim for -Infinity."""
    claim = claim_dict(CLAIM_ID)
    claim.pop("per_seed", None)
    claim["comparison"] = "ge" if value == "Infinity" else "le"
    path = params_with_claims(tmp_path, params_dict, [claim])
    params = load_params(path, scale="ci")
    _write_outputs(tmp_path, {METRIC: 0.6 if value == "Infinity" else 0.5})
    assert claims.evaluate(params, tmp_path)[0].verdict == "holds"
    (tmp_path / FIG3 / "metrics.json").write_text(f'{{"{METRIC}": {value}}}')
    (r,) = claims.evaluate(params, tmp_path)
    assert (r.verdict, r.measured) == ("missing", None)
    assert r.note.endswith(
        f"{FIG3}/metrics.json: metric {METRIC!r} is {value}, not a finite number; "
        "rerun it with `snakemake claims --forcerun attn_markov_fig3`"
    )


def test_a_non_finite_metric_written_by_the_writer_is_missing(tmp_path: Path) -> None:
    """io.write_json turns ±inf into null; the claim reads that null as missing."""
    _write_outputs(tmp_path, {})
    io.write_json(tmp_path / FIG3 / "metrics.json", _stuck(1.0) | {METRIC: float("inf")})
    r = _evaluate(tmp_path)[CLAIM_ID]
    assert r.verdict == "missing" and "null" in r.note and METRIC in r.note


def test_a_non_finite_reference_metric_is_missing(tmp_path: Path, params_dict: dict) -> None:
    claim = claim_dict(CLAIM_ID)
    claim["reference"] = {"metric": "ref/value"}
    path = params_with_claims(tmp_path, params_dict, [claim])
    params = load_params(path, scale="ci")
    _write_outputs(tmp_path, _stuck(1.0) | {"ref/value": 0.6})
    assert claims.evaluate(params, tmp_path)[0].verdict == "holds"
    text = json.dumps(_stuck(1.0))[:-1] + ', "ref/value": -Infinity}'
    (tmp_path / FIG3 / "metrics.json").write_text(text)
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "missing" and r.reference is None
    assert "reference metric 'ref/value' is -Infinity" in r.note and FIG3 in r.note


def test_a_non_finite_per_seed_value_is_missing(tmp_path: Path, params_dict: dict) -> None:
    claim = claim_dict(CLAIM_ID)
    claim["per_seed"] = {"pattern": "p0.5_q0.8/untied/seed{seed}/delta", "over_seeds": "max"}
    claim["metric"] = "p0.5_q0.8/untied/max_delta"
    path = params_with_claims(tmp_path, params_dict, [claim])
    params = load_params(path, scale="ci")
    seeds = {f"p0.5_q0.8/untied/seed{s}/delta": 0.7 + s / 10 for s in range(3)}
    _write_outputs(tmp_path, seeds | {claim["metric"]: 0.9})
    assert claims.evaluate(params, tmp_path)[0].verdict == "holds"
    text = json.dumps(seeds | {claim["metric"]: 0.9}).replace("0.7,", '"0.7",')
    (tmp_path / FIG3 / "metrics.json").write_text(text)
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "missing" and FIG3 in r.note
    assert "per-seed metric 'p0.5_q0.8/untied/seed0/delta' is a string" in r.note


# ----------------------------------------------------------------------------- malformed files
MALFORMED = {
    "truncated": (b'{"a": 1.0,\n "b": 2.0,\n  ', "not valid JSON (line 3, column 3"),
    "array": (b"[1.0, 2.0]", "not a JSON object (it holds an array)"),
    "number": (b"0.5", "not a JSON object (it holds a number)"),
    "empty": (b"", "not valid JSON (line 1, column 1"),
    "binary": (b"\xff\xfe\x00", "not UTF-8 text"),
}


def _claims_outputs(root: Path) -> dict[Path, bytes]:
    files = [root / OUTPUTS.claims, root / OUTPUTS.report]
    return {p: p.read_bytes() for p in [*files, *OUTPUTS.summaries(root)]}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_metrics_file_is_one_error_line_and_missing_claims(
    tmp_path: Path, monkeypatch, capsys, kind: str
) -> None:
    content, message = MALFORMED[kind]
    monkeypatch.chdir(tmp_path)
    _write_outputs(tmp_path, _stuck(1.0))
    assert main([*CLI, "claims"]) == 0
    before = json.loads((tmp_path / OUTPUTS.claims).read_text())
    (tmp_path / FIG3 / "metrics.json").write_bytes(content)
    capsys.readouterr()
    assert main([*CLI, "claims"]) == 0  # the files are written; `check` fails below
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {FIG3}/metrics.json: {message}")
    after = json.loads((tmp_path / OUTPUTS.claims).read_text())
    fig3 = [r for r in after if r["experiment"] == "attn_markov_fig3"]
    assert fig3 and all(r["verdict"] == "missing" for r in fig3)
    assert all(f"{FIG3}/metrics.json: {message}" in r["note"] for r in fig3)
    assert [r for r in after if r["experiment"] != "attn_markov_fig3"] == [
        r for r in before if r["experiment"] != "attn_markov_fig3"
    ]
    assert f"{FIG3}/metrics.json: {message}" in (tmp_path / OUTPUTS.report).read_text()
    assert main([*CLI, "check"]) == 1
    err = capsys.readouterr().err
    assert f"error: {FIG3}/metrics.json: {message}" in err
    assert f"UNEXPECTED {CLAIM_ID}: verdict missing" in err


def test_a_malformed_provenance_file_is_reported_the_same_way(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    _write_outputs(tmp_path, _stuck(1.0))
    (tmp_path / FIG3 / "provenance.json").write_text('{"scale": "ci", ')
    assert main([*CLI, "claims"]) == 0
    assert capsys.readouterr().err.startswith(
        f"error: {FIG3}/provenance.json: not valid JSON (line 1, column 17: Expecting property name"
    )
    record = next(r for r in verdicts.load_records("ci", tmp_path) if r.id == CLAIM_ID)
    assert record.verdict == "missing" and f"{FIG3}/provenance.json" in record.note


def test_claims_on_a_truncated_metrics_file_prints_no_traceback(tmp_path: Path) -> None:
    """The command as Snakemake runs it: exit 0, one line on stderr, the files written."""
    _write_outputs(tmp_path, _stuck(1.0))
    (tmp_path / FIG3 / "metrics.json").write_text('{"p0.5_q0.8/tied/frac_unigram": 1.0,\n')
    res = subprocess.run(
        [sys.executable, "-m", "replicate", *CLI, "claims"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"error: {FIG3}/metrics.json: not valid JSON (line 2, column 1: "
        "Expecting property name enclosed in double quotes)"
    ]
    assert (tmp_path / OUTPUTS.claims).exists() and (tmp_path / OUTPUTS.report).exists()


def test_claims_failing_for_another_reason_leaves_its_files_byte_identical(
    tmp_path: Path, monkeypatch, params_dict: dict
) -> None:
    monkeypatch.chdir(tmp_path)
    _write_outputs(tmp_path, _stuck(1.0))
    assert main([*CLI, "claims"]) == 0
    saved = _claims_outputs(tmp_path)
    _write_outputs(tmp_path, _stuck(0.0))  # a fresh evaluation would change the files
    params_dict["experiments"]["attn_markov_fig3"]["settings"]["ci"]["chains"][0]["p"] = 1.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(params_dict, sort_keys=False))
    assert main(["--params", str(bad), "--scale", "ci", "claims"]) == 2
    assert _claims_outputs(tmp_path) == saved

    def broken_report(*_: object) -> str:
        raise RuntimeError("rendering failed")

    monkeypatch.setattr("replicate.report.render_report", broken_report)
    with pytest.raises(RuntimeError, match="rendering failed"):
        main([*CLI, "claims"])
    assert _claims_outputs(tmp_path) == saved  # rendered before anything was written


# ----------------------------------------------------------------------------- temporary files
def test_a_killed_writer_leaves_a_recognisable_temp_file_that_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "results/paper/item"
    io.write_json(out / "metrics.json", {"a": 1.0})
    io.write_text(out / "table.md", "| a |\n")
    (out / ".gitignore").write_text("/figure.png\n")
    outputs = {p: p.read_bytes() for p in out.iterdir()}
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from replicate import io\n"
        "def half(tmp):\n"
        "    tmp.write_bytes(b'half a file')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "io._atomic(Path(sys.argv[1]), half)\n"
    )
    res = subprocess.run([sys.executable, "-c", script, str(out / "metrics.json")], cwd=REPO)
    assert res.returncode == -signal.SIGKILL
    (stale,) = set(out.iterdir()) - set(outputs)
    assert stale.name.startswith(f"{io.TEMP_PREFIX}metrics.json.") and stale.suffix == ".json"
    assert io.remove_stale_temps(out) == [stale]
    assert {p: p.read_bytes() for p in out.iterdir()} == outputs  # outputs untouched


def test_remove_stale_temps_recurses_only_when_asked(tmp_path: Path) -> None:
    nested = tmp_path / "runs" / f"{io.TEMP_PREFIX}curve.csv.0a1b2c3d.csv"
    top = tmp_path / f"{io.TEMP_PREFIX}figure.png.deadbeef.png"
    nested.parent.mkdir()
    nested.write_text("x")
    top.write_text("x")
    io.write_csv(tmp_path / "runs" / "curve.csv", pd.DataFrame({"step": [1]}))
    assert io.remove_stale_temps(tmp_path) == [top]
    assert nested.exists()
    assert io.remove_stale_temps(tmp_path, recursive=True) == [nested]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["curve.csv"]
    assert io.remove_stale_temps(tmp_path / "absent") == []


def test_claims_removes_its_own_stale_temps(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    stale = tmp_path / "results/ci" / f"{io.TEMP_PREFIX}claims.json.00000000.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    assert main([*CLI, "claims"]) == 0
    assert not stale.exists() and (tmp_path / OUTPUTS.claims).exists()


# ----------------------------------------------------------------------------- file mode
@pytest.fixture
def umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def test_outputs_get_the_users_file_mode(tmp_path: Path, umask: None) -> None:
    """mkstemp made every output 0600 whatever the umask."""
    import matplotlib.pyplot as plt
    import torch

    fig, _ = plt.subplots()
    io.save_figure(fig, tmp_path / "figure.png")
    plt.close(fig)
    io.write_json(tmp_path / "metrics.json", {"a": 1.0})
    io.write_text(tmp_path / "table.md", "x")
    io.write_csv(tmp_path / "runs.csv", pd.DataFrame({"a": [1]}))
    io.write_torch(tmp_path / "model.pt", torch.zeros(2))
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(modes, 0o644) and len(modes) == 5
    os.umask(0o077)
    io.write_text(tmp_path / "private.md", "x")
    assert (tmp_path / "private.md").stat().st_mode & 0o777 == 0o600


# ----------------------------------------------------------------------------- command line
def test_global_options_go_before_or_after_the_subcommand() -> None:
    parse = _parser().parse_args
    assert parse(["check", "--scale", "ci"]).scale == "ci"
    assert parse(["--scale", "paper", "check"]).scale == "paper"
    assert parse(["--scale", "paper", "check", "--scale", "ci"]).scale == "ci"
    assert parse(["run", "x", "--params", "p.yaml"]).params == Path("p.yaml")
    assert parse(["--params", "p.yaml", "run", "x", "--scale", "ci"]).params == Path("p.yaml")
    defaults = parse(["list"])
    assert (defaults.params, defaults.scale) == (Path("params.yaml"), None)


def test_options_after_the_subcommand_reach_the_command(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["list", "--params", str(PARAMS_FILE)]) == 0
    assert "attn_markov_fig3" in capsys.readouterr().out
    assert main(["claims", *CLI]) == 0
    assert main(["check", "--scale", "paper", "--params", str(PARAMS_FILE)]) == 1
    # written at ci, checked at paper: each scale has its own results tree
    assert "results/paper/claims.json is missing" in capsys.readouterr().err


def test_version(capsys) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"markov-replicate {version('markov-replicate')}\n"


def test_run_with_a_missing_upstream_output_names_it(tmp_path: Path, monkeypatch, capsys):
    params = load_params(PARAMS_FILE, scale="ci")
    name = next(iter(params.raw.derived_experiments))
    upstream = params.upstream_of(name)
    assert upstream is not None
    monkeypatch.chdir(tmp_path)
    assert main([*CLI, "run", name]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    first = params.output_paths(upstream)[0]
    assert line.startswith(f"error: {name} reads the outputs of {upstream}, but {first} is missing")
    assert not (tmp_path / params.results_dir / params.experiment(name).paper).exists()
    present = params.output_paths(upstream)
    for path in present[:-1]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    assert main(["run", name, *CLI]) == 2
    err = capsys.readouterr().err
    assert f"but {present[-1]} is missing; build it first" in err and "more" not in err
    assert not (tmp_path / params.directory(name)).exists()


def test_no_broken_pipe_traceback_when_the_reader_leaves() -> None:
    """`python -m replicate list | head -1`: the reader is gone before anything is written."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "replicate", *CLI, "list"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1  # what the Python docs' recipe exits with
    assert err == ""
    res = subprocess.run(
        f"{sys.executable} -m replicate list | head -1",
        shell=True,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.stderr == "" and len(res.stdout.splitlines()) == 1


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_command_run_below_the_repository_root_names_the_root(tmp_path: Path) -> None:
    """From a subfolder every path the commands read and write (results/, logs/) would start
    in the wrong place: the command says where to run it, exits 2 and writes nothing. A
    parameters file named with --params is still read from anywhere."""
    for name in ("params.yaml", "Snakefile"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    sub = tmp_path / "results" / "ci"
    sub.mkdir(parents=True)
    before = _snapshot(tmp_path)
    commands = {
        "list": [sys.executable, "-m", "replicate", "list"],
        "check": [str(Path(sys.executable).parent / "markov-replicate"), "check", "--scale", "ci"],
    }
    for command in commands.values():
        res = subprocess.run(command, cwd=sub, capture_output=True, text=True, timeout=120)
        assert (res.returncode, res.stdout) == (2, "")
        assert res.stderr == (
            f"error: this command must be run from the repository root, {tmp_path} (the "
            f"current folder, {sub}, has no params.yaml)\n"
        )
        assert _snapshot(tmp_path) == before
    res = subprocess.run(
        [*commands["list"], "--params", "../../params.yaml"],
        cwd=sub,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and "attn_markov_fig3\t" in res.stdout, res.stderr


def test_check_says_missing_when_claims_json_is_missing(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write_outputs(tmp_path, _stuck(1.0))
    assert main([*CLI, "check"]) == 1
    assert capsys.readouterr().err == (
        f"error: {OUTPUTS.claims} is missing; build it with `python -m replicate claims` "
        "(or `snakemake claims`)\n"
    )
    (tmp_path / OUTPUTS.claims).write_text("[{")
    assert main([*CLI, "check"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {OUTPUTS.claims}: not a list of claim records")
    assert "rebuild it with `python -m replicate claims`" in err
    assert (tmp_path / OUTPUTS.claims).read_text() == "[{"  # check writes nothing


# ----------------------------------------------------------------------------- verdict summaries
def test_verdict_summaries_count_the_records(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write_outputs(tmp_path, _stuck(1.0))
    assert main([*CLI, "claims"]) == 0
    records = verdicts.load_records("ci", tmp_path)
    paths = OUTPUTS.summaries(tmp_path)
    assert [p.relative_to(tmp_path) for p in paths] == [
        Path(f"results/ci/verdicts/{paper}.json")
        for paper in ("attn_markov", "local_global", "subngrams", "two_layer")
    ]
    keys = ["claims", "implied", "facts", "holds", "does_not_reproduce", "inconclusive"]
    keys += ["not_tested", "missing", "unexpected"]
    total = dict.fromkeys(keys, 0)
    for path in paths:
        summary = json.loads(path.read_text())
        own = summary.pop("papers_own")
        assert list(summary) == keys and all(type(v) is int for v in summary.values())
        recs = [r for r in records if f"results/ci/verdicts/{r.paper}.json" in str(path)]
        facts = [r for r in recs if r.implied_by is None]
        papers = [r for r in facts if r.provenance == "paper"]
        assert own == {
            key: sum(r.verdict == key.replace("_", "-") for r in papers) for key in keys[3:8]
        }
        assert summary == {
            "claims": len(recs),
            "implied": len(recs) - len(facts),
            "facts": len(facts),
            "holds": sum(r.verdict == "holds" for r in facts),
            "does_not_reproduce": sum(r.verdict == "does-not-reproduce" for r in facts),
            "inconclusive": sum(r.verdict == "inconclusive" for r in facts),
            "not_tested": sum(r.verdict == "not-tested" for r in facts),
            "missing": sum(r.verdict == "missing" for r in facts),
            "unexpected": len(verdicts.unexpected(recs)),
        }
        total = {k: total[k] + summary[k] for k in keys}
    assert total["claims"] == len(records) == len(load_claims(load_params(PARAMS_FILE)).claims)
    assert total["holds"] >= 1 and total["missing"] >= 1 and total["implied"] >= 1
