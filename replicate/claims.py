"""Evaluate every claim (`replicate.claim_files`) against the measured metrics; write the
verdicts (claims.json), the report and the per-paper tallies.

A claim's verdict is ``holds`` or ``does-not-reproduce`` from its comparison, or
``missing`` when the metric (or its experiment's output) is absent, is not a finite number
(NaN, ±Infinity, null, a string, a boolean: the note names the file and the key), or was
produced at another scale. A claim measured over several seeds (``per_seed``) also gets
per-seed verdicts and an interval of its measured value over seeds (`seed_interval`): the
seed range below `MIN_BOOTSTRAP_SEEDS` seeds, else a 95 % seed-bootstrap interval; when that
interval straddles the tolerance the verdict is ``inconclusive`` (the seeds disagree),
whatever the point value says; except for a claim about some or every seed of the runs made
(``per_seed.quantifier``), whose verdict is that of its seeds (`quantified_verdict`). A
claim about some of the seeds only (``per_seed.only``, e.g.
the stuck runs) is measured over those; when no seed is one of them it is ``inconclusive``
with a note saying it has no subject (`no_subject`). The check fails when any verdict
differs from the expected one; ``missing`` always fails.

A malformed output file (not valid JSON, not a JSON object, unreadable) is a fault of that
experiment's outputs, not of the claims step: `evaluate_with_errors` returns one
line per such file, naming it and the JSON error, and records that experiment's claims as
``missing`` with the same text in their note. ``python -m replicate claims`` prints those
lines to stderr, still writes claims.json, REPORT.md and the per-paper verdict summaries
(`write_claims`: everything is rendered first, then each file is replaced atomically) and
exits 0. It must not exit non-zero: Snakemake deletes the outputs of a failed job, which
would destroy the previous claims.json and REPORT.md and leave nothing that names the
fault. The failure comes one step later, from ``python -m replicate check`` (the Snakemake
rule ``claims``), which exits 1 naming each missing claim and the file.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replicate import citations, io, report
from replicate.claim_files import (
    UNTESTED,
    Claim,
    ClaimSet,
    MetricRef,
    Recording,
    SeedAggregate,
    load_claims,
    run_steps,
    tested,
)
from replicate.control_record import control_problem, control_status
from replicate.experiments import paper_of
from replicate.params import METRICS_FILE, PAPERS, PROVENANCE_FILE, SCALES, Params
from replicate.provenance import LEARNING, differences, learning_switched_off
from replicate.verdicts import (
    SEED_BOOTSTRAP,
    SEED_RANGE,
    ClaimRecord,
    ClaimsOutputs,
    verdict_summary,
)

MIN_BOOTSTRAP_SEEDS = 4
"""Below this many seeds the interval is the seed range (`seed_range`), not a bootstrap:
with n <= 3 seeds a resample repeating one seed has probability n**-n >= 1/27 > 2.5 %, so
the 95 % percentile interval of a mean, median, max or min over seeds is the range of the
per-seed values anyway (at ci, 95 of the 96 intervals were)."""
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
"""Fixed, so that the interval and hence the verdict are deterministic."""
INTERVAL_PERCENTILES = (2.5, 97.5)
"""A 95 % percentile interval over the seed-bootstrap resamples."""


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


def quantified_verdict(quantifier: str, evidence: SeedEvidence, point: str) -> tuple[str, str]:
    """The verdict of a claim about some (``any``) or every (``all``) seed: the per-seed
    verdicts' disjunction or conjunction; and a note when the claim's metric (``point``, its
    point verdict) gives another verdict, so does not express the quantifier."""
    holding = [v == "holds" for v in evidence.verdicts.values()]
    holds = any(holding) if quantifier == "any" else all(holding)
    verdict = "holds" if holds else "does-not-reproduce"
    if verdict != point:
        return verdict, (
            f"per_seed.quantifier {quantifier!r} gives {verdict} over the seeds' verdicts, but "
            f"the claim's metric gives {point}: the metric does not express the quantifier"
        )
    return verdict, ""


def _describe(value: Any) -> str:
    """What a metric value that is not a finite number is, for a note."""
    if value is None:
        return "null (how NaN and ±Infinity are written)"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, int):
        return "an integer too large for a float"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    return io.JSON_TYPE_NAMES.get(type(value), "an object")


def metric_value(metrics: dict[str, Any], key: str) -> tuple[float | None, str]:
    """``metrics[key]`` as a finite float, or None and why not (absent, or not a finite
    number: NaN, ±Infinity, null, a string, a boolean, a list, an object)."""
    if key not in metrics:
        return None, f"metric {key!r} is absent"
    value = metrics[key]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number, ""
    return None, f"metric {key!r} is {_describe(value)}, not a finite number"


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(\{seed\}|\*)", pattern)
    body = "".join(
        "(?P<seed>[0-9]+)" if p == "{seed}" else "([^/]+)" if p == "*" else re.escape(p)
        for p in parts
    )
    return re.compile(f"^{body}$")


class NoSubject(ValueError):
    """No seed is one the claim is about (`SeedFilter`): there is nothing to measure."""


def kept_seeds(metrics: dict[str, Any], spec: SeedAggregate, seeds: list[int]) -> list[int]:
    """The seeds of ``seeds`` whose ``spec.only`` key equals its value (all without ``only``).

    Raises ValueError when such a key is absent or not a finite number, NoSubject when no
    seed qualifies.
    """
    if spec.only is None:
        return seeds
    kept = []
    for seed in seeds:
        value, problem = metric_value(metrics, spec.only.pattern.replace("{seed}", str(seed)))
        if value is None:
            raise ValueError(f"per_seed.only {problem}")
        if value == spec.only.equals:
            kept.append(seed)
    if not kept:
        raise NoSubject(
            f"no seed has {spec.only.pattern} = {spec.only.equals:g}, the runs this claim is "
            "about: it has no subject at this scale, so it can neither hold nor fail"
        )
    return kept


def seed_matrix(metrics: dict[str, Any], spec: SeedAggregate) -> tuple[np.ndarray, list[int]]:
    """Per-seed values as a (groups, seeds) matrix, seeds ascending; only the seeds
    ``spec.only`` keeps (`kept_seeds`).

    Raises ValueError when no key matches, when a matching key's value is not a finite
    number, or when the groups do not share one seed set; NoSubject when no seed qualifies.
    """
    regex = _pattern_regex(spec.pattern)
    table: dict[tuple[str, ...], dict[int, float]] = {}
    for key in metrics:
        match = regex.match(key)
        if match is None:
            continue
        value, problem = metric_value(metrics, key)
        if value is None:
            raise ValueError(f"per-seed {problem}")
        group = tuple(g for i, g in enumerate(match.groups()) if i != _seed_index(regex))
        table.setdefault(group, {})[int(match["seed"])] = value
    if not table:
        raise ValueError(f"no metric matches per_seed pattern {spec.pattern!r}")
    seeds = sorted(next(iter(table.values())))
    if any(sorted(v) != seeds for v in table.values()):
        raise ValueError(f"groups of {spec.pattern!r} do not share one seed set")
    seeds = kept_seeds(metrics, spec, seeds)
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


def seed_range(values: np.ndarray, spec: SeedAggregate) -> tuple[float, float]:
    """The smallest and largest `aggregate` over the resamples that repeat one seed as many
    times as there are seeds: the per-seed values' range (n times it for a ``sum``)."""
    n_seeds = values.shape[1]
    stats = [float(aggregate(values[:, [j] * n_seeds], spec)) for j in range(n_seeds)]
    return min(stats), max(stats)


