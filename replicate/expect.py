"""Record the measurement behind each expectation: `python -m replicate expect`.

A person sets a claim's expected verdict and its reason in ``claims/<paper>.yaml``; this
records what the harness measured for it at the active scale, in ``claims/recorded.json``
(`replicate.claim_files`): the verdict (the expected one, which the measurement gives), the
measured value, how it was measured (per-seed values and the interval where the claim has
them, and the device), the commit and the UTC date; and the metric keys each current
experiment writes, in ``claims/metric_keys.json`` (`replicate.metric_keys`). Nothing else
writes these files, and no person should. When the person later expects another verdict,
the recording no longer backs the expectation (the report says so) until this records it
again.

It records only what the commit it names produced. It refuses, naming each claim or file:
- a working tree with changes to tracked files or untracked files (`git status`), other than
  dvc.lock and recorded.json themselves: the commit would not be the code that ran;
- outputs that Snakemake would rerun (older than their code, or produced with other
  settings: `replicate.checkout.current_experiments`);
- a verdict that is ``missing``, or that differs from the claims file's expected verdict:
  the person changes the expectation (and its reason) first;
- an expectation whose claims file gives a written ``basis`` at this scale, when the claim
  is named: a recording replaces it, so the person deletes the basis first (``--all`` skips
  such claims and says how many).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from replicate import claims, io, metric_keys
from replicate.checkout import RefusedRecording, clean_commit, current_experiments
from replicate.citations import cited_keys
from replicate.claim_files import Claim, Recording, load_claims, recorded_file, write_recorded
from replicate.params import METRICS_FILE, PROVENANCE_FILE, ConfigError, Params
from replicate.report import seeds_text, value_text
from replicate.verdicts import ClaimRecord


@dataclass(frozen=True)
class Recorded:
    """What one call recorded: the claims, the commit, and the claims skipped (written basis)."""

    ids: list[str]
    commit: str
    skipped: list[str]
    path: Path


def _device(params: Params, experiment: str, root: Path) -> str:
    """The device the experiment's outputs were made on (provenance.json), e.g. CPU."""
    path = root / params.directory(experiment) / PROVENANCE_FILE
    provenance = io.read_json_object(path)
    return str(provenance.get("device", "cpu")).upper()


def describe(record: ClaimRecord, device: str) -> str:
    """The recorded basis: value, and per-seed verdicts and values with the interval (seed
    range or 95 % seed-bootstrap, `replicate.claims.seed_interval`) where the claim has
    them, as the report writes them (`replicate.report.seeds_text`)."""
    text = f"measured at {record.scale} scale on {device}: {value_text(record.measured, record)}"
    if record.interval is not None:
        text += f"; per seed: {seeds_text(record)}"
    return text


def _cited(params: Params, claim: Claim, root: Path) -> tuple[dict[str, float | None], str]:
    """The values of the metric keys the claim's note and this scale's reason cite
    (`replicate.citations`), from its experiment's metrics.json, and what is wrong ('')."""
    keys = cited_keys([claim.note, claim.expected[params.scale].reason])  # type: ignore[index]
    if not keys:
        return {}, ""
    path = root / params.directory(claim.experiment) / METRICS_FILE
    metrics = io.read_json_object(path)
    absent = [k for k in keys if k not in metrics]
    if absent:
        return {}, f"{claim.id}: its text cites {', '.join(absent)}, which {path} does not hold"
    return {k: metrics[k] for k in keys}, ""


def _problems(record: ClaimRecord) -> str:
    if record.verdict == "missing":
        return f"{record.id}: the verdict is missing ({record.note})"
    if record.verdict != record.expected:
        return (
            f"{record.id}: measured {record.verdict} ({record.measured}), but the claims file "
            f"expects {record.expected} at {record.scale} scale: set the expected verdict and "
            "its reason first"
        )
    return ""


def expect(
    params: Params, ids: list[str] | None, root: Path = Path("."), prune: bool = False
) -> Recorded:
    """Record the measurements behind the expectations of ``ids`` (None: every claim) at
    the active scale, all or none; see the module for what is refused."""
    claimset = load_claims(params, prune=prune)
    by_id = {c.id: c for c in claimset.claims}
    unknown = [i for i in ids or [] if i not in by_id]
    if unknown:
        raise ConfigError(f"no claim with id {', '.join(unknown)} in {params.claims_dir}")
    scale = params.scale
    chosen = [c for c in claimset.claims if ids is None or c.id in ids]
    written = [c.id for c in chosen if c.expected[scale].basis]  # type: ignore[index]
    if ids is not None and written:
        raise RefusedRecording(
            f"{', '.join(written)}: the claims file gives expected.{scale}.basis; a recording "
            "replaces it: delete that basis first"
        )
    chosen = [c for c in chosen if c.id not in written]
    keys_path = metric_keys.keys_file(params.claims_dir)
    commit = clean_commit(root, recorded_file(params.claims_dir), keys_path)
    stale = sorted({c.experiment for c in chosen} - set(current_experiments(params, root)))
    if stale:
        raise RefusedRecording(
            f"the outputs of {', '.join(stale)} are not current (older than their code, "
            f"missing, or made with other settings): run `snakemake {' '.join(stale)}` first"
        )
    records = {r.id: r for r in claims.evaluate(params, root, claimset)}
    cited = {c.id: _cited(params, c, root) for c in chosen}
    problems = [p for p in (_problems(records[c.id]) for c in chosen) if p]
    problems += [problem for _, problem in cited.values() if problem]
    if problems:
        raise RefusedRecording("nothing recorded:\n  " + "\n  ".join(problems))
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    recorded = {claim_id: dict(per_scale) for claim_id, per_scale in claimset.recorded.items()}
    for claim in chosen:
        record = records[claim.id]
        recorded.setdefault(claim.id, {})[scale] = Recording(
            verdict=record.verdict,
            basis=describe(record, _device(params, claim.experiment, root)),
            measured=record.measured,
            commit=commit,
            date=today,
            cited=cited[claim.id][0],
        )
    path = write_recorded(params.claims_dir, recorded)
    _record_keys(params, root, keys_path)
    return Recorded([c.id for c in chosen], commit, written, path)


def _record_keys(params: Params, root: Path, path: Path) -> None:
    """Record the metric keys of every experiment whose outputs are current at this scale
    in ``path`` (`replicate.metric_keys`), keeping the other scales' and experiments'."""
    scales = metric_keys.read_recorded(path)
    at_scale = scales.setdefault(params.scale, {})
    for name in current_experiments(params, root):
        at_scale[name] = list(io.read_json_object(root / params.directory(name) / METRICS_FILE))
    metric_keys.write_recorded(path, scales)
