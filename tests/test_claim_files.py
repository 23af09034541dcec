"""The claims files (claims/<paper>.yaml, claims/recorded.json) and `python -m replicate expect`.

Loading: the repository's files read in the papers' order and figure by figure; each fault
is named by file and claim id. Recording: `expect` writes what the current outputs measure,
with the verdict, commit and date, only from a clean tree, only for a verdict the claims file
expects, never over a written basis; the report then shows the recording, while the claims
file still expects the verdict it was made for.
"""

from __future__ import annotations

import copy
import datetime
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from replicate import claims, verdicts
from replicate.checkout import RefusedRecording
from replicate.claim_files import NOT_RECORDED, UNBACKED, load_claims
from replicate.cli import main
from replicate.config import load_params
from replicate.expect import expect
from replicate.params import PAPERS, ConfigError

from .conftest import CLAIMS_DIR, PARAMS_FILE, claim_dict, params_with_claims
from .test_claims import CLAIM_ID, _stuck, _write_outputs

PAPER_TITLES = {
    "attn_markov": "Attention with Markov",
    "local_global": "Local to Global",
    "subngrams": "Sub-n-grams Are Near-stationary Points",
    "two_layer": "Two-Layer Transformers Provably Represent Induction Heads",
}


# ----------------------------------------------------------------------------- the repository's
def test_each_paper_has_a_file_that_opens_with_its_title() -> None:
    for paper in PAPERS:
        text = (CLAIMS_DIR / f"{paper}.yaml").read_text()
        assert PAPER_TITLES[paper] in text.splitlines()[0]
        assert yaml.safe_load(text)["paper"] == paper


def test_claims_read_in_the_papers_order_grouped_by_experiment() -> None:
    params = load_params(PARAMS_FILE)
    claimset = load_claims(params)
    papers = [params.experiment(c.experiment).paper for c in claimset.claims]
    assert papers == sorted(papers, key=PAPERS.index)
    experiments = [c.experiment for c in claimset.claims]
    groups = [e for i, e in enumerate(experiments) if i == 0 or experiments[i - 1] != e]
    assert len(groups) == len(set(groups)), "an experiment's claims are not contiguous"


def test_no_hand_edited_claims_file_holds_a_recorded_measurement() -> None:
    """Recorded values live in recorded.json only: the claims files have no such keys."""
    for paper in PAPERS:
        for claim in yaml.safe_load((CLAIMS_DIR / f"{paper}.yaml").read_text())["claims"]:
            for scale, expectation in claim["expected"].items():
                assert set(expectation) <= {"verdict", "reason", "basis"}, (claim["id"], scale)


def test_every_ci_expectation_rests_on_a_recording_or_a_written_basis() -> None:
    """A recording made for another verdict than the one expected now backs nothing."""
    params = load_params(PARAMS_FILE, scale="ci")
    claimset = load_claims(params)
    for claim in claimset.claims:
        backed = claimset.recording(claim, "ci") is not None or claim.expected["ci"].basis
        assert backed, claimset.basis(claim, "ci")


def _full_history() -> bool:
    """Whether this checkout is a git repository with its whole history (not shallow)."""
    shallow = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
        cwd=CLAIMS_DIR.parent,
    )
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