def seed_interval(values: np.ndarray, spec: SeedAggregate) -> tuple[tuple[float, float], str]:
    """The interval of the claim's value over seeds and its kind: the seed range below
    `MIN_BOOTSTRAP_SEEDS` seeds, else the 95 % seed-bootstrap interval."""
    if values.shape[1] < MIN_BOOTSTRAP_SEEDS:
        return seed_range(values, spec), SEED_RANGE
    return seed_bootstrap(values, spec), SEED_BOOTSTRAP


Outputs = dict[str, tuple[dict[str, Any] | None, str]]


def _metric_keys(claim: Claim) -> list[str]:
    """The metric keys a claim names outright: its metric and a metric reference."""
    keys = [claim.metric]
    if isinstance(claim.reference, MetricRef):
        keys.append(claim.reference.metric)
    return keys


def absent_metric_note(claim: Claim, key: str, metrics: dict[str, Any], file: Path) -> str:
    """Why a claim naming ``key`` has no value in a valid metrics file that lacks it: the
    claim's error (a mistyped or renamed key), not the outputs', which a rerun would write
    again without it; with the nearest keys the file holds."""
    nearest = difflib.get_close_matches(key, list(metrics), n=3, cutoff=0.6)
    hint = f"; nearest: {', '.join(nearest)}" if nearest else ""
    return (
        f"claim {claim.id} names metric {key!r}, which {file} does not hold{hint}: correct "
        f"the claim in claims/{paper_of(claim.experiment)}.yaml"
    )


