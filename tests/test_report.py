"""REPORT.md and Snakemake's views of the verdicts: the paper order of the sections, the
summary and the list of failures, the digits printed, the run table, the settings line,
the other scale's expectation, the captions of `snakemake --report`, the lines a run ends
with, and the claims files' texts."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from replicate import io, report
from replicate.claim_files import load_claims
from replicate.config import load_params
from replicate.control_record import DEFINITION_FIELDS
from replicate.params import PAPERS, Params
from replicate.verdicts import ClaimRecord, ClaimsOutputs

from .conftest import (
    CLAIMS_DIR,
    PARAMS_FILE,
    REPO,
    claim_dict,
    params_with_claims,
    stability_record,
)


@pytest.fixture(scope="module")
def params() -> Params:
    return load_params(PARAMS_FILE, scale="ci")


def _record(claim_id: str, **fields: Any) -> ClaimRecord:
    """A record of paper A's Fig. 3 that holds as expected, with ``fields`` over it."""
    base = ClaimRecord(
        id=claim_id,
        paper="attn_markov",
        experiment="attn_markov_fig3",
        figure="Fig. 3a",
        statement="a statement",
        metric="m",
        comparison="le",
        measured=0.001,
        reference=0.0,
        tolerance=0.005,
        scale="ci",
        verdict="holds",
        expected="holds",
        expected_reason=None,
        expected_basis="",
        matches_expectation=True,
        provenance="paper",
        source="paper A, Fig. 3",
        reference_source="",
        note="",
        other_scale="paper",
        other_expected="holds",
        other_expected_basis="the paper's statement",
    )
    return replace(base, **fields)


# ----------------------------------------------------------------------------- paper order
def test_figure_key_puts_figures_then_tables_then_the_text_then_the_appendices() -> None:
    ordered = [
        "Fig. 1",
        "Fig. 1 (dashed lines)",
        "Fig. 2b",
        "Fig. 3a,c",
        "Fig. 3b (t = 115)",
        "Fig. 10",
        "Figs. 17-19",
        "Table 1",
        "Table 4 vs Table 3",
        "Table H.5",
        "Sec. 2 (data)",
        "Thm 3 (Sec. 3), Thm 4 (Sec. 4)",
        "Lemma 3.1",
        "Thm. 4.2",
        "Sec. 5 / App. C.2 (Lemma 7)",
        "Lemma H.6",
        "App. A.1",
        "App. D, Eq. (28)",
        "App. H.1 (layer-2 maps)",
        "App. H.4",
        "App. I",
        "something else",
    ]
    assert sorted(reversed(ordered), key=report.figure_key) == ordered


@pytest.mark.parametrize(
    ("text", "label", "number", "panel"),
    [
        ("Fig. 3a,c", "Fig. 3", (3,), 1),
        ("Table H.5", "Table H.5", (report.LETTERED + 7, 5), 0),
        ("Thm. 4.2", "Thm. 4.2", (4, 2), 0),
        ("App. D, Eq. (28)", "App. D", (report.LETTERED + 3,), 0),
        ("Eq. (10)", "Eq. 10", (10,), 0),
    ],
)
def test_parse_figure_reads_the_first_item_named(
    text: str, label: str, number: tuple[int, ...], panel: int
) -> None:
    ref = report.parse_figure(text)
    assert (ref.label, ref.number, ref.panel) == (label, number, panel)


def test_sections_follow_each_papers_order(params: Params) -> None:
    """On the repository's claims: in every paper the sections' figure keys never decrease;
    paper D's figures come first, then its tables, its appendix H.1 after them."""
    records = [
        _record(c.id, experiment=c.experiment, figure=c.figure) for c in load_claims(params).claims
    ]
    by_paper = report.sections(records, params)
    assert list(by_paper) == list(PAPERS)
    for paper_sections in by_paper.values():
        keys = [report.figure_key(s.figure) for s in paper_sections]
        assert keys == sorted(keys)
    names = [s.name for s in by_paper["two_layer"]]
    assert names[:2] == ["two_layer_fig1", "two_layer_fig2"]
    assert names.index("two_layer_table4") < names.index("two_layer_maps")
    first_a = by_paper["attn_markov"][0]
    assert (first_a.name, first_a.label) == ("attn_markov_fig1", "Fig. 1")


