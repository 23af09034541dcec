"""A claim naming a metric key its experiment does not write is rejected when the claims
load, naming the file, the claim, the field and the nearest keys (`replicate.metric_keys`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from replicate import metric_keys
from replicate.claim_files import load_claims
from replicate.config import load_params
from replicate.params import ConfigError

from .conftest import claim_dict, params_with_claims

CLAIM_ID = "A3a-tied-stuck"  # attn_markov_fig3, metric p0.5_q0.8/tied/frac_unigram
KEYS = {
    "p0.5_q0.8/tied/frac_unigram",
    "p0.5_q0.8/tied/seed0/class",
    "p0.5_q0.8/tied/seed1/class",
    "p0.5_q0.8/untied/seed0/class",
}


def _claim(**fields: object) -> SimpleNamespace:
    base = {
        "id": "X",
        "experiment": "e",
        "metric": "p0.5_q0.8/tied/frac_unigram",
        "reference": 0.5,
        "per_seed": None,
        "converged": None,
        "note": None,
        "expected": {"ci": SimpleNamespace(reason=None)},
    }
    return SimpleNamespace(**{**base, **fields})


def test_patterns_match_seeds_and_segments_and_misses_name_the_nearest_keys() -> None:
    per_seed = SimpleNamespace(pattern="p0.5_q0.8/*/seed{seed}/class", only=None)
    assert metric_keys.problems(_claim(per_seed=per_seed), KEYS) == []
    cited = _claim(note="seed 0 is [[p0.5_q0.8/tied/seed0/class]]")
    assert metric_keys.problems(cited, KEYS) == []
    assert metric_keys.problems(_claim(metric="p0.5_q0.8/tied/frac_unigrams"), KEYS) == [
        "metric = 'p0.5_q0.8/tied/frac_unigrams' is no metric e writes; "
        "nearest: p0.5_q0.8/tied/frac_unigram"
    ]
    wrong = [
        _claim(per_seed=SimpleNamespace(pattern="p0.5_q0.8/tied/run{seed}/class", only=None)),
        _claim(converged=SimpleNamespace(pattern="p0.5_q0.8/tied/seed{seed}/falling")),
        _claim(reference=SimpleNamespace(metric="p0.5_q0.8/tied/frac_bigram")),
        _claim(expected={"ci": SimpleNamespace(reason="measured [[p0.5/tied/seed0/class]]")}),
    ]
    fields = [metric_keys.problems(c, KEYS)[0].split(" = ")[0] for c in wrong]
    assert fields == [
        "per_seed.pattern",
        "converged.pattern",
        "reference.metric",
        "a [[key]] of its text",
    ]
    # a pattern's seed is a number, its '*' one path segment
    one_segment = SimpleNamespace(pattern="*/seed{seed}/class", only=None)
    assert metric_keys.problems(_claim(per_seed=one_segment), KEYS) != []


def test_a_mistyped_metric_is_rejected_when_the_claims_load(
    tmp_path: Path, params_dict: dict
) -> None:
    """Only the recorded keys are known (a fresh clone: no results yet): the claim is
    rejected at load, before any training, naming its file and id."""
    claim = claim_dict(CLAIM_ID)
    path = params_with_claims(tmp_path, params_dict, [claim])
    keys_path = metric_keys.keys_file(tmp_path / "claims")
    metric_keys.write_recorded(keys_path, {"ci": {"attn_markov_fig3": KEYS}})
    assert load_claims(load_params(path, scale="ci")).claims[0].id == CLAIM_ID

    claim["metric"] = "p0.5_q0.8/tied/frac_unigrams"
    path = params_with_claims(tmp_path, params_dict, [claim])
    with pytest.raises(ConfigError) as err:
        load_claims(load_params(path, scale="ci"))
    assert str(err.value) == (
        f"{tmp_path / 'claims' / 'attn_markov.yaml'}: claim {CLAIM_ID}: metric = "
        "'p0.5_q0.8/tied/frac_unigrams' is no metric attn_markov_fig3 writes; nearest: "
        "p0.5_q0.8/tied/frac_unigram (keys from metric_keys.json and the results' metrics "
        "files)"
    )


def test_keys_in_the_results_count_and_an_unknown_experiment_is_not_checked(
    tmp_path: Path, params_dict: dict
) -> None:
    claim = claim_dict(CLAIM_ID)
    claim["metric"] = "p0.5_q0.8/tied/new_metric"
    path = params_with_claims(tmp_path, params_dict, [claim])
    params = load_params(path, scale="ci")
    assert load_claims(params).claims[0].id == CLAIM_ID  # nothing known of the experiment
    metric_keys.write_recorded(
        metric_keys.keys_file(tmp_path / "claims"), {"ci": {"attn_markov_fig3": KEYS}}
    )
    with pytest.raises(ConfigError, match="new_metric' is no metric attn_markov_fig3 writes"):
        load_claims(params)
    out = tmp_path / params.directory("attn_markov_fig3")
    out.mkdir(parents=True)
    (out / "metrics.json").write_text(json.dumps({"p0.5_q0.8/tied/new_metric": 1.0}))
    assert load_claims(params).claims[0].id == CLAIM_ID  # the changed experiment writes it


def test_a_record_of_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / metric_keys.KEYS_FILE
    path.write_text(json.dumps({"format": 0, "scales": {}}))
    with pytest.raises(ConfigError, match="not a metric-keys record of format 1"):
        metric_keys.read_recorded(path)
