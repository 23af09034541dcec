"""The claims: one hand-written file per paper, and the measurements recorded behind them.

``claims/<paper>.yaml`` (the folder is params.yaml's ``claims_dir``) holds what a person
writes about each claim of one paper: the statement and where the paper makes it, the metric,
the comparison, the reference and its source, the tolerance per scale, and per scale the
expected verdict with its reason. It opens with the paper's key and title and lists the
claims figure by figure, in the paper's order.

``claims/recorded.json`` is written by ``python -m replicate expect`` (`replicate.expect`),
never by hand: per claim and scale, what the harness measured when the expectation was set
(the verdict it was recorded for, the value, how it was measured, the commit and the date).
An expectation rests on such a recording or, where nothing was measured at that scale (a
paper-scale run not made yet), on a ``basis`` written by hand; never on both. One with
neither says so in the report, and so does one whose recording was made for another verdict
than the one expected now: that recording backs nothing until `expect` records it again.

``claims/stability.json`` is written by ``python -m replicate stability``
(`replicate.stability`, whose docstring gives its format), never by hand: per perturbation
and paper, the claims whose verdict a numerically neutral change flipped. A claim's
``cpu_dependent`` mark rests on it (`_check_cpu_dependence`): the record must carry the
content digest the command wrote, list the claim with both values and verdicts, name a commit
of this history, and give the digest of the code the claim's paper runs now.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from replicate import io, metric_keys
from replicate.config import read_yaml_file
from replicate.control_record import CONTROLS_FILE, read_controls
from replicate.params import PAPERS, SCALES, ConfigError, Params, Scale, format_errors
from replicate.settings import NonNegativeInt, Strict
from replicate.sources import paper_digest

RECORDED_FILE = "recorded.json"
NOT_RECORDED = "not recorded yet: run the claim, then `python -m replicate expect {id}`"
"""The basis shown for an expectation that rests on no recording and no written basis."""
UNBACKED = (
    "the expected {expected} is not backed by its recording in {file} ({detail}), made for "
    "verdict {recorded}: run the claim, then `python -m replicate expect {id}`"
)
"""The basis shown for an expectation whose recording was made for another verdict."""

STABILITY_FILE = "stability.json"
"""The stability check's record (`replicate.stability`), also kept in the claims folder."""
STABILITY_FORMAT = 2
"""The version of the stability record's format that `read_stability` reads."""
RECORD_DIGEST = "sha256"
"""The stability record's key for the digest of the rest of its content (`record_digest`)."""


class ClaimTolerance(Strict):
    paper: Annotated[float, Field(ge=0.0)]
    ci: Annotated[float, Field(ge=0.0)]
    ci_reason: str | None = None

    @model_validator(mode="after")
    def _looser_ci_needs_reason(self) -> ClaimTolerance:
        if self.ci > self.paper and not self.ci_reason:
            raise ValueError(
                f"ci tolerance {self.ci} is looser than paper tolerance {self.paper}: "
                "add ci_reason saying why the reduced scale needs it"
            )
        return self


Verdict = Literal["holds", "does-not-reproduce", "inconclusive", "not-tested"]
"""``inconclusive``: the interval of the measured value over seeds (seed range or
seed-bootstrap) straddles the tolerance, or a claim about some seeds has none at this scale
(`replicate.claims`). ``not-tested``: the run at this scale stops before the step at which
the paper shows the effect the claim reads (`Claim.effect`). Neither is ever counted as
holds or as does-not-reproduce."""

UNTESTED = "not-tested"

Provenance = Literal["paper", "derived", "proposal", "settings"]
"""Whose statement a claim checks: the paper's own result; our derivation from it; our
proposal (a check the paper does not make); or a consistency check (``settings``): our
settings or instantiated model against the paper's tables, or our code against itself (a
count from our own formulas, a structural identity, a fit read back), never a result."""


