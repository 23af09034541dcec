"""REPORT.md, the human view of one scale's claims.json (both in ``results/<scale>/``); and
the two shorter views Snakemake gives of the same verdicts: the captions of `snakemake
--report` (`caption_claims`) and the lines a `snakemake` run ends with (`console_summary`).

REPORT.md opens with a summary (per paper and per figure or table, the verdicts of the
papers' own results, the other claims counted apart), the list of the claims that do not
reproduce or are inconclusive, and a contents list; then one section per experiment, in
each paper's own order of its figures, tables, theorems and appendices (`figure_key`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicate import io
from replicate.params import (
    METRICS_FILE,
    PROVENANCE_FILE,
    ConfigError,
    ExperimentEntry,
    Params,
)
from replicate.verdicts import (
    SEED_BOOTSTRAP,
    SEED_RANGE,
    ClaimRecord,
    ClaimsOutputs,
    counted,
    load_records,
    tally,
    unexpected,
)

if TYPE_CHECKING:
    from replicate.claim_files import Claim, PerturbationCheck

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
COUNTED_AS = {
    "holds": "hold",
    "does-not-reproduce": "do not reproduce",
    "inconclusive": "inconclusive",
    "not-tested": "not tested",
    "missing": "missing",
}
"""How a count of each verdict is worded ("3 hold", "1 do not reproduce")."""
LISTED = ("does-not-reproduce", "inconclusive")
"""The verdicts the list after the summary gives one line each (besides unexpected ones)."""
REASON_CHARS = 200
"""The longest reason that list shows whole; a longer one is cut at a word (its section's
notes give it all)."""
SHOWN_FAILURES = 10
"""The most unexpected verdicts `console_summary` names; REPORT.md lists them all."""

# ----------------------------------------------------------------------------- paper order
FIGURE_KINDS = (
    r"Figs?\.?|Figures?",
    r"Tables?",
    r"Sec\.|Sections?|§|Thms?\.?|Theorems?|Lemmas?|Props?\.?|Propositions?|Cor\.|"
    r"Corollary|Defs?\.|Definitions?|Remarks?|Eqs?\.|Equations?",
    r"App\.|Appendix",
)
"""What a claim's ``figure`` field can start with, in the order the report takes them: the
figures, the tables, the main text's sections, theorems, lemmas, definitions, remarks and
equations (by their number), and the appendices."""
_FIGURE = re.compile(
    r"\s*(?P<word>"
    + "|".join(f"(?P<k{i}>{kind})" for i, kind in enumerate(FIGURE_KINDS))
    + r")\s*\(?(?P<number>[A-Z](?:\.\d+)*|\d+(?:\.\d+)*)(?P<panel>[a-z])?(?![A-Za-z0-9])"
)
LETTERED = 10**6
"""Added to an appendix letter's rank (A = 0), so that a lettered number (Table H.5,
Lemma H.6) comes after every plain one (Table 4, Thm. 5)."""


@dataclass(frozen=True)
class FigureRef:
    """Where a claim is in its paper, from its ``figure`` field (`parse_figure`)."""

    kind: int
    """The index of its kind in `FIGURE_KINDS`; ``len(FIGURE_KINDS)`` (last) when unread."""
    number: tuple[int, ...]
    """Its number, part by part ("4.2": (4, 2); an appendix letter: `LETTERED` + rank)."""
    panel: int
    """Its panel letter (Fig. 3b: 2), 0 for none."""
    label: str
    """The word and number as written, without the panel ("Fig. 3", "App. H.1"); the
    whole field when unread."""


def parse_figure(text: str) -> FigureRef:
    """The first figure, table, theorem or appendix item that ``text`` names ("Fig. 3a,c",
    "Table H.5", "Thm. 4.2", "App. D, Eq. (28)", "Sec. 5 / App. C.2")."""
    match = _FIGURE.match(text)
    if match is None:
        return FigureRef(len(FIGURE_KINDS), (), 0, text.strip())
    kind = next(i for i in range(len(FIGURE_KINDS)) if match[f"k{i}"])
    number = tuple(
        int(part) if part.isdigit() else LETTERED + ord(part) - ord("A")
        for part in match["number"].split(".")
    )
    panel = ord(match["panel"]) - ord("a") + 1 if match["panel"] else 0
    return FigureRef(kind, number, panel, f"{match['word']} {match['number']}")


def figure_key(text: str) -> tuple[int, tuple[int, ...], int, str]:
    """A sort key in a paper's own order: figures (Fig. 1, Fig. 2, ..., Figs. 17-19), then
    tables, then the main text's numbered items, then the appendices (App. A.1, ..., App.
    H.4); the field itself breaks ties ("Fig. 1" before "Fig. 1 (dashed lines)")."""
    ref = parse_figure(text)
    return ref.kind, ref.number, ref.panel, text


_ITEM = re.compile(r"(?P<kind>fig|table|thm|prop|app)_?(?P<number>[A-Za-z]?\d*)")
_ITEM_WORDS = {"fig": "Fig.", "table": "Table", "thm": "Thm.", "prop": "Prop.", "app": "App."}


def item_figure(item: str) -> str | None:
    """The figure, table, theorem, proposition or appendix an experiment's item name
    names (``fig3``: Fig. 3, ``table_h5``: Table H.5, ``thm42``: Thm. 4.2, ``prop32``:
    Prop. 3.2, ``appD``: App. D), None for another name (``maps``, ``references``): the
    digits of a theorem or proposition are its section and number."""
    match = _ITEM.fullmatch(item)
    if match is None or not match["number"]:
        return None
    number = match["number"]
    if match["kind"] in ("thm", "prop") or not number[0].isdigit():
        number = ".".join([number[0].upper(), *([number[1:]] if number[1:] else [])])
    return f"{_ITEM_WORDS[match['kind']]} {number}"


@dataclass(frozen=True)
class Section:
    """One experiment's section of REPORT.md: its claims and where it sits in its paper."""

    name: str
    entry: ExperimentEntry
    records: list[ClaimRecord]

    @property
    def figure(self) -> str:
        """The item its experiment's name says (`item_figure`: ``fig3`` is Fig. 3,
        ``thm42`` Thm. 4.2), else its first claim's ``figure`` field (the claims files list
        each experiment's claims from its main figure or table on), else its title."""
        named = item_figure(self.entry.item)
        if named is not None:
            return named
        return self.records[0].figure if self.records else self.entry.title

    @property
    def label(self) -> str:
        return parse_figure(self.figure).label


