"""What produced an experiment's outputs, and whether that is what params.yaml says now.

Every experiment writes ``provenance.json`` (a declared output): the params.yaml values that
shape its outputs at the scale it ran (`recorded_inputs`). `mismatches` compares a
recorded file with params.yaml at the active scale, so that outputs restored from elsewhere
(``dvc checkout``, a copy) with other settings are refused by name and key.

The settings are recorded twice: validated (defaults filled in: what the run used) and as
written in params.yaml (`SETTINGS_AS_WRITTEN`). When those written now equal the recorded
ones, the validated settings are equal too and the comparison skips validating them, which
imports the experiment's module (torch, Lightning: seconds, at every check of the record
step). A change of a default in the code is then not seen here, but the outputs are older
than that code, which Snakemake and the record step (`replicate.record`) see by their times.

It also records a digest of the code that produced the outputs (`CODE_DIGEST`,
`replicate.sources.experiment_digest`: the syntax trees of the files the experiment's job
imports): an edit that leaves them as they were (a comment, a reformat, a checkout or a
stash) leaves the outputs current, for the record step as for Snakemake, whose rule has the
same digest among its ``params``.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from replicate import io
from replicate.params import PROVENANCE_FILE, ConfigError, Params
from replicate.sources import CODE_ROOT, experiment_digest

SETTINGS_AS_WRITTEN = "settings_as_written"
"""provenance.json's key for the experiment's settings as params.yaml writes them."""
CODE_DIGEST = "code_sha256"
"""provenance.json's key for the digest of the code that produced the outputs."""
LEARNING = "learning"
"""provenance.json's key, present with the value ``off`` in the outputs of a run with
learning switched off (`LEARNING_ENV`): the claims step never reads such outputs as a
training's, nor a training's as a control's."""

LEARNING_ENV = "MARKOV_REPLICATE_LEARNING"
"""The environment variable that switches learning off for the negative control
(`replicate.controls`): with the value ``off``, every `replicate.training.train_ensemble`
call trains with a learning rate of 0, the same members, seeds, data, schedule and
evaluations, so the model stays at its initialisation (AdamW's and SGD's updates, weight
decay included, are scaled by the learning rate). ``on`` or unset: training as configured."""


def learning_switched_off() -> bool:
    """Whether `LEARNING_ENV` switches learning off in this process (a value other than
    ``on`` or ``off`` is an error naming it)."""
    value = os.environ.get(LEARNING_ENV, "on")
    if value not in ("on", "off"):
        raise ConfigError(f"environment: {LEARNING_ENV} = {value!r}: expected 'on' or 'off'")
    return value == "off"


def same_code(name: str, params: Params, root: Path = Path(".")) -> bool:
    """Whether experiment ``name``'s outputs under ``root`` were produced by the code there
    now (the running code where ``root`` holds none: outputs made beside no checkout), by
    the digest in its provenance.json (False when absent or unreadable)."""
    code = root if (root / "replicate").is_dir() else CODE_ROOT
    try:
        recorded = io.read_json_object(root / params.directory(name) / PROVENANCE_FILE)
        return recorded.get(CODE_DIGEST) == experiment_digest(name, code)
    except (OSError, io.MalformedFile):
        return False


def _shared_inputs(name: str, params: Params) -> dict[str, Any]:
    """Every recorded input but the validated settings."""
    entry = params.experiment(name)
    return {
        "experiment": name,
        "scale": params.scale,
        "runtime": params.raw.runtime.model_dump(mode="json"),
        SETTINGS_AS_WRITTEN: copy.deepcopy(entry.settings[params.scale]),
        **{
            section: getattr(params.raw, section).model_dump(mode="json") for section in entry.reads
        },
    }


def recorded_inputs(name: str, params: Params) -> dict[str, Any]:
    """The values of `Params.input_keys` for experiment ``name``, as provenance.json holds
    them: ``scale``, ``runtime``, ``settings`` (validated, defaults filled in), the settings
    as written (`SETTINGS_AS_WRITTEN`) and one entry per shared section the experiment
    reads."""
    return _shared_inputs(name, params) | {
        "settings": params.settings(name).model_dump(mode="json")
    }


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def mismatches(name: str, params: Params, root: Path = Path(".")) -> list[str]:
    """Why experiment ``name``'s outputs under ``root`` were not produced by params.yaml at the
    active scale: one message per differing key (empty: they were). A missing or unreadable
    provenance.json is one message too."""
    path = root / params.directory(name) / PROVENANCE_FILE
    try:
        recorded = io.read_json_object(path)
    except FileNotFoundError:
        return [f"{name}: {path} cannot be read (it is missing)"]
    except io.MalformedFile as exc:
        return [f"{name}: provenance cannot be read: {exc}"]
    return differences(name, params, recorded)


def differences(name: str, params: Params, recorded: Mapping[str, Any]) -> list[str]:
    """One message per key where a parsed provenance.json differs from params.yaml at the
    active scale (see `mismatches`); the settings as written are compared only to skip
    validating the settings when they are equal (module docstring)."""
    inputs = _shared_inputs(name, params)
    if recorded.get(SETTINGS_AS_WRITTEN) == inputs[SETTINGS_AS_WRITTEN]:
        inputs["settings"] = recorded.get("settings")
    else:
        inputs["settings"] = params.settings(name).model_dump(mode="json")
    del inputs[SETTINGS_AS_WRITTEN]
    want = _flatten(inputs, "")
    have = _flatten({k: recorded.get(k) for k in inputs}, "")
    return [
        f"{name}: outputs were produced with {key} = {json.dumps(have.get(key))}, "
        f"params.yaml ({params.scale} scale) has {json.dumps(want.get(key))}"
        for key in sorted(set(want) | set(have))
        if want.get(key) != have.get(key)
    ]