def rerun_advice(name: str) -> str:
    """The command that remakes experiment ``name``'s outputs and the claims. Snakemake does
    not rerun a job whose outputs are present and newer than its inputs, however broken
    their content, so a bare `snakemake NAME` would do nothing: ``--forcerun`` makes it."""
    return f"rerun it with `snakemake claims --forcerun {name}`"


def _load_outputs(params: Params, root: Path) -> tuple[Outputs, list[str]]:
    """Per experiment: (metrics or None, note explaining why they are unusable); and one
    line per malformed file (`read_json_object`)."""
    loaded: Outputs = {}
    errors: list[str] = []
    for name in params.experiments:
        directory = params.directory(name)
        metrics_file = directory / METRICS_FILE
        provenance_file = directory / PROVENANCE_FILE
        try:
            metrics = io.read_json_object(root / metrics_file, metrics_file)
            provenance = io.read_json_object(root / provenance_file, provenance_file)
        except FileNotFoundError as exc:
            missing = directory / Path(str(exc.filename)).name
            loaded[name] = (None, f"{missing} not found: run `{name}` first")
            continue
        except io.MalformedFile as exc:
            errors.append(str(exc))
            loaded[name] = (None, f"{exc}; {rerun_advice(name)}")
            continue
        if provenance.get("scale") != params.scale:
            loaded[name] = (
                None,
                f"{name} outputs were produced at scale {provenance.get('scale')!r}, "
                f"the check runs at {params.scale!r}",
            )
            continue
        learning = "off" if learning_switched_off() else "on"
        if provenance.get(LEARNING, "on") != learning:
            loaded[name] = (
                None,
                f"{provenance_file}: produced with learning {provenance.get(LEARNING, 'on')}, "
                f"this evaluation reads runs with learning {learning} (the negative control, "
                f"`python -m replicate controls`, switches it off); {rerun_advice(name)}",
            )
            continue
        differ = differences(name, params, provenance)
        if differ:  # e.g. restored by `dvc checkout` from a commit with other settings
            loaded[name] = (None, "; ".join([*differ, rerun_advice(name)]))
            continue
        loaded[name] = (metrics, "")
    return loaded, errors


@dataclass(frozen=True)
class SeedEvidence:
    """A multi-seed claim's per-seed values and verdicts and its interval (`seed_interval`)."""

    values: dict[str, float] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    interval: tuple[float, float] | None = None
    interval_kind: str = ""


def _seed_evidence(
    claim: Claim, metrics: dict[str, Any], measured: float, reference: float, tolerance: float
) -> tuple[SeedEvidence, str]:
    """Per-seed values and verdicts and the interval, or a note saying why they are unusable."""
    spec = claim.per_seed
    if spec is None:
        return SeedEvidence(), ""
    try:
        values, seeds = seed_matrix(metrics, spec)
    except ValueError as exc:
        return SeedEvidence(), str(exc)
    pooled = float(aggregate(values, spec))
    if not math.isclose(pooled, measured, rel_tol=1e-9, abs_tol=1e-12):
        note = (
            f"per_seed aggregate {pooled:.6g} of {spec.pattern!r} differs from the metric "
            f"{measured:.6g}: the claim's per_seed pattern does not describe its metric"
        )
        return SeedEvidence(), note
    per_seed = {str(s): float(aggregate(values[:, [j]], spec)) for j, s in enumerate(seeds)}
    verdicts = {
        s: "holds" if compare(v, reference, claim.comparison, tolerance) else "does-not-reproduce"
        for s, v in per_seed.items()
    }
    interval, kind = seed_interval(values, spec)
    return SeedEvidence(per_seed, verdicts, interval, kind), ""


