"""The cost plan: calibration runs record what each rule trains, and the requests it writes
reach the rule's resources."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate import plan, timings
from replicate.config import load_params
from replicate.markov import binary_kernel
from replicate.params import ResourceRequest
from replicate.plan import ExperimentCost
from replicate.training import (
    Calibration,
    TrainingContext,
    TrainingPlan,
    gpt_ensemble,
    train_ensemble,
)

from .conftest import TINY_TRAINING, shrink


def _tiny_params(tmp_path: Path, params_dict: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(shrink(params_dict), sort_keys=False))
    return path


def test_a_calibration_trains_a_few_steps_and_records_the_planned_size() -> None:
    members = [ChainMember(binary_kernel(0.2, 0.3), np.array([0.6, 0.4]), s) for s in (0, 1, 2)]
    model = gpt_ensemble(GPTConfig(vocab_size=2, n_embd=8, block_size=16), [0, 1, 2])
    training = TrainingPlan(
        steps=500, batch_size=4, seq_len=16, eval_every=7, test_sequences=8, test_seed=1
    )
    calibration = Calibration(5)
    context = TrainingContext(calibration=calibration)
    trained = train_ensemble(model, members, training, OptimConfig(lr=1e-3), "c", context=context)
    costs = calibration.costs
    assert trained.eval_steps.tolist() == [0, 5]  # cut to 5 steps, evaluated first and last
    (cost,) = costs
    assert (cost.members, cost.steps, cost.eval_every) == (3, 500, 7)
    assert cost.parameters == sum(p.numel() for p in model.parameters())
    assert cost.step_seconds > 0 and cost.eval_seconds > 0
    assert cost.evaluations == 500 // 7 + 2  # step 0, every 7th, the last (500 % 7 != 0)
    assert cost.seconds == 500 * cost.step_seconds + cost.evaluations * cost.eval_seconds


def test_plan_on_a_tiny_scale(
    tmp_path: Path, params_dict: dict, capsys: pytest.CaptureFixture
) -> None:
    """A training rule and a derived one (its upstream calibrated first): model-steps from
    the plan's settings, a finished calibration, each rule reported as it finishes (a plan
    stopped part-way still shows those), requests written and read back."""
    path = _tiny_params(tmp_path, params_dict)
    params = load_params(path, scale="ci")
    costs = plan.plan(params, path, names=["attn_markov_table2"], steps=4, timeout=300)
    by_name = {c.name: c for c in costs}
    assert list(by_name) == ["attn_markov_fig3", "attn_markov_table2"]  # upstream added
    reported = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in reported] == [
        "[1/2] attn_markov_fig3",
        "[2/2] attn_markov_table2",
    ]
    fig3, table2 = by_name["attn_markov_fig3"], by_name["attn_markov_table2"]
    assert fig3.status == "ok" and table2.status == "ok"
    settings = params.settings("attn_markov_fig3")
    runs = len(settings.chains) * len(settings.seeds)
    assert fig3.trainings and all(t["steps"] == TINY_TRAINING["steps"] for t in fig3.trainings)
    assert sum(t["members"] for t in fig3.trainings) == runs * len(settings.tying)
    assert fig3.model_steps == runs * len(settings.tying) * TINY_TRAINING["steps"]
    assert table2.trainings == [] and table2.model_steps == 0
    assert fig3.seconds > fig3.other_seconds > 0 and fig3.peak_mb > 0
    assert fig3.cpu_hours == fig3.seconds / 3600 and fig3.gpu_hours is None
    rows = plan.table(costs).splitlines()
    assert len(rows) == 2 + len(costs) + 1 and rows[-1].startswith("| **total**")

    written = plan.write_resources(costs, "ci", root=tmp_path)
    assert written == timings.planned_resources_file("ci", tmp_path)
    requests = timings.read_resources("ci", root=tmp_path)
    assert requests["attn_markov_fig3"] == fig3.request().model_dump(exclude_none=True)
    assert fig3.request().runtime >= plan.MIN_RUNTIME
    assert fig3.request().mem_mb >= fig3.peak_mb * plan.MEMORY_MARGIN
    expected = timings.expected_seconds("ci", ["attn_markov_fig3"], root=tmp_path)
    assert expected["attn_markov_fig3"] == round(fig3.seconds, 1)


def test_a_plan_of_one_experiment_calibrates_its_whole_chain_upstream_first() -> None:
    """Paper D's Table 4 reads Table 3, which reads the shared models: a plan of Table 4 alone
    calibrates all three, in that order (one level of upstream left Table 3 without the
    models' outputs it reads)."""
    params = load_params(only=[])
    assert plan.calibration_order(params, ["two_layer_table4"]) == [
        "two_layer_maps",
        "two_layer_table3",
        "two_layer_table4",
    ]
    everything = plan.calibration_order(params)
    assert sorted(everything) == sorted(params.experiments)
    for position, name in enumerate(everything):
        upstream = params.upstream_of(name)
        assert upstream is None or everything.index(upstream) < position


def _cost(name: str, seconds: float, status: str = "ok") -> ExperimentCost:
    return ExperimentCost(name=name, status=status, other_seconds=seconds, peak_mb=100.0)


def test_a_plan_of_some_experiments_keeps_the_other_entries(tmp_path: Path) -> None:
    """Writing the requests of a partial plan replaces the entries of the experiments it
    calibrated and leaves the rest of the file as it was; a rule whose calibration failed
    goes back to the default, and an entry naming no experiment goes."""
    first = [_cost("attn_markov_fig3", 60.0), _cost("two_layer_maps", 300.0)]
    path = plan.write_resources(first, "ci", root=tmp_path)
    stale = yaml.safe_load(path.read_text()) | {"no_such_rule": {"mem_mb": 1, "seconds": 1.0}}
    path.write_text(yaml.safe_dump(stale))
    again = [_cost("two_layer_maps", 120.0), _cost("attn_markov_fig1", 0.0, "timeout")]
    plan.write_resources(again, "ci", root=tmp_path)
    written = timings.read_plan("ci", tmp_path)
    assert set(written) == {"attn_markov_fig3", "two_layer_maps"}
    assert written["attn_markov_fig3"]["seconds"] == 60.0  # not calibrated again: kept
    assert written["two_layer_maps"]["seconds"] == 120.0  # calibrated again: replaced
    plan.write_resources([_cost("attn_markov_fig3", 0.0, "ValueError: bad")], "ci", tmp_path)
    assert set(timings.read_plan("ci", tmp_path)) == {"two_layer_maps"}


def test_a_timed_out_calibration_keeps_the_trainings_it_measured(
    tmp_path: Path, params_dict: dict
) -> None:
    """`calibrate` appends each training's cost as soon as it is measured; `timed_out` reads
    them back (a line cut by the kill is dropped), so a rule stopped by the timeout reports
    a lower bound instead of nothing."""
    path = _tiny_params(tmp_path, params_dict)
    params = load_params(path, scale="ci")
    partial = tmp_path / "fig3.partial.jsonl"
    finished = plan.calibrate("attn_markov_fig3", params, tmp_path / "run", 4, partial)
    assert len(finished["trainings"]) == 2  # tied and untied
    with partial.open("a") as lines:
        lines.write('{"label": "cut by the ki')
    stopped = plan.timed_out("attn_markov_fig3", partial, timeout=500.0, threads=1)
    assert stopped.status == "timeout"
    assert stopped.trainings == finished["trainings"]
    measured = sum(t["calibration_seconds"] for t in finished["trainings"])
    assert stopped.other_seconds == 500.0 - measured
    assert stopped.model_steps == ExperimentCost(**finished).model_steps
    nothing = plan.plan(params, path, names=["attn_markov_fig3"], steps=4, timeout=0.01)
    assert [(c.status, c.trainings, c.other_seconds) for c in nothing] == [("timeout", [], 0.01)]


def test_planned_requests_sit_between_the_default_and_the_experiments_own() -> None:
    params = load_params(only=[])
    planned = ResourceRequest(mem_mb=1234, runtime=17)
    # attn_markov_fig3 has no resources block of its own at ci scale: the plan's request
    assert params.raw.experiments["attn_markov_fig3"].resources.get("ci") is None
    got = params.resources("attn_markov_fig3", planned)
    assert (got.mem_mb, got.runtime) == (1234, 17)
    assert got.gpu == params.raw.cluster.resources["ci"].gpu
    # an experiment's own block overrides the plan
    own = params.experiment("attn_markov_table2").resources
    paper = load_params(only=[], scale="paper")
    got = paper.resources("attn_markov_table2", planned)
    assert got.runtime == own["paper"].runtime and got.mem_mb == own["paper"].mem_mb


def test_critical_path_adds_the_longest_downstream_chain() -> None:
    seconds = {"a": 75.0, "b": 160.0, "c": 120.0, "d": 10.0, "e": 30.0}
    upstream = {"a": None, "b": "a", "c": None, "d": "a", "e": "d"}
    length = timings.critical_path_seconds(seconds, upstream)
    assert length == {"a": 235.0, "b": 160.0, "c": 120.0, "d": 40.0, "e": 30.0}
    assert length["a"] > length["c"]  # the short rule others wait for starts first
