"""Train one ensemble of models with one Lightning Trainer and return what it learned.

Every training in the harness goes through `train_ensemble`: any ensemble model
(`lightning_modules`), any members (a source and a seed each), any objective. Lightning is
imported by `train_ensemble` itself, so an experiment that trains nothing never loads it
(start-up time). `configure_torch` sets the trainings' precision and how an ensemble too
large for the device's memory is split into chunks of members trained one after the other.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import numpy as np
import torch
from torch import nn

from lightning_modules import EnsembleGPT, GPTConfig
from replicate.chunking import (
    chunk_bounds,
    concat_histories,
    concat_snapshots,
    cuda_member_bytes,
    members_that_fit,
    select_members,
    write_members,
)
from replicate.params import Precision
from replicate.provenance import learning_switched_off

if TYPE_CHECKING:
    import lightning as L

    from lightning_modules import (
        EnsembleModule,
        MarkovEnsembleData,
        Member,
        Objective,
        OptimConfig,
        SequenceBatch,
        TestEvaluation,
    )
    from lightning_modules.measures import Probe


AUTOCAST_DTYPES: dict[str, torch.dtype | None] = {
    "32-true": None,
    "bf16-mixed": torch.bfloat16,
    "16-mixed": torch.float16,
}


@dataclass(frozen=True)
class DeviceSettings:
    """How the trainings use the device, set by `configure_torch`.

    ``precision``: see `Precision`. ``max_members_per_chunk``: train an ensemble in
    consecutive chunks of at most this many members, one after the other (members are
    independent, so the results equal the unchunked run's); None: on CUDA, as many as fit
    in ``memory_fraction`` of the free device memory, from the measured peak of one
    member's training step (`replicate.chunking.cuda_member_bytes`); elsewhere all members.
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


_DEVICE = DeviceSettings()


@dataclass(frozen=True)
class TrainingPlan:
    """Length and data shape of one training run (shared by every member).

    ``seq_len`` is the model's input length; ``gradset_sequences`` > 0 adds a fixed
    gradient set for population-gradient norms (ours, paper C), split into
    ``gradset_chunks`` chunks.
    """

    steps: int
    batch_size: int
    seq_len: int
    eval_every: int
    test_sequences: int
    test_seed: int
    snapshot_steps: tuple[int, ...] = ()
    gradset_sequences: int = 0
    gradset_chunks: int = 8


@dataclass
class TrainedEnsemble:
    """A trained ensemble: the module (with its evaluation history) and its fixed test set."""

    module: EnsembleModule
    members: list[Member]
    test_batch: SequenceBatch
    eval_batch: int

    @property
    def model(self) -> nn.Module:
        return self.module.model

    @property
    def test_tokens(self) -> torch.Tensor:
        return self.test_batch.tokens

    @property
    def eval_steps(self) -> np.ndarray:
        return np.asarray(self.module.eval_steps)

    def history(self, name: str) -> np.ndarray:
        """(E, n_evals, ...) values of ``name`` at the evaluation steps."""
        return np.stack(self.module.history[name], axis=1)

    @property
    def test_loss(self) -> np.ndarray:
        """(E, n_evals) test-loss history."""
        return self.history("test_loss")

    @property
    def grad_norm(self) -> np.ndarray:
        """(E, n_evals) minibatch gradient norm averaged since the previous evaluation."""
        return self.history("grad_norm")

    @property
    def population_grad_norm(self) -> np.ndarray:
        """(E, n_evals) population gradient norm (needs ``plan.gradset_sequences``)."""
        return self.history("population_grad_norm")

    @property
    def population_grad_floor(self) -> np.ndarray:
        """(E, n_evals) noise floor of `population_grad_norm`."""
        return self.history("population_grad_floor")

    @property
    def probes(self) -> dict[str, np.ndarray]:
        """Every probe's (E, n_evals, ...) history."""
        return {name: self.history(name) for name in self.module.probes}

    def evaluate(self) -> TestEvaluation:
        """Next-token loss and transition means of the current weights on the test set."""
        from lightning_modules import evaluate_next_token

        return evaluate_next_token(self.model, self.test_tokens, self.eval_batch)


@dataclass
class _CheckpointScope:
    """Where the `train_ensemble` calls inside `checkpointing` keep their checkpoints."""

    directory: Path
    every: int
    calls: int = field(default=0)

    def folder(self, digest: str) -> Path:
        """The next call's folder, numbered in call order and named after what it trains;
        a folder of the same number left by other settings or code is stale and removed."""
        number = f"{self.calls:03d}"
        self.calls += 1
        folder = self.directory / f"{number}-{digest[:16]}"
        if self.directory.is_dir():
            for old in self.directory.glob(f"{number}-*"):
                if old != folder:
                    shutil.rmtree(old)
        return folder


_SCOPE: _CheckpointScope | None = None
CHECKPOINT_PATTERN = "step*.ckpt"


@contextmanager
def checkpointing(directory: Path, every: int) -> Iterator[None]:
    """Inside this block every `train_ensemble` call saves a Lightning checkpoint each
    ``every`` steps (0: none) and at its end under ``directory``, and resumes from the
    latest one it finds there, so the rerun of a killed job continues its training. The
    caller removes ``directory`` once its outputs are complete."""
    global _SCOPE
    previous, _SCOPE = _SCOPE, _CheckpointScope(Path(directory), every)
    try:
        yield
    finally:
        _SCOPE = previous


@dataclass(frozen=True)
class TrainingCost:
    """One `train_ensemble` call seen inside `calibrating`: its planned size and the
    measured cost of a few of its steps on this machine."""

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
class _Calibration:
    steps: int
    on_cost: Callable[[TrainingCost], None] | None = None
    costs: list[TrainingCost] = field(default_factory=list)

    def record(self, cost: TrainingCost) -> None:
        self.costs.append(cost)
        if self.on_cost is not None:
            self.on_cost(cost)


_CALIBRATION: _Calibration | None = None


@contextmanager
def calibrating(
    steps: int, on_cost: Callable[[TrainingCost], None] | None = None
) -> Iterator[list[TrainingCost]]:
    """Inside this block every `train_ensemble` call trains only ``steps`` steps (at least
    4), evaluating at the first and the last, and appends its `TrainingCost` to the list
    yielded (and hands it to ``on_cost`` as soon as it is measured); what the experiment
    computes from such trainings is meaningless (they serve the cost plan, `replicate.plan`)."""
    global _CALIBRATION
    previous, _CALIBRATION = _CALIBRATION, _Calibration(max(4, steps), on_cost)
    try:
        yield _CALIBRATION.costs
    finally:
        _CALIBRATION = previous


def _training_digest(
    model: nn.Module,
    members: Sequence[Member],
    plan: TrainingPlan,
    optim: OptimConfig,
    label: str,
    objective: Objective,
    test_batch: SequenceBatch,
) -> str:
    """Identity of one training: initial weights, data, plan, optimiser and objective."""
    # A dataclass objective's repr names its fields; another's repr would hold its address.
    objective_id = repr(objective) if is_dataclass(objective) else type(objective).__qualname__
    digest = hashlib.sha256(repr((label, plan, optim, objective_id)).encode())
    for member in members:
        digest.update(f"{member.seed}".encode() + member.source.key())
    for name, tensor in model.state_dict().items():
        raw = tensor.detach().cpu().contiguous().flatten().view(torch.uint8)  # any dtype
        digest.update(name.encode() + raw.numpy().tobytes())
    digest.update(test_batch.tokens.numpy().tobytes())
    return digest.hexdigest()


def _latest_checkpoint(folder: Path) -> Path | None:
    found = sorted(folder.glob(CHECKPOINT_PATTERN)) if folder.is_dir() else []
    return found[-1] if found else None


def configure_torch(
    threads: int,
    precision: Precision = DeviceSettings.precision,
    max_members_per_chunk: int | None = DeviceSettings.max_members_per_chunk,
    memory_fraction: float = DeviceSettings.memory_fraction,
) -> None:
    """Fix the CPU thread count (results are reproducible for a given device and count) and
    the trainings' `DeviceSettings` (the defaults: float32, chunks only where CUDA memory
    needs them)."""
    global _DEVICE
    _DEVICE = DeviceSettings(precision, max_members_per_chunk, memory_fraction)
    torch.set_num_threads(threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # lightning 2.6 vs torch 2.13 pytree notice
    # One process per job: with SLURM installed Lightning suggests srun, which is not needed.
    warnings.filterwarnings("ignore", ".*`srun` command is available.*")
    # Resuming: the checkpoint folder is expected to hold the checkpoint resumed from.
    warnings.filterwarnings("ignore", ".*Checkpoint directory .* exists and is not empty.*")


def gpt_ensemble(
    cfg: GPTConfig, seeds: Sequence[int], initialize: Callable[[EnsembleGPT], None] | None = None
) -> EnsembleGPT:
    """An `EnsembleGPT` with member i initialised from ``seeds[i]``, then ``initialize``
    (under no_grad) for experiments that start from a special point (paper B)."""
    model = EnsembleGPT(cfg, len(seeds))
    model.init_members(list(seeds))
    if initialize is not None:
        with torch.no_grad():
            initialize(model)
    return model


def train_ensemble(
    model: nn.Module,
    members: Sequence[Member],
    plan: TrainingPlan,
    optim: OptimConfig,
    label: str,
    objective: Objective | None = None,
    probes: Mapping[str, Probe] | None = None,
    progress: bool = True,
) -> TrainedEnsemble:
    """Train ``model`` (E = len(members) members) as one batched computation.

    Member i trains on data drawn from ``members[i].source`` with ``members[i].seed``;
    one Trainer, one progress bar. ``plan.snapshot_steps`` keeps parameter copies in
    ``module.snapshots``. Inside `checkpointing`, training is saved every so many steps and
    resumed from the latest one of the same training (same weights, data, plan). Where the
    `DeviceSettings` ask for chunks of fewer members, the chunks train one after the other
    and their results are joined in member order (`_train_in_chunks`).
    """
    from lightning_modules import NextTokenCE

    objective = objective if objective is not None else NextTokenCE()
    if learning_switched_off():
        optim = replace(optim, lr=0.0)
    per_chunk = _members_per_chunk(model, members, plan, objective)
    if per_chunk >= len(members):
        return _train(model, members, plan, optim, label, objective, probes, progress)
    chunks = chunk_bounds(len(members), per_chunk)
    return _train_in_chunks(model, members, chunks, plan, optim, label, objective, probes, progress)


def _members_per_chunk(
    model: nn.Module, members: Sequence[Member], plan: TrainingPlan, objective: Objective
) -> int:
    """The chunk size `DeviceSettings` give for this training (see there)."""
    from lightning_modules import member_generator
    from lightning_modules.sources import sample_members

    if _DEVICE.max_members_per_chunk is not None:
        return _DEVICE.max_members_per_chunk
    if not torch.cuda.is_available() or len(members) == 1:
        return len(members)
    # The largest batch a step sees: a training batch or a chunk of the gradient set.
    rows = max(plan.batch_size, -(-plan.gradset_sequences // plan.gradset_chunks))
    generator = member_generator(members[0].seed, "memory")
    batch = sample_members([members[0]], rows, plan.seq_len + objective.extra_tokens(), [generator])
    needed = cuda_member_bytes(model, objective, batch, AUTOCAST_DTYPES[_DEVICE.precision])
    free, _ = torch.cuda.mem_get_info()
    return members_that_fit(needed, free, _DEVICE.memory_fraction)


def _train_in_chunks(
    model: nn.Module,
    members: Sequence[Member],
    chunks: Sequence[range],
    plan: TrainingPlan,
    optim: OptimConfig,
    label: str,
    objective: Objective,
    probes: Mapping[str, Probe] | None,
    progress: bool,
) -> TrainedEnsemble:
    """Train ``model``'s members chunk by chunk (consecutive ranges of members), one Trainer
    each; write the trained members back into ``model`` and join the chunks' evaluation
    histories and snapshots along the member axis."""
    largest = max(len(chunk) for chunk in chunks)
    print(
        f"{label}: {len(members)} members in {len(chunks)} chunks of at most {largest}",
        file=sys.stderr,
        flush=True,
    )
    parts = []
    for chunk in chunks:
        part = _train(
            select_members(model, chunk),
            [members[i] for i in chunk],
            plan,
            optim,
            f"{label} [{chunk.start}:{chunk.stop}]",
            objective,
            probes,
            progress,
        )
        write_members(model, part.model, chunk)
        parts.append(part)
    data = _data(members, plan, objective)
    module = _module(model, data, plan, optim, objective, probes)
    module.history = concat_histories([p.module.history for p in parts])
    module.eval_steps = list(parts[0].module.eval_steps)
    module.snapshots = concat_snapshots([p.module.snapshots for p in parts])
    return TrainedEnsemble(
        module=module,
        members=list(members),
        test_batch=data.test_batch(),
        eval_batch=plan.batch_size,
    )


def _data(
    members: Sequence[Member], plan: TrainingPlan, objective: Objective
) -> MarkovEnsembleData:
    from lightning_modules import MarkovEnsembleData

    return MarkovEnsembleData(
        members,
        plan.batch_size,
        plan.seq_len + objective.extra_tokens(),
        plan.steps,
        plan.test_sequences,
        plan.test_seed,
        plan.gradset_sequences,
    )


def _module(
    model: nn.Module,
    data: MarkovEnsembleData,
    plan: TrainingPlan,
    optim: OptimConfig,
    objective: Objective,
    probes: Mapping[str, Probe] | None,
) -> EnsembleModule:
    from lightning_modules import EnsembleModule

    return EnsembleModule(
        model,
        optim,
        plan.steps,
        data.test_batch(),
        plan.eval_every,
        eval_batch=plan.batch_size,
        objective=objective,
        snapshot_steps=plan.snapshot_steps,
        probes=probes,
        gradient_set=data.gradient_set(),
        gradient_chunks=plan.gradset_chunks,
    )


def _train(
    model: nn.Module,
    members: Sequence[Member],
    plan: TrainingPlan,
    optim: OptimConfig,
    label: str,
    objective: Objective,
    probes: Mapping[str, Probe] | None,
    progress: bool,
) -> TrainedEnsemble:
    """One Trainer over all of ``members`` (see `train_ensemble`)."""
    import lightning as L

    from replicate.lightning_callbacks import (
        _IntermediateCheckpoints,
        _LabelledProgressBar,
        _StepTimer,
    )

    calibration, planned, started = _CALIBRATION, plan, time.perf_counter()
    if calibration is not None:
        short = min(plan.steps, calibration.steps)
        snapshots = tuple(s for s in plan.snapshot_steps if s <= short)
        plan = replace(plan, steps=short, eval_every=short, snapshot_steps=snapshots)
    data = _data(members, plan, objective)
    module = _module(model, data, plan, optim, objective, probes)
    callbacks: list[L.Callback] = []
    timer = _StepTimer() if calibration is not None else None
    if timer is not None:
        callbacks.append(timer)
    if progress:
        callbacks.append(_LabelledProgressBar(label, refresh_rate=max(1, plan.steps // 50)))
    folder = None
    if _SCOPE is not None and _SCOPE.every > 0:
        folder = _SCOPE.folder(
            _training_digest(model, members, plan, optim, label, objective, data.test_batch())
        )
        callbacks.append(
            _IntermediateCheckpoints(
                dirpath=folder,
                filename="step{step:09d}",
                auto_insert_metric_name=False,
                every_n_train_steps=_SCOPE.every,
                save_top_k=1,
                enable_version_counter=False,
            )
        )
    trainer = L.Trainer(
        accelerator="auto",
        devices=1,
        max_steps=plan.steps,
        logger=False,
        enable_checkpointing=folder is not None,
        enable_model_summary=False,
        enable_progress_bar=progress,
        callbacks=callbacks,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        precision=_DEVICE.precision,
    )
    resume = _latest_checkpoint(folder) if folder is not None else None
    if resume is not None:
        print(f"{label}: resuming from checkpoint {resume}", file=sys.stderr, flush=True)
    trainer.fit(module, datamodule=data, ckpt_path=resume, weights_only=True)
    if folder is not None:
        _keep_final_checkpoint(trainer, folder, plan.steps)
    if calibration is not None and timer is not None:
        calibration.record(
            TrainingCost(
                label=label,
                members=len(members),
                steps=planned.steps,
                eval_every=planned.eval_every,
                parameters=sum(p.numel() for p in model.parameters()),
                step_seconds=timer.step_seconds(),
                eval_seconds=timer.eval_seconds(),
                device=str(module.device),
                calibration_seconds=time.perf_counter() - started,
            )
        )
    module.to("cpu")
    return TrainedEnsemble(
        module=module,
        members=list(members),
        test_batch=data.test_batch(),
        eval_batch=plan.batch_size,
    )


def _keep_final_checkpoint(trainer: L.Trainer, folder: Path, steps: int) -> None:
    """Save the finished training and drop the earlier checkpoints: a rerun of an
    interrupted experiment then restores this training instead of repeating it."""
    final = folder / f"step{steps:09d}.ckpt"
    trainer.save_checkpoint(final)
    for path in folder.glob(CHECKPOINT_PATTERN):
        if path != final:
            path.unlink()
