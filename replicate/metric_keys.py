"""The metric keys each experiment writes, and the check that a claim names only those.

A claim reads its experiment's metrics.json by key: its ``metric``, a metric ``reference``,
the ``per_seed`` and ``converged`` patterns (``{seed}`` for a seed number, ``*`` for one
varying path segment) and the keys its prose cites as ``[[key]]`` (`replicate.citations`).
A mistyped key used to load fine and surface only after training, as a claim without a
value. Here it is rejected when the claims load (`replicate.claim_files.load_claims`),
naming the file, the claim, the field and the nearest keys the experiment writes.

What an experiment writes is known before any training from ``claims/metric_keys.json``,
which `python -m replicate expect` writes (never a person) from the outputs it records, per
scale and experiment; for an experiment recorded there, the keys of this checkout's metrics
files count too, so a claim on a key that a changed experiment has just begun to write loads
before it is recorded. An experiment not recorded (a new one) is not checked: its claims
are checked at evaluation (`replicate.claims.absent_metric_note`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from replicate import io
from replicate.citations import cited_keys
from replicate.params import METRICS_FILE, SCALES, ConfigError, Params

KEYS_FILE = "metric_keys.json"
FORMAT = 1


class _Pattern(Protocol):
    pattern: str


class Claim(Protocol):
    """What the check reads of a claim (`replicate.claim_files.Claim`)."""

    id: str
    experiment: str
    metric: str
    reference: Any
    per_seed: Any
    converged: _Pattern | None
    note: str | None
    expected: Mapping[str, Any]


def keys_file(folder: Path) -> Path:
    return folder / KEYS_FILE


def read_recorded(path: Path) -> dict[str, dict[str, list[str]]]:
    """Per scale, per experiment, the keys recorded in ``path`` ({} without the file)."""
    if not path.exists():
        return {}
    content = io.read_json_object(path)
    if content.get("format") != FORMAT or not isinstance(content.get("scales"), dict):
        raise ConfigError(
            f"{path}: not a metric-keys record of format {FORMAT} (it is written by "
            "`python -m replicate expect`; restore it with git)"
        )
    return content["scales"]


def write_recorded(path: Path, scales: Mapping[str, Mapping[str, Iterable[str]]]) -> Path:
    """Write the record, keys sorted, scales and experiments in order."""
    content = {
        "format": FORMAT,
        "scales": {
            scale: {name: sorted(keys) for name, keys in sorted(scales[scale].items())}
            for scale in SCALES
            if scale in scales
        },
    }
    io.write_json(path, content)
    return path


def written_keys(params: Params) -> dict[str, set[str]]:
    """Per recorded experiment, the keys it writes at any scale: recorded (`KEYS_FILE` in
    the claims folder) or held by a metrics.json of the results beside params.yaml. An
    experiment the record does not list is left out: its results alone may be a broken
    output's, which the claims step reports as the outputs' fault, not a claim's."""
    root = params.file.parent
    found: dict[str, set[str]] = {}
    for per_experiment in read_recorded(keys_file(params.claims_dir)).values():
        for name, keys in per_experiment.items():
            found.setdefault(name, set()).update(keys)
    for scale in SCALES:
        for name in (n for n in found if n in params.experiments):
            path = root / params.experiments[name].directory(scale) / METRICS_FILE
            try:
                found[name].update(io.read_json_object(path))
            except (OSError, io.MalformedFile):
                continue
    return found


def named_keys(claim: Claim) -> list[tuple[str, str]]:
    """Each (field, key or pattern) a claim reads from its experiment's metrics."""
    named = [("metric", claim.metric)]
    if hasattr(claim.reference, "metric"):
        named.append(("reference.metric", claim.reference.metric))
    if claim.per_seed is not None:
        named.append(("per_seed.pattern", claim.per_seed.pattern))
        if claim.per_seed.only is not None:
            named.append(("per_seed.only.pattern", claim.per_seed.only.pattern))
    if claim.converged is not None:
        named.append(("converged.pattern", claim.converged.pattern))
    reasons = [e.reason for e in claim.expected.values()]
    named += [("a [[key]] of its text", key) for key in cited_keys([claim.note, *reasons])]
    return named


def _regex(pattern: str) -> re.Pattern[str]:
    """A key pattern as a regular expression: ``{seed}`` a seed number, ``*`` a segment."""
    parts = re.split(r"(\{seed\}|\*)", pattern)
    table = {"{seed}": r"\d+", "*": r"[^/]+"}
    return re.compile("".join(table.get(part, re.escape(part)) for part in parts))


def problems(claim: Claim, keys: set[str]) -> list[str]:
    """What ``claim`` names that no key of ``keys`` (its experiment's) matches, each with
    the nearest keys."""
    found = []
    for field, key in named_keys(claim):
        regex = _regex(key)
        if any(regex.fullmatch(k) for k in keys):
            continue
        nearest = difflib.get_close_matches(key, sorted(keys), n=3, cutoff=0.6)
        hint = f"; nearest: {', '.join(nearest)}" if nearest else ""
        found.append(f"{field} = {key!r} is no metric {claim.experiment} writes{hint}")
    return found


def check(claims: Iterable[Claim], where: Mapping[str, Path], keys: Mapping[str, set[str]]) -> None:
    """ConfigError naming the file, the claim and what it names that its experiment does
    not write (`problems`), for the first claim with any; experiments without known keys
    are skipped."""
    for claim in claims:
        if claim.experiment not in keys:
            continue
        found = problems(claim, keys[claim.experiment])
        if found:
            raise ConfigError(
                f"{where[claim.id]}: claim {claim.id}: {found[0]} (keys from "
                f"{keys_file(where[claim.id].parent).name} and the results' metrics files)"
            )