# ----------------------------------------------------------------------------- summary
def _fig3_records() -> list[ClaimRecord]:
    """Paper A's Fig. 3: 2 paper results hold, 1 does not reproduce, 1 is inconclusive,
    1 implied (not counted); 2 settings checks, one holding."""
    return [
        _record("A-hold-1"),
        _record("A-hold-2"),
        _record("A-implied", implied_by="A-hold-1"),
        _record(
            "A-fails",
            measured=0.04576,
            verdict="does-not-reproduce",
            expected="does-not-reproduce",
            expected_reason="the runs end at the unigram loss. A second sentence.",
        ),
        _record(
            "A-torn",
            verdict="inconclusive",
            expected="inconclusive",
            expected_reason="the seeds disagree",
        ),
        _record("A-set-1", provenance="settings"),
        _record(
            "A-set-2",
            provenance="settings",
            verdict="does-not-reproduce",
            expected="does-not-reproduce",
            expected_reason="by design",
        ),
    ]


def test_the_report_opens_with_a_summary_a_list_of_failures_and_contents(
    params: Params, tmp_path: Path
) -> None:
    text = report.render_report(_fig3_records(), params, tmp_path)
    summary = text.index('<a id="summary">')
    assert text.index("- [Summary](#summary)") < summary  # the contents list
    assert "- [Paper D — Two-layer transformers represent induction heads](#two_layer)" in text
    assert (
        "| [Fig. 3](#attn_markov_fig3) | Effect of weight tying on test loss and predicted "
        "probabilities | 2 | 1 | 1 | 0 | 0 | 1 of 2 |"
    ) in text
    assert (
        "| **[Paper A](#attn_markov)** | **Attention with Markov** | **2** | **1** | **1** |"
        in (text)
    )
    listed = text[text.index('<a id="listed">') : text.index('<a id="how-to-read">')]
    assert (
        "| `A-fails` | [Paper A, Fig. 3](#attn_markov_fig3) | paper | **does-not-reproduce** "
        "| 0.04576 | ≤ 0.005 | the runs end at the unigram loss. |"
    ) in listed
    assert "`A-torn`" in listed and "`A-set-2`" in listed and "`A-hold-1`" not in listed
    assert '### <a id="attn_markov_fig3"></a>Fig. 3 · Effect of weight tying' in text


def test_an_unexpected_verdict_is_listed_with_what_was_expected(
    params: Params, tmp_path: Path
) -> None:
    wrong = _record(
        "A-wrong",
        verdict="does-not-reproduce",
        matches_expectation=False,
        note="metric 'm' is far off. More.",
    )
    text = report.render_report([wrong], params, tmp_path)
    assert "**unexpected** (expected holds): metric 'm' is far off. |" in text


def test_one_line_keeps_the_first_sentence() -> None:
    assert report.one_line("a model with App. D's structure. Next one.") == (
        "a model with App. D's structure."
    )
    cut = report.one_line("word " * 100)
    assert cut.endswith(" …") and len(cut) <= report.REASON_CHARS + 2


# ----------------------------------------------------------------------------- digits
def test_a_condition_prints_the_reference_to_the_tolerance_digit() -> None:
    """-1.3897 ± 0.0001 printed as -1.39 ± 0.0001 would seem to fail at -1.38967."""
    r = _record(
        "x", comparison="close", reference=-1.3897, tolerance=1e-4, measured=-1.3896713216878593
    )
    assert report.condition(r) == "-1.3897 ± 0.0001"
    assert report.value_text(r.measured, r) == "-1.3897"
    assert report.reference_text(0.199, 5e-4) == "0.199"
    assert report.reference_text(0.61361234, 0.005) == "0.6136"
    assert report.reference_text(0.6136123456, 1e-6) == "0.6136123"
    assert report.reference_text(0.6, 0.0) == "0.6"


def test_the_expected_cell_prints_the_value_with_the_deciding_digits(
    params: Params, tmp_path: Path
) -> None:
    """0.19946 cut to 0.1995 would sit on the bound of 0.199 ± 0.0005."""
    r = _record(
        "x",
        comparison="close",
        reference=0.199,
        tolerance=5e-4,
        measured=0.19946023365297763,
        expected_measured=0.19946023365297763,
        expected_commit="7ea0293",
    )
    text = report.render_report([r], params, tmp_path)
    assert "| 0.19946 | 0.199 ± 0.0005 |" in text
    assert "holds (measured 0.19946, at `7ea0293`)" in text


@pytest.mark.parametrize(
    ("tolerance", "places"), [(1e-4, 4), (5e-4, 4), (0.02, 2), (3.0, 0), (20.0, -1), (0.0, None)]
)
def test_tolerance_places(tolerance: float, places: int | None) -> None:
    assert report.tolerance_places(tolerance) == places