class Expectation(Strict):
    """The hand-written part of an expectation at one scale."""

    verdict: Verdict
    reason: str | None = None
    """Why a verdict other than ``holds`` is expected (required then)."""
    basis: str | None = None
    """What the expectation rests on where no measurement is recorded for it (the paper's
    statement, a spec calibration); a recording replaces it."""

    @model_validator(mode="after")
    def _failure_needs_reason(self) -> Expectation:
        if self.verdict not in ("holds", UNTESTED) and not self.reason:
            raise ValueError(f"an expected verdict {self.verdict!r} needs a reason")
        return self


class Recording(Strict):
    """What the harness measured when an expectation was set (written by `expect`)."""

    verdict: Verdict
    """The verdict expected, and measured, when it was recorded: the recording backs the
    expectation only while the claims file still expects that verdict."""
    basis: str
    """How it was measured, with the value (and per-seed values and interval)."""
    measured: float | None = None
    commit: str | None = None
    """The commit whose code produced the measurement."""
    date: str | None = None
    """The UTC date it was recorded (None: recorded by hand before `expect` existed)."""
    cited: dict[str, float | None] = Field(default_factory=dict)
    """The values of the metric keys that the claim's note and this scale's reason cite as
    ``[[key]]`` (`replicate.citations`), from the outputs the verdict was measured on."""


class MetricRef(Strict):
    metric: str


class Effect(Strict):
    """Where the paper shows the effect a claim reads: the training step it happens at, and
    where that is read. A run that stops before ``step`` has not tested the claim: its
    verdict is ``not-tested``, not a non-reproduction."""

    step: Annotated[int, Field(gt=0)]
    source: str


class Convergence(Strict):
    """Where a claim about the end of training reads whether each seed's run was still
    learning when it stopped: a metrics.json key with ``{seed}`` where the seed number goes,
    1 for a seed whose test loss was still falling (`replicate.analysis.plateaus.
    still_falling`), NaN where the curve cannot tell, else 0. A run still learning when it
    stops has not tested the claim: its verdict is ``not-tested``, naming the seeds."""

    pattern: str

    @model_validator(mode="after")
    def _one_seed(self) -> Convergence:
        if self.pattern.count("{seed}") != 1 or "*" in self.pattern:
            raise ValueError("converged.pattern needs exactly one '{seed}' and no '*'")
        return self


class SeedFilter(Strict):
    """The seeds a claim is about: those whose value at ``pattern`` (a metrics.json key with
    ``{seed}`` where the seed number goes) equals ``equals``, e.g. a run class of -1 for a
    claim about the runs stuck at the unigram (UNIGRAM)."""

    pattern: str
    equals: float

    @model_validator(mode="after")
    def _one_seed_no_groups(self) -> SeedFilter:
        if self.pattern.count("{seed}") != 1 or "*" in self.pattern:
            raise ValueError("per_seed.only.pattern needs exactly one '{seed}' and no '*'")
        return self


