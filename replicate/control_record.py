"""The negative controls' record, ``claims/controls.json``, and what it says of each claim.

Written by `python -m replicate controls` (`replicate.controls`), read by the claims step.
Per scale: the commit, date and CPU of the run, and per claim the control's verdict and
measured value, whether the claim reads a trained model (`reads_training`), and the digest
of the claim's definition (`definition_digest`); and per paper the digest of its code
(`replicate.sources.paper_digest`). A claim whose metric, reference, comparison,
tolerance or seed aggregation, or whose paper's code, changed since is *stale* until the
control is run again. A SHA-256 over the rest of each scale's entry (`entry_digest`) is
checked when the file is read, so an edited record is refused.

The check fails for a claim of the paper's own results or our derivations (provenance
``paper`` or ``derived``) that reads a trained model when, at a scale the record covers, its
control holds and the claim does not say why it should (``holds_untrained``: a claim about
the initialisation), or when the record is stale for it (`control_problem`). A scale the
record does not cover is shown as not run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from replicate import io
from replicate.params import ConfigError, Params

CONTROLS_FILE = "controls.json"


class Claim(Protocol):
    """What the record needs of a claim (`replicate.claim_files.Claim`, which imports this
    module to read the record)."""

    id: str
    experiment: str
    provenance: str
    holds_untrained: str | None

    def model_dump(self, *, mode: str, include: frozenset[str]) -> dict[str, Any]: ...


NOT_RUN = "not run"
"""A claim's control status at a scale the record does not cover."""
NOT_TRAINED = "n/a"
"""The status of a claim whose experiment (and its upstream) trains no model."""
STALE = "stale"
"""The claim's definition or its paper's code changed since the control ran (or the claim is
new)."""
CHECKED = ("paper", "derived")
"""The provenances whose claims the check holds to their control (`control_problem`)."""
DEFINITION_FIELDS = frozenset(
    {
        "experiment",
        "metric",
        "comparison",
        "reference",
        "tolerance",
        "per_seed",
        "effect",
        "converged",
    }
)
"""The fields of a claim that decide its verdict on given outputs."""


def definition_digest(claim: Claim) -> str:
    """SHA-256 of the claim's `DEFINITION_FIELDS` (canonical JSON)."""
    fields = claim.model_dump(mode="json", include=DEFINITION_FIELDS)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def entry_digest(entry: dict[str, Any]) -> str:
    """SHA-256 of one scale's entry, its ``digest`` key left out (canonical JSON)."""
    body = {k: v for k, v in entry.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def reads_training(params: Params, experiment: str, scale: str) -> bool:
    """Whether ``experiment`` at ``scale`` trains a model (``training.steps`` in its
    settings) or reads the outputs of an upstream experiment that does."""
    settings = params.experiment(experiment).settings[scale]  # type: ignore[index]
    training = settings.get("training")
    if isinstance(training, dict) and isinstance(training.get("steps"), int):
        return True
    upstream = params.upstream_of(experiment)
    return upstream is not None and reads_training(params, upstream, scale)


def read_controls(path: Path) -> dict[str, dict[str, Any]]:
    """The record at ``path`` per scale (empty when there is none). A scale's entry whose
    digest does not match its content is a ConfigError: the file is written only by
    `python -m replicate controls`."""
    if not path.exists():
        return {}
    try:
        data = io.read_json_object(path)
    except io.MalformedFile as exc:
        raise ConfigError(str(exc)) from exc
    for scale, entry in data.items():
        if not isinstance(entry, dict) or entry.get("digest") != entry_digest(entry):
            raise ConfigError(
                f"{path}: the {scale!r} entry's digest does not match its content: the file "
                "is written by `python -m replicate controls` only; run it again"
            )
    return data


def control_status(
    claim: Claim, record: Mapping[str, dict[str, Any]], params: Params, code: Mapping[str, str]
) -> tuple[str, float | None]:
    """The claim's negative control at the active scale in ``record`` (`read_controls`) and
    the value measured there: the control's verdict, or `NOT_TRAINED`, `NOT_RUN`, `STALE`
    (also where the control ran other code of its paper than ``code``, this checkout's
    `paper_digest` per paper)."""
    if not reads_training(params, claim.experiment, params.scale):
        return NOT_TRAINED, None
    entry = record.get(params.scale)
    if entry is None:
        return NOT_RUN, None
    row = entry["claims"].get(claim.id)
    paper = params.experiment(claim.experiment).paper
    if row is None or row["definition"] != definition_digest(claim):
        return STALE, None
    if entry["code"].get(paper) != code[paper]:
        return STALE, None
    return row["verdict"], row["measured"]


def control_problem(claim: Claim, status: str) -> str:
    """Why the claims check fails for ``claim`` on its control (empty: it does not)."""
    if claim.provenance not in CHECKED:
        return ""
    if status == STALE:
        return (
            "its negative control was run for another definition of the claim or other code of "
            "its paper (or not at all): run `python -m replicate controls`"
        )
    if status == "holds" and not claim.holds_untrained:
        return (
            "it holds for models that learned nothing (the negative control, learning switched "
            "off): it tests nothing about training; make it able to fail, or say in "
            "`holds_untrained` why it should hold at initialisation"
        )
    return ""


def write_controls(path: Path, scale: str, entry: dict[str, Any]) -> None:
    """Replace ``scale``'s entry of the record at ``path`` with ``entry`` and its digest
    (atomically; the other scales' entries are kept)."""
    entry = {**entry, "digest": entry_digest(entry)}
    io.write_json(path, {**read_controls(path), scale: entry})
