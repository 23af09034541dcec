"""The claims checker: pass, fail, missing, NaN, stale scale, unexpected pass; report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replicate import claims, verdicts
from replicate.claim_files import load_claims
from replicate.cli import main
from replicate.config import load_params, read_params_file
from replicate.provenance import CODE_DIGEST, recorded_inputs
from replicate.sources import experiment_digest

from .conftest import PARAMS_FILE, claim_dict, params_with_claims, stability_record

CLAIM_ID = "A3a-tied-stuck"  # metric p0.5_q0.8/tied/frac_unigram, ge 0.6, expected holds


def _write_outputs(root: Path, metrics: dict, scale: str = "ci") -> None:
    """Fig. 3's outputs as produced by params.yaml at ``scale`` and the code here
    (provenance.json included)."""
    params = load_params(PARAMS_FILE, scale=scale, only=["attn_markov_fig3"])
    out = root / params.directory("attn_markov_fig3")
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics))
    provenance = {
        **recorded_inputs("attn_markov_fig3", params),
        CODE_DIGEST: experiment_digest("attn_markov_fig3"),
    }
    (out / "provenance.json").write_text(json.dumps(provenance))


def _stuck(frac: float) -> dict:
    """CLAIM_ID's metric and its per-seed run classes (-1 UNIGRAM, 1 BIGRAM), 3 seeds."""
    stuck = round(3 * frac)
    classes = {f"p0.5_q0.8/tied/seed{s}/class": -1.0 if s < stuck else 1.0 for s in range(3)}
    return {"p0.5_q0.8/tied/frac_unigram": stuck / 3, **classes}


def _record(root: Path) -> verdicts.ClaimRecord:
    params = load_params(PARAMS_FILE, scale="ci")
    return next(r for r in claims.evaluate(params, root) if r.id == CLAIM_ID)


@pytest.mark.parametrize(
    ("comparison", "measured", "reference", "tol", "holds"),
    [
        ("le", 0.011, 0.0, 0.01, False),
        ("le", 0.01, 0.0, 0.01, True),
        ("ge", 0.59, 0.6, 0.0, False),
        ("ge", 0.6, 0.6, 0.0, True),
        ("close", 0.62, 0.619, 0.005, True),
        ("close", 0.63, 0.619, 0.005, False),
    ],
)
def test_compare(
    comparison: str, measured: float, reference: float, tol: float, holds: bool
) -> None:
    assert claims.compare(measured, reference, comparison, tol) is holds


def test_expected_pass(tmp_path: Path) -> None:
    _write_outputs(tmp_path, _stuck(1.0))
    r = _record(tmp_path)
    assert (r.verdict, r.expected, r.matches_expectation) == ("holds", "holds", True)
    assert r.measured == 1.0 and r.reference == 0.6 and r.scale == "ci"


def test_unexpected_failure(tmp_path: Path) -> None:
    _write_outputs(tmp_path, _stuck(0.0))
    r = _record(tmp_path)
    assert r.verdict == "does-not-reproduce" and not r.matches_expectation


def test_unexpected_pass(tmp_path: Path, params_dict: dict) -> None:
    """A claim expected not to reproduce that suddenly holds must also fail the check."""
    claim = claim_dict(CLAIM_ID)
    claim["expected"]["ci"] = {"verdict": "does-not-reproduce", "basis": "test", "reason": "test"}
    path = params_with_claims(tmp_path, params_dict, [claim])
    _write_outputs(tmp_path, _stuck(1.0))
    params = load_params(path, scale="ci")
    r = next(r for r in claims.evaluate(params, tmp_path) if r.id == CLAIM_ID)
    assert r.verdict == "holds" and not r.matches_expectation


def test_missing_metric_and_nan(tmp_path: Path) -> None:
    """A key a valid metrics file lacks is the claim's error (named with the nearest keys
    the file holds, and no advice to rerun, which would write the file again without it); a
    value that is not a number is the outputs' (rerun them)."""
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigrams": 1.0, "something/else": 1.0})
    r = _record(tmp_path)
    assert r.verdict == "missing" and not r.matches_expectation
    assert r.note == (
        f"claim {CLAIM_ID} names metric 'p0.5_q0.8/tied/frac_unigram', which "
        "results/ci/attn_markov/fig3/metrics.json does not hold; nearest: "
        "p0.5_q0.8/tied/frac_unigrams: correct the claim in claims/attn_markov.yaml"
    )
    _write_outputs(tmp_path, {"p0.5_q0.8/tied/frac_unigram": None})
    r = _record(tmp_path)
    assert r.verdict == "missing" and "NaN" in r.note and "--forcerun attn_markov_fig3" in r.note