def sections(records: list[ClaimRecord], params: Params) -> dict[str, list[Section]]:
    """Per paper (those with experiments), its sections in the paper's order (`figure_key`
    of `Section.figure`; experiments on one item keep params.yaml's order)."""
    by_paper: dict[str, list[Section]] = {}
    for name, entry in params.experiments.items():
        recs = [r for r in records if r.experiment == name]
        by_paper.setdefault(entry.paper, []).append(Section(name, entry, recs))
    return {
        paper: sorted(by_paper[paper], key=lambda s: figure_key(s.figure))
        for paper in PAPER_TITLES
        if paper in by_paper
    }


# ----------------------------------------------------------------------------- numbers
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


def tolerance_places(tolerance: float) -> int | None:
    """The decimal place of the tolerance's leading digit (0.0001: 4, 0.0005: 4, 0.02: 2,
    3: 0, 20: -1); None for a zero tolerance, which fixes no place."""
    if tolerance <= 0 or not math.isfinite(tolerance):
        return None
    return -math.floor(math.log10(tolerance))


def _places(text: str) -> int:
    """The digits after the decimal point of a printed number ("2.5e-05": 6, "1.2e+04": -3)."""
    exponent = Decimal(text).as_tuple().exponent
    assert isinstance(exponent, int)  # a finite number's
    return -exponent


def value_text(value: float | None, r: ClaimRecord) -> str:
    """``value`` to 4 significant digits, or as many more as it takes for the printed
    number to lie on the same side of each of the claim's thresholds as the value itself:
    0.94995 printed as 0.95 would seem to meet ``≥ 0.95``, 0.19946 printed as 0.1995 to sit
    on the bound of ``0.199 ± 0.0005``."""
    if value is None:
        return _fmt(value)

    def side(x: float, bound: float) -> int:
        return (x > bound) - (x < bound)

    for digits in range(4, 18):
        text = f"{value:.{digits}g}"
        if all(side(float(text), b) == side(value, b) for b in bounds(r)):
            return text
    return repr(value)


def reference_text(reference: float | None, tolerance: float) -> str:
    """A claim's reference to 4 significant digits, or more until it is printed exactly or
    to a digit beyond the tolerance's leading one, so that the printed condition is the
    one checked: -1.3897 ± 0.0001, not -1.39 ± 0.0001 (which -1.38967 would seem to miss)."""
    if reference is None:
        return _fmt(reference)
    places = tolerance_places(tolerance)
    for digits in range(4, 18):
        text = f"{reference:.{digits}g}"
        if float(text) == reference or (places is not None and _places(text) > places):
            return text
    return repr(reference)


def _cell(text: str) -> str:
    """Table-safe text: a literal '|' would end the Markdown cell."""
    return text.replace("|", "\\|")