class SeedAggregate(Strict):
    """Where a multi-seed claim's per-seed values are, and how they make the measured value.

    ``pattern`` is a metrics.json key with ``{seed}`` where the seed number goes (keys read
    ``.../seed<s>/...``) and ``*`` for one path segment that varies across groups (cells,
    chains, tyings). Per group, the per-seed values are reduced with ``over_seeds``; the
    group values with ``over_groups``. ``indicator``: a per-seed value counts as 1 when it
    equals this number (e.g. a run class), else 0, so ``mean`` gives a fraction of seeds.
    ``only``: the claim is about the seeds `SeedFilter` keeps (an experiment's metric over
    its stuck runs, say), and the aggregate is over those; otherwise over all seeds. The
    claim's metric must equal this aggregate (checked at evaluation). ``call_bounds``: the
    per-seed values rest on calls decided within noise (paper C's k-gram level calls,
    `replicate.experiments.subngrams.stages.with_call_bounds`); the keys ``<key>.lo`` and
    ``<key>.hi`` hold each seed's least and greatest value over the calls the noise allows,
    and a claim whose verdict differs between the two aggregates is inconclusive.
    """

    pattern: str
    over_seeds: Literal["mean", "abs_mean", "median", "max", "min", "sum"]
    over_groups: Literal["max", "min", "mean", "sum"] | None = None
    indicator: float | None = None
    only: SeedFilter | None = None
    call_bounds: bool = False
    quantifier: Literal["any", "all"] | None = None
    """A claim about some seed (``any``: "in at least one seed") or every seed (``all``) of
    the runs made: its verdict is the per-seed verdicts' disjunction or conjunction, with no
    interval over seed resamples (a statement about the seeds run, not about a mean that
    more seeds would estimate). The claim's metric must give the same verdict."""

    @model_validator(mode="after")
    def _placeholders(self) -> SeedAggregate:
        if self.pattern.count("{seed}") != 1:
            raise ValueError("per_seed.pattern needs exactly one '{seed}'")
        if ("*" in self.pattern) != (self.over_groups is not None):
            raise ValueError("per_seed.over_groups is needed exactly when the pattern has '*'")
        if self.quantifier is not None and self.over_groups is not None:
            raise ValueError("per_seed.quantifier needs a pattern without groups ('*')")
        if self.call_bounds and (self.indicator is not None or self.over_seeds == "abs_mean"):
            raise ValueError(
                "per_seed.call_bounds needs an aggregate that is monotone in each seed's value "
                "(no indicator, no abs_mean): the bounds' aggregates bound the claim's value"
            )
        return self


class Claim(Strict):
    id: str
    experiment: str
    figure: str
    statement: str
    source: str
    provenance: Provenance
    metric: str
    comparison: Literal["le", "ge", "close"]
    reference: float | MetricRef
    reference_source: str
    tolerance: ClaimTolerance
    expected: dict[Scale, Expectation]
    per_seed: SeedAggregate | None = None
    """Per-seed values of a multi-seed claim: per-seed verdicts and an interval over seeds."""
    effect: Effect | None = None
    """The step at which the paper shows the effect (None: the claim reads no such step)."""
    converged: Convergence | None = None
    """Where the run's seeds say whether they were still learning at the last step (None:
    the claim does not read the end of training, or its runs are not checked for it)."""
    note: str | None = None
    """What a reader must know to trust the verdict (a mislabel in the paper, a variant)."""
    implied_by: str | None = None
    """The id of a claim of the same paper whose fact implies this one (B5-maxima-repel
    follows from B5-rate). The claim is evaluated and shown as any other,
    but the tallies count the fact once, with the claim that implies it."""
    holds_untrained: str | None = None
    """Why the claim is meant to hold for a model that learned nothing (a claim about the
    initialisation): its negative control (`replicate.control_record`) may then hold."""
    cpu_dependent: dict[Scale, str] | None = None
    """Per scale, why the verdict there depends on the CPU, with the spread measured: the
    stability check (`replicate.stability`) found that a numerically neutral
    perturbation changes it, and claims/stability.json, as the check wrote it for the code
    here, must list the claim so (`_check_cpu_dependence`). At such a scale the verdict is
    ``inconclusive`` on every machine, whatever the run's own evidence gives (kept as
    ``own_verdict``), and the text joins the claim's note."""

    @model_validator(mode="after")
    def _both_scales(self) -> Claim:
        missing = [s for s in SCALES if s not in self.expected]
        if missing:
            raise ValueError(f"expected verdict missing for scale(s) {missing}")
        for scale in self.cpu_dependent or {}:
            verdict = self.expected[scale].verdict
            if verdict != "inconclusive":
                raise ValueError(
                    f"cpu_dependent.{scale}: the verdict there is inconclusive on every "
                    f"machine, but expected.{scale}.verdict = {verdict!r}"
                )
        return self


class ClaimsFile(Strict):
    """One paper's claims file. Claims are validated one by one, so errors name the id."""

    paper: str
    title: str
    claims: list[dict[str, Any]]


