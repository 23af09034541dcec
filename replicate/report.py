"""REPORT.md: the human view of results/claims.json, one section per paper."""

from __future__ import annotations

import json
from pathlib import Path

from replicate.claims import ClaimRecord
from replicate.config import Params

PAPER_TITLES = {
    "attn_markov": "Paper A — Attention with Markov",
    "local_global": "Paper B — Local to Global",
    "subngrams": "Paper C — Sub-n-grams are near-stationary points",
    "two_layer": "Paper D — Two-layer transformers represent induction heads",
}
CLASS_NAMES = {-1: "UNIGRAM", 0: "INTERMEDIATE", 1: "BIGRAM"}
SYMBOLS = {"le": "≤", "ge": "≥", "close": "within ±"}


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


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
    return "✅ as expected" if r.matches_expectation else "❌ UNEXPECTED"


def _claims_table(records: list[ClaimRecord]) -> list[str]:
    lines = [
        "| claim | figure | statement | measured | condition | verdict | expected | check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| `{r.id}` | {_cell(r.figure)} | {_cell(r.statement)} | {_fmt(r.measured)} "
            f"| {_condition(r)} "
            f"| **{r.verdict}** | {r.expected} | {_status(r)} |"
        )
    return lines


def _seed_table(metrics: dict) -> list[str]:
    """Per-seed run classes (keys ``<chain>/<tying>/seed<s>/class`` and ``.../kappa``)."""
    rows = []
    for key, value in metrics.items():
        if key.endswith("/class") and "/seed" in key:
            run = key[: -len("/class")]
            kappa = metrics.get(f"{run}/kappa")
            loss = metrics.get(f"{run}/final_loss")
            rows.append(
                f"| `{run}` | {CLASS_NAMES.get(int(value), value)} | {_fmt(kappa)} | {_fmt(loss)} |"
            )
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


def _settings_line(provenance: dict) -> str:
    settings = provenance.get("settings", {})
    model = settings.get("model", {})
    training = settings.get("training", {})
    architecture = model or settings.get("architecture", {})
    variants = settings.get("variants") or ([model["variant"]] if model else [])
    parts = [
        "model variant " + " and ".join(f"`{v}`" for v in variants) if variants else "",
        f"activation `{architecture['activation']}`" if "activation" in architecture else "",
        f"initial law `{settings.get('initial_law')}`" if "initial_law" in settings else "",
        f"N={training.get('seq_len')}, {training.get('steps')} iterations" if training else "",
        f"seeds {settings.get('seeds')}" if "seeds" in settings else "",
        f"device `{provenance.get('device')}`",
    ]
    return "Settings behind these verdicts: " + ", ".join(p for p in parts if p) + "."


def render_report(records: list[ClaimRecord], params: Params, root: Path = Path(".")) -> str:
    n_bad = sum(not r.matches_expectation for r in records)
    counts = {
        v: sum(r.verdict == v for r in records) for v in ("holds", "does-not-reproduce", "missing")
    }
    lines = [
        "# Replication report",
        "",
        f"Scale: **{params.scale}**. {len(records)} claims: {counts['holds']} hold, "
        f"{counts['does-not-reproduce']} do not reproduce, {counts['missing']} missing. "
        + (
            "**All verdicts match their expectations.**"
            if n_bad == 0
            else f"**{n_bad} verdict(s) differ from the expected one.**"
        ),
        "",
        "Each claim compares one measured metric (from `results/<paper>/<item>/metrics.json`) "
        "with a reference and a tolerance from `params.yaml`. *Expected* is the verdict we "
        "measured when the claim was recorded; a mismatch fails the check. Machine-readable: "
        "`results/claims.json`.",
        "",
        "| paper | claims | hold | do not reproduce | missing | unexpected |",
        "|---|---|---|---|---|---|",
    ]
    for paper, title in PAPER_TITLES.items():
        recs = [r for r in records if r.paper == paper]
        if recs:
            tally = [
                sum(r.verdict == v for r in recs)
                for v in ("holds", "does-not-reproduce", "missing")
            ]
            bad = sum(not r.matches_expectation for r in recs)
            lines.append(
                f"| {title} | {len(recs)} | {tally[0]} | {tally[1]} | {tally[2]} | {bad or '—'} |"
            )
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
            prov_file = directory / "provenance.json"
            if prov_file.exists():
                lines += [_settings_line(json.loads(prov_file.read_text())), ""]
            lines += _claims_table(recs)
            for r in recs:
                if r.note:
                    lines.append(f"\n- `{r.id}`: {r.note}")
                if r.expected == "does-not-reproduce" and r.expected_reason:
                    lines.append(f"\n- `{r.id}` is expected not to reproduce: {r.expected_reason}")
            metrics_file = directory / "metrics.json"
            if metrics_file.exists():
                lines += _seed_table(json.loads(metrics_file.read_text()))
    return "\n".join(lines) + "\n"