def call_bounds(claim: Claim, metrics: dict[str, Any]) -> tuple[float, float, list[int]]:
    """The claim's value with every seed at its ``.lo`` and at its ``.hi`` value
    (``per_seed.call_bounds``), and the seeds whose two differ (their calls are decided by
    noise). Raises ValueError when a bound is absent or not a finite number."""
    assert claim.per_seed is not None
    bounds = []
    for end in ("lo", "hi"):
        spec = claim.per_seed.model_copy(update={"pattern": f"{claim.per_seed.pattern}.{end}"})
        bounds.append(seed_matrix(metrics, spec))
    (low, seeds), (high, _) = bounds
    undecided = [s for j, s in enumerate(seeds) if (low[:, j] != high[:, j]).any()]
    return float(aggregate(low, claim.per_seed)), float(aggregate(high, claim.per_seed)), undecided


def _within_call_noise(
    claim: Claim, metrics: dict[str, Any], reference: float, tolerance: float
) -> tuple[bool, str]:
    """Whether the claim's verdict depends on calls decided by noise (``per_seed.call_bounds``),
    with a note saying why; or a note saying why the bounds are unusable (then False)."""
    if claim.per_seed is None or not claim.per_seed.call_bounds:
        return False, ""
    try:
        low, high, undecided = call_bounds(claim, metrics)
    except ValueError as exc:
        return False, f"call bounds: {exc}"
    if compare(low, reference, claim.comparison, tolerance) == compare(
        high, reference, claim.comparison, tolerance
    ):
        return False, ""
    seeds = ", ".join(map(str, undecided))
    return True, (
        f"inconclusive: the k-gram level calls of seed(s) {seeds} lie within the test loss's "
        f"standard error of a band edge; over the calls that noise allows the value ranges "
        f"over [{low:.4g}, {high:.4g}], where the claim can hold or fail"
    )


def no_subject(claim: Claim, metrics: dict[str, Any]) -> str:
    """Why a claim about some seeds (``per_seed.only``) has none at this scale, else ''.

    Such a claim is ``inconclusive``, not ``missing``: its metric is rightly undefined (the
    experiments write NaN for a maximum over no stuck run), and nothing is absent.
    """
    if claim.per_seed is None or claim.per_seed.only is None:
        return ""
    try:
        seed_matrix(metrics, claim.per_seed)
    except NoSubject as exc:
        return str(exc)
    except ValueError:  # reported by `_seed_evidence`
        return ""
    return ""


def _untested_note(claim: Claim, params: Params, scale: str) -> str:
    """Why a claim is ``not-tested`` at ``scale`` (`replicate.claim_files.tested`)."""
    assert claim.effect is not None
    steps = run_steps(params, claim.experiment, scale)
    return (
        f"not tested at {scale} scale: the run stops at step {steps}, before step "
        f"{claim.effect.step}, where the paper shows the effect ({claim.effect.source}); the "
        "measured value is shown, not judged"
    )


def _still_learning(claim: Claim, metrics: dict[str, Any] | None) -> tuple[list[int], str]:
    """The seeds whose run was still learning when it stopped (`Claim.converged`), and what
    is wrong where the outputs do not say ('' else)."""
    if claim.converged is None or metrics is None:
        return [], ""
    pattern = re.escape(claim.converged.pattern).replace(re.escape("{seed}"), r"(\d+)")
    flags = {
        int(match.group(1)): value
        for key, value in metrics.items()
        if (match := re.fullmatch(pattern, key))
    }
    if not flags:
        return [], f"no key matches converged.pattern {claim.converged.pattern!r}"
    return sorted(seed for seed, value in flags.items() if value != 0), ""


