"""Evaluate every claim of params.yaml against the measured metrics; render the report.

A claim's verdict is ``holds`` or ``does-not-reproduce`` from its comparison, or
``missing`` when the metric (or its experiment's output) is absent, NaN, or was produced at
another scale. A claim measured over several seeds (``per_seed``) also gets per-seed
verdicts and a seed-bootstrap interval of its measured value (`seed_bootstrap`); when that
interval straddles the tolerance the verdict is ``inconclusive``, whatever the point value
says. The check fails when any verdict differs from the expected one; ``missing`` always
fails.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replicate import io
from replicate.config import SCALES, Claim, MetricRef, Params, SeedAggregate

CLAIMS_FILE = Path("results/claims.json")
REPORT_FILE = Path("results/REPORT.md")
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
"""Fixed, so that the interval and hence the verdict are deterministic."""
INTERVAL_PERCENTILES = (2.5, 97.5)
"""A 95 % percentile interval over the seed-bootstrap resamples."""


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
    expected_measured: float | None = None
    expected_commit: str | None = None
    other_scale: str = ""
    other_expected: str = ""
    other_expected_reason: str | None = None
    seed_values: dict[str, float] = field(default_factory=dict)
    seed_verdicts: dict[str, str] = field(default_factory=dict)
    interval: list[float] | None = None
    point_verdict: str = ""
    """The verdict of the measured value alone (before the seed-bootstrap interval)."""

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


def _holds_everywhere(lo: float, hi: float, reference: float, comparison: str, tol: float) -> bool:
    """Every value in [lo, hi] satisfies the claim (the condition's set is an interval)."""
    return compare(lo, reference, comparison, tol) and compare(hi, reference, comparison, tol)


def _fails_everywhere(lo: float, hi: float, reference: float, comparison: str, tol: float) -> bool:
    """No value in [lo, hi] satisfies the claim."""
    if comparison == "le":
        return lo > reference + tol
    if comparison == "ge":
        return hi < reference - tol
    return lo > reference + tol or hi < reference - tol


def interval_verdict(
    point_holds: bool, interval: tuple[float, float], reference: float, comparison: str, tol: float
) -> str:
    """holds / does-not-reproduce when the point and the whole interval agree, else inconclusive."""
    lo, hi = interval
    if point_holds and _holds_everywhere(lo, hi, reference, comparison, tol):
        return "holds"
    if not point_holds and _fails_everywhere(lo, hi, reference, comparison, tol):
        return "does-not-reproduce"
    return "inconclusive"


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(\{seed\}|\*)", pattern)
    body = "".join(
        "(?P<seed>[0-9]+)" if p == "{seed}" else "([^/]+)" if p == "*" else re.escape(p)
        for p in parts
    )
    return re.compile(f"^{body}$")


def seed_matrix(metrics: dict[str, Any], spec: SeedAggregate) -> tuple[np.ndarray, list[int]]:
    """Per-seed values as a (groups, seeds) matrix, seeds ascending.

    Raises ValueError when no key matches, or when the groups do not share one seed set.
    """
    regex = _pattern_regex(spec.pattern)
    table: dict[tuple[str, ...], dict[int, float]] = {}
    for key, value in metrics.items():
        match = regex.match(key)
        if match is None or not isinstance(value, (int, float)):
            continue
        group = tuple(g for i, g in enumerate(match.groups()) if i != _seed_index(regex))
        table.setdefault(group, {})[int(match["seed"])] = float(value)
    if not table:
        raise ValueError(f"no metric matches per_seed pattern {spec.pattern!r}")
    seeds = sorted(next(iter(table.values())))
    if any(sorted(v) != seeds for v in table.values()):
        raise ValueError(f"groups of {spec.pattern!r} do not share one seed set")
    values = np.array([[v[s] for s in seeds] for _, v in sorted(table.items())])
    if spec.indicator is not None:
        values = (values == spec.indicator).astype(float)
    return values, seeds


def _seed_index(regex: re.Pattern[str]) -> int:
    return regex.groupindex["seed"] - 1


def aggregate(values: np.ndarray, spec: SeedAggregate) -> np.ndarray:
    """The claim's value from (..., groups, seeds) per-seed values: over seeds, then groups."""
    reducers = {"mean": np.mean, "median": np.median, "max": np.max, "min": np.min, "sum": np.sum}
    if spec.over_seeds == "abs_mean":
        per_group = np.abs(values.mean(axis=-1))
    else:
        per_group = reducers[spec.over_seeds](values, axis=-1)
    return reducers[spec.over_groups or "max"](per_group, axis=-1)


def seed_bootstrap(values: np.ndarray, spec: SeedAggregate) -> tuple[float, float]:
    """95 % percentile interval of `aggregate` over seed resamples (groups share a resample).

    A resample draws as many seeds as there are, with replacement, from a generator seeded
    with `BOOTSTRAP_SEED`.
    """
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    n_seeds = values.shape[1]
    draws = rng.integers(0, n_seeds, size=(BOOTSTRAP_RESAMPLES, n_seeds))
    resampled = values[:, draws].transpose(1, 0, 2)  # (resamples, groups, seeds)
    stats = aggregate(resampled, spec)
    lo, hi = np.percentile(stats, INTERVAL_PERCENTILES)
    return float(lo), float(hi)


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


def _seed_evidence(
    claim: Claim, metrics: dict[str, Any], measured: float, reference: float, tolerance: float
) -> tuple[dict[str, float], dict[str, str], tuple[float, float] | None, str]:
    """Per-seed values and verdicts, the bootstrap interval, and a note if they are unusable."""
    spec = claim.per_seed
    if spec is None:
        return {}, {}, None, ""
    try:
        values, seeds = seed_matrix(metrics, spec)
    except ValueError as exc:
        return {}, {}, None, str(exc)
    pooled = float(aggregate(values, spec))
    if not math.isclose(pooled, measured, rel_tol=1e-9, abs_tol=1e-12):
        note = (
            f"per_seed aggregate {pooled:.6g} of {spec.pattern!r} differs from the metric "
            f"{measured:.6g}: the claim's per_seed pattern does not describe its metric"
        )
        return {}, {}, None, note
    per_seed = {str(s): float(aggregate(values[:, [j]], spec)) for j, s in enumerate(seeds)}
    verdicts = {
        s: "holds" if compare(v, reference, claim.comparison, tolerance) else "does-not-reproduce"
        for s, v in per_seed.items()
    }
    return per_seed, verdicts, seed_bootstrap(values, spec), ""


def evaluate_claim(
    claim: Claim, params: Params, metrics: dict[str, Any] | None, note: str
) -> ClaimRecord:
    scale = params.scale
    expectation = claim.expected[scale]  # type: ignore[index]
    other_scale = next(s for s in SCALES if s != scale)
    other = claim.expected[other_scale]  # type: ignore[index]
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
    seed_values: dict[str, float] = {}
    seed_verdicts: dict[str, str] = {}
    interval = None
    point = ""
    if measured is None or reference is None:
        verdict = "missing"
    else:
        holds = compare(measured, reference, claim.comparison, tolerance)
        point = verdict = "holds" if holds else "does-not-reproduce"
        seed_values, seed_verdicts, interval, seed_note = _seed_evidence(
            claim, metrics or {}, measured, reference, tolerance
        )
        if seed_note:
            verdict, note = "missing", seed_note
        elif interval is not None:
            verdict = interval_verdict(holds, interval, reference, claim.comparison, tolerance)
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
        note=" ".join(n for n in (claim.note or "", note) if n),
        expected_measured=expectation.measured,
        expected_commit=expectation.commit,
        other_scale=other_scale,
        other_expected=other.verdict,
        other_expected_reason=other.reason,
        seed_values=seed_values,
        seed_verdicts=seed_verdicts,
        interval=None if interval is None else list(interval),
        point_verdict=point,
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