# ----------------------------------------------------------------------------- runs, settings
def test_a_run_filed_again_under_a_group_is_shown_once() -> None:
    metrics = {
        "p0.3_q0.3/tied/seed0/class": 1.0,
        "p0.3_q0.3/tied/seed0/kappa": 0.9993,
        "p0.3_q0.3/tied/seed0/final_loss": 0.6136,
        "below/tied/p0.3_q0.3/seed0/class": 1.0,  # Fig. 4's group keys
        "off_boundary/tied/p0.3_q0.3/seed0/class": 1.0,
        "theory/l2/seed0/class": -1.0,
        "theory/l2/seed0/kappa": -0.001,
        "theory/deep/l2/seed0/class": -1.0,  # Fig. 1's, with the same values
        "theory/deep/l2/seed0/kappa": -0.001,
        "theory/other/l2/seed0/class": 1.0,  # another run: its class differs
    }
    assert list(report.runs(metrics)) == [
        "p0.3_q0.3/tied/seed0",
        "theory/l2/seed0",
        "theory/other/l2/seed0",
    ]


def test_the_settings_line_gives_each_orders_training_length() -> None:
    """Paper D's shared models: orders[].step_scale scales training.steps per order."""
    orders = [
        {"order": 1, "step_scale": 2.0},
        {"order": 2, "step_scale": 1.0},
        {"order": 3, "step_scale": 2.0},
    ]
    settings = {"orders": orders, "training": {"steps": 3000, "seq_len": 32}, "seeds": [0, 1]}
    line = report.settings_line({"settings": settings, "device": "cpu"})
    assert "input length 32, 6000 iterations for k = 1 and 3 (3000 for k = 2)," in line
    same = [{"order": 1, "step_scale": 1.0}, {"order": 2, "step_scale": 1.0}]
    assert report.training_length({**settings, "orders": same}) == "3000 iterations"
    assert report.training_length({"training": {"steps": 600}}) == "600 iterations"
    upstream = report.settings_line({"device": "cpu"}, "two_layer_maps")
    assert "the outputs of [`two_layer_maps`](#two_layer_maps)" in upstream


def test_every_png_of_an_experiment_is_shown(params: Params, tmp_path: Path) -> None:
    maps = tmp_path / "results/ci/two_layer/maps"
    maps.mkdir(parents=True)
    for k in (1, 2):
        (maps / f"maps_k{k}.png").write_bytes(b"")
    text = report.render_report([], params, tmp_path)
    assert "![two_layer_maps: maps_k1.png](two_layer/maps/maps_k1.png)" in text
    assert "![two_layer_maps: maps_k2.png](two_layer/maps/maps_k2.png)" in text
    assert "maps_k3.png)" not in text  # not written


# ----------------------------------------------------------------------------- other scale
def test_the_other_scale_says_measured_or_assumed(params: Params, tmp_path: Path) -> None:
    measured = _record(
        "A-measured",
        other_expected_recorded=True,
        other_expected_basis="measured at paper scale on CPU: 4.985e-08",
        other_expected_measured=4.985213318563974e-08,
        other_expected_commit="b5275b0",
    )
    assumed = _record("A-assumed", other_expected_basis="spec calibration; not yet run")
    assert report.other_scale_text(measured) == (
        "paper: holds, measured 4.985e-08 on CPU at `b5275b0`"
    )
    assert report.other_scale_text(assumed) == "paper: holds, assumed"
    text = report.render_report([measured, assumed], params, tmp_path)
    assert "Assumed at paper scale (no run recorded there), on these grounds:" in text
    assert "- spec calibration; not yet run: `A-assumed`\n" in text


# ----------------------------------------------------------------------------- Snakemake
def test_rst_text_escapes_substitutions_and_inline_markup() -> None:
    assert report.rst_text("|e| and |Pr - p_hat_k|, theta_*^k") == (
        "\\|e\\| and \\|Pr - p\\_hat\\_k\\|, theta\\_\\*^k"
    )


class _Snakemake:
    """What a caption template reads of Snakemake's ``snakemake`` object."""

    def __init__(self, config: dict[str, Any], rule: str) -> None:
        self.config = config
        self.rule = rule