@dataclass(frozen=True)
class ClaimSet:
    """Every claim, papers in order and each paper's in its file's order, with the
    recorded measurements behind their expectations."""

    claims: list[Claim]
    recorded: dict[str, dict[str, Recording]]
    files: list[Path]
    """The files read: each paper's claims file, and the recordings when present."""
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The negative controls' record per scale (`replicate.control_record.read_controls`)."""
    stale_marks: dict[str, str] = field(default_factory=dict)
    """Per ``cpu_dependent`` claim whose stability record was measured on other code, why
    (`_check_cpu_dependence`): the claims check fails on it."""
    code: dict[str, str] = field(default_factory=dict)
    """This checkout's `replicate.sources.paper_digest` of each paper, taken once as the claims
    load: the code a recorded control or stability check must have run to count."""

    def recording(self, claim: Claim, scale: str) -> Recording | None:
        """The recording the expectation at ``scale`` rests on; None where there is none or
        where it was made for another verdict than the one expected now (`unbacked`)."""
        recording = self.recorded.get(claim.id, {}).get(scale)
        return None if recording is None or self.unbacked(claim, scale) else recording

    def unbacked(self, claim: Claim, scale: str) -> str:
        """Where the recording at ``scale`` was made for another verdict than the expected
        one, what says that it does not back the expectation; else ''."""
        recording = self.recorded.get(claim.id, {}).get(scale)
        expected = claim.expected[scale].verdict  # type: ignore[index]
        if recording is None or recording.verdict == expected:
            return ""
        detail = ", ".join(
            part
            for part in (
                "" if recording.measured is None else f"measured {recording.measured:.4g}",
                f"at `{recording.commit}`" if recording.commit else "",
            )
            if part
        )
        return UNBACKED.format(
            file=RECORDED_FILE,
            detail=detail or "no value",
            recorded=recording.verdict,
            expected=expected,
            id=claim.id,
        )

    def basis(self, claim: Claim, scale: str) -> str:
        """What the expectation at ``scale`` rests on: the recording, else the written basis;
        or what says it rests on nothing (no recording, or one made for another verdict)."""
        recording = self.recording(claim, scale)
        if recording is not None:
            return recording.basis
        written = claim.expected[scale].basis  # type: ignore[index]
        return self.unbacked(claim, scale) or written or NOT_RECORDED.format(id=claim.id)


def claims_file(folder: Path, paper: str) -> Path:
    return folder / f"{paper}.yaml"


def recorded_file(folder: Path) -> Path:
    return folder / RECORDED_FILE


def stability_file(folder: Path) -> Path:
    """The stability check's record in the claims folder (`replicate.stability`)."""
    return folder / STABILITY_FILE


def _claim_label(raw: Any, index: int) -> str:
    claim_id = raw.get("id") if isinstance(raw, Mapping) else None
    return f"claim {claim_id}" if isinstance(claim_id, str) else f"claim number {index + 1}"


def _read_paper(path: Path, paper: str, params: Params) -> list[Claim]:
    data = read_yaml_file(path, "claims file")
    try:
        document = ClaimsFile.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_errors(err, "", str(path), "claims file")) from err
    if document.paper != paper:
        raise ConfigError(f"{path}: paper = {document.paper!r}, but the file is {paper}'s")
    claims = []
    for index, raw in enumerate(document.claims):
        label = _claim_label(raw, index)
        try:
            claim = Claim.model_validate(raw)
        except ValidationError as err:
            raise ConfigError(format_errors(err, "", f"{path}: {label}", "claim")) from err
        entry = params.experiments.get(claim.experiment)
        if entry is None:
            raise ConfigError(
                f"{path}: {label}: experiment = {claim.experiment!r} is not defined in "
                "params.yaml (experiments or derived_experiments)"
            )
        if entry.paper != paper:
            raise ConfigError(
                f"{path}: {label}: experiment = {claim.experiment!r} belongs to paper "
                f"{entry.paper}: move the claim to {claims_file(path.parent, entry.paper)}"
            )
        if claim.effect is not None:
            _check_effect(claim, params, f"{path}: {label}")
        untested = [s for s in SCALES if claim.expected[s].verdict == UNTESTED]  # type: ignore[index]
        if untested and claim.effect is None and claim.converged is None:
            raise ConfigError(
                f"{path}: {label}: expected.{untested[0]}.verdict = {UNTESTED!r}, but nothing "
                "can make the claim untested: give the paper's step (effect) or where the run "
                "says it was still learning (converged)"
            )
        claims.append(claim)
    return claims


