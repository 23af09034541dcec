"""What a claim's verdict record holds, where the records are stored, and their tallies.

`replicate.claims` makes the records (one `ClaimRecord` per claim), `replicate.report`
renders them; both read this module, neither reads the other's internals.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from replicate import io
from replicate.params import PAPERS, results_dir


@dataclass(frozen=True)
class ClaimsOutputs:
    """Where the claims step of one scale writes, in that scale's results tree
    (`replicate.params.results_dir`): claims.json, REPORT.md and ``verdicts/<paper>.json``."""

    scale: str

    @property
    def claims(self) -> Path:
        return results_dir(self.scale) / "claims.json"

    @property
    def report(self) -> Path:
        return results_dir(self.scale) / "REPORT.md"

    @property
    def verdicts_dir(self) -> Path:
        """One small summary per paper, ``<paper>.json`` (`verdict_summary`): `dvc metrics
        show`."""
        return results_dir(self.scale) / "verdicts"

    def summaries(self, root: Path = Path(".")) -> list[Path]:
        """The per-paper verdict summaries `write_claims` writes, one per paper, always all."""
        return [root / self.verdicts_dir / f"{paper}.json" for paper in PAPERS]

    def paths(self, root: Path = Path(".")) -> list[Path]:
        """Every file the claims step writes: claims.json, REPORT.md, the summaries."""
        return [root / self.claims, root / self.report, *self.summaries(root)]


SEED_RANGE = "seed range"
SEED_BOOTSTRAP = "95 % seed-bootstrap"
"""The two kinds of interval over seeds (`replicate.claims.seed_interval`), as claims.json
(``interval_kind``) and recorded.json name them."""
VERDICTS = ("holds", "does-not-reproduce", "inconclusive", "not-tested", "missing")


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
    other_expected_recorded: bool = False
    """Whether the other scale's expectation rests on a run recorded there
    (claims/recorded.json), not on a basis written by hand."""
    other_expected_basis: str = ""
    """What the other scale's expectation rests on: the recording's basis (how it was
    measured, the device and the value), else the hand-written basis."""
    other_expected_measured: float | None = None
    other_expected_commit: str | None = None
    seed_values: dict[str, float] = field(default_factory=dict)
    seed_verdicts: dict[str, str] = field(default_factory=dict)
    interval: list[float] | None = None
    interval_kind: str = ""
    """What ``interval`` is: `SEED_RANGE` (fewer than 4 seeds) or `SEED_BOOTSTRAP`
    (`replicate.claims.seed_interval`); '' for a claim without per-seed values."""
    point_verdict: str = ""
    """The verdict of the measured value alone (before the interval over seeds)."""
    implied_by: str | None = None
    """The claim whose fact implies this one's: not counted in the tallies (`counted`)."""
    own_verdict: str = ""
    """The verdict of this run's own evidence: ``verdict`` itself, except where the claim is
    ``cpu_dependent`` at this scale (``verdict`` is then inconclusive on every machine). The
    stability check compares these."""
    negative_control: str = ""
    """The claim's verdict on models that learned nothing (`replicate.control_record`), or
    why there is none: ``n/a`` (no trained model), ``not run``, ``stale``."""
    negative_measured: float | None = None
    control_problem: str = ""
    """Why the check fails on the claim's control (`replicate.control_record.control_problem`);
    empty when it does not."""
    stability_problem: str = ""
    """Why the check fails on the claim's ``cpu_dependent`` mark (`ClaimSet.stale_marks`);
    empty when it does not."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def unexpected(records: list[ClaimRecord]) -> list[ClaimRecord]:
    """The records the check fails on: a verdict other than the expected one, a control that
    says the claim cannot fail (``control_problem``), or a stale ``cpu_dependent`` mark
    (``stability_problem``)."""
    return [
        r for r in records if not r.matches_expectation or r.control_problem or r.stability_problem
    ]


def counted(records: list[ClaimRecord]) -> list[ClaimRecord]:
    """The records the tallies count: one per fact, leaving out claims implied by another
    (``implied_by``), which are evaluated and shown but would count their fact twice."""
    return [r for r in records if r.implied_by is None]


def tally(records: list[ClaimRecord]) -> dict[str, int]:
    """Per verdict (`VERDICTS`), how many facts (`counted`: implied claims left out) have it."""
    facts = counted(records)
    return {v: sum(r.verdict == v for r in facts) for v in VERDICTS}


def verdict_summary(records: list[ClaimRecord], paper: str) -> dict[str, Any]:
    """Counts of one paper's claims, the same keys for every paper: ``claims`` (all),
    ``implied`` (those implied by another claim), ``facts`` (the rest, one per fact), one
    count per verdict over the facts (``does_not_reproduce`` for does-not-reproduce),
    ``unexpected`` over all claims (an implied claim's verdict is checked too), and
    ``papers_own``: the verdict counts of the paper's own results alone (provenance
    ``paper``, apart from our derivations, proposals and consistency checks)."""
    recs = [r for r in records if r.paper == paper]
    facts = counted(recs)
    own = tally([r for r in recs if r.provenance == "paper"])
    return {
        "claims": len(recs),
        "implied": len(recs) - len(facts),
        "facts": len(facts),
        **{v.replace("-", "_"): n for v, n in tally(recs).items()},
        "unexpected": len(unexpected(recs)),
        "papers_own": {v.replace("-", "_"): n for v, n in own.items()},
    }


def load_records(scale: str, root: Path = Path(".")) -> list[ClaimRecord]:
    """The records stored in ``scale``'s claims.json: FileNotFoundError when it is absent,
    else `io.MalformedFile` when it holds no list of claim records."""
    path = ClaimsOutputs(scale).claims
    try:
        data = json.loads((root / path).read_text())
        return [ClaimRecord(**row) for row in data]
    except FileNotFoundError:
        raise
    except (OSError, ValueError, TypeError) as exc:
        raise io.MalformedFile(f"{path}: not a list of claim records ({exc})") from exc