def test_every_caption_renders_without_a_docutils_message(params: Params) -> None:
    """Every experiment's caption, as `snakemake --report` renders it (Jinja, then docutils),
    from the repository's claims with one measured verdict: no warning or error."""
    from docutils.core import publish_parts
    from jinja2 import Environment

    claims = load_claims(params).claims
    measured = [_record(claims[0].id, verdict="does-not-reproduce", matches_expectation=False)]
    config = {
        "scale": "ci",
        "report_captions": report.captions(params, claims, measured),
        "report_verdicts": report.claims_caption(measured, ""),
    }
    env = Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string((REPO / "report/experiment.rst").read_text())
    strict = {"halt_level": 2, "report_level": 5}  # a warning raises
    for name in params.experiments:
        caption = template.render(snakemake=_Snakemake(config, name))
        publish_parts(caption, writer="html", settings_overrides=strict)
    shown = config["report_captions"][claims[0].experiment]["claims"][0]
    assert shown["measured"].startswith("does-not-reproduce (measured 0.001; condition")
    assert shown["measured"].endswith(", UNEXPECTED")
    for other in ("claims.rst", "workflow.rst"):
        text = env.from_string((REPO / "report" / other).read_text()).render(
            snakemake=_Snakemake(config, "claims_evaluation")
        )
        publish_parts(text, writer="html", settings_overrides=strict)
        assert "claims: 0 of 1 verdicts as expected" in text


def test_a_caption_shows_a_statement_with_bars_literally(params: Params) -> None:
    from docutils.core import publish_parts

    html = publish_parts(
        f"- {report.rst_text('the error |e| and |Pr - p_hat_k| stay small')}",
        writer="html",
        settings_overrides={"halt_level": 2, "report_level": 5},
    )["body"]
    assert "the error |e| and |Pr - p_hat_k| stay small" in html


CLAIMS_FILE = ClaimsOutputs("ci").claims
REPORT_FILE = ClaimsOutputs("ci").report


def _write_records(root: Path, records: list[ClaimRecord]) -> None:
    io.write_json(root / CLAIMS_FILE, [r.to_json() for r in records])


def test_console_summary_ends_a_run_with_the_verdicts(tmp_path: Path) -> None:
    assert report.console_summary("ci", tmp_path) == [
        f"claims: {CLAIMS_FILE} is not written yet: `snakemake claims` evaluates every claim"
    ]
    wrong = _record("A-wrong", verdict="does-not-reproduce", matches_expectation=False)
    _write_records(tmp_path, [_record("A-right"), wrong])
    inputs = tmp_path / "params.yaml"
    inputs.write_text("")
    os.utime(inputs, (0, 0))  # older than claims.json
    assert report.console_summary("ci", tmp_path, [Path("params.yaml")]) == [
        "claims: 1 of 2 verdicts as expected",
        "  UNEXPECTED A-wrong: does-not-reproduce, expected holds",
        "papers' own results (2 claims): 1 hold, 1 do not reproduce",
        f"report: {(tmp_path / REPORT_FILE).resolve()}",
    ]
    later = (tmp_path / CLAIMS_FILE).stat().st_mtime + 10
    os.utime(inputs, (later, later))
    lines = report.console_summary("ci", tmp_path, [Path("params.yaml")])
    assert lines[1].startswith(f"  (as {CLAIMS_FILE} last recorded them: outputs or claims")


def test_console_summary_names_at_most_a_few_failures(tmp_path: Path) -> None:
    many = [
        _record(f"A-{i}", verdict="missing", matches_expectation=False)
        for i in range(report.SHOWN_FAILURES + 3)
    ]
    _write_records(tmp_path, many)
    lines = report.console_summary("ci", tmp_path)
    assert lines[report.SHOWN_FAILURES + 1] == f"  ... and 3 more (all in {REPORT_FILE})"


# ----------------------------------------------------------------------------- claims' texts
TRACKER = re.compile(r"\bissue \d+|\bstop \d+")