@pytest.mark.skipif(not _full_history(), reason="needs a git checkout with its full history")
def test_every_recording_names_a_commit_of_this_history() -> None:
    """A recording names the commit whose code produced the value; a commit made in some
    other clone and never brought here does not count."""
    recorded = json.loads((CLAIMS_DIR / "recorded.json").read_text())
    commits = {r["commit"] for scales in recorded.values() for r in scales.values() if r["commit"]}
    missing = [
        c
        for c in sorted(commits)
        if subprocess.run(
            ["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=CLAIMS_DIR.parent, capture_output=True
        ).returncode
        != 0
    ]
    assert not missing, f"recorded.json names commits not in this history: {missing}"


# ----------------------------------------------------------------------------- faults, by name
def _without_reason(expectation: dict) -> None:
    expectation["verdict"] = "does-not-reproduce"
    expectation.pop("reason", None)


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (
            lambda c: c["tolerance"].update(ci=0.5, paper=0.1),
            ["tolerance", "looser than paper", "ci_reason"],
        ),
        (lambda c: _without_reason(c["expected"]["ci"]), ["expected.ci", "needs a reason"]),
        (lambda c: c.update(experiment="attn_markov_fig99"), ["attn_markov_fig99", "not defined"]),
        (lambda c: c.update(comparison="about"), ["comparison = 'about'"]),
    ],
)
def test_a_bad_claim_is_named_by_file_and_id(
    tmp_path: Path, params_dict: dict, mutate, needles
) -> None:
    claim = claim_dict(CLAIM_ID)
    mutate(claim)
    folder = tmp_path / "claims"
    folder.mkdir()
    document = {"paper": "attn_markov", "title": "A", "claims": [claim]}
    (folder / "attn_markov.yaml").write_text(yaml.safe_dump(document))
    path = params_with_claims(tmp_path, params_dict, [])
    with pytest.raises(ConfigError) as info:
        load_claims(load_params(path))
    message = str(info.value)
    assert f"claims/attn_markov.yaml: claim {CLAIM_ID}" in message
    for needle in needles:
        assert needle in message


def test_a_claim_in_another_papers_file_and_a_duplicate_id(
    tmp_path: Path, params_dict: dict
) -> None:
    claim = claim_dict(CLAIM_ID)
    folder = tmp_path / "claims"
    folder.mkdir()
    document = {"paper": "local_global", "title": "B", "claims": [claim]}
    (folder / "local_global.yaml").write_text(yaml.safe_dump(document))
    path = params_with_claims(tmp_path, params_dict, [])
    with pytest.raises(ConfigError, match="belongs to paper attn_markov: move the claim"):
        load_claims(load_params(path))
    (folder / "local_global.yaml").unlink()
    params_with_claims(tmp_path, params_dict, [claim, copy.deepcopy(claim)])
    with pytest.raises(ConfigError, match=f"claim {CLAIM_ID}: the id is also used in"):
        load_claims(load_params(path))


def test_implied_by_names_an_unimplied_claim_of_the_same_paper(
    tmp_path: Path, params_dict: dict
) -> None:
    """B5-maxima-repel follows from B5-rate; a wrong or chained implied_by is refused."""
    head, implied = claim_dict("B5-rate"), claim_dict("B5-maxima-repel")
    assert implied["implied_by"] == "B5-rate"
    other = claim_dict(CLAIM_ID)
    cases = [
        ({**implied, "implied_by": "B5-gone"}, "names no other claim"),
        ({**implied, "implied_by": implied["id"]}, "names no other claim"),
        ({**implied, "implied_by": CLAIM_ID}, "is a claim of another paper"),
    ]
    for claim, message in cases:
        path = params_with_claims(tmp_path, params_dict, [head, other, claim])
        with pytest.raises(ConfigError, match=f"claim B5-maxima-repel: implied_by = .*{message}"):
            load_claims(load_params(path))
    chained = {**claim_dict("B5-minima-attract"), "implied_by": "B5-maxima-repel"}
    path = params_with_claims(tmp_path, params_dict, [head, implied, chained])
    with pytest.raises(ConfigError, match="is itself implied by B5-rate: name that one"):
        load_claims(load_params(path))
    path = params_with_claims(tmp_path, params_dict, [head, implied])
    loaded = {c.id: c.implied_by for c in load_claims(load_params(path)).claims}
    assert (loaded["B5-rate"], loaded["B5-maxima-repel"]) == (None, "B5-rate")