def test_missing_outputs_and_stale_scale(tmp_path: Path) -> None:
    r = _record(tmp_path)
    assert r.verdict == "missing" and "not found" in r.note
    _write_outputs(tmp_path, _stuck(1.0), scale="paper")
    (tmp_path / "results/paper").rename(tmp_path / "results/ci")  # copied into the ci tree
    r = _record(tmp_path)
    assert r.verdict == "missing" and "scale 'paper'" in r.note


def test_claims_files_report_and_check_exit_codes(tmp_path: Path, monkeypatch) -> None:
    params = load_params(PARAMS_FILE, scale="ci")
    _write_outputs(tmp_path, _stuck(1.0))
    records = claims.evaluate(params, tmp_path)
    claims.write_claims(records, params, tmp_path)
    saved = json.loads((tmp_path / "results/ci/claims.json").read_text())
    assert len(saved) == len(load_claims(params).claims)
    assert set(saved[0]) >= {
        "id",
        "paper",
        "figure",
        "metric",
        "measured",
        "reference",
        "tolerance",
        "scale",
        "verdict",
        "expected",
        "provenance",
    }
    report = (tmp_path / "results/ci/REPORT.md").read_text()
    assert CLAIM_ID in report and "UNEXPECTED" in report  # the other claims are missing
    implied = [c.id for c in load_claims(params).claims if c.implied_by]
    assert implied and f"{len(implied)} more claims follow from another claim" in report
    assert f"- `{implied[0]}` follows from `" in report  # each says which, below its table
    monkeypatch.chdir(tmp_path)
    args = ["--params", str(PARAMS_FILE), "--scale", "ci", "check"]
    assert main(args) == 1  # every other claim is missing its metrics


def test_check_does_not_trust_a_stored_claims_file(tmp_path: Path, monkeypatch) -> None:
    """A claims.json saying 'all as expected' cannot pass when the metrics are gone."""
    params = load_params(PARAMS_FILE, scale="ci")
    _write_outputs(tmp_path, _stuck(1.0))
    records = claims.evaluate(params, tmp_path)
    for r in records:  # forge a file that claims everything matched
        r.verdict, r.matches_expectation = r.expected, True
    claims.write_claims(records, params, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["--params", str(PARAMS_FILE), "--scale", "ci", "check"]) == 1


def test_check_passes_when_every_verdict_matches(
    tmp_path: Path, params_dict: dict, monkeypatch
) -> None:
    path = params_with_claims(tmp_path, params_dict, [claim_dict(CLAIM_ID)])
    _write_outputs(tmp_path, _stuck(1.0))
    monkeypatch.chdir(tmp_path)
    assert main(["--params", str(path), "--scale", "ci", "claims"]) == 0
    assert main(["--params", str(path), "--scale", "ci", "check"]) == 0
    _write_outputs(tmp_path, _stuck(0.0))  # metrics changed since
    assert main(["--params", str(path), "--scale", "ci", "check"]) == 1


# ----------------------------------------------------------------------------- per-seed claims
def _seed_params(tmp_path: Path, params_dict: dict, claim_update: dict) -> object:
    """params with CLAIM_ID only, updated by ``claim_update`` (per_seed, expected, ...)."""
    claim = claim_dict(CLAIM_ID) | claim_update
    return load_params(params_with_claims(tmp_path, params_dict, [claim]), scale="ci")


MAX_DELTA = {  # a "le" claim over seeds: max over seeds of delta_bigram <= 0 + 0.005
    "metric": "p0.5_q0.8/untied/max_delta_bigram",
    "comparison": "le",
    "reference": 0.0,
    "tolerance": {"paper": 0.01, "ci": 0.005},
    "per_seed": {"pattern": "p0.5_q0.8/untied/seed{seed}/delta_bigram", "over_seeds": "max"},
}


def _deltas(values: list[float]) -> dict:
    return {
        "p0.5_q0.8/untied/max_delta_bigram": max(values),
        **{f"p0.5_q0.8/untied/seed{s}/delta_bigram": v for s, v in enumerate(values)},
    }