def _texts(value: Any, path: str) -> list[tuple[str, str]]:
    """Every string under ``value`` with its path, leaving out a claim's definition fields
    (`control_record.DEFINITION_FIELDS`: their texts belong to the definition)."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [
            found
            for key, item in value.items()
            if key not in DEFINITION_FIELDS
            for found in _texts(item, f"{path}.{key}")
        ]
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in _texts(item, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("paper", PAPERS)
def test_claims_texts_cite_no_tracker_numbers(paper: str) -> None:
    """A reader of REPORT.md cannot look up a number of the project's tracker: a claim's
    statement, source, reference source, note, reasons and bases say what they mean in words."""
    data = yaml.safe_load((CLAIMS_DIR / f"{paper}.yaml").read_text())
    cited = [
        f"{path}: {TRACKER.search(text)[0]!r}"  # type: ignore[index]
        for path, text in _texts(data, paper)
        if TRACKER.search(text)
    ]
    assert not cited, cited


def test_the_tracker_pattern_finds_tracker_numbers() -> None:
    reference = " ".join(["issue", "5"])  # a tracker number, assembled: this file cites none
    data = {"claims": [{"note": f"see {reference}", "effect": {"source": reference}}]}
    assert [path for path, text in _texts(data, "x") if TRACKER.search(text)] == [
        "x.claims[0].note"
    ]
    assert not TRACKER.search("the tissue 3 cells")


def test_a_section_is_labelled_by_the_item_its_experiment_names() -> None:
    """An experiment named for a figure, table, theorem, proposition or appendix is shown as
    that item (paper C's `thm42` is Thm. 4.2 even though its first claim is on Lemma 3.1);
    another name falls back to its first claim's figure."""
    assert [
        report.item_figure(i) for i in ("fig3", "table_h5", "thm42", "prop32", "appD", "maps")
    ] == ["Fig. 3", "Table H.5", "Thm. 4.2", "Prop. 3.2", "App. D", None]


def test_the_readme_headline_is_rendered_from_the_verdict_summaries(tmp_path: Path) -> None:
    """The README's table of what each paper's claims found is generated from the ci
    verdict summaries (tracked by git) and equal to them; another text around it stays."""
    from .conftest import REPO

    summaries = ClaimsOutputs("ci").verdicts_dir
    (tmp_path / summaries).mkdir(parents=True)
    for i, paper in enumerate(report.PAPER_TITLES):
        own = {"holds": 10 + i, "does_not_reproduce": i, "inconclusive": 1, "not_tested": 0}
        io.write_json(
            tmp_path / summaries / f"{paper}.json",
            {"claims": 50, "unexpected": i, "papers_own": {**own, "missing": 0}},
        )
    table = report.headline("ci", tmp_path)
    assert table.splitlines()[3] == ("| Paper B — Local to Global | 11 | 1 | 1 | 0 | 49 of 50 |")
    text = f"intro\n{report.HEADLINE_START}\nold\n{report.HEADLINE_END}\nrest\n"
    assert report.with_headline(text, table) == (
        f"intro\n{report.HEADLINE_START}\n{table}\n{report.HEADLINE_END}\nrest\n"
    )
    with pytest.raises(ValueError, match="headline markers are missing"):
        report.with_headline("no markers", table)
    readme = (REPO / "README.md").read_text()
    assert report.with_headline(readme, report.headline("ci", REPO)) == readme, (
        "README.md's headline is stale: run `python -m replicate.report --readme README.md`"
    )


def test_the_verdicts_the_redraw_changed_are_listed_with_both_readings(
    tmp_path: Path, params_dict: dict
) -> None:
    """REPORT.md lists each claim whose verdict the stability check's redraw changed, with
    its section, this run's verdict, both verdicts and values of the check, and the run
    that measured it, and its headline counts the papers' definite verdicts among them;
    without a redraw at this scale it says so, and the headline says nothing of it."""
    claim_id = "C-F1a-stages"
    params = load_params(
        params_with_claims(tmp_path, params_dict, [claim_dict(claim_id)]), scale="ci"
    )
    here = _record(claim_id, paper="subngrams", experiment="subngrams_fig1", figure="Fig. 1")
    stability_record(params.claims_dir, {"subngrams": [claim_id]}, perturbation="aten-default")
    text = report.render_report([here], params, tmp_path)
    section = _between(text, "draw", "how-to-read")
    assert "Not measured at ci scale: run `python -m replicate stability redraw`." in section
    assert "drawn anew" not in text.partition("Contents:")[0]
    stability_record(params.claims_dir, {"subngrams": [claim_id]}, perturbation="redraw")
    text = report.render_report([here], params, tmp_path)
    assert "1 of those 1 definite verdicts changed when the data were drawn anew" in text
    section = _between(text, "draw", "how-to-read")
    assert (
        f"| `{claim_id}` | [Paper C, Fig. 1](#subngrams_fig1) | paper | holds "
        "| holds → inconclusive | 1 → 0.5 |"
    ) in section
    assert "`redraw` (seeds + 100)" in section and "(this code)" in section
    assert "1 of 1 verdicts changed" in section


def _between(text: str, start: str, end: str) -> str:
    """The report's text from the heading anchored ``start`` to the one anchored ``end``."""
    return text[text.index(f'<a id="{start}">') : text.index(f'<a id="{end}">')]
