"""Measured values cited in claims' prose (`replicate.citations`): parsed, recorded by
`expect` from the outputs the verdict was measured on, refused when the experiment does not
write them, and every citation in the repository's claims files recorded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from replicate.checkout import RefusedRecording
from replicate.citations import cited_keys, cited_value_text, render
from replicate.claim_files import load_claims
from replicate.config import load_params
from replicate.expect import expect
from replicate.params import ConfigError

from .test_claim_files import _git, project  # noqa: F401  (the fixture)
from .test_claims import CLAIM_ID


def test_keys_in_order_once_and_rendered() -> None:
    texts = ["a [[k1/seed0/x]] and [[k2]]", None, "again [[k1/seed0/x]]"]
    assert cited_keys(texts) == ["k1/seed0/x", "k2"]
    assert cited_keys(["[[not a key]] [x] [[]]"]) == []
    assert render("seed 0: [[a]], seed 1: [[b]]", {"a": 0.123456, "b": 3.0}) == (
        "seed 0: 0.1235, seed 1: 3"
    )
    assert render("[[a]] and [[c]]", {"a": None}) == "n/a and `c` (not recorded)"
    assert render("[[a]]", None) == "`a` (not recorded)"
    assert cited_value_text(math.nan) == "n/a" and cited_value_text(2.5e-7) == "2.5e-07"


def _cite(project: Path, reason: str) -> None:  # noqa: F811
    """The project's claim with ``reason`` as its note, committed."""
    path = project.parent / "claims/attn_markov.yaml"
    document = yaml.safe_load(path.read_text())
    document["claims"][0]["expected"]["ci"] = {"verdict": "holds"}
    document["claims"][0]["note"] = reason
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    _git(project.parent, "commit", "-q", "-am", "cite")


def test_expect_records_the_cited_values_and_refuses_an_absent_key(project: Path) -> None:  # noqa: F811
    root = project.parent
    params = load_params(project, scale="ci")
    _cite(project, "seed 0 is in class [[p0.5_q0.8/tied/seed0/class]]")
    expect(params, [CLAIM_ID], root)
    entry = json.loads((root / "claims/recorded.json").read_text())[CLAIM_ID]["ci"]
    assert entry["cited"] == {"p0.5_q0.8/tied/seed0/class": -1.0}
    (claim,) = load_claims(params).claims
    recording = load_claims(params).recorded[CLAIM_ID]["ci"]
    assert render(claim.note or "", recording.cited) == "seed 0 is in class -1"
    keys = json.loads((root / "claims/metric_keys.json").read_text())["scales"]["ci"]
    assert "p0.5_q0.8/tied/seed0/class" in keys["attn_markov_fig3"]
    _cite(project, "seed 7: [[p0.5_q0.8/tied/seed7/class]]")
    # the experiment's keys are recorded now: the claim is refused as soon as it loads
    with pytest.raises(ConfigError, match=r"'p0.5_q0.8/tied/seed7/class' is no metric"):
        expect(params, [CLAIM_ID], root)
    (root / "claims/metric_keys.json").unlink()  # not recorded: `expect` itself refuses it
    with pytest.raises(RefusedRecording, match=r"cites p0.5_q0.8/tied/seed7/class, which"):
        expect(params, [CLAIM_ID], root)


def test_every_citation_in_the_claims_files_is_recorded() -> None:
    """A claim whose reason at a scale cites a metric has the value in its recording at that
    scale, and one whose note cites a metric has it in its ci recording (`expect` writes
    them); a paper-scale recording made before a note cited anything shows the key as not
    recorded until that scale is run again."""
    params = load_params(scale="ci")
    claimset = load_claims(params)
    missing = []
    for claim in claimset.claims:
        for scale, expectation in claim.expected.items():
            texts = [expectation.reason, claim.note if scale == "ci" else None]
            recording = claimset.recorded.get(claim.id, {}).get(scale)
            missing += [
                f"{claim.id}.{scale}: {k}"
                for k in cited_keys(texts)
                if recording is None or k not in recording.cited
            ]
    assert not missing, "record again with `python -m replicate expect`: " + ", ".join(missing)