def test_a_stray_file_a_missing_folder_and_recordings_that_do_not_fit(
    tmp_path: Path, params_dict: dict
) -> None:
    path = params_with_claims(tmp_path, params_dict, [claim_dict(CLAIM_ID)])
    params = load_params(path)
    (tmp_path / "claims" / "attn-markov.yaml").write_text("claims: []\n")
    with pytest.raises(ConfigError, match=r"attn-markov\.yaml: not a claims file"):
        load_claims(params)
    (tmp_path / "claims" / "attn-markov.yaml").unlink()
    recorded = tmp_path / "claims" / "recorded.json"
    recorded.write_text(json.dumps({"A-gone": {"ci": {"basis": "measured"}}}))
    with pytest.raises(ConfigError, match="A-gone: no claim of that id"):
        load_claims(params)
    assert load_claims(params, prune=True).recorded == {}
    recorded.write_text(json.dumps({CLAIM_ID: {"ci": {"basis": "measured"}}}))
    with pytest.raises(
        ConfigError, match=rf"{CLAIM_ID}\.ci: invalid recording\n  verdict: missing"
    ):
        load_claims(params)  # a recording names the verdict it was made for
    recorded.write_text(json.dumps({CLAIM_ID: {"paper": {"verdict": "holds", "basis": "m"}}}))
    with pytest.raises(ConfigError, match="delete that basis"):  # the paper basis is written
        load_claims(params)
    recorded.write_text(json.dumps({CLAIM_ID: {"ci": {"basis": "m", "measured": "x"}}}))
    with pytest.raises(ConfigError, match=f"{CLAIM_ID}.ci"):
        load_claims(params)
    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump({**params_dict, "claims_dir": "nowhere"}))
    with pytest.raises(ConfigError, match=r"claims_dir = 'nowhere': .*nowhere is not a folder"):
        load_claims(load_params(moved))


