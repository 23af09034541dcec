"""REPORT.md: the human view of results/claims.json, one section per paper."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from replicate import io
from replicate.params import METRICS_FILE, PROVENANCE_FILE, Params
from replicate.verdicts import (
    SEED_BOOTSTRAP,
    SEED_RANGE,
    VERDICTS,
    ClaimRecord,
    counted,
    unexpected,
)

PAPER_TITLES = {
    "attn_markov": "Paper A — Attention with Markov",
    "local_global": "Paper B — Local to Global",
    "subngrams": "Paper C — Sub-n-grams are near-stationary points",
    "two_layer": "Paper D — Two-layer transformers represent induction heads",
}
CLASS_NAMES = {-1: "UNIGRAM", 0: "INTERMEDIATE", 1: "BIGRAM"}
SYMBOLS = {"le": "≤", "ge": "≥", "close": "within ±"}
PROVENANCE = {
    "paper": "the papers' results",
    "derived": "our derivations from them",
    "proposal": "our proposed checks",
    "settings": "consistency checks (our settings and code, not results)",
}
SHORT = {
    "holds": "✓",
    "does-not-reproduce": "✗",
    "inconclusive": "?",
    "not-tested": "·",
    "missing": "–",
}


def _fmt(value: object) -> str:
    """A number to 4 significant digits, — for None, any other JSON value as JSON."""
    if value is None:
        return "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.4g}"
    return _cell(json.dumps(value))


def bounds(r: ClaimRecord) -> list[float]:
    """The thresholds of a claim's condition: reference + tolerance (le), reference -
    tolerance (ge), or both (close); none while the reference is missing."""
    if r.reference is None:
        return []
    return {
        "le": [r.reference + r.tolerance],
        "ge": [r.reference - r.tolerance],
        "close": [r.reference - r.tolerance, r.reference + r.tolerance],
    }[r.comparison]


def value_text(value: float | None, r: ClaimRecord) -> str:
    """``value`` to 4 significant digits, or as many more as it takes for the printed
    number to lie on the same side of each of the claim's thresholds as the value itself
    (issue 20: 0.94995 printed as 0.95 looked as if it met ``≥ 0.95``)."""
    if value is None:
        return _fmt(value)

    def side(x: float, bound: float) -> int:
        return (x > bound) - (x < bound)

    for digits in range(4, 18):
        text = f"{value:.{digits}g}"
        if all(side(float(text), b) == side(value, b) for b in bounds(r)):
            return text
    return repr(value)


def _cell(text: str) -> str:
    """Table-safe text: a literal '|' would end the Markdown cell."""
    return text.replace("|", "\\|")


def _condition(r: ClaimRecord) -> str:
    if r.comparison == "close":
        return f"{_fmt(r.reference)} ± {r.tolerance:g}"
    if r.reference is None or not r.tolerance:
        return f"{SYMBOLS[r.comparison]} {_fmt(r.reference)}"
    if r.reference == 0:
        bound = r.tolerance if r.comparison == "le" else -r.tolerance
        return f"{SYMBOLS[r.comparison]} {bound:g}"
    sign = "+" if r.comparison == "le" else "−"
    return f"{SYMBOLS[r.comparison]} {_fmt(r.reference)} {sign} {r.tolerance:g}"


def _status(r: ClaimRecord) -> str:
    if not r.matches_expectation:
        return "❌ UNEXPECTED"
    if r.control_problem:
        return "❌ CANNOT FAIL"
    return "❌ STALE MARK" if r.stability_problem else "✅ as expected"


def _control(r: ClaimRecord) -> str:
    """The claim's negative control (learning switched off): its verdict and value there."""
    if r.negative_measured is None:
        return r.negative_control or "—"
    return f"{r.negative_control} ({value_text(r.negative_measured, r)})"


def _expected(r: ClaimRecord) -> str:
    """The expected verdict and what it was set from (measured value, commit)."""
    detail = ", ".join(
        x
        for x in (
            f"measured {_fmt(r.expected_measured)}" if r.expected_measured is not None else "",
            f"at `{r.expected_commit}`" if r.expected_commit else "",
        )
        if x
    )
    return f"{r.expected} ({detail})" if detail else r.expected


INTERVAL_LABELS = {SEED_RANGE: "range", SEED_BOOTSTRAP: "95% bootstrap"}
"""How a claim's interval is labelled in its table cell, by `ClaimRecord.interval_kind`."""


def _seeds(r: ClaimRecord) -> str:
    """Per-seed verdicts and values, and the seed range or seed-bootstrap interval, or — for
    one-off claims."""
    if r.interval is None:
        return "—"
    per_seed = " ".join(
        f"s{s}{SHORT[r.seed_verdicts[s]]}{value_text(v, r)}" for s, v in r.seed_values.items()
    )
    lo, hi = (value_text(end, r) for end in r.interval)
    return f"{per_seed}; {INTERVAL_LABELS[r.interval_kind]} [{lo}, {hi}]"