def _learning_note(seeds: list[int], claim: Claim, scale: str) -> str:
    """Why a claim whose run was still learning at its last step is ``not-tested``."""
    assert claim.converged is not None
    plural = "s" if len(seeds) > 1 else ""
    return (
        f"not tested at {scale} scale: seed{plural} {', '.join(map(str, seeds))} still "
        f"learning at the last step, or too few evaluations to tell (the test loss over the "
        f"end of the run: {claim.converged.pattern}); the measured value is shown, not judged"
    )


JUDGED = ("holds", "does-not-reproduce", "inconclusive")
"""The verdicts a run's evidence can give; a ``cpu_dependent`` claim turns them into
inconclusive, while ``not-tested`` and ``missing`` stay what they are."""


def _cpu_note(spread: str, own: str) -> str:
    """Why a ``cpu_dependent`` claim is inconclusive here, and what this run alone gives."""
    return (
        f"inconclusive on every machine: the verdict depends on the CPU ({spread}); this "
        f"machine's runs alone give {own}"
    )


def _cited_text(text: str | None, recording: Recording | None) -> str | None:
    """A claim's prose with the values it cites (`replicate.citations`) as recorded."""
    if text is None:
        return None
    return citations.render(text, None if recording is None else recording.cited)


def _untrained_note(claim: Claim) -> str:
    """Why the claim is meant to hold for models that learned nothing (``holds_untrained``)."""
    if not claim.holds_untrained:
        return ""
    return f"Meant to hold untrained (its negative control may hold): {claim.holds_untrained}."


@dataclass(frozen=True)
class Judgement:
    """A verdict and the note that explains it, as each rule of `evaluate_claim` leaves them."""

    verdict: str
    note: str


@dataclass(frozen=True)
class Measurement:
    """What a claim's metrics give: the measured value and the reference (None: unusable),
    the tolerance at the scale, the seeds' evidence and the verdict of the value alone."""

    measured: float | None
    reference: float | None
    tolerance: float
    evidence: SeedEvidence
    point: str


def _measured_values(
    claim: Claim, metrics: dict[str, Any] | None, file: Path, note: str
) -> tuple[float | None, float | None, str]:
    """Rule 1: the measured value and the reference. A key a valid metrics file lacks while
    holding others is the claim's error (`absent_metric_note`); a value that is no finite
    number, or an empty file, is the outputs' (rerun them); ``note`` says why the metrics
    are unusable, when they are."""
    if metrics is None:
        return None, None, note
    measured, problem = metric_value(metrics, claim.metric)
    reference: float | None
    if isinstance(claim.reference, MetricRef):
        reference, ref_problem = metric_value(metrics, claim.reference.metric)
        if ref_problem and not problem:
            problem = f"reference {ref_problem}"
    else:
        reference = float(claim.reference)
    absent = [k for k in _metric_keys(claim) if k not in metrics]
    if absent and metrics:  # an empty file is the outputs' fault, not a claim's
        note = absent_metric_note(claim, absent[0], metrics, file)
    elif problem:
        note = f"{file}: {problem}; {rerun_advice(claim.experiment)}"
    return measured, reference, note


def _judged(
    claim: Claim,
    metrics: dict[str, Any] | None,
    file: Path,
    values: tuple[float | None, float | None, float],
    note: str,
) -> tuple[Judgement, Measurement, str]:
    """Rule 2: the verdict of the measurement (``values``: measured, reference, tolerance):
    inconclusive without a subject (no seed the claim is about); missing without values;
    else the comparison, then the seeds' evidence (a quantifier over seeds, or an interval
    straddling the tolerance: inconclusive) and the noise of a k-gram level call. Also the
    note on unusable per-seed values (empty when usable)."""
    measured, reference, tolerance = values
    evidence, point, seed_note = SeedEvidence(), "", ""
    subject = "" if metrics is None else no_subject(claim, metrics)
    if subject or measured is None or reference is None:
        judgement = Judgement("inconclusive", f"{file}: {subject}") if subject else None
        measurement = Measurement(measured, reference, tolerance, evidence, point)
        return judgement or Judgement("missing", note), measurement, seed_note
    holds = compare(measured, reference, claim.comparison, tolerance)
    point = verdict = "holds" if holds else "does-not-reproduce"
    evidence, seed_note = _seed_evidence(claim, metrics or {}, measured, reference, tolerance)
    if seed_note:
        verdict, note = "missing", f"{file}: {seed_note}"
    elif claim.per_seed is not None and claim.per_seed.quantifier is not None:
        verdict, quantified_note = quantified_verdict(claim.per_seed.quantifier, evidence, point)
        if quantified_note:
            verdict, note = "missing", f"{file}: {quantified_note}"
    elif evidence.interval is not None:
        verdict = interval_verdict(holds, evidence.interval, reference, claim.comparison, tolerance)
    undecided, call_note = _within_call_noise(claim, metrics or {}, reference, tolerance)
    if call_note and not undecided:
        verdict, note = "missing", f"{file}: {call_note}"
    elif undecided and verdict != "missing":
        verdict, note = "inconclusive", call_note
    measurement = Measurement(measured, reference, tolerance, evidence, point)
    return Judgement(verdict, note), measurement, seed_note


