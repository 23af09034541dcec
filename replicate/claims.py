"""Evaluate every claim of params.yaml against the measured metrics; render the report.

A claim's verdict is ``holds`` or ``does-not-reproduce`` from its comparison, or
``missing`` when the metric (or its experiment's output) is absent, NaN, or was produced at
another scale. The check fails when any verdict differs from the expected one; ``missing``
always fails.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from replicate import io
from replicate.config import Claim, MetricRef, Params

CLAIMS_FILE = Path("results/claims.json")
REPORT_FILE = Path("results/REPORT.md")


@dataclass
class ClaimRecord:
    id: str
    paper: str
    experiment: str
    figure: str
    statement: str
    metric: str
    comparison: str
    measured: float | None
    reference: float | None
    tolerance: float
    scale: str
    verdict: str
    expected: str
    expected_reason: str | None
    expected_basis: str
    matches_expectation: bool
    provenance: str
    source: str
    reference_source: str
    note: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def compare(measured: float, reference: float, comparison: str, tolerance: float) -> bool:
    """Whether the claim holds: le, ge, or close (|measured - reference| <= tolerance)."""
    if comparison == "le":
        return measured <= reference + tolerance
    if comparison == "ge":
        return measured >= reference - tolerance
    if comparison == "close":
        return abs(measured - reference) <= tolerance
    raise ValueError(f"unknown comparison {comparison!r}")


def _load_outputs(params: Params, root: Path) -> dict[str, tuple[dict[str, Any] | None, str]]:
    """Per experiment: (metrics or None, note explaining why they are unusable)."""
    loaded: dict[str, tuple[dict[str, Any] | None, str]] = {}
    for name, entry in params.experiments.items():
        directory = root / entry.directory
        try:
            metrics = json.loads((directory / "metrics.json").read_text())
            provenance = json.loads((directory / "provenance.json").read_text())
        except FileNotFoundError:
            loaded[name] = (None, f"{entry.directory}/metrics.json not found: run `{name}` first")
            continue
        if provenance.get("scale") != params.scale:
            loaded[name] = (
                None,
                f"{name} outputs were produced at scale {provenance.get('scale')!r}, "
                f"the check runs at {params.scale!r}",
            )
            continue
        loaded[name] = (metrics, "")
    return loaded


def _number(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    if value is None or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def evaluate_claim(
    claim: Claim, params: Params, metrics: dict[str, Any] | None, note: str
) -> ClaimRecord:
    scale = params.scale
    expectation = claim.expected[scale]  # type: ignore[index]
    tolerance = getattr(claim.tolerance, scale)
    measured = reference = None
    if metrics is not None:
        measured = _number(metrics, claim.metric)
        if isinstance(claim.reference, MetricRef):
            reference = _number(metrics, claim.reference.metric)
        else:
            reference = float(claim.reference)
        if measured is None:
            state = "absent" if claim.metric not in metrics else "NaN"
            note = f"metric {claim.metric!r} is {state} in metrics.json"
        elif reference is None:
            note = f"reference metric {claim.reference.metric!r} is absent or NaN"  # type: ignore[union-attr]
    if measured is None or reference is None:
        verdict = "missing"
    else:
        holds = compare(measured, reference, claim.comparison, tolerance)
        verdict = "holds" if holds else "does-not-reproduce"
    return ClaimRecord(
        id=claim.id,
        paper=params.experiment(claim.experiment).paper,
        experiment=claim.experiment,
        figure=claim.figure,
        statement=claim.statement,
        metric=claim.metric,
        comparison=claim.comparison,
        measured=measured,
        reference=reference,
        tolerance=tolerance,
        scale=scale,
        verdict=verdict,
        expected=expectation.verdict,
        expected_reason=expectation.reason,
        expected_basis=expectation.basis,
        matches_expectation=verdict == expectation.verdict,
        provenance=claim.provenance,
        source=claim.source,
        reference_source=claim.reference_source,
        note=note,
    )


def evaluate(params: Params, root: Path = Path(".")) -> list[ClaimRecord]:
    outputs = _load_outputs(params, root)
    return [evaluate_claim(c, params, *outputs[c.experiment]) for c in params.claims]


def unexpected(records: list[ClaimRecord]) -> list[ClaimRecord]:
    return [r for r in records if not r.matches_expectation]


def write_claims(records: list[ClaimRecord], params: Params, root: Path = Path(".")) -> None:
    io.write_json(root / CLAIMS_FILE, [r.to_json() for r in records])
    from replicate.report import render_report

    io.write_text(root / REPORT_FILE, render_report(records, params, root))


def load_records(root: Path = Path(".")) -> list[ClaimRecord]:
    data = json.loads((root / CLAIMS_FILE).read_text())
    return [ClaimRecord(**row) for row in data]