def test_seeds_that_disagree_make_an_inconclusive_verdict(
    tmp_path: Path, params_dict: dict
) -> None:
    """The point value fails, one seed passes: the interval straddles the bound."""
    params = _seed_params(tmp_path, params_dict, MAX_DELTA)
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.0052]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.point_verdict == "does-not-reproduce"
    assert r.verdict == "inconclusive" and not r.matches_expectation
    assert r.seed_verdicts == {"0": "holds", "1": "holds", "2": "does-not-reproduce"}
    assert r.interval is not None and r.interval[0] <= 0.005 < r.interval[1] == 0.0052


def test_seeds_that_agree_keep_the_verdict(tmp_path: Path, params_dict: dict) -> None:
    params = _seed_params(tmp_path, params_dict, MAX_DELTA)
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.003]))
    assert claims.evaluate(params, tmp_path)[0].verdict == "holds"
    _write_outputs(tmp_path, _deltas([0.01, 0.02, 0.03]))
    assert claims.evaluate(params, tmp_path)[0].verdict == "does-not-reproduce"


def test_inconclusive_can_be_expected_and_needs_a_reason(tmp_path: Path, params_dict: dict) -> None:
    from replicate.params import ConfigError

    expected = {
        "paper": {"verdict": "holds", "basis": "b"},
        "ci": {"verdict": "inconclusive", "basis": "b"},
    }
    with pytest.raises(ConfigError, match=f"(?s)claim {CLAIM_ID}: .*needs a reason"):
        claims.evaluate(_seed_params(tmp_path, params_dict, {**MAX_DELTA, "expected": expected}))
    expected["ci"] |= {"reason": "seeds straddle"}
    params = _seed_params(tmp_path, params_dict, {**MAX_DELTA, "expected": expected})
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.0052]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.matches_expectation and r.expected_basis == "b"
    assert (r.other_scale, r.other_expected) == ("paper", "holds")


def test_a_pattern_that_does_not_describe_the_metric_is_missing(
    tmp_path: Path, params_dict: dict
) -> None:
    params = _seed_params(tmp_path, params_dict, MAX_DELTA)
    metrics = _deltas([0.001, 0.002, 0.003]) | {"p0.5_q0.8/untied/max_delta_bigram": 0.004}
    _write_outputs(tmp_path, metrics)
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "missing" and "does not describe its metric" in r.note
    _write_outputs(tmp_path, {"p0.5_q0.8/untied/max_delta_bigram": 0.004})
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "missing" and "no metric matches" in r.note


def test_grouped_pattern_indicator_and_bootstrap_determinism() -> None:
    from replicate.claim_files import SeedAggregate

    spec = SeedAggregate(
        pattern="a/*/seed{seed}/class", over_seeds="mean", over_groups="mean", indicator=1.0
    )
    metrics = {f"a/{g}/seed{s}/class": float(s != 2 or g == "x") for g in "xy" for s in range(3)}
    metrics["a/x/seed0/other"] = 5.0  # not matched
    values, seeds = claims.seed_matrix(metrics, spec)
    assert seeds == [0, 1, 2] and values.shape == (2, 3)
    assert float(claims.aggregate(values, spec)) == pytest.approx(5 / 6)
    first = claims.seed_bootstrap(values, spec)
    assert first == claims.seed_bootstrap(values, spec)  # fixed generator
    assert first[0] < 5 / 6 <= first[1] == 1.0


def test_interval_verdict_for_close() -> None:
    assert claims.interval_verdict(True, (0.0, 0.004), 0.0, "close", 0.005) == "holds"
    assert (
        claims.interval_verdict(False, (0.006, 0.01), 0.0, "close", 0.005) == "does-not-reproduce"
    )
    assert claims.interval_verdict(False, (-0.01, 0.01), 0.0, "close", 0.005) == "inconclusive"


def test_report_separates_provenance_and_shows_seeds(tmp_path: Path, params_dict: dict) -> None:
    from replicate.report import render_report

    params = _seed_params(tmp_path, params_dict, MAX_DELTA)
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.0052]))
    report = render_report(claims.evaluate(params, tmp_path), params, tmp_path)
    assert "| the papers' results (`paper`) | — | 1 | 0 | 0 | 1 | 0 | 0 | 1 |" in report
    assert "s2✗0.0052" in report and "; range [0.001, 0.0052]" in report
    assert "| paper |" in report and "paper: holds" in report  # provenance, other scale


