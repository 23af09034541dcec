"""A ``cpu_dependent`` mark rests on a stability record `python -m replicate stability` wrote
for the code here (`replicate.claim_files._check_cpu_dependence`).

The probe that passed before: claim C-F1a-stages marked ``cpu_dependent`` and one hand-written
row ``{"id": "C-F1a-stages"}`` added to claims/stability.json. Each test builds a scratch
claims folder holding that claim, marked, and a record written through the command's own
functions (`replicate.stability.paper_check`, `merge`; `write_stability`), then changes one
thing: a hand edit, a bare row, a row copied in, a commit from elsewhere (each refused), other
code or the older format (a stale mark: the claims check fails). `--papers`'s merge keeps
the entries of the papers not rerun.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicate.claim_files import (
    STABILITY_FORMAT,
    load_claims,
    read_stability,
    record_digest,
    stability_file,
    write_stability,
)
from replicate.claims import evaluate
from replicate.config import load_params
from replicate.params import ConfigError, Params
from replicate.sources import paper_digest
from replicate.stability import _drop_cpu_marks, _earlier, merge, paper_check
from replicate.verdicts import unexpected

from .conftest import (
    CLAIMS_DIR,
    PARAMS_FILE,
    claim_dict,
    git,
    head_commit,
    params_with_claims,
    stability_record,
    synthetic_record,
)

CLAIM_ID = "C-F1a-stages"  # paper C (subngrams), marked cpu_dependent by the tests only
PAPER = "subngrams"
MARK = "cpu_dependent.ci"


def _marked_params(root: Path, params_dict: dict) -> Params:
    """``root``/params.yaml with CLAIM_ID alone, marked ``cpu_dependent`` at ci (its
    expected verdict there inconclusive), and a record as the command writes it backing it."""
    claim = claim_dict(CLAIM_ID)
    claim["cpu_dependent"] = {"ci": "seeds 1.0 / 0.0 natively, 0.0 / 0.0 with another CPU"}
    claim["expected"]["ci"] = {"verdict": "inconclusive", "reason": "depends on the CPU"}
    return load_params(params_with_claims(root, params_dict, [claim]), scale="ci")


@pytest.fixture
def project(tmp_path: Path, params_dict: dict) -> Params:
    """A committed git project (`_marked_params`) whose record names its own HEAD."""
    params = _marked_params(tmp_path, params_dict)
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "claims")
    stability_record(params.claims_dir, {PAPER: [CLAIM_ID]}, commit=head_commit(tmp_path))
    return params


def _refused(params: Params, *needles: str) -> str:
    """The loader's refusal, which names the claims file, the claim, the mark, the record
    and each of ``needles``."""
    with pytest.raises(ConfigError) as caught:
        load_claims(params)
    message = str(caught.value)
    for needle in (f"{PAPER}.yaml", f"claim {CLAIM_ID}", MARK, "stability.json", *needles):
        assert needle in message, (needle, message)
    return message


def _edit(params: Params, change: Any) -> None:
    """Apply ``change`` to the record's parsed JSON and write it back, digest untouched."""
    path = stability_file(params.claims_dir)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def test_a_record_as_the_command_writes_it_backs_the_mark(project: Params) -> None:
    claimset = load_claims(project)
    (claim,) = claimset.claims
    assert claim.cpu_dependent and stability_file(project.claims_dir) in claimset.files
    record = read_stability(stability_file(project.claims_dir))
    check = record.perturbations["aten-default"].papers[PAPER]
    assert (check.code_sha256, check.commit) == (
        paper_digest(PAPER),
        head_commit(project.file.parent),
    )
    (row,) = check.verdicts_changed
    assert (row.id, row.verdict, row.perturbed_verdict) == (CLAIM_ID, "holds", "inconclusive")
    assert (row.measured, row.perturbed_measured) == (1.0, 0.5)
    text = stability_file(project.claims_dir).read_text()
    assert json.loads(text)["sha256"] == record_digest(json.loads(text))


def test_a_hand_added_bare_row_is_refused(project: Params) -> None:
    """A bare row added by hand: the claim marked, and ``{"id": ...}`` added to the record
    under another perturbation's entry of its paper."""
    stability_record(project.claims_dir, {"two_layer": ["D-BIT-3-4bit"]}, perturbation="threads-2")

    def forge(data: dict) -> None:
        papers = data["perturbations"]["threads-2"]["papers"]
        papers[PAPER] = {**papers["two_layer"], "verdicts_changed": [{"id": CLAIM_ID}]}

    _edit(project, forge)
    _refused(project, "not written by `python -m replicate stability` or was edited by hand")