def _unless_not_tested(
    claim: Claim, params: Params, metrics: dict[str, Any] | None, seed_note: str, j: Judgement
) -> Judgement:
    """Rule 3: a run that stops before the paper's effect has not tested the claim, whatever
    its metric says (NaN included); absent outputs or metrics stay `missing`: those are
    faults."""
    untested = not tested(claim, params, params.scale) and claim.metric in (metrics or {})
    if untested and not seed_note:
        return Judgement(UNTESTED, _untested_note(claim, params, params.scale))
    return j


def _unless_still_learning(
    claim: Claim, metrics: dict[str, Any] | None, file: Path, scale: str, j: Judgement
) -> Judgement:
    """Rule 4: a claim about the end of training is not tested by a seed still learning at
    its last step (``converged``); too few evaluations to tell is missing evidence."""
    learning, learning_note = _still_learning(claim, metrics)
    if j.verdict not in JUDGED:
        return j
    if learning_note:
        return Judgement("missing", f"{file}: {learning_note}")
    if learning:
        return Judgement(UNTESTED, _learning_note(learning, claim, scale))
    return j


def _unless_cpu_dependent(claim: Claim, scale: str, j: Judgement) -> Judgement:
    """Rule 5: a verdict the stability check found to depend on the CPU is inconclusive on
    every machine, with this machine's own verdict in the note."""
    cpu_note = (claim.cpu_dependent or {}).get(scale)
    if cpu_note and j.verdict in JUDGED:
        return Judgement(
            "inconclusive", " ".join(n for n in (j.note, _cpu_note(cpu_note, j.verdict)) if n)
        )
    return j


def evaluate_claim(
    claim: Claim, claimset: ClaimSet, params: Params, metrics: dict[str, Any] | None, note: str
) -> ClaimRecord:
    """One claim's record: its rules in order, each of which may overrule the verdict of the
    ones before (`_measured_values`, `_judged`, `_unless_not_tested`,
    `_unless_still_learning`, `_unless_cpu_dependent`); ``note`` says why the experiment's
    outputs are unusable, when they are."""
    scale = params.scale
    file = params.directory(claim.experiment) / METRICS_FILE
    measured, reference, note = _measured_values(claim, metrics, file, note)
    values = (measured, reference, getattr(claim.tolerance, scale))
    judgement, measurement, seed_note = _judged(claim, metrics, file, values, note)
    judgement = _unless_not_tested(claim, params, metrics, seed_note, judgement)
    judgement = _unless_still_learning(claim, metrics, file, scale, judgement)
    own = judgement.verdict
    judgement = _unless_cpu_dependent(claim, scale, judgement)
    return _claim_record(claim, claimset, params, measurement, judgement, own)


def _expectation_fields(claim: Claim, claimset: ClaimSet, scale: str) -> dict[str, Any]:
    """A record's fields on what is expected of the claim at ``scale`` and at the other
    scale: the verdicts, their reasons and bases, and the recordings behind them."""
    recording = claimset.recording(claim, scale)
    other_scale = next(s for s in SCALES if s != scale)
    other_recording = claimset.recording(claim, other_scale)
    expectation = claim.expected[scale]  # type: ignore[index]
    other = claim.expected[other_scale]  # type: ignore[index]
    return {
        "expected": expectation.verdict,
        "expected_reason": _cited_text(expectation.reason, recording),
        "expected_basis": claimset.basis(claim, scale),
        "expected_measured": None if recording is None else recording.measured,
        "expected_commit": None if recording is None else recording.commit,
        "other_scale": other_scale,
        "other_expected": other.verdict,
        "other_expected_reason": _cited_text(other.reason, other_recording),
        "other_expected_recorded": other_recording is not None,
        "other_expected_basis": claimset.basis(claim, other_scale),
        "other_expected_measured": None if other_recording is None else other_recording.measured,
        "other_expected_commit": None if other_recording is None else other_recording.commit,
    }


