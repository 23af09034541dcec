"""One seed that escapes the unigram (or one that gets stuck) must never make a claim's
verdict ``missing``.

Every claim of the repository is evaluated on synthetic metrics at ci scale, three seeds,
where every run of a seed has that seed's class (UNIGRAM -1 or BIGRAM 1) and per-seed
values that depend on it (small for a stuck run, large for an escaped one). Paper A's
Fig. 3 and Fig. 5 summarise their groups of runs with their own functions
(`fig3._group_metrics`, `fig5.group_metrics`), which restrict the ``unigram_runs_*``
numbers to the stuck runs; those functions make the metrics here. Every other per-seed
claim's metric is its ``per_seed`` aggregate over all seeds, which is how those experiments
compute it (the real ci outputs confirm it: `replicate check` fails a claim whose pattern
does not describe its metric). A claim without per-seed values reads a finite constant.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

from replicate import claims
from replicate.analysis import RunClass
from replicate.claim_files import Claim, load_claims
from replicate.config import load_params
from replicate.experiments.attn_markov import fig3, fig5

from .conftest import PARAMS_FILE

SEEDS = (0, 1, 2)
GROUPS = ("g0", "g1")
FIG3, FIG5 = "attn_markov_fig3", "attn_markov_fig5"
FIG3_RUN_VALUES = (
    "final_loss",
    "delta_unigram",
    "delta_bigram",
    "max_dev_x0",
    "max_dev_x1",
    "max_dev_pi1",
    "std_k",
    "norm_a",
    "mean_abs_a_dot_z",
    "mean_norm_z",
    "dev_sigmoid_b",
)
"""The per-run values `fig3._group_metrics` reads."""
FIG5_STATES = 5


def _value(run_class: RunClass, seed: int) -> float:
    """A per-seed value: about 0.007 for a stuck run, 0.8 for an escaped one."""
    return (0.007 if run_class is RunClass.UNIGRAM else 0.8) + 0.001 * seed


def _keys(pattern: str) -> list[tuple[str, int]]:
    """The keys ``pattern`` names for every group and seed, each with its seed."""
    groups = GROUPS if "*" in pattern else ("",)
    return [(pattern.replace("*", g).replace("{seed}", str(s)), s) for g in groups for s in SEEDS]


def _per_seed_values(claim: Claim, classes: dict[int, RunClass]) -> dict[str, float]:
    """The keys of the claim's per-seed pattern (and of its ``only`` pattern: the run class, or
    else the event the claim is about, which every seed has), with bounds equal to the value
    where the claim reads call bounds (every call firm)."""
    spec = claim.per_seed
    assert spec is not None
    values = {}
    for pattern in (spec.pattern, spec.only.pattern if spec.only else None):
        for key, seed in _keys(pattern) if pattern else []:
            if key.endswith("/class"):
                values[key] = float(classes[seed])
            elif spec.only is not None and pattern == spec.only.pattern:
                values[key] = spec.only.equals  # the event the claim is about: every seed
            else:
                values[key] = _value(classes[seed], seed)
            if spec.call_bounds and pattern == spec.pattern:
                values[f"{key}.lo"] = values[f"{key}.hi"] = values[key]
    return values


def _fig3_groups(metrics: dict[str, Any], tags: set[tuple[str, str]], classes: dict) -> None:
    """Fig. 3's per-run values and, from `fig3._group_metrics`, its group summaries."""
    for tag, tying in tags:
        for seed in SEEDS:
            prefix = f"{tag}/{tying}/seed{seed}"
            metrics[f"{prefix}/class"] = float(classes[seed])
            for name in FIG3_RUN_VALUES:
                metrics[f"{prefix}/{name}"] = _value(classes[seed], seed)
        runs = [SimpleNamespace(run_class=classes[s], seed=s) for s in SEEDS]
        metrics.update(fig3._group_metrics(tag, tying, runs, metrics))  # type: ignore[arg-type]


def _state_run(p: float, run_class: RunClass, seed: int) -> SimpleNamespace:
    """A stand-in for a trained `StateRun`: what `fig5.run_metrics` reads."""
    stay = 1 / FIG5_STATES if run_class is RunClass.UNIGRAM else 1 - p
    fit = {"final_loss": 1.0, "delta_bigram": 0.5, "delta_unigram": 0.0, "kappa": 0.0}
    if run_class is RunClass.BIGRAM:
        fit |= {"delta_bigram": 0.0, "delta_unigram": -0.5, "kappa": 1.0}
    fit["class"] = float(run_class)
    return SimpleNamespace(
        fit_metrics=lambda: dict(fit), p_stay=stay + 0.001 * seed, p=p, states=FIG5_STATES
    )


def _fig5_groups(metrics: dict[str, Any], tags: set[tuple[str, str]], classes: dict) -> None:
    """Fig. 5's per-run values (`fig5.run_metrics`) and group summaries (`group_metrics`)."""
    for tag, tying in tags:
        runs = [_state_run(float(tag[1:]), classes[s], s) for s in SEEDS]
        for seed, run in zip(SEEDS, runs, strict=True):
            per_run = fig5.run_metrics(run)  # type: ignore[arg-type]
            metrics.update({f"{tag}/{tying}/seed{seed}/{k}": v for k, v in per_run.items()})
        summary = fig5.group_metrics(runs)  # type: ignore[arg-type]
        metrics.update({f"{tag}/{tying}/{k}": v for k, v in summary.items()})