def run_steps(params: Params, experiment: str, scale: str) -> int | None:
    """The training steps of ``experiment``'s run at ``scale`` (``training.steps`` of its
    settings; None for an experiment that trains nothing)."""
    training = params.experiment(experiment).settings[scale].get("training")  # type: ignore[index]
    steps = training.get("steps") if isinstance(training, dict) else None
    return steps if isinstance(steps, int) else None


def tested(claim: Claim, params: Params, scale: str) -> bool:
    """Whether the run at ``scale`` reaches the step of the claim's effect (or it has none)."""
    if claim.effect is None:
        return True
    steps = run_steps(params, claim.experiment, scale)
    return steps is not None and steps >= claim.effect.step


def _check_effect(claim: Claim, params: Params, label: str) -> None:
    """An ``effect`` needs a training run, and an expected ``not-tested`` needs a run that
    stops before the effect's step: one that reaches it tests the claim, and the expectation
    would hide that. The converse, a tested expectation on a run shortened below the effect
    (a trial run, the tests' tiny settings), is no error here: the claim's verdict is then
    ``not-tested``, which the claims check reports as unexpected, naming the step."""
    assert claim.effect is not None
    for scale in SCALES:
        steps = run_steps(params, claim.experiment, scale)
        if steps is None:
            raise ConfigError(
                f"{label}: effect: {claim.experiment} trains nothing (no training.steps at "
                f"{scale} scale), so no run can stop before the effect"
            )
        expected = claim.expected[scale].verdict  # type: ignore[index]
        if expected == UNTESTED and steps >= claim.effect.step:
            raise ConfigError(
                f"{label}: expected.{scale}.verdict = {expected!r}, but the {scale} run has "
                f"{steps} steps and the effect is at step {claim.effect.step}: expect a "
                "tested verdict"
            )


def _read_recorded(
    path: Path, claims: Mapping[str, Claim], prune: bool
) -> dict[str, dict[str, Recording]]:
    try:
        data = io.read_json_object(path)
    except io.MalformedFile as exc:
        raise ConfigError(str(exc)) from exc
    recorded: dict[str, dict[str, Recording]] = {}
    for claim_id, per_scale in data.items():
        if claim_id not in claims and prune:
            continue
        if claim_id not in claims:
            raise ConfigError(
                f"{path}: {claim_id}: no claim of that id in any claims file (renamed or "
                "removed?): `python -m replicate expect --prune` drops such recordings"
            )
        if not isinstance(per_scale, dict) or not set(per_scale) <= set(SCALES):
            raise ConfigError(f"{path}: {claim_id}: must map scales {SCALES} to recordings")
        recorded[claim_id] = {}
        for scale, value in per_scale.items():
            try:
                recorded[claim_id][scale] = Recording.model_validate(value)
            except ValidationError as err:
                label = f"{path}: {claim_id}.{scale}"
                raise ConfigError(format_errors(err, "", label, "recording")) from err
            if claims[claim_id].expected[scale].basis:  # type: ignore[index]
                raise ConfigError(
                    f"{path}: {claim_id}.{scale}: a measurement is recorded, and the claims "
                    f"file also gives expected.{scale}.basis: delete that basis (the recording "
                    "replaces it)"
                )
    return recorded