def test_a_row_copied_in_without_the_digest_is_refused(project: Params) -> None:
    """A full row, taken from another claim's entry and renamed, in a record whose digest
    was not recomputed."""
    stability_record(project.claims_dir, {"two_layer": ["D-BIT-3-4bit"]})

    def copy_row(data: dict) -> None:
        papers = data["perturbations"]["aten-default"]["papers"]
        papers[PAPER] = json.loads(json.dumps(papers["two_layer"]))
        papers[PAPER]["verdicts_changed"][0] |= {"id": CLAIM_ID, "paper": PAPER}

    _edit(project, copy_row)
    _refused(project, "edited by hand", f"--papers {PAPER}")


def test_a_bare_row_is_refused_even_with_its_digest_recomputed(project: Params) -> None:
    def bare(data: dict) -> None:
        data["perturbations"]["aten-default"]["papers"][PAPER]["verdicts_changed"] = [
            {"id": CLAIM_ID}
        ]
        data["sha256"] = record_digest(data)

    _edit(project, bare)
    _refused(project, "verdicts_changed.0.measured: missing (required)")


def test_the_older_format_makes_every_mark_stale(project: Params) -> None:
    """A record as the command wrote it before the digests (no sha256, no code digests): it
    backs no mark, so the claims check fails naming the command that remakes it, while the
    claims load (the experiments can run)."""
    row = {"id": CLAIM_ID, "paper": PAPER, "verdict": "holds", "perturbed_verdict": "inconclusive"}
    older = {
        "scale": "ci",
        "perturbations": {
            "aten-default": {"commit": head_commit(project.file.parent), "verdicts_changed": [row]}
        },
    }
    stability_file(project.claims_dir).write_text(json.dumps(older))
    message = load_claims(project).stale_marks[CLAIM_ID]
    assert "format written before" in message
    assert f"rerun `python -m replicate stability --papers {PAPER}`" in message


def test_a_record_of_other_code_makes_the_mark_stale(project: Params) -> None:
    """Measured on other code of the paper, the mark still loads (the experiments can run) but
    the claim's record carries why it is stale, which fails the claims check."""
    commit = head_commit(project.file.parent)
    run = {"commit": commit, "date": "2026-11-28", "cpu": "test", "seconds": 1}
    native = [synthetic_record(CLAIM_ID, PAPER, "holds", 1.0)]
    perturbed = [synthetic_record(CLAIM_ID, PAPER, "inconclusive", 0.5)]
    other_code = paper_digest("two_layer")  # any digest but the paper's own
    check = paper_check(PAPER, run, other_code, native, perturbed)
    write_stability(
        stability_file(project.claims_dir), merge(None, "ci", "threads-2", {PAPER: check})
    )
    message = load_claims(project).stale_marks[CLAIM_ID]
    for part in (
        f"perturbations.threads-2.papers.{PAPER}.code_sha256",
        "made for other code of subngrams_fig1",
        f"rerun `python -m replicate stability --papers {PAPER}`",
        commit,
    ):
        assert part in message
    (record,) = [r for r in evaluate(project, project.file.parent) if r.id == CLAIM_ID]
    assert record.stability_problem == message
    assert record in unexpected([record])


def test_a_mark_does_not_rest_on_the_redraw(project: Params) -> None:
    """The redraw lists the claims that turn on the data drawn, not on the CPU: a record whose
    only listing of the marked claim is the redraw's backs no ``cpu_dependent`` mark, and
    the redraw's entry says its seed shift."""
    stability_record(
        project.claims_dir,
        {PAPER: [CLAIM_ID]},
        commit=head_commit(project.file.parent),
        perturbation="redraw",
    )
    entry = read_stability(stability_file(project.claims_dir)).perturbations["redraw"]
    assert entry.seed_offset == 100 and entry.threads is None and entry.env == {}
    _refused(project, "does not list it", "numerically neutral perturbation")


def test_a_record_written_before_the_redraw_still_backs_the_mark(project: Params) -> None:
    """A record whose perturbations carry no ``seed_offset`` (written before the redraw) keeps
    its digest and backs the mark: the key reads as null, numerically neutral."""
    path = stability_file(project.claims_dir)
    data = json.loads(path.read_text())
    for entry in data["perturbations"].values():
        del entry["seed_offset"]
    data["sha256"] = record_digest(data)
    path.write_text(json.dumps(data, indent=2))
    assert load_claims(project).claims[0].cpu_dependent
    assert read_stability(path).perturbations["aten-default"].seed_offset is None


def test_a_commit_not_in_this_history_is_refused(project: Params) -> None:
    stability_record(project.claims_dir, {PAPER: [CLAIM_ID]}, commit="0123abc")
    _refused(
        project,
        f"perturbations.aten-default.papers.{PAPER}.commit = '0123abc'",
        "not a commit of this repository's history",
    )