def test_report_prints_enough_digits_to_show_the_side_of_the_threshold(
    tmp_path: Path, params_dict: dict
) -> None:
    """0.0049996 <= 0.005 holds; at 4 digits it would print as the bound itself."""
    from replicate.report import render_report, value_text

    params = _seed_params(tmp_path, params_dict, MAX_DELTA)
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.0049996]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "holds"
    report = render_report([r], params, tmp_path)
    assert "| 0.0049996 | ≤ 0.005 |" in report and "s2✓0.0049996;" in report
    assert "s0✓0.001 " in report  # far from the bound: 4 digits as before
    assert value_text(0.0050004, r) == "0.0050004" and value_text(0.0051, r) == "0.0051"


# ----------------------------------------------------------------------------- not-tested
def _ci_steps(params_dict: dict) -> int:
    return params_dict["experiments"]["attn_markov_fig3"]["settings"]["ci"]["training"]["steps"]


def test_a_run_that_stops_before_the_effect_has_not_tested_the_claim(
    tmp_path: Path, params_dict: dict
) -> None:
    """The run ends before the step where the paper shows the effect, so its value is shown
    but not judged; with the effect within the run the claim is judged."""
    steps = _ci_steps(params_dict)
    later = {"step": steps + 1, "source": "a test"}
    expected = {"paper": {"verdict": "holds"}, "ci": {"verdict": "not-tested"}}
    params = _seed_params(tmp_path, params_dict, {"effect": later, "expected": expected})
    _write_outputs(tmp_path, _stuck(0.0))  # would not reproduce, if it were judged
    (r,) = claims.evaluate(params, tmp_path)
    assert (r.verdict, r.point_verdict, r.measured) == ("not-tested", "does-not-reproduce", 0.0)
    assert r.matches_expectation
    assert f"the run stops at step {steps}, before step {steps + 1}" in r.note
    within = {"step": steps, "source": "a test"}
    expected["ci"] = {"verdict": "holds"}
    params = _seed_params(tmp_path, params_dict, {"effect": within, "expected": expected})
    _write_outputs(tmp_path, _stuck(1.0))
    assert claims.evaluate(params, tmp_path)[0].verdict == "holds"
    _write_outputs(tmp_path, {"something/else": 1.0})  # an absent metric stays a fault
    params = _seed_params(
        tmp_path,
        params_dict,
        {"effect": later, "expected": {**expected, "ci": {"verdict": "not-tested"}}},
    )
    assert claims.evaluate(params, tmp_path)[0].verdict == "missing"


def test_an_effect_must_agree_with_the_expected_verdict(tmp_path: Path, params_dict: dict) -> None:
    """A run shortened below a claim's effect gives `not-tested`, unexpected where a tested
    verdict is expected; a `not-tested` expectation on a run that reaches the effect is a
    claims-file error (it would hide a result)."""
    from replicate.params import ConfigError

    steps = _ci_steps(params_dict)
    expected = {"paper": {"verdict": "holds"}, "ci": {"verdict": "holds"}}
    params = _seed_params(
        tmp_path, params_dict, {"effect": {"step": steps + 1, "source": "t"}, "expected": expected}
    )
    _write_outputs(tmp_path, _stuck(1.0))
    (r,) = claims.evaluate(params, tmp_path)
    assert (r.verdict, r.expected, r.matches_expectation) == ("not-tested", "holds", False)
    assert f"the run stops at step {steps}, before step {steps + 1}" in r.note
    expected["ci"] = {"verdict": "not-tested"}
    params = _seed_params(
        tmp_path, params_dict, {"effect": {"step": steps, "source": "t"}, "expected": expected}
    )
    with pytest.raises(ConfigError, match="expect a tested verdict"):
        claims.evaluate(params, tmp_path)