def _check_implications(claims: list[Claim], where: Mapping[str, Path]) -> None:
    """Each ``implied_by`` names another claim of the same paper that is implied by none."""
    by_id = {c.id: c for c in claims}
    for claim in (c for c in claims if c.implied_by is not None):
        head = by_id.get(claim.implied_by or "")
        label = f"{where[claim.id]}: claim {claim.id}: implied_by = {claim.implied_by!r}"
        if head is None or head.id == claim.id:
            raise ConfigError(f"{label} names no other claim")
        if where[head.id] != where[claim.id]:
            raise ConfigError(f"{label} is a claim of another paper ({where[head.id]})")
        if head.implied_by is not None:
            raise ConfigError(f"{label} is itself implied by {head.implied_by}: name that one")


def load_claims(params: Params, prune: bool = False) -> ClaimSet:
    """Every paper's claims file in ``params.claims_dir`` and the recordings beside them.

    A paper without a file has no claims. A file that is no paper's, a claim naming an
    experiment of another paper or none, a metric key its experiment does not write
    (`replicate.metric_keys`), a duplicate id, an ``implied_by`` naming no claim of
    the same paper (or one implied itself), a recording of no claim and a ``cpu_dependent``
    the stability record does not back are ConfigErrors naming the file and the claim's id
    (``prune``: such a recording is left out instead, for `expect --prune` to write the rest
    back).
    """
    folder = params.claims_dir
    if not folder.is_dir():
        raise ConfigError(
            f"params.yaml: claims_dir = {params.raw.claims_dir!r}: {folder} is not a folder"
        )
    known = {claims_file(folder, p).name for p in PAPERS}
    known |= {RECORDED_FILE, STABILITY_FILE, CONTROLS_FILE, metric_keys.KEYS_FILE}
    strays = sorted(p.name for p in folder.iterdir() if p.suffix in {".yaml", ".yml", ".json"})
    strays = [name for name in strays if name not in known]
    if strays:
        raise ConfigError(
            f"{folder / strays[0]}: not a claims file (expected {', '.join(sorted(known))})"
        )
    claims: list[Claim] = []
    files: list[Path] = []
    where: dict[str, Path] = {}
    for paper in PAPERS:
        path = claims_file(folder, paper)
        if not path.exists():
            continue
        files.append(path)
        for claim in _read_paper(path, paper, params):
            if claim.id in where:
                other = where[claim.id]
                raise ConfigError(f"{path}: claim {claim.id}: the id is also used in {other}")
            where[claim.id] = path
            claims.append(claim)
    _check_implications(claims, where)
    metric_keys.check(claims, where, metric_keys.written_keys(params))
    recorded: dict[str, dict[str, Recording]] = {}
    path = recorded_file(folder)
    if path.exists():
        files.append(path)
        recorded = _read_recorded(path, {c.id: c for c in claims}, prune)
    path = stability_file(folder)
    if path.exists():
        files.append(path)
    code = {paper: paper_digest(paper) for paper in PAPERS}
    stale_marks = _check_cpu_dependence(claims, where, path, params, code)
    path = folder / CONTROLS_FILE
    if path.exists():
        files.append(path)
    return ClaimSet(claims, recorded, files, read_controls(path), stale_marks, code)


class ChangedVerdict(Strict):
    """A claim whose own verdict a perturbation changed, with both verdicts and values (the
    native run's and the perturbed one's; None where the claim is absent from that side)."""

    id: str
    paper: str
    verdict: str | None
    perturbed_verdict: str | None
    measured: float | None
    perturbed_measured: float | None
    seed_values: dict[str, float | None]
    perturbed_seed_values: dict[str, float | None]


class PaperCheck(Strict):
    """One paper's part of a perturbation's check: the run that measured it and what moved."""

    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")]
    date: str
    cpu: str
    code_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """`replicate.sources.paper_digest` of the paper at ``commit``: the code that ran."""
    seconds: NonNegativeInt
    """The wall time of the perturbed run (with every paper run alongside)."""
    claims: NonNegativeInt
    values_moved: NonNegativeInt
    verdicts_changed: list[ChangedVerdict]