def _tags(claim_list: list[Claim], tag: str) -> set[tuple[str, str]]:
    """The (chain or p, tying) groups the claims' metrics name."""
    found = (re.match(rf"^({tag})/(tied|untied)/", c.metric) for c in claim_list)
    return {(m[1], m[2]) for m in found if m}


def synthetic_metrics(claim_list: list[Claim], classes: dict[int, RunClass]) -> dict[str, dict]:
    """Per experiment, metrics for ``claim_list`` with run classes ``classes`` per seed."""
    metrics: dict[str, dict[str, Any]] = {c.experiment: {} for c in claim_list}
    for claim in claim_list:
        if claim.per_seed is not None:
            metrics[claim.experiment].update(_per_seed_values(claim, classes))
        if claim.converged is not None:  # every run settled at its end
            metrics[claim.experiment].update(
                {key: 0.0 for key, _ in _keys(claim.converged.pattern)}
            )
    for name, tag, summarise in (
        (FIG3, r"p[0-9.]+_q[0-9.]+", _fig3_groups),
        (FIG5, r"p[0-9.]+", _fig5_groups),
    ):
        mine = [c for c in claim_list if c.experiment == name]
        summarise(metrics[name], _tags(mine, tag), classes)
    for claim in claim_list:
        own = metrics[claim.experiment]
        if claim.metric not in own and claim.per_seed is not None:
            own[claim.metric] = float(claims.aggregate(*_all_seeds(own, claim)))
        own.setdefault(claim.metric, 0.5)
        if isinstance(claim.reference, claims.MetricRef):
            own.setdefault(claim.reference.metric, 0.5)
    return metrics


def _all_seeds(metrics: dict[str, Any], claim: Claim) -> tuple[Any, Any]:
    """The claim's per-seed matrix over all seeds, and its aggregate spec."""
    assert claim.per_seed is not None
    return claims.seed_matrix(metrics, claim.per_seed)[0], claim.per_seed


def _flips() -> list[dict[int, RunClass]]:
    """Every seed escaping from all-stuck runs, and every seed sticking among escaped runs."""
    flips = []
    for base, flipped in ((RunClass.UNIGRAM, RunClass.BIGRAM), (RunClass.BIGRAM, RunClass.UNIGRAM)):
        for seed in SEEDS:
            flips.append({s: flipped if s == seed else base for s in SEEDS})
    return flips


@pytest.fixture(scope="module")
def everything() -> tuple[Any, Any]:
    params = load_params(PARAMS_FILE, scale="ci")
    return params, load_claims(params)


def _verdicts(everything: tuple[Any, Any], classes: dict[int, RunClass]) -> dict[str, Any]:
    params, claimset = everything
    metrics = synthetic_metrics(claimset.claims, classes)
    return {
        c.id: claims.evaluate_claim(c, claimset, params, metrics[c.experiment], "")
        for c in claimset.claims
    }


@pytest.mark.parametrize(
    "classes", _flips(), ids=lambda c: "".join(f"{int(v):+d}" for v in c.values())
)
def test_no_claim_is_missing_with_one_seed_flipped(everything, classes) -> None:
    records = _verdicts(everything, classes)
    missing = {i: r.note for i, r in records.items() if r.verdict == "missing"}
    assert not missing
    assert len(records) == len(everything[1].claims)


def test_stuck_run_claims_aggregate_over_the_stuck_seeds(everything) -> None:
    """One escaped seed (0.8) is left out of a claim about the stuck runs (0.008, 0.009)."""
    escaped_seed0 = {0: RunClass.BIGRAM, 1: RunClass.UNIGRAM, 2: RunClass.UNIGRAM}
    r = _verdicts(everything, escaped_seed0)["A3-tied-output-vanishes"]
    assert r.measured == pytest.approx(0.009) and r.seed_values == pytest.approx(
        {"1": 0.008, "2": 0.009}
    )
    assert (r.verdict, r.interval_kind, r.interval) == (
        "holds",
        "seed range",
        pytest.approx([0.008, 0.009]),
    )


def test_a_claim_about_stuck_runs_without_any_has_no_subject(everything) -> None:
    """No stuck seed: the metric is NaN and the claim is inconclusive, saying why."""
    escaped = dict.fromkeys(SEEDS, RunClass.BIGRAM)
    records = _verdicts(everything, escaped)
    about_stuck = [
        c.id
        for c in everything[1].claims
        if c.per_seed and c.per_seed.only and c.per_seed.only.pattern.endswith("/class")
    ]
    assert len(about_stuck) == 7
    for claim_id in about_stuck:
        r = records[claim_id]
        assert r.verdict == "inconclusive" and "has no subject" in r.note, claim_id
        assert r.measured is None and r.interval is None
    assert not [i for i, r in records.items() if r.verdict == "missing"]