# ----------------------------------------------------------------------------- expect
def _git(root: Path, *args: str) -> str:
    env_args = ["-c", "user.name=test", "-c", "user.email=test@example.org"]
    done = subprocess.run(
        ["git", *env_args, *args], cwd=root, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def project(tmp_path: Path, params_dict: dict) -> Path:
    """A git project with CLAIM_ID alone, its ci basis left to a recording, and Fig. 3's
    outputs measuring it (frac_unigram 1: holds)."""
    claim = claim_dict(CLAIM_ID)
    claim["expected"]["ci"] = {"verdict": "holds"}
    path = params_with_claims(tmp_path, params_dict, [claim])
    for output in load_params(path).output_paths("attn_markov_fig3"):
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / output).touch()  # complete outputs: Snakemake would not rerun them
    _write_outputs(tmp_path, _stuck(1.0))
    (tmp_path / ".gitignore").write_text("results/\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "claims")
    return path


def test_expect_records_value_commit_and_date_and_the_report_shows_them(project: Path) -> None:
    root = project.parent
    params = load_params(project, scale="ci")
    (before,) = claims.evaluate(params, root)
    assert before.expected_basis == NOT_RECORDED.format(id=CLAIM_ID)
    done = expect(params, [CLAIM_ID], root)
    head = _git(root, "rev-parse", "--short", "HEAD")
    assert (done.ids, done.commit) == ([CLAIM_ID], head)
    entry = json.loads((root / "claims/recorded.json").read_text())[CLAIM_ID]["ci"]
    assert entry["verdict"] == "holds"  # the verdict expected, and measured
    assert entry["measured"] == 1.0 and entry["commit"] == head
    assert entry["date"] == datetime.datetime.now(datetime.UTC).date().isoformat()
    # 3 seeds: the range, not a bootstrap; as the report's table writes them
    assert (
        entry["basis"] == "measured at ci scale on CPU: 1; per seed: s0✓1 s1✓1 s2✓1; range [1, 1]"
    )
    (after,) = claims.evaluate(params, root)
    assert (after.expected_measured, after.expected_commit) == (1.0, head)
    assert after.expected_basis == entry["basis"]


def _expect_at_ci(project: Path, expectation: dict) -> None:
    """The project's claims file with ``expectation`` as its claim's ci expectation."""
    path = project.parent / "claims/attn_markov.yaml"
    document = yaml.safe_load(path.read_text())
    document["claims"][0]["expected"]["ci"] = expectation
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_a_recording_made_for_another_verdict_backs_nothing(project: Path) -> None:
    """A person who changes an expected verdict leaves the recording made for the old one:
    the record shows no value or commit behind the new expectation, its basis and note say
    what the recording was made for and what to run; the check does not fail on that alone.
    `expect` records again, and the recording backs the expectation."""
    root = project.parent
    params = load_params(project, scale="ci")
    expect(params, [CLAIM_ID], root)
    old = _git(root, "rev-parse", "--short", "HEAD")
    _expect_at_ci(project, {"verdict": "does-not-reproduce", "reason": "all runs escape"})
    _write_outputs(root, _stuck(0.0))  # the runs now measure does-not-reproduce
    (record,) = claims.evaluate(params, root)
    assert record.verdict == record.expected == "does-not-reproduce"
    assert (record.expected_measured, record.expected_commit) == (None, None)
    unbacked = UNBACKED.format(
        file="recorded.json",
        detail=f"measured 1, at `{old}`",
        recorded="holds",
        expected="does-not-reproduce",
        id=CLAIM_ID,
    )
    assert record.expected_basis == unbacked
    assert "made for verdict holds" in unbacked and f"replicate expect {CLAIM_ID}`" in unbacked
    assert record.note.endswith(unbacked)  # shown under the claim's table in REPORT.md
    assert verdicts.unexpected([record]) == []
    _git(root, "commit", "-q", "-am", "expect does-not-reproduce")
    expect(params, [CLAIM_ID], root)
    entry = json.loads((root / "claims/recorded.json").read_text())[CLAIM_ID]["ci"]
    assert (entry["verdict"], entry["measured"]) == ("does-not-reproduce", 0.0)
    (record,) = claims.evaluate(params, root)
    new = _git(root, "rev-parse", "--short", "HEAD")
    assert (record.expected_measured, record.expected_commit) == (0.0, new)
    assert record.expected_basis == entry["basis"] and "made for verdict" not in record.note


def test_expect_refuses_a_dirty_tree_and_an_unexpected_verdict(project: Path) -> None:
    root = project.parent
    params = load_params(project, scale="ci")
    (root / "notes.txt").write_text("uncommitted\n")
    with pytest.raises(RefusedRecording, match=r"uncommitted changes \(notes.txt\)"):
        expect(params, [CLAIM_ID], root)
    (root / "notes.txt").unlink()
    _write_outputs(root, _stuck(0.0))  # the measurement no longer gives the expected verdict
    with pytest.raises(RefusedRecording, match=r"measured does-not-reproduce .* expects holds"):
        expect(params, [CLAIM_ID], root)
    assert not (root / "claims/recorded.json").exists()  # nothing was written


def test_expect_refuses_stale_outputs(project: Path) -> None:
    root = project.parent
    data = yaml.safe_load(project.read_text())
    data["experiments"]["attn_markov_fig3"]["settings"]["ci"]["training"]["steps"] += 1
    project.write_text(yaml.safe_dump(data, sort_keys=False))
    _git(root, "commit", "-q", "-am", "one more step")
    with pytest.raises(RefusedRecording, match="outputs of attn_markov_fig3 are not current"):
        expect(load_params(project, scale="ci"), [CLAIM_ID], root)


def test_expect_will_not_record_over_a_written_basis(project: Path, monkeypatch, capsys) -> None:
    root = project.parent
    monkeypatch.chdir(root)
    args = ["--params", str(project), "--scale", "paper", "expect"]
    with pytest.raises(RefusedRecording, match=r"gives expected\.paper\.basis"):
        expect(load_params(project, scale="paper"), [CLAIM_ID], root)
    assert main([*args, "--all"]) == 0  # the only claim is skipped, and said to be
    assert "skipped 1 claim(s) whose expectation gives a written basis" in capsys.readouterr().out
    assert main(args) == 2  # neither ids nor --all
    assert main(["--params", str(project), "--scale", "ci", "expect", "A-none"]) == 2