class PerturbationCheck(Strict):
    """One perturbation (`replicate.stability.PERTURBATIONS`) and its check per paper."""

    what: str
    env: dict[str, str]
    threads: int | None
    seed_offset: int | None = None
    """The shift of every seed (`replicate.stability.REDRAWS`): the perturbation redraws the
    data rather than imitating another CPU, and no ``cpu_dependent`` mark rests on it. Null
    (and absent in a record written before the redraw existed): numerically neutral."""
    papers: dict[str, PaperCheck]


class StabilityRecord(Strict):
    """claims/stability.json's content but its digest (`replicate.stability` documents it)."""

    format: Literal[2]
    scale: Scale
    perturbations: dict[str, PerturbationCheck]


def record_digest(content: Mapping[str, Any]) -> str:
    """SHA-256 of a stability record's canonical JSON, every key but `RECORD_DIGEST`: keys
    sorted, no whitespace between tokens, UTF-8, no NaN (ValueError where there is one)."""
    text = json.dumps(
        {key: value for key, value in content.items() if key != RECORD_DIGEST},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def render_stability(content: Mapping[str, Any]) -> str:
    """The text of a stability record of ``content`` (validated as `StabilityRecord`), its
    digest last."""
    try:
        document = StabilityRecord.model_validate(content).model_dump(mode="json")
    except ValidationError as err:
        raise ConfigError(format_errors(err, "", STABILITY_FILE, "stability record")) from err
    document[RECORD_DIGEST] = record_digest(document)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_stability(path: Path, content: Mapping[str, Any]) -> Path:
    """Replace the stability record at ``path`` atomically (`render_stability`)."""
    io.write_text(path, render_stability(content))
    return path


class OlderStabilityFormat(ConfigError):
    """The stability record predates the digests a ``cpu_dependent`` mark rests on: nothing in
    it can be checked, so every mark is stale (the claims check fails), but nothing is forged."""


def read_stability(path: Path) -> StabilityRecord:
    """The stability record at ``path``, as `write_stability` wrote it. ConfigError naming the
    file when it cannot be read, is in the format from before the record carried digests,
    does not match its digest (not written by the command, or edited since) or does not hold
    full rows; FileNotFoundError when it is absent."""
    try:
        data = io.read_json_object(path)
    except io.MalformedFile as exc:
        raise ConfigError(f"{exc}: not a stability record") from exc
    if RECORD_DIGEST not in data:
        raise OlderStabilityFormat(
            f"{path} is in the format written before the record carried the code digests and "
            f"the content digest ({RECORD_DIGEST}) that a cpu_dependent mark rests on"
        )
    try:
        matches = data[RECORD_DIGEST] == record_digest(data)
    except ValueError:  # NaN or infinity: nothing the command writes
        matches = False
    if not matches:
        raise ConfigError(
            f"{path} was not written by `python -m replicate stability` or was edited by hand "
            f"(its {RECORD_DIGEST} does not match its content)"
        )
    del data[RECORD_DIGEST]
    try:
        return StabilityRecord.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_errors(err, "", str(path), "stability record")) from err


