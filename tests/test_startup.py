"""Start-up: heavy libraries are imported only by the code that uses them.

Each check runs in a fresh interpreter and reads `sys.modules`; how long start-up takes is
measured by benchmarks/startup_and_scaling.py, never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from replicate.config import load_params, read_params_file, validated_dir, validation_key
from replicate.experiments import PAPERS, REGISTRY
from replicate.params import ConfigError

from .conftest import PARAMS_FILE

HEAVY = ("lightning", "seaborn", "scipy")


def _loaded_after(code: str, cache: Path | None = None) -> dict[str, bool]:
    """Which of HEAVY (and the paper packages) ``code`` leaves imported; ``cache``: the
    folder of validated params it sees (`replicate.config.validated_dir`)."""
    names = [*HEAVY, *(f"replicate.experiments.{p}" for p in PAPERS)]
    report = f"print(json.dumps({{n: n in sys.modules for n in {names!r}}}))"
    probe = f"{code}\nimport json, sys\n{report}"
    env = {**os.environ, **({"XDG_CACHE_HOME": str(cache)} if cache else {})}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_training_and_models_import_without_lightning() -> None:
    loaded = _loaded_after(
        "import replicate.training\n"
        "from lightning_modules import EnsembleGPT, GPTConfig\n"
        "from replicate.training import gpt_ensemble\n"
        "gpt_ensemble(GPTConfig(vocab_size=2, n_embd=8, block_size=8), [0, 1])"
    )
    assert not loaded["lightning"]


def test_every_public_name_of_lightning_modules_resolves() -> None:
    import lightning_modules

    for name in lightning_modules.__all__:
        assert getattr(lightning_modules, name).__name__ == name
    assert set(lightning_modules.__all__) <= set(dir(lightning_modules))


def test_plotting_imports_seaborn_only_to_draw() -> None:
    assert _loaded_after("import replicate.plotting") == {
        **_loaded_after(""),
        "seaborn": False,
        "scipy": False,
    }
    assert _loaded_after("from replicate import plotting\nplotting.figure(1, 1)")["seaborn"]


def test_running_one_experiment_loads_only_its_paper() -> None:
    loaded = _loaded_after(
        "from replicate.config import load_params\n"
        f"params = load_params({str(PARAMS_FILE)!r}, only=['attn_markov_table2'])\n"
        "params.settings('attn_markov_table2')\n"
        "from replicate.experiments import REGISTRY\n"
        "REGISTRY['attn_markov_table2']"
    )
    assert loaded["replicate.experiments.attn_markov"]
    assert not any(loaded[f"replicate.experiments.{p}"] for p in PAPERS if p != "attn_markov")
    assert not any(loaded[heavy] for heavy in HEAVY)  # a rule that trains nothing


def test_validating_every_experiment_does_not_import_lightning(tmp_path: Path) -> None:
    """What the Snakefile does when it parses (every experiment at both scales), and every
    rule that trains nothing: the settings and the sources live apart from Lightning."""
    loaded = _loaded_after(
        f"from replicate.config import load_params\nload_params({str(PARAMS_FILE)!r})", tmp_path
    )
    assert all(loaded[f"replicate.experiments.{p}"] for p in PAPERS)
    assert not loaded["lightning"]


def test_params_validated_in_full_once_are_validated_on_first_use_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validating every experiment imports every paper (about 5 s of each Snakemake start).
    The same values and code validate the same way: a second load of them imports no paper
    and validates each experiment when it is used; a changed value is validated in full
    again, so a bad one still fails at load."""
    load = f"from replicate.config import load_params\nload_params({str(PARAMS_FILE)!r})"
    first, second = _loaded_after(load, tmp_path), _loaded_after(load, tmp_path)
    assert all(first[f"replicate.experiments.{p}"] for p in PAPERS)
    assert not any(second[f"replicate.experiments.{p}"] for p in PAPERS)

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = read_params_file(PARAMS_FILE)
    assert (validated_dir() / validation_key(data)).exists()
    lazy = load_params(data)
    assert lazy.settings("subngrams_fig3") == load_params(PARAMS_FILE, only=[]).settings(
        "subngrams_fig3"
    )
    data["experiments"]["subngrams_fig3"]["settings"]["paper"]["training"]["steps"] = "many"
    with pytest.raises(ConfigError, match=r"subngrams_fig3\.settings\.paper\.training\.steps"):
        load_params(data)


def test_lazy_settings_equal_eager_ones() -> None:
    eager = load_params(PARAMS_FILE)
    lazy = load_params(PARAMS_FILE, only=["attn_markov_fig3"])
    for name in eager.experiments:
        assert lazy.settings(name) == eager.settings(name), name


def test_registry_is_the_union_of_the_papers() -> None:
    import importlib

    union = {}
    for paper in PAPERS:
        union.update(importlib.import_module(f"replicate.experiments.{paper}").EXPERIMENTS)
    assert dict(REGISTRY) == union and len(REGISTRY) == len(union)
    assert "attn_markov_nonsense" not in REGISTRY and "nonsense" not in REGISTRY


def test_every_registry_entry_names_a_schema_and_a_function() -> None:
    """The registry holds names only: each must resolve to a settings schema and a function."""
    for name, entry in REGISTRY.items():
        assert issubclass(entry.settings_model, BaseModel), name
        assert callable(entry.run), name


def test_naming_experiments_imports_none_of_their_code() -> None:
    """Checking that an experiment is implemented imports its paper's package, not its
    modules; running one (its function) imports its own module and not its paper's others."""
    probe = (
        "import json, sys\n"
        "from replicate.experiments import REGISTRY\n"
        "assert all(n in REGISTRY for n in ('two_layer_maps', 'two_layer_table1'))\n"
        "named = 'replicate.experiments.two_layer.maps' in sys.modules\n"
        "REGISTRY['two_layer_table1'].run\n"
        "print(json.dumps([named, *(f'replicate.experiments.two_layer.{m}' in sys.modules"
        " for m in ('table1', 'maps', 'bits'))]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    named, table1, maps, bits = json.loads(out.stdout.splitlines()[-1])
    assert not named and table1 and not maps and not bits