def _claim_record(
    claim: Claim,
    claimset: ClaimSet,
    params: Params,
    measurement: Measurement,
    judgement: Judgement,
    own: str,
) -> ClaimRecord:
    """The record of a claim judged so, with its expectations at both scales, their
    recordings and its negative control."""
    scale = params.scale
    expected = _expectation_fields(claim, claimset, scale)
    control, control_measured = control_status(claim, claimset.controls, params, claimset.code)
    evidence = measurement.evidence
    note = (
        _cited_text(claim.note, claimset.recording(claim, scale)) or "",
        _untrained_note(claim),
        judgement.note,
        claimset.unbacked(claim, scale),
    )
    return ClaimRecord(
        id=claim.id,
        paper=params.experiment(claim.experiment).paper,
        experiment=claim.experiment,
        figure=claim.figure,
        statement=claim.statement,
        metric=claim.metric,
        comparison=claim.comparison,
        measured=measurement.measured,
        reference=measurement.reference,
        tolerance=measurement.tolerance,
        scale=scale,
        verdict=judgement.verdict,
        matches_expectation=judgement.verdict == expected["expected"],
        provenance=claim.provenance,
        source=claim.source,
        reference_source=claim.reference_source,
        note=" ".join(n for n in note if n),
        seed_values=evidence.values,
        seed_verdicts=evidence.verdicts,
        interval=None if evidence.interval is None else list(evidence.interval),
        interval_kind=evidence.interval_kind,
        point_verdict=measurement.point,
        implied_by=claim.implied_by,
        own_verdict=own,
        negative_control=control,
        negative_measured=control_measured,
        control_problem=control_problem(claim, control),
        stability_problem=claimset.stale_marks.get(claim.id, ""),
        **expected,
    )


def evaluate_with_errors(
    params: Params, root: Path = Path("."), claimset: ClaimSet | None = None
) -> tuple[list[ClaimRecord], list[str]]:
    """Every claim's record (``claimset``, by default the claims files of ``params``), and
    one line per malformed output file (its claims are ``missing``; see the module
    docstring)."""
    claimset = claimset or load_claims(params)
    outputs, errors = _load_outputs(params, root)
    records = [evaluate_claim(c, claimset, params, *outputs[c.experiment]) for c in claimset.claims]
    return records, errors


def evaluate(
    params: Params, root: Path = Path("."), claimset: ClaimSet | None = None
) -> list[ClaimRecord]:
    return evaluate_with_errors(params, root, claimset)[0]


def input_files(params: Params, claimset: ClaimSet) -> list[Path]:
    """The files the claims step reads besides its code and the experiments' outputs:
    params.yaml (it validates every experiment at both scales) and the claims files."""
    return [params.file, *claimset.files]


def write_claims(records: list[ClaimRecord], params: Params, root: Path = Path(".")) -> None:
    """Write claims.json, REPORT.md and the per-paper verdict summaries. All are rendered
    before the first is written, and each is replaced atomically, so a failure leaves the
    previous files as they were; temporary files a killed earlier run left are removed."""
    rows = [r.to_json() for r in records]
    rendered = report.render_report(records, params, root)
    outputs = ClaimsOutputs(params.scale)
    summaries = {
        path: verdict_summary(records, paper)
        for path, paper in zip(outputs.summaries(root), PAPERS, strict=True)
    }
    for directory in {(root / outputs.claims).parent, root / outputs.verdicts_dir}:
        io.remove_stale_temps(directory)
    io.write_json(root / outputs.claims, rows)
    for path, summary in summaries.items():
        io.write_json(path, summary)
    io.write_text(root / outputs.report, rendered)
