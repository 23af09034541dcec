"""params.yaml validation: good files load; each bad value is named with its key path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from replicate.claim_files import load_claims
from replicate.config import load_params
from replicate.experiments import REGISTRY
from replicate.params import ConfigError

from .conftest import PARAMS_FILE


def _load(tmp_path: Path, data: dict, scale: str | None = None):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_params(path, scale=scale)


def test_repository_params_are_valid_at_both_scales() -> None:
    for scale in ("ci", "paper"):
        params = load_params(PARAMS_FILE, scale=scale)
        assert params.scale == scale
        assert set(params.experiments) <= set(REGISTRY)
        for name in params.experiments:
            params.settings(name)


def test_every_experiment_has_claims_and_every_claim_an_experiment() -> None:
    params = load_params(PARAMS_FILE)
    with_claims = {c.experiment for c in load_claims(params).claims}
    assert with_claims == set(params.experiments)


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (
            lambda d: d["experiments"]["attn_markov_fig3"]["settings"]["ci"]["chains"][0].update(
                p=1.5
            ),
            ["experiments.attn_markov_fig3.settings.ci.chains.0.p", "1.5", "less than 1"],
        ),
        (
            lambda d: d["experiments"]["attn_markov_fig3"]["settings"]["paper"]["training"].update(
                steps=-5
            ),
            ["experiments.attn_markov_fig3.settings.paper.training.steps", "-5", "greater than 0"],
        ),
        (
            lambda d: d["experiments"]["attn_markov_fig3"]["settings"]["ci"]["model"].update(
                variant="bert"
            ),
            ["settings.ci.model.variant", "'bert'"],
        ),
        (lambda d: d.update(scale="huge"), ["scale", "'huge'"]),
        (  # c = T/2 = 1,024: e^{-c} underflows float64 (paper C, Thm. 4.2 diagonal)
            lambda d: d["experiments"]["subngrams_thm42"]["settings"]["ci"].update(
                diagonal_seq_lens=[256, 2048]
            ),
            ["settings.ci.diagonal_seq_lens.1", "2048", "less than or equal to 1416"],
        ),
        (
            lambda d: d["experiments"]["attn_markov_fig3"]["settings"]["ci"].update(colour="red"),
            ["settings.ci.colour", "Extra inputs are not permitted"],
        ),
        (
            lambda d: d["experiments"].update(
                attn_markov_fig99=copy.deepcopy(d["experiments"]["attn_markov_fig3"])
            ),
            ["experiments.attn_markov_fig99", "no experiment of that name"],
        ),
        (
            lambda d: d["experiments"]["attn_markov_fig3"]["settings"]["ci"]["optim"].update(
                lr=float("nan")
            ),
            ["optim.lr", "nan"],
        ),
    ],
)
def test_bad_values_name_key_and_value(tmp_path: Path, params_dict: dict, mutate, needles) -> None:
    data = copy.deepcopy(params_dict)
    mutate(data)
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, data)
    for needle in needles:
        assert needle in str(info.value)


def test_derived_upstream_chain_is_ordered_and_cycles_refused(
    tmp_path: Path, params_dict: dict
) -> None:
    """A derived experiment may read another derived one (paper D: maps -> table3 -> table4):
    upstreams come first whatever the order in the file; a loop of upstreams is refused."""
    data = copy.deepcopy(params_dict)
    derived = data["derived_experiments"]
    table4 = derived.pop("two_layer_table4")
    data["derived_experiments"] = {"two_layer_table4": table4, **derived}
    names = list(_load(tmp_path, data).experiments)
    assert names.index("two_layer_table3") < names.index("two_layer_table4")
    data["derived_experiments"]["two_layer_table3"]["upstream"] = "table4"
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, data)
    for needle in ("cycle", "two_layer_table4 -> two_layer_table3 -> two_layer_table4"):
        assert needle in str(info.value)


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("scale: ci\nexperiments: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_params(path)


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    """YAML would take the last value silently (`scale` given twice would change the run)."""
    text = PARAMS_FILE.read_text()
    first = text.splitlines().index("scale: ci") + 1
    path = tmp_path / "params.yaml"
    path.write_text(text + "scale: paper\n")
    with pytest.raises(ConfigError) as info:
        load_params(path)
    message = str(info.value)
    assert f"duplicate key 'scale' (first given at line {first})" in message
    assert f"line {len(text.splitlines()) + 1}" in message and str(path) in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read parameters file"):
        load_params(tmp_path / "nope.yaml")


def test_unknown_experiment_lookup() -> None:
    params = load_params(PARAMS_FILE)
    with pytest.raises(ConfigError, match="unknown experiment 'attn_markov_fig42'"):
        params.settings("attn_markov_fig42")


def test_scale_override_selects_settings() -> None:
    ci = load_params(PARAMS_FILE, scale="ci").settings("attn_markov_fig3")
    paper = load_params(PARAMS_FILE, scale="paper").settings("attn_markov_fig3")
    assert paper.training.steps == 8000 and paper.training.seq_len == 1024
    assert ci.training.steps < paper.training.steps
