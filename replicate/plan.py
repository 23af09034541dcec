"""The cost plan of a scale: what every rule trains and what it will cost here.

`python -m replicate plan --scale paper` runs each experiment once in a child process with
every training cut to a few steps (`replicate.training.Calibration`): the child records, per
`train_ensemble` call, the planned members and steps and the measured wall time of a
training step and of an evaluation, and, for the whole experiment, the time outside the
trainings (data, closed forms, figures) and the peak memory. The estimate of a rule is

    other seconds + sum over its trainings of (steps x step seconds + evaluations x eval seconds)

on the machine the plan ran on (its device and thread count); CPU-hours are that times the
threads, GPU-hours that time when the calibration ran on a GPU (none measured otherwise).
The resources written for the cluster profile (`planned_resources_file`) add a margin.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from replicate.io import write_text
from replicate.params import Params, ResourceRequest
from replicate.timings import planned_resources_file, read_plan

if TYPE_CHECKING:
    from replicate.training import TrainingCost

CALIBRATION_STEPS = 8
"""Training steps per `train_ensemble` call in a calibration run (the first is warm-up)."""
RUNTIME_MARGIN = 3.0
"""Requested wall time = estimate x this, at least `MIN_RUNTIME` minutes (two calibrations of
the same rule on a shared machine differed by 2x)."""
MEMORY_MARGIN = 1.5
"""Requested memory = measured peak x this, rounded up to 100 MB, at least `MIN_MEM_MB`."""
MIN_RUNTIME = 10
MIN_MEM_MB = 1000


@dataclass
class ExperimentCost:
    """One rule's calibration: its trainings, the rest of its work, its peak memory."""

    name: str
    status: str
    """``ok``, ``timeout`` (the calibration ran past its limit: a lower bound) or the error."""
    trainings: list[dict] = field(default_factory=list)
    """`replicate.training.TrainingCost` fields plus its estimate ``seconds``."""
    other_seconds: float = 0.0
    peak_mb: float = 0.0
    device: str = "cpu"
    threads: int = 1

    @property
    def model_steps(self) -> int:
        """Members x steps summed over the rule's trainings."""
        return sum(t["members"] * t["steps"] for t in self.trainings)

    @property
    def seconds(self) -> float:
        return self.other_seconds + sum(t["seconds"] for t in self.trainings)

    @property
    def cpu_hours(self) -> float:
        return self.seconds * self.threads / 3600 if self.device == "cpu" else 0.0

    @property
    def gpu_hours(self) -> float | None:
        """Measured only when the calibration ran on a GPU."""
        return self.seconds / 3600 if self.device.startswith("cuda") else None

    def request(self) -> ResourceRequest:
        """What the rule's job should ask a scheduler for (margins included)."""
        runtime = max(MIN_RUNTIME, math.ceil(self.seconds * RUNTIME_MARGIN / 60))
        mem_mb = max(MIN_MEM_MB, 100 * math.ceil(self.peak_mb * MEMORY_MARGIN / 100))
        return ResourceRequest(mem_mb=mem_mb, runtime=runtime)


def calibrate(
    name: str,
    params: Params,
    root: Path,
    steps: int = CALIBRATION_STEPS,
    partial: Path | None = None,
) -> dict:
    """Run experiment ``name`` under ``root`` with every training cut to ``steps`` steps;
    return its `ExperimentCost` fields (called in a child process by `plan`). Each training's
    cost is also appended to ``partial`` (one JSON line) as soon as it is measured, so a
    calibration stopped by `plan`'s timeout still reports the trainings it got through."""
    import torch

    from replicate.experiments.runner import run_experiment
    from replicate.training import Calibration

    def append(cost: TrainingCost) -> None:
        if partial is not None:
            with partial.open("a") as lines:
                lines.write(json.dumps(_training_fields(cost)) + "\n")

    started = time.perf_counter()
    status = "ok"
    calibration = Calibration(steps, on_cost=append)
    try:
        run_experiment(name, params, root=root, progress=False, calibration=calibration)
    except Exception as exc:
        status = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    costs = calibration.costs
    wall = time.perf_counter() - started
    measured = sum(c.calibration_seconds for c in costs)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device = costs[0].device if costs else "cpu"
    if torch.cuda.is_available():
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
        device = "cuda"
    trainings = [_training_fields(c) for c in costs]
    return asdict(
        ExperimentCost(
            name=name,
            status=status,
            trainings=trainings,
            other_seconds=max(0.0, wall - measured),
            peak_mb=peak_mb,
            device=device,
            threads=params.raw.runtime.threads,
        )
    )


def _training_fields(cost: TrainingCost) -> dict:
    return {**asdict(cost), "seconds": cost.seconds}


def timed_out(name: str, partial: Path, timeout: float, threads: int) -> ExperimentCost:
    """The cost of a calibration stopped after ``timeout`` seconds: the trainings it had
    measured (``partial``, written by `calibrate`) and the rest of the time as other work.
    The trainings it had not reached are missing, so the estimate is a lower bound."""
    lines = partial.read_text().splitlines() if partial.exists() else []
    trainings = []
    for line in lines:
        try:
            trainings.append(json.loads(line))
        except json.JSONDecodeError:  # the last line, cut by the kill
            break
    measured = sum(t["calibration_seconds"] for t in trainings)
    return ExperimentCost(
        name=name,
        status="timeout",
        trainings=trainings,
        other_seconds=max(0.0, timeout - measured),
        device=trainings[0]["device"] if trainings else "cpu",
        threads=threads,
    )


