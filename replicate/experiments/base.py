"""What every experiment shares: its registry entry, its run context and the runner.

An experiment is a function ``run(settings, ctx) -> metrics`` that trains or computes, writes
its figure/CSV outputs through ``ctx`` and returns a flat dict of numbers. The runner adds
``metrics.json`` and ``provenance.json`` and checks that exactly the outputs that params.yaml
lists were written. Trainings inside an experiment checkpoint under ``checkpoints/<name>/``
(outside the DVC outputs; every ``cluster.checkpoint_every`` steps) and a rerun after a
crash resumes from there; the folder is removed once the outputs are complete. Wall-clock
timings are Snakemake's benchmark files (``logs/benchmarks/``), never outputs.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure
from pydantic import BaseModel

from replicate import io
from replicate.config import METRICS_FILE, PROVENANCE_FILE, Classification, ExperimentEntry, Params
from replicate.provenance import recorded_inputs
from replicate.training import checkpointing, configure_torch

Metrics = dict[str, float]
CHECKPOINT_DIR = Path("checkpoints")


def provenance(name: str, params: Params) -> dict[str, object]:
    """What produced an experiment's outputs: `recorded_inputs` (every params.yaml value
    that shapes them), plus the device and library versions (issue 11)."""
    return {
        **recorded_inputs(name, params),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
    }


@dataclass
class RunContext:
    """Where and how one experiment writes, plus the shared run-classification thresholds."""

    name: str
    entry: ExperimentEntry
    scale: str
    out_dir: Path
    shared: Classification
    progress: bool = True
    written: list[str] = field(default_factory=list)
    read: set[str] = field(default_factory=set)

    @property
    def classification(self) -> Classification:
        """The shared run-classification thresholds; only for an experiment that declares
        ``reads: [classification]`` in params.yaml (they are then among its inputs)."""
        if "classification" not in self.entry.reads:
            raise RuntimeError(
                f"{self.name} reads the classification thresholds: add `reads: "
                f"[classification]` to its entry in params.yaml"
            )
        self.read.add("classification")
        return self.shared

    def save_figure(self, fig: Figure, stem: str = "figure") -> None:
        """Write ``stem``.png and ``stem``.pdf, then release the figure."""
        import matplotlib.pyplot as plt

        for suffix in (".png", ".pdf"):
            io.save_figure(fig, self.out_dir / f"{stem}{suffix}")
            self.written.append(f"{stem}{suffix}")
        plt.close(fig)

    def save_csv(self, frame: pd.DataFrame, name: str) -> None:
        io.write_csv(self.out_dir / name, frame)
        self.written.append(name)

    def save_torch(self, obj: object, name: str) -> None:
        """Tensors for a downstream experiment (e.g. trained weights)."""
        io.write_torch(self.out_dir / name, obj)
        self.written.append(name)

    def save_text(self, text: str, name: str) -> None:
        io.write_text(self.out_dir / name, text)
        self.written.append(name)

    def label(self, detail: str) -> str:
        return f"{self.name} {detail}"


@dataclass(frozen=True)
class Experiment:
    """A registry entry: the settings schema and the function that runs the experiment."""

    settings_model: type[BaseModel]
    run: Callable[[BaseModel, RunContext], Metrics]


def _check_metrics(name: str, metrics: Mapping[str, float]) -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{name}: metric {key!r} is {type(value).__name__}, not a number")
        flat[key] = float(value)
    return flat


def run_experiment(
    name: str, params: Params, root: Path = Path("."), progress: bool = True
) -> Metrics:
    """Run experiment ``name`` at the params' scale; write its outputs under ``root``."""
    from replicate.experiments import REGISTRY

    entry = params.experiment(name)
    settings = params.settings(name)
    runtime = params.raw.runtime
    configure_torch(runtime.threads, runtime.precision, runtime.max_members_per_chunk)
    ctx = RunContext(
        name=name,
        entry=entry,
        scale=params.scale,
        out_dir=root / entry.directory,
        shared=params.raw.classification,
        progress=progress,
    )
    io.remove_stale_temps(ctx.out_dir, recursive=True)  # left by a run killed mid-write
    checkpoints = root / CHECKPOINT_DIR / name
    started = time.perf_counter()
    with checkpointing(checkpoints, params.checkpoint_every):
        metrics = _check_metrics(name, REGISTRY[name].run(settings, ctx))
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
    # For the person at the terminal (and the rule's log); Snakemake's benchmark file is
    # the record.
    print(f"{name}: done in {elapsed:.1f} s ({params.scale} scale)", file=sys.stderr)
    return metrics