def test_outside_a_git_checkout_the_commit_cannot_be_checked(
    tmp_path: Path, params_dict: dict
) -> None:
    """An exported copy of the project has no history to look the commit up in: the record
    is accepted on its digests (the code digest still ties it to the code here)."""
    params = _marked_params(tmp_path, params_dict)
    stability_record(params.claims_dir, {PAPER: [CLAIM_ID]}, commit="0123abc")
    assert load_claims(params).claims[0].cpu_dependent


def _check(paper: str, commit: str, verdict: str) -> dict[str, Any]:
    run = {"commit": commit, "date": "2026-11-28", "cpu": "test", "seconds": 7}
    native = [synthetic_record(f"{paper}-claim", paper, "holds", 1.0)]
    perturbed = [synthetic_record(f"{paper}-claim", paper, verdict, 0.5)]
    return paper_check(paper, run, paper_digest(paper), native, perturbed)


def test_papers_rerun_replace_only_their_entries(tmp_path: Path) -> None:
    """`--papers two_layer` under threads-2: the record keeps threads-2's entry of paper C
    and every entry of aten-default, as the earlier check wrote them."""
    path = stability_file(tmp_path)
    content = merge(
        None, "ci", "aten-default", {"two_layer": _check("two_layer", "1111111", "holds")}
    )
    content = merge(
        content,
        "ci",
        "threads-2",
        {p: _check(p, "1111111", "does-not-reproduce") for p in ("subngrams", "two_layer")},
    )
    write_stability(path, content)
    before = json.loads(path.read_text())["perturbations"]
    earlier = _earlier(path, "ci")
    assert earlier is not None
    write_stability(
        path,
        merge(earlier, "ci", "threads-2", {"two_layer": _check("two_layer", "2222222", "holds")}),
    )
    after = json.loads(path.read_text())["perturbations"]
    assert after["aten-default"] == before["aten-default"]
    assert after["threads-2"]["papers"]["subngrams"] == before["threads-2"]["papers"]["subngrams"]
    rerun = after["threads-2"]["papers"]["two_layer"]
    assert rerun["commit"] == "2222222" and rerun["verdicts_changed"] == []
    assert read_stability(path).format == STABILITY_FORMAT


def test_entries_of_an_edited_older_or_other_scale_record_are_not_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command never signs entries it did not measure: a record that does not match its
    digest, or in the older format, is dropped (and said so), as is one of another scale."""
    path = stability_record(tmp_path, {PAPER: [CLAIM_ID]})
    assert _earlier(path, "paper") is None
    assert "holds the check at ci scale" in capsys.readouterr().out
    data = json.loads(path.read_text())
    data["perturbations"]["aten-default"]["papers"][PAPER]["values_moved"] += 1
    path.write_text(json.dumps(data))
    assert _earlier(path, "ci") is None
    assert "are not kept" in capsys.readouterr().out
    path.write_text(json.dumps({"scale": "ci", "perturbations": {}}))
    assert _earlier(path, "ci") is None
    assert "format written before" in capsys.readouterr().out
    assert _earlier(tmp_path / "absent.json", "ci") is None


def test_a_clone_loses_its_marks_and_nothing_else(tmp_path: Path) -> None:
    """In the clones the check runs, the claims files keep every claim and key but
    ``cpu_dependent``."""
    written = yaml.safe_load((CLAIMS_DIR / "two_layer.yaml").read_text())
    written["claims"][0]["cpu_dependent"] = {"ci": "t"}
    (tmp_path / "two_layer.yaml").write_text(yaml.safe_dump(written, sort_keys=False))
    _drop_cpu_marks(tmp_path)
    for claim in written["claims"]:
        claim.pop("cpu_dependent", None)
    assert yaml.safe_load((tmp_path / "two_layer.yaml").read_text()) == written


def test_the_command_line_passes_papers(monkeypatch: pytest.MonkeyPatch) -> None:
    import replicate.stability
    from replicate.cli import main

    seen: dict[str, Any] = {}

    def fake(params: Params, names: list[str], papers: list[str] | None, **kwargs: Any) -> Path:
        seen.update(names=names, papers=papers)
        return Path("claims/stability.json")

    monkeypatch.setattr(replicate.stability, "stability", fake)
    given = ["--params", str(PARAMS_FILE), "stability"]
    assert main([*given, "threads-2", "--papers", "two_layer", "subngrams"]) == 0
    assert seen == {"names": ["threads-2"], "papers": ["two_layer", "subngrams"]}
    assert main(given) == 0
    assert seen["papers"] is None and len(seen["names"]) == 3