def _not_in_history(commit: str, folder: Path) -> bool:
    """Whether git shows that ``commit`` is no commit of the history of the repository that
    holds ``folder``. False where that cannot be told: git is not installed, ``folder`` is in
    no git checkout (an exported copy of the project), or the clone is shallow and may lack
    the commit; the code digest still ties the record to the code here."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True)

    try:
        if git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
            return False
        shallow = git("rev-parse", "--is-shallow-repository")
    except FileNotFoundError:
        return False
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def _check_cpu_dependence(
    claims: list[Claim],
    where: Mapping[str, Path],
    path: Path,
    params: Params,
    code: Mapping[str, str],
) -> dict[str, str]:
    """A claim is ``cpu_dependent`` at a scale only where the stability record at ``path``
    backs it: the record reads as `python -m replicate stability` wrote it
    (`read_stability`), and at that scale lists the claim under its paper among the verdicts
    a perturbation changed, each such entry naming a commit of this history (else a
    ConfigError). The declaration rests on a measurement, and goes when a rerun of the check
    no longer lists the claim. Returns, per claim whose entries were measured on other code of
    its paper than this checkout's (``code``, `ClaimSet.code`), why: the mark is then stale,
    which fails the claims check (`ClaimSet.stale_marks`) but lets the experiments run."""
    declared = [c for c in claims if c.cpu_dependent]
    if not declared:
        return {}
    paper_of = {c.id: params.experiment(c.experiment).paper for c in declared}
    try:
        record = read_stability(path)
    except OlderStabilityFormat as exc:
        return {
            c.id: f"its cpu_dependent mark rests on {exc}; rerun `{_rerun(paper_of[c.id])}`"
            for c in declared
        }
    except (FileNotFoundError, ConfigError) as exc:
        problem = (
            f"there is no stability record ({path}); run"
            if isinstance(exc, FileNotFoundError)
            else f"{exc}; rerun"
        )
        claim = declared[0]
        scale = next(iter(claim.cpu_dependent or {}))
        raise ConfigError(
            f"{where[claim.id]}: claim {claim.id}: cpu_dependent.{scale}: {problem} "
            f"`{_rerun(paper_of[claim.id])}`"
        ) from None
    stale: dict[str, str] = {}
    for claim in declared:
        for scale in claim.cpu_dependent or {}:
            label = f"{where[claim.id]}: claim {claim.id}: cpu_dependent.{scale}"
            for key, check in _listing(record, claim, paper_of[claim.id], scale, label, path):
                if check.code_sha256 != code[paper_of[claim.id]]:
                    stale[claim.id] = (
                        f"its cpu_dependent mark rests on {path}: {key}.code_sha256, a stability "
                        f"record made for other code of {claim.experiment} (paper "
                        f"{paper_of[claim.id]}, commit {check.commit}) than this checkout's; "
                        f"rerun `{_rerun(paper_of[claim.id])}`"
                    )
    return stale


def _rerun(paper: str) -> str:
    return f"python -m replicate stability --papers {paper}"


def _listing(
    record: StabilityRecord, claim: Claim, paper: str, scale: str, label: str, path: Path
) -> list[tuple[str, PaperCheck]]:
    """The (key, check) of every numerically neutral perturbation of ``record`` (the redraw
    measures the data's noise, not the CPU's) whose check of ``paper`` at ``scale`` lists
    ``claim`` among the verdicts it changed; a ConfigError (starting with ``label``) where
    there is none, or where one names a commit outside this history."""
    listing = [
        (f"perturbations.{name}.papers.{paper}", entry.papers[paper])
        for name, entry in record.perturbations.items()
        if record.scale == scale
        and entry.seed_offset is None
        and paper in entry.papers
        and any(row.id == claim.id for row in entry.papers[paper].verdicts_changed)
    ]
    if not listing:
        other = f" (it holds the check at {record.scale} scale)"
        raise ConfigError(
            f"{label}: {path} does not list it among the verdicts a numerically neutral "
            f"perturbation changed at {scale} scale{other if record.scale != scale else ''}; run "
            f"`{_rerun(paper)}`, and where it no longer changes, remove cpu_dependent"
        )
    for key, check in listing:
        if _not_in_history(check.commit, path.parent):
            raise ConfigError(
                f"{label}: {path}: {key}.commit = {check.commit!r} is not a commit of "
                f"this repository's history; run `{_rerun(paper)}` here"
            )
    return listing


def render_recorded(recorded: Mapping[str, Mapping[str, Recording]]) -> str:
    """recorded.json's text: claims by id, scales by name, one key per line."""
    document = {
        claim_id: {s: recorded[claim_id][s].model_dump() for s in sorted(recorded[claim_id])}
        for claim_id in sorted(recorded)
        if recorded[claim_id]
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write_recorded(folder: Path, recorded: Mapping[str, Mapping[str, Recording]]) -> Path:
    """Replace recorded.json atomically (`replicate.io`)."""
    path = recorded_file(folder)
    io.write_text(path, render_recorded(recorded))
    return path