def test_a_run_still_learning_at_its_end_has_not_tested_the_claim(
    tmp_path: Path, params_dict: dict
) -> None:
    """A claim about the end of training (``converged``) read on a run whose seed was still
    learning at its last step is `not-tested`, naming the seed; with every seed settled it is
    judged; a run whose outputs do not say is a fault (`missing`); and a `not-tested`
    expectation needs an effect or a convergence flag that could make it so."""
    from replicate.params import ConfigError

    flag = "p0.5_q0.8/tied/seed{seed}/still_falling"
    expected = {"paper": {"verdict": "holds"}, "ci": {"verdict": "not-tested"}}
    params = _seed_params(
        tmp_path, params_dict, {"converged": {"pattern": flag}, "expected": expected}
    )
    flags = {flag.format(seed=s): float(s == 2) for s in range(3)}
    _write_outputs(tmp_path, {**_stuck(1.0), **flags})
    (r,) = claims.evaluate(params, tmp_path)
    assert (r.verdict, r.point_verdict, r.matches_expectation) == ("not-tested", "holds", True)
    assert "seed 2 still learning at the last step" in r.note
    expected["ci"] = {"verdict": "holds"}
    params = _seed_params(
        tmp_path, params_dict, {"converged": {"pattern": flag}, "expected": expected}
    )
    _write_outputs(tmp_path, {**_stuck(1.0), **{k: 0.0 for k in flags}})
    assert claims.evaluate(params, tmp_path)[0].verdict == "holds"
    _write_outputs(tmp_path, _stuck(1.0))  # no convergence flags written
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "missing" and "no key matches converged.pattern" in r.note
    expected["ci"] = {"verdict": "not-tested"}
    params = _seed_params(tmp_path, params_dict, {"expected": expected})
    with pytest.raises(ConfigError, match="nothing can make the claim untested"):
        claims.evaluate(params, tmp_path)


# ---------------------------------------------------------------------- cpu_dependent
def _stability_record(folder: Path, ids: list[str], scale: str = "ci") -> None:
    """A stability record as `python -m replicate stability` writes it, whose one
    perturbation changed ``ids`` (claims of paper A, CLAIM_ID's)."""
    stability_record(folder, {"attn_markov": ids}, scale=scale)


CPU_DEPENDENT = {
    "cpu_dependent": {"ci": "seeds 0.2 / 0.1 natively, -0.1 / 0.3 with portable kernels"},
    "expected": {"paper": {"verdict": "holds"}, "ci": {"verdict": "inconclusive", "reason": "t"}},
}


@pytest.mark.parametrize(("stuck", "own"), [(1.0, "holds"), (0.0, "does-not-reproduce")])
def test_a_cpu_dependent_claim_is_inconclusive_whatever_this_machine_measures(
    tmp_path: Path, params_dict: dict, stuck: float, own: str
) -> None:
    """Where the stability check showed the verdict changes with the CPU, the claim reads
    inconclusive on every machine; the run's own verdict stays in the record, and the
    stability check compares that one."""
    from replicate.stability import compare

    params = _seed_params(tmp_path, params_dict, CPU_DEPENDENT)
    _stability_record(tmp_path / "claims", [CLAIM_ID])
    _write_outputs(tmp_path, _stuck(stuck))
    (r,) = claims.evaluate(params, tmp_path)
    assert (r.verdict, r.own_verdict, r.matches_expectation) == ("inconclusive", own, True)
    assert "depends on the CPU (seeds 0.2 / 0.1 natively" in r.note and f"give {own}" in r.note
    assert tmp_path / "claims/stability.json" in claims.input_files(params, load_claims(params))
    _write_outputs(tmp_path, _stuck(1.0 - stuck))
    (other,) = claims.evaluate(params, tmp_path)
    assert other.verdict == r.verdict and compare([r], [other])["verdicts_changed"][0]["id"]
    _write_outputs(tmp_path, {"something/else": 1.0})  # an absent metric stays a fault
    assert claims.evaluate(params, tmp_path)[0].verdict == "missing"


def test_cpu_dependence_must_rest_on_the_stability_record(
    tmp_path: Path, params_dict: dict
) -> None:
    from replicate.params import ConfigError

    params = _seed_params(tmp_path, params_dict, CPU_DEPENDENT)
    (tmp_path / "claims/stability.json").unlink()
    with pytest.raises(ConfigError, match=rf"claim {CLAIM_ID}: cpu_dependent.ci: there is no"):
        claims.evaluate(params, tmp_path)
    _stability_record(tmp_path / "claims", ["some-other-claim"])
    with pytest.raises(ConfigError, match="remove cpu_dependent"):
        claims.evaluate(params, tmp_path)
    _stability_record(tmp_path / "claims", [CLAIM_ID], scale="paper")
    with pytest.raises(ConfigError, match="at ci scale"):
        claims.evaluate(params, tmp_path)
    both_hold = {"paper": {"verdict": "holds"}, "ci": {"verdict": "holds"}}
    holds = {**CPU_DEPENDENT, "expected": both_hold}
    params = _seed_params(tmp_path, params_dict, holds)
    with pytest.raises(ConfigError, match=r"inconclusive on every machine, but expected\.ci"):
        load_claims(params)