def condition(r: ClaimRecord) -> str:
    """The claim's condition on its measured value, its reference printed by
    `reference_text`."""
    reference = reference_text(r.reference, r.tolerance)
    if r.comparison == "close":
        return f"{reference} ± {r.tolerance:g}"
    if r.reference is None or not r.tolerance:
        return f"{SYMBOLS[r.comparison]} {reference}"
    if r.reference == 0:
        bound = r.tolerance if r.comparison == "le" else -r.tolerance
        return f"{SYMBOLS[r.comparison]} {bound:g}"
    sign = "+" if r.comparison == "le" else "−"
    return f"{SYMBOLS[r.comparison]} {reference} {sign} {r.tolerance:g}"


# ----------------------------------------------------------------------------- claim tables
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
            f"measured {value_text(r.expected_measured, r)}"
            if r.expected_measured is not None
            else "",
            f"at `{r.expected_commit}`" if r.expected_commit else "",
        )
        if x
    )
    return f"{r.expected} ({detail})" if detail else r.expected


_RECORDED_BASIS = re.compile(r"measured at \S+ scale on (?P<device>[^:]+): (?P<value>[^;]+)")
"""How `replicate.expect.describe` begins a recording's basis: the device and the value."""


def other_scale_text(r: ClaimRecord) -> str:
    """What the other scale expects and whether that was measured there (the recording in
    claims/recorded.json: value, device, commit) or assumed (its basis, in the notes)."""
    head = f"{r.other_scale}: {r.other_expected}"
    if not r.other_expected_recorded:
        return f"{head}, assumed"
    match = _RECORDED_BASIS.match(r.other_expected_basis)
    value = match["value"] if match else _fmt(r.other_expected_measured)
    device = f" on {match['device']}" if match else ""
    commit = f" at `{r.other_expected_commit}`" if r.other_expected_commit else ""
    return f"{head}, measured {value}{device}{commit}"


INTERVAL_LABELS = {SEED_RANGE: "range", SEED_BOOTSTRAP: "95% bootstrap"}
"""How a claim's interval is labelled in its table cell, by `ClaimRecord.interval_kind`."""


def seeds_text(r: ClaimRecord) -> str:
    """Per-seed verdicts and values, and the seed range or seed-bootstrap interval, or — for
    one-off claims: the one text of them, in the report's tables and in the basis that
    `replicate.expect` records."""
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
            f"| {value_text(r.measured, r)} | {condition(r)} | {seeds_text(r)} "
            f"| **{r.verdict}** | {_control(r)} | {_cell(_expected(r))} "
            f"| {_cell(other_scale_text(r))} "
            f"| {_status(r)} |"
        )
    return lines


def _claim_notes(records: list[ClaimRecord]) -> list[str]:
    """Below a table: notes, every non-`holds` expectation's reason at both scales, and
    what the other scale's expectations rest on where no run there is recorded."""
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
    assumed: dict[str, list[str]] = {}
    for r in records:
        if not r.other_expected_recorded:
            assumed.setdefault(r.other_expected_basis, []).append(f"`{r.id}`")
    if assumed:
        scale = records[0].other_scale
        lines += ["", f"Assumed at {scale} scale (no run recorded there), on these grounds:", ""]
        lines += [f"- {basis}: {', '.join(ids)}" for basis, ids in assumed.items()]
    return lines


# ----------------------------------------------------------------------------- run tables
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


RUN_COLUMNS = ("class", "kappa", "final_loss")
"""The per-run metrics the run table shows (``<run>/class``, ``.../kappa``, ...)."""