def calibration_order(params: Params, names: list[str] | None = None) -> list[str]:
    """Every experiment (or ``names``) with the whole chain of experiments each reads (paper
    D's Table 4 reads Table 3, which reads the maps), upstream ones first."""
    wanted = set(params.experiments if names is None else names)
    reads = list(wanted)
    while reads:
        upstream = params.upstream_of(reads.pop())
        if upstream is not None and upstream not in wanted:
            wanted.add(upstream)
            reads.append(upstream)
    return [name for name in params.experiments if name in wanted]


def plan(
    params: Params,
    params_file: Path,
    names: list[str] | None = None,
    steps: int = CALIBRATION_STEPS,
    timeout: float = 600.0,
) -> list[ExperimentCost]:
    """Calibrate every experiment (or ``names``, with the experiments they read) of
    ``params`` in dependency order, each in its own process (its own peak memory), in one
    scratch folder (derived experiments read their upstream's calibration outputs)."""
    chosen = calibration_order(params, names)
    results: list[ExperimentCost] = []
    env = {**os.environ, "OMP_NUM_THREADS": str(params.raw.runtime.threads)}
    with tempfile.TemporaryDirectory(prefix="replicate-plan-") as scratch:
        for name in chosen:
            out = Path(scratch) / f"{name}.json"
            partial = out.with_suffix(".partial.jsonl")
            command = [
                sys.executable,
                "-m",
                "replicate",
                "--params",
                str(Path(params_file).resolve()),
                "--scale",
                params.scale,
                "calibrate",
                name,
                "--root",
                scratch,
                "--steps",
                str(steps),
                "--out",
                str(out),
                "--partial",
                str(partial),
            ]
            try:
                subprocess.run(command, env=env, timeout=timeout, check=False, capture_output=True)
            except subprocess.TimeoutExpired:
                cost = timed_out(name, partial, timeout, params.raw.runtime.threads)
            else:
                cost = (
                    ExperimentCost(**json.loads(out.read_text()))
                    if out.exists()
                    else ExperimentCost(name=name, status="calibration process failed")
                )
            results.append(cost)
            # Each rule as it is calibrated: a plan stopped part-way still reports these.
            print(
                f"[{len(results)}/{len(chosen)}] {name}: {cost.seconds / 3600:.3f} h on "
                f"{cost.device} ({cost.status})",
                file=sys.stderr,
                flush=True,
            )
    return results


def table(costs: list[ExperimentCost]) -> str:
    """The plan as a Markdown table, one row per rule, then the totals."""
    lines = [
        "| rule | trainings | model-steps | peak memory (MB) | estimate (h) | CPU-hours "
        "| GPU-hours | calibration |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in costs:
        gpu = "—" if c.gpu_hours is None else f"{c.gpu_hours:.3f}"
        lines.append(
            f"| {c.name} | {len(c.trainings)} | {c.model_steps:,} | {c.peak_mb:,.0f} "
            f"| {c.seconds / 3600:.3f} | {c.cpu_hours:.3f} | {gpu} | {c.status} |"
        )
    gpu_total = [c.gpu_hours for c in costs if c.gpu_hours is not None]
    peak = max((c.peak_mb for c in costs), default=0.0)
    lines.append(
        f"| **total** | {sum(len(c.trainings) for c in costs)} "
        f"| {sum(c.model_steps for c in costs):,} | {peak:,.0f} "
        f"| {sum(c.seconds for c in costs) / 3600:.3f} | {sum(c.cpu_hours for c in costs):.3f} "
        f"| {f'{sum(gpu_total):.3f}' if gpu_total else '—'} | |"
    )
    return "\n".join(lines)


def write_resources(costs: list[ExperimentCost], scale: str, root: Path = Path(".")) -> Path:
    """Write each rule's request (and its estimate, for job ordering) where the Snakefile
    reads it; rules whose calibration did not finish keep the `cluster.resources` default.
    A plan of some experiments leaves the other experiments' entries as the file had them
    (an entry of an experiment no longer registered goes)."""
    from replicate.experiments import REGISTRY

    path = planned_resources_file(scale, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    calibrated = {c.name for c in costs}
    rules = {
        name: entry
        for name, entry in read_plan(scale, root).items()
        if name in REGISTRY and name not in calibrated
    }
    rules |= {
        c.name: {**c.request().model_dump(exclude_none=True), "seconds": round(c.seconds, 1)}
        for c in costs
        if c.status == "ok"
    }
    header = (
        f"# Written by `python -m replicate plan --scale {scale}` (replicate/plan.py): per rule,\n"
        "# mem_mb and runtime (minutes) with margins, and the estimated seconds on the\n"
        f"# calibration machine ({costs[0].device if costs else 'cpu'}). An experiment's own\n"
        "# `resources:` in params.yaml overrides these; missing rules use cluster.resources.\n"
    )
    write_text(path, header + yaml.safe_dump(rules, sort_keys=True))
    return path
