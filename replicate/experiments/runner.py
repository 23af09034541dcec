"""The runner: one experiment from its params to its complete outputs.

It calls the experiment's function (`replicate.experiments.base`), adds ``metrics.json`` and
``provenance.json`` and checks that exactly the outputs that params.yaml lists were written.
Trainings inside an experiment checkpoint under ``checkpoints/<name>/`` (outside the DVC
outputs; every ``cluster.checkpoint_every`` steps) and a rerun after a crash resumes from
there; the folder is removed once the outputs are complete. Wall-clock timings go to
``logs/<scale>/benchmarks/`` (`replicate.params.timings_dir`), never to the outputs.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch

from replicate import io
from replicate.experiments import REGISTRY
from replicate.experiments.base import Metrics, RunContext
from replicate.params import METRICS_FILE, PROVENANCE_FILE, Params
from replicate.provenance import (
    CODE_DIGEST,
    LEARNING,
    learning_switched_off,
    recorded_inputs,
)
from replicate.sources import experiment_digest
from replicate.training import (
    Calibration,
    CheckpointScope,
    DeviceSettings,
    TrainingContext,
    configure_torch,
)

CHECKPOINT_DIR = Path("checkpoints")


def provenance(name: str, params: Params) -> dict[str, object]:
    """What produced an experiment's outputs: `recorded_inputs` (every params.yaml value
    that shapes them), the device and library versions and the code's digest; in a run with
    learning switched off (the negative control), `LEARNING`: ``off``."""
    return {
        **recorded_inputs(name, params),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        CODE_DIGEST: experiment_digest(name),
        **({LEARNING: "off"} if learning_switched_off() else {}),
    }


def _check_metrics(name: str, metrics: Mapping[str, float]) -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{name}: metric {key!r} is {type(value).__name__}, not a number")
        flat[key] = float(value)
    return flat


def run_experiment(
    name: str,
    params: Params,
    root: Path = Path("."),
    progress: bool = True,
    calibration: Calibration | None = None,
) -> Metrics:
    """Run experiment ``name`` at the params' scale; write its outputs under ``root``. With
    ``calibration``, every training is cut short to measure its cost (`replicate.plan`)."""
    return run_in_context(name, params, root, progress, calibration)[0]


def run_in_context(
    name: str,
    params: Params,
    root: Path = Path("."),
    progress: bool = True,
    calibration: Calibration | None = None,
) -> tuple[Metrics, RunContext]:
    """`run_experiment`, also returning the run's context: what it wrote and read, and the
    layout problems of its figures (`RunContext.layout_problems`, also printed)."""
    entry = params.experiment(name)
    runtime = params.raw.runtime
    configure_torch(runtime.threads)
    checkpoints = root / CHECKPOINT_DIR / name
    ctx = RunContext(
        name=name,
        entry=entry,
        scale=params.scale,
        out_dir=root / params.directory(name),
        shared=params.raw.classification,
        training=TrainingContext(
            device=DeviceSettings(runtime.precision, runtime.max_members_per_chunk),
            checkpoints=CheckpointScope(checkpoints, params.checkpoint_every),
            calibration=calibration,
            progress=progress,
        ),
    )
    io.remove_stale_temps(ctx.out_dir, recursive=True)  # left by a run killed mid-write
    started = time.perf_counter()
    metrics = _check_metrics(name, REGISTRY[name].run(params.settings(name), ctx))
    elapsed = time.perf_counter() - started
    if sorted(ctx.written) != sorted(entry.outputs):
        raise RuntimeError(
            f"{name} wrote {sorted(ctx.written)} "
            f"but params.yaml lists outputs {sorted(entry.outputs)}"
        )
    if ctx.read != set(entry.reads):
        raise RuntimeError(
            f"{name} declares reads: {sorted(entry.reads)} in params.yaml but read "
            f"{sorted(ctx.read)}"
        )
    io.write_json(ctx.out_dir / METRICS_FILE, metrics)
    io.write_json(ctx.out_dir / PROVENANCE_FILE, provenance(name, params))
    shutil.rmtree(checkpoints, ignore_errors=True)  # the outputs are complete
    for problem in ctx.layout_problems:
        print(f"{name}: figure layout: {problem}", file=sys.stderr)
    # For the person at the terminal (and the rule's log); Snakemake's benchmark file is
    # the record.
    print(f"{name}: done in {elapsed:.1f} s ({params.scale} scale)", file=sys.stderr)
    return metrics, ctx