def runs(metrics: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Per run (a key ``<run>/class`` with ``/seed`` in it), its `RUN_COLUMNS` values; a run
    that only re-files another under a group name is left out: its path holds every part
    of the other's (``below/tied/p0.3_q0.3/seed0`` holds ``p0.3_q0.3/tied/seed0``) and each
    of its values is the other's or absent."""
    names = [k.removesuffix("/class") for k in metrics if k.endswith("/class") and "/seed" in k]
    table = {run: tuple(metrics.get(f"{run}/{column}") for column in RUN_COLUMNS) for run in names}

    def refiles(run: str, other: str) -> bool:
        mine, theirs = set(run.split("/")), set(other.split("/"))
        return theirs < mine and all(
            v is None or v == w for v, w in zip(table[run], table[other], strict=True)
        )

    return {
        run: values
        for run, values in table.items()
        if not any(refiles(run, other) for other in table if other != run)
    }


def _seed_table(metrics: dict[str, Any]) -> list[str]:
    """Per-seed run classes, κ and final test loss, one row per run (`runs`)."""
    rows = [
        f"| `{run}` | {_run_class(cls)} | {_fmt(kappa)} | {_fmt(loss)} |"
        for run, (cls, kappa, loss) in runs(metrics).items()
    ]
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


def training_length(settings: dict[str, Any]) -> str:
    """The training length: ``training.steps`` iterations, or per order where the orders
    scale it (``orders[].step_scale``: round(step_scale x steps), at least 1, as the models
    of paper D, App. H.1 train at ci scale); '' without a training block."""
    steps = settings.get("training", {}).get("steps")
    if steps is None:
        return ""
    orders = [o for o in settings.get("orders", []) if isinstance(o, dict) and "step_scale" in o]
    per_length: dict[int, list[str]] = {}
    for order in orders:
        length = max(1, round(order["step_scale"] * steps))
        per_length.setdefault(length, []).append(str(order["order"]))
    if len(per_length) <= 1:
        return f"{next(iter(per_length), steps)} iterations"
    (first, ks), *others = per_length.items()
    rest = "; ".join(f"{length} for k = {' and '.join(k)}" for length, k in others)
    return f"{first} iterations for k = {' and '.join(ks)} ({rest})"


def settings_line(provenance: dict, upstream: str | None = None) -> str:
    """The settings that produced a section's verdicts, for any model family: the model
    block (GPT variant and activation, or a paper's own model options), the training
    length (`training_length`), seeds, initial law and device; and the experiment whose
    outputs it reads, if any."""
    settings = provenance.get("settings", {})
    model = settings.get("model") or settings.get("architecture") or {}
    training = settings.get("training", {})
    variants = settings.get("variants") or ([model["variant"]] if "variant" in model else [])
    parts = [
        "model variant " + " and ".join(f"`{v}`" for v in variants) if variants else "",
        f"model `{_compact(model)}`" if model else "",
        f"initial law `{settings.get('initial_law')}`" if "initial_law" in settings else "",
        f"input length {training.get('seq_len')}, {training_length(settings)}" if training else "",
        f"seeds {settings.get('seeds')}" if "seeds" in settings else "",
        f"device `{provenance.get('device')}`",
        f"and the outputs of [`{upstream}`](#{upstream}) (its settings there)" if upstream else "",
    ]
    return "Settings behind these verdicts: " + ", ".join(p for p in parts if p) + "."


# ----------------------------------------------------------------------------- tallies
def _tally_cells(records: list[ClaimRecord]) -> str:
    """Claims implied by another (not counted), then the facts and their verdicts, then
    the unexpected verdicts among all the claims (`verdicts.counted`)."""
    facts = counted(records)
    counts = tally(records).values()
    bad = len(unexpected(records))
    implied = len(records) - len(facts)
    return f"{implied or '—'} | {len(facts)} | " + " | ".join(map(str, counts)) + f" | {bad or '—'}"


def _provenance_tallies(records: list[ClaimRecord]) -> list[str]:
    """Counts per kind of claim (paper results apart from ours), then per paper and kind."""
    lines = [
        "| claims | implied (not counted) | count | hold | do not reproduce | inconclusive "
        "| not tested | missing | unexpected |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, label in PROVENANCE.items():
        recs = [r for r in records if r.provenance == kind]
        if recs:
            lines.append(f"| {label} (`{kind}`) | {_tally_cells(recs)} |")
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
                lines.append(f"| {title} | {kind} | {_tally_cells(recs)} |")
    return lines


def _summary_row(label: str, title: str, records: list[ClaimRecord], bold: bool) -> str:
    """One row of the summary: the verdicts of the papers' own results, then how many of
    the other claims (derived, proposal, settings) hold."""
    counts = tally([r for r in records if r.provenance == "paper"])
    others = counted([r for r in records if r.provenance != "paper"])
    held = sum(r.verdict == "holds" for r in others)
    cells = [str(n) for n in counts.values()]
    if bold:
        cells = [f"**{c}**" for c in cells]
    other = f"{held} of {len(others)}" if others else "—"
    return f"| {label} | {title} | " + " | ".join(cells) + f" | {other} |"


def _summary(by_paper: dict[str, list[Section]]) -> list[str]:
    lines = [
        "The papers' own results (provenance `paper`), per paper and per figure or table, "
        "each fact once (a claim implied by another is not counted). The last column counts "
        "apart our derivations, proposals and consistency checks (`derived`, `proposal`, "
        "`settings`): how many of them hold.",
        "",
        "| item | section | "
        + " | ".join(f"{SHORT[v]} {words}" for v, words in COUNTED_AS.items())
        + " | other checks hold |",
        "|---|---|" + "---|" * len(COUNTED_AS) + "---|",
    ]
    for paper, paper_sections in by_paper.items():
        letter, _, title = PAPER_TITLES[paper].partition(" — ")
        recs = [r for s in paper_sections for r in s.records]
        lines.append(_summary_row(f"**[{letter}](#{paper})**", f"**{title}**", recs, True))
        for s in paper_sections:
            lines.append(
                _summary_row(
                    f"[{_cell(s.label)}](#{s.name})", _cell(s.entry.title), s.records, False
                )
            )
    return lines


ABBREVIATIONS = ("App", "Sec", "Fig", "Figs", "Eq", "Eqs", "Thm", "Thms", "Prop", "Def", "cf", "vs")
"""Words whose full stop ends no sentence ("App. D's structure")."""
_SENTENCE_END = re.compile(
    "".join(f"(?<!\\b{a}\\.)" for a in ABBREVIATIONS) + r"(?<=\.)\s+(?=[A-Z])"
)


def one_line(text: str) -> str:
    """The first sentence of ``text`` (up to a full stop before a capital, not one after
    an `ABBREVIATIONS` word), cut at a word when longer than `REASON_CHARS`."""
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    if len(first) <= REASON_CHARS:
        return first
    return first[:REASON_CHARS].rsplit(" ", 1)[0] + " …"


def _reason(r: ClaimRecord) -> str:
    """Why a listed claim has its verdict: its expectation's reason, else its note; for an
    unexpected verdict, what was expected."""
    why = one_line(r.expected_reason or r.note or "")
    if r.matches_expectation:
        return why
    return f"**unexpected** (expected {r.expected})" + (f": {why}" if why else "")


def _listed(by_paper: dict[str, list[Section]]) -> list[str]:
    """The claims that do not reproduce or are inconclusive, and any verdict other than the
    expected one: one line each with the measured value, the condition and the reason, in
    the report's order."""
    rows = []
    for paper, paper_sections in by_paper.items():
        letter = PAPER_TITLES[paper].partition(" — ")[0]
        for s in paper_sections:
            for r in s.records:
                if r.verdict in LISTED or not r.matches_expectation:
                    implied = f" (follows from `{r.implied_by}`)" if r.implied_by else ""
                    rows.append(
                        f"| `{r.id}`{implied} | [{letter}, {_cell(s.label)}](#{s.name}) "
                        f"| {r.provenance} | **{r.verdict}** | {value_text(r.measured, r)} "
                        f"| {condition(r)} | {_cell(_reason(r))} |"
                    )
    if not rows:
        return ["None: every claim holds or is not tested at this scale."]
    return [
        "Every claim whose verdict is does-not-reproduce or inconclusive, and any verdict "
        "other than the expected one, with the reason its expectation gives (in full in its "
        "section's notes).",
        "",
        "| claim | section | provenance | verdict | measured | condition | reason |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def _redraw_entries(params: Params) -> tuple[dict[str, PerturbationCheck], str]:
    """The stability record's redraw entries at ``params``' scale (each perturbation with a
    ``seed_offset``, `replicate.stability.REDRAWS`), and why there are none ("" if there are)."""
    from replicate.claim_files import read_stability, stability_file

    path = stability_file(params.claims_dir)
    command = "`python -m replicate stability redraw`"
    try:
        record = read_stability(path)
    except FileNotFoundError:
        return {}, f"Not measured: there is no stability record ({command} writes it)."
    except ConfigError as exc:
        return {}, f"The stability record cannot be read: {exc}."
    entries = {
        name: entry
        for name, entry in record.perturbations.items()
        if entry.seed_offset is not None and record.scale == params.scale
    }
    return entries, "" if entries else f"Not measured at {params.scale} scale: run {command}."


def _draw_dependence(
    by_paper: dict[str, list[Section]], entries: dict[str, PerturbationCheck], absent: str
) -> list[str]:
    """Every claim whose own verdict the stability check's redraw (``entries``, else why
    none: ``absent``; `_redraw_entries`) changed (every seed shifted: the same laws, other
    data), with both verdicts and values and this run's verdict; per paper the run that
    measured it, and whether that was this code."""
    from replicate.sources import paper_digest

    if not entries:
        return [absent]
    place = {
        r.id: (r, PAPER_TITLES[paper].partition(" — ")[0], s)
        for paper, paper_sections in by_paper.items()
        for s in paper_sections
        for r in s.records
    }
    lines = [
        "A claim listed here changed its own verdict when the stability check reran its "
        "experiments with every seed of params.yaml shifted (the same laws, other training "
        "data, initialisations and test sets): its verdict at this scale is a reading within "
        "the seed-to-seed noise of its tolerance, not a result, until more seeds or longer "
        "runs settle it. It is still counted under its verdict above.",
    ]
    rows, runs = [], []
    for name, entry in entries.items():
        for paper, check in entry.papers.items():
            code = "this code" if check.code_sha256 == paper_digest(paper) else "other code"
            runs.append(
                f"{PAPER_TITLES.get(paper, paper)}: `{name}` (seeds + {entry.seed_offset}), "
                f"commit {check.commit} ({code}), {check.date}: "
                f"{len(check.verdicts_changed)} of {check.claims} verdicts changed"
            )
            for row in check.verdicts_changed:
                r, letter, s = place.get(row.id, (None, "", None))
                where = f"[{letter}, {_cell(s.label)}](#{s.name})" if s else "—"
                rows.append(
                    f"| `{row.id}` | {where} | {r.provenance if r else '—'} "
                    f"| {r.verdict if r else '—'} | {row.verdict} → {row.perturbed_verdict} "
                    f"| {_fmt(row.measured)} → {_fmt(row.perturbed_measured)} |"
                )
    lines += ["", *(f"- {run}" for run in runs), ""]
    if not rows:
        return [*lines, "No verdict changed."]
    return [
        *lines,
        "| claim | section | provenance | verdict here | as drawn → redrawn | measured |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


# ----------------------------------------------------------------------------- REPORT.md
HOW_TO_READ = (
    "Each claim compares one measured metric (from `<paper>/<item>/metrics.json` in this "
    "scale's results tree) with a reference and a tolerance from `claims/<paper>.yaml`. "
    "*Expected* is the verdict set "
    "there from what was measured, with the value and commit recorded behind it "
    "(`claims/recorded.json`); a mismatch fails the check. *Other scale expects* is the "
    "expectation at the scale not run here: *measured* where a run there is recorded in "
    "`claims/recorded.json` (its value, device and commit), else *assumed*, on the grounds "
    "listed under the section's table. Measured values are printed with as many digits as "
    "the comparison needs to be visibly right: on the correct side of each threshold, and one "
    "digit beyond the tolerance's leading digit. A claim measured over several seeds"
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
    "spread measured and this machine's own verdict in its note. A claim whose verdict "
    "changed when the stability check drew the data anew (`python -m replicate stability "
    "redraw`) is listed, with both readings, under *Verdicts that depend on the data drawn*. "
    "Machine-readable: "
    "`claims.json` beside this report (`interval_kind` says which interval, `own_verdict` "
    "what the run's own evidence gives)."
)
CONTENTS = {
    "summary": "Summary",
    "listed": "Claims that do not reproduce or are inconclusive",
    "draw": "Verdicts that depend on the data drawn",
    "how-to-read": "How to read this report",
    "tallies": "Tallies by provenance",
}
"""The report's own parts (anchor: heading), before one part per paper."""


def _heading(level: int, anchor: str, text: str) -> str:
    """A heading with an explicit anchor, the target of the summary's and contents' links."""
    return f'{"#" * level} <a id="{anchor}"></a>{text}'


def _draw_sentence(facts: list[ClaimRecord], entries: dict[str, PerturbationCheck]) -> str:
    """How many of the papers' own definite verdicts (``facts``: the counted claims) the
    stability check's redraw (``entries``, `_redraw_entries`) changed, as a sentence of the
    headline; "" where not measured."""
    if not entries:
        return ""
    changed = {
        row.id
        for entry in entries.values()
        for check in entry.papers.values()
        for row in check.verdicts_changed
    }
    definite = [
        r for r in facts if r.provenance == "paper" and r.verdict in ("holds", "does-not-reproduce")
    ]
    moved = sum(1 for r in definite if r.id in changed)
    return (
        f"{moved} of those {len(definite)} definite verdicts changed when the data were drawn "
        "anew ([Verdicts that depend on the data drawn](#draw)). "
    )


def _headline(
    records: list[ClaimRecord], params: Params, redrawn: dict[str, PerturbationCheck]
) -> str:
    n_bad = len(unexpected(records))
    facts = counted(records)
    counts = tally([r for r in facts if r.provenance == "paper"])
    n_paper = sum(counts.values())
    return (
        f"Scale: **{params.scale}**. Of the papers' own results, {n_paper} claims: "
        f"{counts['holds']} hold, {counts['does-not-reproduce']} do not reproduce, "
        f"{counts['inconclusive']} are inconclusive, {counts['not-tested']} not tested at this "
        f"scale (the run stops before the step where the paper shows the effect), "
        f"{counts['missing']} missing. "
        + _draw_sentence(facts, redrawn)
        + f"{len(facts) - n_paper} further claims are our derivations, proposals and "
        "settings checks (counted apart). "
        f"{len(records) - len(facts)} more claims follow from another claim (`implied_by`): "
        "they are evaluated, shown and checked, but not counted, so that each fact counts "
        "once. "
        + (
            "**All verdicts match their expectations.**"
            if n_bad == 0
            else f"**{n_bad} verdict(s) differ from the expected one.**"
        )
    )


def _section(s: Section, params: Params, root: Path) -> list[str]:
    """One experiment's section: heading, figures, outputs, settings, claims, notes, runs."""
    name, entry = s.name, s.entry
    title = entry.title if entry.title.startswith(s.label) else f"{s.label} · {entry.title}"
    lines = ["", _heading(3, name, f"{title} (`{name}`, {entry.source})"), ""]
    directory = params.directory(name)
    here = directory.relative_to(params.results_dir)  # REPORT.md's links start from its tree
    for output in entry.outputs:
        if output.endswith(".png") and (root / directory / output).exists():
            lines += [f"![{name}: {output}]({here / output})", ""]
    links = [f"[{o}]({here / o})" for o in entry.outputs if o.endswith((".md", ".csv", ".pdf"))]
    if links:
        lines += ["Outputs: " + ", ".join(links) + ".", ""]
    provenance = _read(root / directory / PROVENANCE_FILE)
    if provenance is not None:
        lines += [settings_line(provenance, params.upstream_of(name)), ""]
    lines += _claims_table(s.records)
    lines += _claim_notes(s.records)
    metrics = _read(root / directory / METRICS_FILE)
    if metrics is not None:
        lines += _seed_table(metrics)
    return lines


def render_report(records: list[ClaimRecord], params: Params, root: Path = Path(".")) -> str:
    by_paper = sections(records, params)
    redraw = _redraw_entries(params)
    contents = [f"- [{text}](#{anchor})" for anchor, text in CONTENTS.items()]
    contents += [f"- [{PAPER_TITLES[paper]}](#{paper})" for paper in by_paper]
    lines = [
        "# Replication report",
        "",
        _headline(records, params, redraw[0]),
        "",
        "Contents:",
        "",
        *contents,
        "",
        _heading(2, "summary", CONTENTS["summary"]),
        "",
        *_summary(by_paper),
        "",
        _heading(2, "listed", CONTENTS["listed"]),
        "",
        *_listed(by_paper),
        "",
        _heading(2, "draw", CONTENTS["draw"]),
        "",
        *_draw_dependence(by_paper, *redraw),
        "",
        _heading(2, "how-to-read", CONTENTS["how-to-read"]),
        "",
        HOW_TO_READ,
        "",
        _heading(2, "tallies", CONTENTS["tallies"]),
        "",
        *_provenance_tallies(records),
    ]
    for paper, paper_sections in by_paper.items():
        lines += ["", _heading(2, paper, PAPER_TITLES[paper])]
        for s in paper_sections:
            lines += _section(s, params, root)
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- Snakemake
_RST_SPECIAL = re.compile(r"([\\`*_|])")


def rst_text(text: str) -> str:
    """``text`` as reStructuredText shows it literally: unescaped, ``|e|`` is read as a
    substitution reference and ``*``, ``_`` and backquotes as inline markup."""
    return _RST_SPECIAL.sub(r"\\\1", text)


def measured_text(r: ClaimRecord | None) -> str:
    """A claim's measured verdict, value and condition, for a caption; what says that it
    has not been evaluated yet when there is no record."""
    if r is None:
        return "not evaluated yet (`snakemake claims` evaluates every claim)"
    text = f"{r.verdict} (measured {value_text(r.measured, r)}; condition {condition(r)})"
    return text if r.matches_expectation else f"{text}, UNEXPECTED"


def captions(
    params: Params, claims: Iterable[Claim], records: list[ClaimRecord]
) -> dict[str, dict[str, Any]]:
    """Per experiment, what its caption in `snakemake --report` shows (report/experiment.rst):
    its title and source, and its claims: id, source, statement, the verdict expected at the
    scale of ``params`` and the one measured (from ``records``, the stored claims.json; a
    record of another scale is not used). Every text is escaped for reStructuredText
    (`rst_text`)."""
    scale = params.scale
    measured = {r.id: r for r in records if r.scale == scale}
    shown: dict[str, dict[str, Any]] = {
        name: {"title": rst_text(entry.title), "source": rst_text(entry.source), "claims": []}
        for name, entry in params.experiments.items()
    }
    for claim in claims:
        if claim.experiment in shown:
            shown[claim.experiment]["claims"].append(
                {
                    "id": claim.id,
                    "source": rst_text(claim.source),
                    "statement": rst_text(claim.statement),
                    "expected": claim.expected[scale].verdict,  # type: ignore[index]
                    "measured": rst_text(measured_text(measured.get(claim.id))),
                }
            )
    return shown


def verdict_lines(records: list[ClaimRecord]) -> list[str]:
    """How many verdicts are as expected, and the verdicts of the papers' own results."""
    bad = unexpected(records)
    counts = tally([r for r in records if r.provenance == "paper"])
    return [
        f"claims: {len(records) - len(bad)} of {len(records)} verdicts as expected",
        f"papers' own results ({sum(counts.values())} claims): "
        + ", ".join(f"{n} {COUNTED_AS[v]}" for v, n in counts.items() if n),
    ]


def claims_caption(records: list[ClaimRecord], problem: str) -> str:
    """The measured verdicts in a sentence, for the caption of claims.json and REPORT.md in
    `snakemake --report` (report/claims.rst), escaped for reStructuredText."""
    return rst_text(problem or "; ".join(verdict_lines(records)) + ".")


def stored_records(scale: str, root: Path = Path(".")) -> tuple[list[ClaimRecord], str]:
    """The records of ``scale``'s claims.json, or none and why (absent, malformed)."""
    try:
        return load_records(scale, root), ""
    except FileNotFoundError:
        return [], (
            f"{ClaimsOutputs(scale).claims} is not written yet: `snakemake claims` evaluates "
            "every claim"
        )
    except io.MalformedFile as exc:
        return [], f"{exc}; `snakemake claims` rewrites it"


def console_summary(scale: str, root: Path = Path("."), inputs: Iterable[Path] = ()) -> list[str]:
    """The lines a `snakemake` run ends with (the Snakefile's ``onsuccess`` and
    ``onerror``): the claims check's count over claims.json, its unexpected verdicts (at most
    `SHOWN_FAILURES`), the papers' own results, and where REPORT.md is. ``inputs``: the
    files the claims are evaluated from; when one is newer than claims.json, a line says
    that the verdicts predate it."""
    outputs = ClaimsOutputs(scale)
    records, problem = stored_records(scale, root)
    if problem:
        return [f"claims: {problem}"]
    bad = unexpected(records)
    first, papers = verdict_lines(records)
    lines = [first]
    written = (root / outputs.claims).stat().st_mtime
    if any(p.exists() and p.stat().st_mtime > written for p in (root / p for p in inputs)):
        lines.append(
            f"  (as {outputs.claims} last recorded them: outputs or claims changed since; "
            "`snakemake claims` evaluates them again)"
        )
    for r in bad[:SHOWN_FAILURES]:
        if not r.matches_expectation:
            lines.append(f"  UNEXPECTED {r.id}: {r.verdict}, expected {r.expected}")
        if r.control_problem:
            lines.append(f"  CANNOT FAIL {r.id}: {r.control_problem}")
        if r.stability_problem:
            lines.append(f"  STALE MARK {r.id}: {r.stability_problem}")
    if len(bad) > SHOWN_FAILURES:
        lines.append(f"  ... and {len(bad) - SHOWN_FAILURES} more (all in {outputs.report})")
    lines.append(papers)
    lines.append(f"report: {(root / outputs.report).resolve()}")
    return lines


# ----------------------------------------------------------------------------- README headline
HEADLINE_START = (
    "<!-- headline: generated from results/ci/verdicts/ by `python -m replicate.report "
    "--readme README.md`; do not edit -->"
)
HEADLINE_END = "<!-- /headline -->"


def headline(scale: str = "ci", root: Path = Path(".")) -> str:
    """What each paper's claims found at ``scale``, from its verdict summaries (tracked by git,
    `verdicts.verdict_summary`): a table of the papers' own results per verdict and of all
    claims as expected, for the README."""
    lines = [
        f"| Paper | its own results ({scale} scale): hold | do not reproduce | inconclusive "
        "| not tested | all claims as expected |",
        "|---|---|---|---|---|---|",
    ]
    for paper, title in PAPER_TITLES.items():
        summary = io.read_json_object(root / ClaimsOutputs(scale).verdicts_dir / f"{paper}.json")
        own = summary["papers_own"]
        counts = [own[v] for v in ("holds", "does_not_reproduce", "inconclusive", "not_tested")]
        expected = f"{summary['claims'] - summary['unexpected']} of {summary['claims']}"
        lines.append(f"| {title} | " + " | ".join(map(str, counts)) + f" | {expected} |")
    return "\n".join(lines)


def with_headline(text: str, table: str) -> str:
    """``text`` (the README) with the block between `HEADLINE_START` and `HEADLINE_END`
    replaced by ``table``; ValueError when the markers are missing."""
    start, end = text.find(HEADLINE_START), text.find(HEADLINE_END)
    if start < 0 or end < start:
        raise ValueError(f"the headline markers are missing: {HEADLINE_START} ... {HEADLINE_END}")
    return text[: start + len(HEADLINE_START)] + "\n" + table + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    """``python -m replicate.report --readme README.md [--check]``: write (or check) the
    README's headline from the committed ci verdict summaries."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m replicate.report", description=main.__doc__)
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    parser.add_argument("--check", action="store_true", help="exit 1 if the headline is stale")
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    try:
        updated = with_headline(text, headline())
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != text:
            print(f"{args.readme}'s headline is stale: run `python -m replicate.report`")
            return 1
        return 0
    io.write_text(args.readme, updated)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