def test_fewer_than_four_seeds_give_their_range_and_more_a_bootstrap(
    tmp_path: Path, params_dict: dict
) -> None:
    """With 3 seeds the interval is labelled and computed as the seed range; with 5 it is
    the 95 % seed-bootstrap, which leaves out the extreme seeds."""
    from replicate.report import render_report

    params = _seed_params(tmp_path, params_dict, MAX_DELTA)
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.0052]))
    (r,) = claims.evaluate(params, tmp_path)
    assert (r.interval_kind, r.interval) == ("seed range", [0.001, 0.0052])
    _write_outputs(tmp_path, _deltas([0.001, 0.002, 0.003, 0.004, 0.0052]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.interval_kind == "95 % seed-bootstrap" and r.interval is not None
    assert r.interval[0] > 0.001 and r.interval[1] == 0.0052  # the max of 5 seeds
    assert "; 95% bootstrap [" in render_report([r], params, tmp_path)


FRACTION = {  # a "ge" claim over seeds: the fraction of stage-wise seeds >= 0.6
    "metric": "p0.5_q0.8/untied/frac_stagewise",
    "comparison": "ge",
    "reference": 0.6,
    "tolerance": {"paper": 0.0, "ci": 0.0},
    "per_seed": {
        "pattern": "p0.5_q0.8/untied/seed{seed}/stagewise",
        "over_seeds": "mean",
        "call_bounds": True,
    },
}


def _stagewise(values: list[float], low: list[float], high: list[float]) -> dict:
    key = "p0.5_q0.8/untied/seed{}/stagewise"
    metrics = {"p0.5_q0.8/untied/frac_stagewise": sum(values) / len(values)}
    for s, (v, lo, hi) in enumerate(zip(values, low, high, strict=True)):
        metrics |= {key.format(s): v, f"{key.format(s)}.lo": lo, f"{key.format(s)}.hi": hi}
    return metrics


def test_a_verdict_that_rests_on_calls_within_noise_is_inconclusive(
    tmp_path: Path, params_dict: dict
) -> None:
    """All 3 seeds are stage-wise (1 >= 0.6). When seed 2's level call is within the noise
    (its .lo is 0) the fraction ranges over [0.67, 1] and still holds; when seeds 1 and 2's
    are, it ranges over [0.33, 1]: inconclusive, naming both seeds. Bounds absent: missing,
    naming what is absent."""
    params = _seed_params(tmp_path, params_dict, FRACTION)
    _write_outputs(tmp_path, _stagewise([1, 1, 1], [1, 1, 1], [1, 1, 1]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "holds" and "noise" not in r.note
    _write_outputs(tmp_path, _stagewise([1, 1, 1], [1, 1, 0], [1, 1, 1]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "holds"
    _write_outputs(tmp_path, _stagewise([1, 1, 1], [1, 0, 0], [1, 1, 1]))
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "inconclusive" and r.point_verdict == "holds"
    assert "seed(s) 1, 2 lie within the test loss's standard error" in r.note
    assert "[0.3333, 1]" in r.note
    metrics = _stagewise([1, 1, 1], [1, 1, 1], [1, 1, 1])
    _write_outputs(tmp_path, {k: v for k, v in metrics.items() if not k.endswith(".lo")})
    (r,) = claims.evaluate(params, tmp_path)
    assert r.verdict == "missing" and "call bounds: no metric matches" in r.note


def test_call_bounds_need_a_monotone_aggregate() -> None:
    from replicate.claim_files import SeedAggregate

    with pytest.raises(ValueError, match="monotone"):
        SeedAggregate(pattern="a/seed{seed}/x", over_seeds="abs_mean", call_bounds=True)
    with pytest.raises(ValueError, match="monotone"):
        SeedAggregate(pattern="a/seed{seed}/x", over_seeds="sum", indicator=1.0, call_bounds=True)


def test_seed_range_of_a_sum_is_over_one_seed_repeated() -> None:
    """A sum over 3 seeds of 1 each is 3, and so is every one-seed resample (A4.3)."""
    from replicate.claim_files import SeedAggregate

    spec = SeedAggregate(pattern="a/seed{seed}/class", over_seeds="sum", indicator=-1.0)
    values, _ = claims.seed_matrix({f"a/seed{s}/class": -1.0 for s in range(3)}, spec)
    assert claims.seed_interval(values, spec) == ((3.0, 3.0), "seed range")


def test_only_keeps_the_seeds_a_claim_is_about() -> None:
    from replicate.claim_files import SeedAggregate

    only = {"pattern": "a/seed{seed}/class", "equals": -1.0}
    spec = SeedAggregate(pattern="a/seed{seed}/norm", over_seeds="max", only=only)
    metrics = {"a/seed0/class": 1.0, "a/seed1/class": -1.0, "a/seed2/class": -1.0}
    metrics |= {"a/seed0/norm": 0.8, "a/seed1/norm": 0.01, "a/seed2/norm": 0.02}
    values, seeds = claims.seed_matrix(metrics, spec)
    assert seeds == [1, 2] and values.tolist() == [[0.01, 0.02]]
    with pytest.raises(claims.NoSubject, match="no seed has a/seed\\{seed\\}/class = -1"):
        claims.seed_matrix(metrics | {"a/seed1/class": 1.0, "a/seed2/class": 1.0}, spec)
    with pytest.raises(ValueError, match=r"per_seed\.only metric 'a/seed1/class' is absent"):
        claims.seed_matrix({k: v for k, v in metrics.items() if k != "a/seed1/class"}, spec)
    with pytest.raises(ValueError, match="no '\\*'"):
        SeedAggregate(
            pattern="a/*/seed{seed}/n",
            over_seeds="max",
            over_groups="max",
            only={"pattern": "a/*/seed{seed}/class", "equals": -1.0},
        )


@pytest.mark.parametrize(
    ("quantifier", "seeds", "verdict"),
    [
        ("any", ["does-not-reproduce", "holds", "does-not-reproduce"], "holds"),
        ("any", ["does-not-reproduce", "does-not-reproduce"], "does-not-reproduce"),
        ("all", ["holds", "holds"], "holds"),
        ("all", ["holds", "does-not-reproduce", "holds"], "does-not-reproduce"),
    ],
)
def test_a_quantified_claim_takes_its_seeds_verdicts(
    quantifier: str, seeds: list[str], verdict: str
) -> None:
    evidence = claims.SeedEvidence(verdicts={str(s): v for s, v in enumerate(seeds)})
    assert claims.quantified_verdict(quantifier, evidence, verdict) == (verdict, "")
    other = "holds" if verdict != "holds" else "does-not-reproduce"
    assert (
        "does not express the quantifier"
        in claims.quantified_verdict(quantifier, evidence, other)[1]
    )


def test_an_existential_claim_holds_when_one_seed_of_three_shows_it(tmp_path: Path) -> None:
    """Paper C's C-F3d ("in at least one seed"): one seed of three switching holds, where an
    interval over seed resamples would read the seeds' disagreement as inconclusive."""
    claim = claim_dict("C-F3d-head-switch")
    params_file = params_with_claims(tmp_path, read_params_file(PARAMS_FILE), [claim])
    params = load_params(params_file, scale="ci")
    out = tmp_path / "results/ci/subngrams/fig3"
    out.mkdir(parents=True)
    switched = {"seed1/final_switch": 0.0, "seed2/final_switch": 0.0, "seed3/final_switch": 1.0}
    metrics = {"F3d/frac_seeds_switched": 1 / 3, **switched}
    (out / "metrics.json").write_text(json.dumps(metrics))
    provenance = recorded_inputs("subngrams_fig3", params)
    (out / "provenance.json").write_text(json.dumps(provenance))
    (record,) = claims.evaluate(params, tmp_path)
    assert (record.verdict, record.point_verdict) == ("holds", "holds")
    assert record.interval is not None and record.interval[0] < 0.2 < record.interval[1]
    switched["seed3/final_switch"] = 0.0
    (out / "metrics.json").write_text(json.dumps({"F3d/frac_seeds_switched": 0.0, **switched}))
    (record,) = claims.evaluate(params, tmp_path)
    assert record.verdict == "does-not-reproduce"
