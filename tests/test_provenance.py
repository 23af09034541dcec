"""Outputs carry what produced them; the check refuses outputs built with other settings."""

from __future__ import annotations

from pathlib import Path

from replicate import claims, io
from replicate.config import load_params
from replicate.provenance import (
    PROVENANCE_FILE,
    SETTINGS_AS_WRITTEN,
    mismatches,
    recorded_inputs,
)

from .conftest import REPO
from .test_claims import _stuck

NAME = "attn_markov_fig3"


def _outputs(root: Path, provenance: dict) -> None:
    params = load_params(REPO / "params.yaml", only=[NAME])
    directory = root / params.directory(NAME)
    io.write_json(directory / PROVENANCE_FILE, provenance)
    io.write_json(directory / "metrics.json", _stuck(1.0))


def test_recorded_inputs_match_params(tmp_path: Path) -> None:
    params = load_params(REPO / "params.yaml", only=[NAME])
    _outputs(tmp_path, recorded_inputs(NAME, params))
    assert mismatches(NAME, params, tmp_path) == []
    recorded = recorded_inputs(NAME, params)
    assert recorded["classification"] == params.raw.classification.model_dump(mode="json")
    assert recorded["runtime"]["threads"] == params.raw.runtime.threads


def test_other_settings_are_named_and_their_claims_missing(tmp_path: Path) -> None:
    """As after `dvc checkout --force` of outputs built with other settings."""
    params = load_params(REPO / "params.yaml")
    other = recorded_inputs(NAME, params)
    other["settings"]["training"]["steps"] += 1
    other[SETTINGS_AS_WRITTEN]["training"]["steps"] += 1
    other["classification"]["bigram_kappa_min"] = 0.5
    _outputs(tmp_path, other)
    found = mismatches(NAME, params, tmp_path)
    assert len(found) == 2
    assert any("settings.training.steps" in m for m in found)
    assert any("classification.bigram_kappa_min = 0.5" in m for m in found)
    records = [r for r in claims.evaluate(params, tmp_path) if r.experiment == NAME]
    assert records and all(r.verdict == "missing" for r in records)
    assert all("settings.training.steps" in r.note for r in records)


def test_unreadable_provenance_is_a_mismatch(tmp_path: Path) -> None:
    params = load_params(REPO / "params.yaml", only=[NAME])
    directory = tmp_path / params.directory(NAME)
    directory.mkdir(parents=True)
    (directory / PROVENANCE_FILE).write_text("{")
    (message,) = mismatches(NAME, params, tmp_path)
    assert "cannot be read" in message and NAME in message


def test_settings_are_validated_only_when_those_written_changed(tmp_path: Path) -> None:
    """The record step's shortcut: equal settings as written stand for equal validated
    settings, so the recorded ones are taken without importing the experiment's module; when
    what is written differs, or a provenance.json from before it was recorded lacks it, the
    validated settings are compared."""
    params = load_params(REPO / "params.yaml", only=[NAME])
    recorded = recorded_inputs(NAME, params)
    assert recorded[SETTINGS_AS_WRITTEN] == params.experiment(NAME).settings[params.scale]
    recorded[SETTINGS_AS_WRITTEN]["seeds"] = [7]  # a copy, not params' own dict
    assert params.experiment(NAME).settings[params.scale]["seeds"] != [7]
    recorded = recorded_inputs(NAME, params)
    stale = recorded | {"settings": {**recorded["settings"], "seeds": [99]}}
    _outputs(tmp_path, stale)
    assert mismatches(NAME, params, tmp_path) == []  # trusted: written settings are equal
    written = {**recorded[SETTINGS_AS_WRITTEN], "seeds": [99]}
    _outputs(tmp_path, stale | {SETTINGS_AS_WRITTEN: written})
    (message,) = mismatches(NAME, params, tmp_path)
    assert "settings.seeds = [99]" in message
    older = {k: v for k, v in recorded.items() if k != SETTINGS_AS_WRITTEN}
    _outputs(tmp_path, older)
    assert mismatches(NAME, params, tmp_path) == []
    _outputs(tmp_path, {k: v for k, v in stale.items() if k != SETTINGS_AS_WRITTEN})
    (message,) = mismatches(NAME, params, tmp_path)
    assert "settings.seeds = [99]" in message
