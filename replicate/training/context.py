"""What a training does besides its own settings, handed to it as one object.

A `TrainingContext` says how the trainings use the device (`DeviceSettings`), where they
keep their checkpoints (`CheckpointScope`), whether they are cut short to measure their
cost (`Calibration`) and whether they show progress. The runner makes one from params.yaml
(`replicate.experiments.runner`) and every `train_ensemble` call receives it, so what a
training does depends on its arguments only: two trainings in one process can differ, and
no call leaves state behind for the next. `configure_torch` sets what is the process's own
(the CPU thread count and the warnings torch and Lightning print).
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import get_args

import torch

from replicate.params import Precision

AUTOCAST_DTYPES = MappingProxyType(
    {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
)
"""The autocast dtype of each `Precision` (None: float32 throughout)."""


@dataclass(frozen=True)
class DeviceSettings:
    """How the trainings use the device.

    ``precision``: see `Precision`. ``max_members_per_chunk``: train an ensemble in
    consecutive chunks of at most this many members, one after the other (members are
    independent, so the results equal the unchunked run's); None: on CUDA, as many as fit
    in ``memory_fraction`` of the free device memory, from the measured peak of one
    member's training step (`replicate.training.chunking.cuda_member_bytes`); elsewhere all
    members.
    """

    precision: Precision = "32-true"
    max_members_per_chunk: int | None = None
    memory_fraction: float = 0.8

    def __post_init__(self) -> None:
        if self.precision not in get_args(Precision):
            raise ValueError(f"precision must be one of {get_args(Precision)}")
        if self.max_members_per_chunk is not None and self.max_members_per_chunk < 1:
            raise ValueError("max_members_per_chunk must be at least 1 (or None: automatic)")
        if not 0.0 < self.memory_fraction <= 1.0:
            raise ValueError("memory_fraction must lie in (0, 1]")


@dataclass
class CheckpointScope:
    """Where one experiment's trainings keep their checkpoints: each training saves a
    Lightning checkpoint every ``every`` steps (0: none) and at its end in its own folder
    under ``directory``, and resumes from it, so the rerun of a killed job continues its
    training. The runner removes ``directory`` once the experiment's outputs are complete."""

    directory: Path
    every: int
    calls: int = field(default=0)

    def folder(self, digest: str) -> Path:
        """The next training's folder, numbered in call order and named after what it
        trains (``digest``); a folder of the same number left by other settings or code is
        stale and removed."""
        number = f"{self.calls:03d}"
        self.calls += 1
        folder = self.directory / f"{number}-{digest[:16]}"
        if self.directory.is_dir():
            for old in self.directory.glob(f"{number}-*"):
                if old != folder:
                    shutil.rmtree(old)
        return folder


@dataclass(frozen=True)
class TrainingCost:
    """One training cut short by a `Calibration`: its planned size and the measured cost of
    a few of its steps on this machine."""

    label: str
    members: int
    steps: int
    eval_every: int
    parameters: int
    step_seconds: float
    """Median wall time of one training step (sampling, forward, backward, update)."""
    eval_seconds: float
    """Wall time of one evaluation (test loss, gradient norms, probes)."""
    device: str
    calibration_seconds: float
    """Wall time of the shortened training itself (data, module, fit)."""

    @property
    def evaluations(self) -> int:
        """Evaluations of the full training: step 0, every ``eval_every``, the last step."""
        return self.steps // self.eval_every + 1 + int(self.steps % self.eval_every != 0)

    @property
    def seconds(self) -> float:
        """Estimated wall time of the full training."""
        return self.steps * self.step_seconds + self.evaluations * self.eval_seconds


@dataclass
class Calibration:
    """Train only ``steps`` steps (at least 4), evaluating at the first and the last, and
    collect each training's `TrainingCost` in ``costs`` (handing it to ``on_cost`` as soon
    as it is measured); what an experiment computes from such trainings is meaningless
    (they serve the cost plan, `replicate.plan`)."""

    steps: int
    on_cost: Callable[[TrainingCost], None] | None = None
    costs: list[TrainingCost] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.steps = max(4, self.steps)

    def record(self, cost: TrainingCost) -> None:
        self.costs.append(cost)
        if self.on_cost is not None:
            self.on_cost(cost)


@dataclass(frozen=True)
class TrainingContext:
    """Everything a `train_ensemble` call takes from outside its own settings (see the
    module's docstring); the default trains on the device in float32, without checkpoints,
    in full and quietly."""

    device: DeviceSettings = DeviceSettings()
    checkpoints: CheckpointScope | None = None
    calibration: Calibration | None = None
    progress: bool = False


def configure_torch(threads: int) -> None:
    """Fix the process's CPU thread count (results are reproducible for a given device and
    count) and silence the notices of torch and Lightning that say nothing about this
    harness's trainings."""
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # lightning 2.6 vs torch 2.13 pytree notice
    # One process per job: with SLURM installed Lightning suggests srun, which is not needed.
    warnings.filterwarnings("ignore", ".*`srun` command is available.*")
    # Resuming: the checkpoint folder is expected to hold the checkpoint resumed from, and a
    # training's first run finds none there.
    warnings.filterwarnings("ignore", ".*Checkpoint directory .* exists and is not empty.*")
    warnings.filterwarnings("ignore", '.*ckpt_path="last"\\) is set, but there is no last.*')
