"""params.yaml validation: good files load; each bad value is named with its key path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from replicate.claim_files import load_claims
from replicate.config import load_params, read_params_file
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


# ----------------------------------------------------------------------------- error lines
FIG4 = "  attn_markov_fig4:\n"
FIG5 = "  attn_markov_fig5:\n"
TABLE1 = "  attn_markov_table1:\n"
DERIVED = "derived_experiments:\n"
LINED = {
    # kind: (where the edit starts, old text, new text, the line's text, its message, only)
    "wrong type deep in settings": (
        FIG4,
        "seeds: [0, 1, 2]",
        'seeds: [0, "x", 2]',
        'seeds: [0, "x", 2]',
        "experiments.attn_markov_fig4.settings.ci.seeds.1 = 'x'",
        ["attn_markov_fig4"],
    ),
    "unknown key in settings": (
        TABLE1,
        "      ci: {n_embd: 4,",
        "      ci: {colour: red, n_embd: 4,",
        "      ci: {colour: red",
        "experiments.attn_markov_table1.settings.ci.colour = 'red': Extra inputs are not permitted",
        ["attn_markov_table1"],
    ),
    "missing key in settings (its mapping's line)": (
        TABLE1,
        "      ci: {n_embd: 4, ",
        "      ci: {",
        "      ci: {seq_len",
        "experiments.attn_markov_table1.settings.ci.n_embd: missing (required)",
        ["attn_markov_table1"],
    ),
    "derived experiment's settings": (
        DERIVED,
        "settings: {paper: {}, ci: {}}",
        "settings: {paper: {}, ci: {colour: red}}",
        "colour: red",
        "derived_experiments.attn_markov_table2.settings.ci.colour = 'red'",
        ["attn_markov_table2"],
    ),
    "unknown key in an experiment": (
        FIG4,
        "    item: fig4\n",
        "    item: fig4\n    colour: red\n",
        "    colour: red",
        "experiments.attn_markov_fig4.colour = 'red': Extra inputs are not permitted",
        None,
    ),
    "unknown top-level key": (
        "claims_dir:",
        "claims_dir:",
        "colour: red\nclaims_dir:",
        "colour: red",
        "colour = 'red': Extra inputs are not permitted",
        None,
    ),
    "missing key (its mapping's line)": (
        "runtime:",
        "  threads: 1 ",
        "  # threads: 1 ",
        "runtime:",
        "runtime.threads: missing (required)",
        None,
    ),
    "missing top-level key (the document's first line)": (
        "scale: ci\n",
        "scale: ci\n",
        "",
        "runtime:",
        "scale: missing (required)",
        None,
    ),
    "bad value in runtime": (
        "runtime:",
        "precision: 32-true",
        "precision: 64",
        "precision: 64",
        "runtime.precision = 64",
        None,
    ),
    "bad value in cluster": (
        "cluster:",
        "{mem_mb: 4000,",
        "{mem_mb: -1,",
        "{mem_mb: -1,",
        "cluster.resources.ci.mem_mb = -1: Input should be greater than 0",
        None,
    ),
    "a scale missing in cluster": (
        "cluster:",
        "checkpoint_every: {ci: 0, paper: 500}",
        "checkpoint_every: {ci: 0}",
        "  checkpoint_every:",
        "cluster.checkpoint_every: missing scale(s) ['paper']",
        None,
    ),
    "bad scale": ("scale: ci\n", "scale: ci", "scale: huge", "scale: huge", "scale = 'huge'", None),
    "bad scale name in settings": (
        FIG4,
        "      ci:\n",
        "      big:\n",
        "      big:",
        "experiments.attn_markov_fig4.settings.big.[key] = 'big': Input should be 'ci' or",
        None,
    ),
    "value out of range": (
        "classification:",
        "bigram_kappa_min: 0.8",
        "bigram_kappa_min: 1.5",
        "bigram_kappa_min: 1.5",
        "classification.bigram_kappa_min = 1.5: Input should be less than 1",
        None,
    ),
    "nan": (
        FIG4,
        "lr: 1.0e-3",
        "lr: .nan",
        "lr: .nan",
        "experiments.attn_markov_fig4.settings.paper.optim.lr = nan is not a valid value",
        None,
    ),
    "an experiment not implemented": (
        FIG4,
        FIG4 + "    paper: attn_markov\n    item: fig4",
        "  attn_markov_fig44:\n    paper: attn_markov\n    item: fig44",
        "  attn_markov_fig44:",
        "experiments.attn_markov_fig44: no experiment of that name is implemented",
        None,
    ),
    "a name other than <paper>_<item>": (
        FIG4,
        "    item: fig4",
        "    item: fig5",
        FIG4,
        "experiments.attn_markov_fig4: name must be <paper>_<item> = 'attn_markov_fig5'",
        None,
    ),
    "an upstream under experiments": (
        FIG4,
        "    item: fig4\n",
        "    item: fig4\n    upstream: fig3\n",
        "    upstream: fig3",
        "experiments.attn_markov_fig4.upstream: move an experiment that reads another's",
        None,
    ),
    "an upstream that is no experiment": (
        "  attn_markov_table2:",
        "upstream: fig3",
        "upstream: fig33",
        "upstream: fig33",
        "derived_experiments.attn_markov_table2.upstream: must name an item of paper "
        "attn_markov under experiments or derived_experiments, not 'fig33'",
        None,
    ),
    "an experiment under both sections": (
        DERIVED,
        DERIVED,
        DERIVED + "  attn_markov_fig4:\n    paper: attn_markov\n    item: fig4\n    title: t\n"
        "    source: s\n    outputs: []\n    upstream: fig3\n    settings: {ci: {}, paper: {}}\n",
        "  attn_markov_fig4:",
        "derived_experiments.attn_markov_fig4: also defined under experiments",
        None,
    ),
    "a cycle of upstreams": (
        "  two_layer_table3:",
        "upstream: maps",
        "upstream: table4",
        "upstream: table4",
        "derived_experiments.two_layer_table3.upstream: cycle two_layer_table3 -> two_layer_table4",
        None,
    ),
    "an always-written file among the outputs": (
        FIG4,
        "outputs: [figure.png",
        "outputs: [metrics.json, figure.png",
        "outputs: [metrics.json",
        "experiments.attn_markov_fig4.outputs.0: metrics.json is always written",
        None,
    ),
    "a curve of no output": (
        FIG5,
        "{file: curves.csv,",
        "{file: curvez.csv,",
        "{file: curvez.csv,",
        "experiments.attn_markov_fig5.curves.0.file: 'curvez.csv' is not among the outputs",
        None,
    ),
    "settings missing for a scale": (
        TABLE1,
        "      ci: {n_embd",
        "      # ci: {n_embd",
        "    settings:",
        "experiments.attn_markov_table1.settings: missing for scale(s) ['ci']",
        None,
    ),
}


@pytest.mark.parametrize("kind", LINED)
def test_every_validation_error_names_its_line(tmp_path: Path, kind: str) -> None:
    """Each kind of error in params.yaml names the line of the offending key (a missing key:
    the line of the mapping that lacks it), as a YAML syntax error does."""
    start, old, new, line_text, message, only = LINED[kind]
    text = PARAMS_FILE.read_text()
    at = text.index(start)
    edited = text[:at] + text[at:].replace(old, new, 1)
    assert edited != text
    # The text before ``at`` is unchanged: the line's text is looked for from there.
    line = edited.count("\n", 0, edited.index(line_text.strip("\n"), at)) + 1
    path = tmp_path / "params.yaml"
    path.write_text(edited)
    with pytest.raises(ConfigError) as info:
        load_params(path, only=only)
    assert f"line {line}: {message}" in str(info.value)
    assert str(path) in str(info.value)


def test_a_value_set_by_config_is_blamed_on_the_option_without_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snakemake hands over the working directory's params.yaml as a dict, --config values on
    top: the file's errors have their lines there, the option's have none."""
    text = PARAMS_FILE.read_text().replace("  threads: 1 ", "  # threads: 1 ", 1)
    (tmp_path / "params.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    data = read_params_file(Path("params.yaml"))
    data["classification"]["bigram_kappa_min"] = float("nan")
    with pytest.raises(ConfigError) as info:
        load_params(data, overrides={"classification": {"bigram_kappa_min": float("nan")}})
    assert str(info.value) == "--config: classification.bigram_kappa_min = nan is not a valid value"
    data["classification"]["bigram_kappa_min"] = 2.0
    with pytest.raises(ConfigError) as info:
        load_params(data, overrides={"classification": {"bigram_kappa_min": 2.0}})
    runtime = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("runtime:"))
    assert str(info.value).splitlines() == [
        "params.yaml and --config: invalid parameters",
        f"  line {runtime}: runtime.threads: missing (required) (params.yaml)",
        "  classification.bigram_kappa_min = 2.0: Input should be less than 1 (--config)",
    ]