def _claims_table(records: list[ClaimRecord]) -> list[str]:
    lines = [
        "| claim | provenance | figure | statement | measured | condition | per seed; "
        "interval over seeds | verdict | untrained (control) | expected | other scale expects "
        "| check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| `{r.id}` | {r.provenance} | {_cell(r.figure)} | {_cell(r.statement)} "
            f"| {value_text(r.measured, r)} | {_condition(r)} | {_seeds(r)} "
            f"| **{r.verdict}** | {_control(r)} | {_cell(_expected(r))} "
            f"| {r.other_scale}: {r.other_expected} "
            f"| {_status(r)} |"
        )
    return lines


def _claim_notes(records: list[ClaimRecord]) -> list[str]:
    """Below a table: notes, and every non-`holds` expectation's reason, at both scales."""
    lines = []
    for r in records:
        if r.implied_by:
            lines.append(f"\n- `{r.id}` follows from `{r.implied_by}`: not counted in the tallies.")
        if r.note:
            lines.append(f"\n- `{r.id}`: {r.note}")
        if r.control_problem:
            lines.append(f"\n- `{r.id}` cannot fail: {r.control_problem}")
        if r.stability_problem:
            lines.append(f"\n- `{r.id}`: {r.stability_problem}")

        if r.expected != "holds" and r.expected_reason:
            lines.append(
                f"\n- `{r.id}` is expected {r.expected} at {r.scale} scale: {r.expected_reason}"
            )
        if r.other_expected != "holds" and r.other_expected_reason:
            lines.append(
                f"\n- `{r.id}` is expected {r.other_expected} at {r.other_scale} scale: "
                f"{r.other_expected_reason}"
            )
        elif r.other_expected != r.expected:
            lines.append(f"\n- `{r.id}` is expected {r.other_expected} at {r.other_scale} scale.")
    return lines


def _run_class(value: object) -> str:
    """A run class's name (-1, 0, 1); a value that is no finite number as `_fmt` shows it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return CLASS_NAMES.get(int(value), str(value))
    return _fmt(value)


def _read(path: Path) -> dict[str, Any] | None:
    """An output file's JSON object, or None when it is absent or malformed (the claims'
    notes name the file and the fault)."""
    try:
        return io.read_json_object(path)
    except (FileNotFoundError, io.MalformedFile):
        return None


def _seed_table(metrics: dict[str, Any]) -> list[str]:
    """Per-seed run classes (keys ``<chain>/<tying>/seed<s>/class`` and ``.../kappa``)."""
    rows = []
    for key, value in metrics.items():
        if key.endswith("/class") and "/seed" in key:
            run = key[: -len("/class")]
            kappa = metrics.get(f"{run}/kappa")
            loss = metrics.get(f"{run}/final_loss")
            rows.append(f"| `{run}` | {_run_class(value)} | {_fmt(kappa)} | {_fmt(loss)} |")
    if not rows:
        return []
    return [
        "",
        "Per-seed outcomes (κ = fraction of the unigram→bigram gap closed):",
        "",
        "| run | class | κ | final test loss |",
        "|---|---|---|---|",
        *rows,
    ]


def _compact(block: dict) -> str:
    """``key=value`` pairs of a flat settings block (nested blocks are left out)."""
    return ", ".join(f"{k}={v}" for k, v in block.items() if not isinstance(v, (dict, list)))


def _settings_line(provenance: dict) -> str:
    """The settings that produced a section's verdicts, for any model family: the model
    block (GPT variant and activation, or a paper's own model options), the training
    length, seeds, initial law and device."""
    settings = provenance.get("settings", {})
    model = settings.get("model") or settings.get("architecture") or {}
    training = settings.get("training", {})
    variants = settings.get("variants") or ([model["variant"]] if "variant" in model else [])
    parts = [
        "model variant " + " and ".join(f"`{v}`" for v in variants) if variants else "",
        f"model `{_compact(model)}`" if model else "",
        f"initial law `{settings.get('initial_law')}`" if "initial_law" in settings else "",
        f"input length {training.get('seq_len')}, {training.get('steps')} iterations"
        if training
        else "",
        f"seeds {settings.get('seeds')}" if "seeds" in settings else "",
        f"device `{provenance.get('device')}`",
    ]
    return "Settings behind these verdicts: " + ", ".join(p for p in parts if p) + "."


def _tally(records: list[ClaimRecord]) -> str:
    """Claims implied by another (not counted), then the facts and their verdicts, then
    the unexpected verdicts among all the claims (`verdicts.counted`)."""
    facts = counted(records)
    counts = [sum(r.verdict == v for r in facts) for v in VERDICTS]
    bad = len(unexpected(records))
    implied = len(records) - len(facts)
    return f"{implied or '—'} | {len(facts)} | " + " | ".join(map(str, counts)) + f" | {bad or '—'}"


def _headline(records: list[ClaimRecord]) -> list[str]:
    """Counts per kind of claim (paper results apart from ours), then per paper and kind."""
    lines = [
        "| claims | implied (not counted) | count | hold | do not reproduce | inconclusive "
        "| not tested | missing | unexpected |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, label in PROVENANCE.items():
        recs = [r for r in records if r.provenance == kind]
        if recs:
            lines.append(f"| {label} (`{kind}`) | {_tally(recs)} |")
    lines += [
        "",
        "| paper | provenance | implied (not counted) | count | hold | do not reproduce "
        "| inconclusive | not tested | missing | unexpected |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for paper, title in PAPER_TITLES.items():
        for kind in PROVENANCE:
            recs = [r for r in records if r.paper == paper and r.provenance == kind]
            if recs:
                lines.append(f"| {title} | {kind} | {_tally(recs)} |")
    return lines


def render_report(records: list[ClaimRecord], params: Params, root: Path = Path(".")) -> str:
    n_bad = len(unexpected(records))
    facts = counted(records)
    paper_recs = [r for r in facts if r.provenance == "paper"]
    counts = {v: sum(r.verdict == v for r in paper_recs) for v in VERDICTS}
    lines = [
        "# Replication report",
        "",
        f"Scale: **{params.scale}**. Of the papers' own results, {len(paper_recs)} claims: "
        f"{counts['holds']} hold, {counts['does-not-reproduce']} do not reproduce, "
        f"{counts['inconclusive']} are inconclusive, {counts['not-tested']} not tested at this "
        f"scale (the run stops before the step where the paper shows the effect), "
        f"{counts['missing']} missing. "
        f"{len(facts) - len(paper_recs)} further claims are our derivations, proposals and "
        "settings checks (counted apart below). "
        f"{len(records) - len(facts)} more claims follow from another claim (`implied_by`): "
        "they are evaluated, shown and checked, but not counted, so that each fact counts "
        "once. "
        + (
            "**All verdicts match their expectations.**"
            if n_bad == 0
            else f"**{n_bad} verdict(s) differ from the expected one.**"
        ),
        "",
        "Each claim compares one measured metric (from `results/<paper>/<item>/metrics.json`) with"
        " a reference and a tolerance from `claims/<paper>.yaml`. *Expected* is the verdict set "
        "there from what was measured, with the value and commit recorded behind it "
        "(`claims/recorded.json`); a mismatch fails the check. A claim measured over several seeds"
        " shows each seed's verdict (✓ holds, ✗ does not) and an interval of the measured value "
        "over seeds: with fewer than 4 seeds the *range* of the seeds (a 95 % bootstrap over so "
        "few seeds is that range anyway), with more a *95% bootstrap* interval. When the interval "
        "straddles the tolerance the seeds disagree and the verdict is *inconclusive*, which is "
        "never counted as holding or failing (the fix is more seeds or longer training, not a "
        "moved tolerance). A claim about some runs only (the stuck ones, say) is measured over "
        "those seeds; where no seed is one of them it has no subject at that scale and is "
        "*inconclusive* too, with a note saying so. So is a claim on paper C's k-gram level calls "
        "that holds under one reading of the calls within the test loss's standard error and fails"
        " under another (the note names the seeds and the range). A claim whose run stops before "
        "the step at which the paper shows its effect is *not-tested* at that scale, with the "
        "measured value shown but not judged: it is no non-reproduction. A claim whose verdict the"
        " stability check found to depend on the CPU (`python -m replicate stability`, "
        "`claims/stability.json`) is *inconclusive* at that scale on every machine, with the "
        "spread measured and this machine's own verdict in its note. Machine-readable: "
        "`results/claims.json` (`interval_kind` says which interval, `own_verdict` what the run's "
        "own evidence gives).",
        "",
        *_headline(records),
    ]
    for paper, title in PAPER_TITLES.items():
        experiments = {n: e for n, e in params.experiments.items() if e.paper == paper}
        if not experiments:
            continue
        lines += ["", f"## {title}"]
        for name, entry in experiments.items():
            recs = [r for r in records if r.experiment == name]
            lines += ["", f"### {entry.title} (`{name}`, {entry.source})", ""]
            directory = root / entry.directory
            figure = entry.directory / "figure.png"
            if (root / figure).exists():
                lines += [f"![{name}]({figure.relative_to('results')})", ""]
            links = [
                f"[{o}]({(entry.directory / o).relative_to('results')})"
                for o in entry.outputs
                if o.endswith((".md", ".csv", ".pdf"))
            ]
            if links:
                lines += ["Outputs: " + ", ".join(links) + ".", ""]
            provenance = _read(directory / PROVENANCE_FILE)
            if provenance is not None:
                lines += [_settings_line(provenance), ""]
            lines += _claims_table(recs)
            lines += _claim_notes(recs)
            metrics = _read(directory / METRICS_FILE)
            if metrics is not None:
                lines += _seed_table(metrics)
    return "\n".join(lines) + "\n"
