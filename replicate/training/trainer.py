"""Train one ensemble of models with one Lightning Trainer and return what it learned.

Every training in the harness goes through `train_ensemble`: any ensemble model
(`lightning_modules`), any members (a source and a seed each), any objective, and a
`TrainingContext` for what it takes from outside its own settings. Lightning is imported
by the training itself, so an experiment that trains nothing never loads it (start-up time).

Evaluation runs in the module's ``on_train_batch_end`` (`lightning_modules.EnsembleModule`)
rather than in Lightning's validation loop, and its curves are kept in the module rather
than written by a Lightning logger: the papers' curves start at step 0, before any update,
which a validation loop at ``val_check_interval`` never evaluates, and the population
gradient norms of paper C need gradients, which the validation loop switches off.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from replicate.provenance import learning_switched_off
from replicate.training.checkpoints import LAST, checkpoint_callback, save_final, training_digest
from replicate.training.chunking import (
    chunk_bounds,
    concat_histories,
    concat_snapshots,
    cuda_member_bytes,
    members_that_fit,
    select_members,
    write_members,
)
from replicate.training.context import AUTOCAST_DTYPES, TrainingContext, TrainingCost
from replicate.training.ensemble import TrainedEnsemble, TrainingPlan

if TYPE_CHECKING:
    import lightning as L

    from lightning_modules import (
        EnsembleModule,
        MarkovEnsembleData,
        Member,
        Objective,
        OptimConfig,
    )
    from lightning_modules.measures import Probe
    from replicate.training.callbacks import StepTimer


def train_ensemble(
    model: nn.Module,
    members: Sequence[Member],
    plan: TrainingPlan,
    optim: OptimConfig,
    label: str,
    objective: Objective | None = None,
    probes: Mapping[str, Probe] | None = None,
    context: TrainingContext | None = None,
) -> TrainedEnsemble:
    """Train ``model`` (E = len(members) members) as one batched computation.

    Member i trains on data drawn from ``members[i].source`` with ``members[i].seed``;
    one Trainer, one progress bar (``context.progress``; no context: the defaults of
    `TrainingContext`). ``plan.snapshot_steps`` keeps parameter copies in
    ``module.snapshots``. With ``context.checkpoints``, training is saved every so many
    steps and resumed from the latest save of the same training (same weights, data, plan).
    Where ``context.device`` asks for chunks of fewer members, the chunks train one after
    the other and their results are joined in member order (`_train_in_chunks`); with
    ``context.calibration``, the training is cut short and its cost recorded.
    """
    from lightning_modules import NextTokenCE

    objective = objective if objective is not None else NextTokenCE()
    if learning_switched_off():
        optim = replace(optim, lr=0.0)
    run = _Run(plan, optim, objective, probes, context or TrainingContext())
    per_chunk = _members_per_chunk(model, members, run)
    if per_chunk >= len(members):
        return _train(model, members, label, run)
    return _train_in_chunks(model, members, chunk_bounds(len(members), per_chunk), label, run)


@dataclass(frozen=True)
class _Run:
    """One `train_ensemble` call's settings, shared by its chunks."""

    plan: TrainingPlan
    optim: OptimConfig
    objective: Objective
    probes: Mapping[str, Probe] | None
    context: TrainingContext

    def calibrated(self) -> _Run:
        """The run a `Calibration` asks for: at most its steps, evaluated at the first and
        the last, keeping the snapshots those steps reach."""
        calibration = self.context.calibration
        if calibration is None:
            return self
        short = min(self.plan.steps, calibration.steps)
        snapshots = tuple(s for s in self.plan.snapshot_steps if s <= short)
        plan = replace(self.plan, steps=short, eval_every=short, snapshot_steps=snapshots)
        return replace(self, plan=plan)


def _members_per_chunk(model: nn.Module, members: Sequence[Member], run: _Run) -> int:
    """The chunk size ``run.context.device`` gives for this training (see `DeviceSettings`)."""
    from lightning_modules import member_generator
    from lightning_modules.sources import sample_members

    device, plan = run.context.device, run.plan
    if device.max_members_per_chunk is not None:
        return device.max_members_per_chunk
    if not torch.cuda.is_available() or len(members) == 1:
        return len(members)
    # The largest batch a step sees: a training batch or a chunk of the gradient set.
    rows = max(plan.batch_size, -(-plan.gradset_sequences // plan.gradset_chunks))
    generator = member_generator(members[0].seed, "memory")
    length = plan.seq_len + run.objective.extra_tokens()
    batch = sample_members([members[0]], rows, length, [generator])
    needed = cuda_member_bytes(model, run.objective, batch, AUTOCAST_DTYPES[device.precision])
    free, _ = torch.cuda.mem_get_info()
    return members_that_fit(needed, free, device.memory_fraction)


def _train_in_chunks(
    model: nn.Module, members: Sequence[Member], chunks: Sequence[range], label: str, run: _Run
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
            f"{label} [{chunk.start}:{chunk.stop}]",
            run,
        )
        write_members(model, part.model, chunk)
        parts.append(part)
    data = _data(members, run)
    module = _module(model, data, run)
    module.history = concat_histories([p.module.history for p in parts])
    module.eval_steps = list(parts[0].module.eval_steps)
    module.snapshots = concat_snapshots([p.module.snapshots for p in parts])
    return TrainedEnsemble(
        module=module,
        members=list(members),
        test_batch=data.test_batch(),
        eval_batch=run.plan.batch_size,
    )


def _data(members: Sequence[Member], run: _Run) -> MarkovEnsembleData:
    from lightning_modules import MarkovEnsembleData

    plan = run.plan
    return MarkovEnsembleData(
        members,
        plan.batch_size,
        plan.seq_len + run.objective.extra_tokens(),
        plan.steps,
        plan.test_sequences,
        plan.test_seed,
        plan.gradset_sequences,
    )


def _module(model: nn.Module, data: MarkovEnsembleData, run: _Run) -> EnsembleModule:
    from lightning_modules import EnsembleModule

    plan = run.plan
    return EnsembleModule(
        model,
        run.optim,
        plan.steps,
        data.test_batch(),
        plan.eval_every,
        eval_batch=plan.batch_size,
        objective=run.objective,
        snapshot_steps=plan.snapshot_steps,
        probes=run.probes,
        gradient_set=data.gradient_set(),
        gradient_chunks=plan.gradset_chunks,
    )


def _train(
    model: nn.Module, members: Sequence[Member], label: str, planned: _Run
) -> TrainedEnsemble:
    """One Trainer over all of ``members`` (see `train_ensemble`)."""
    from replicate.training.callbacks import StepTimer

    started = time.perf_counter()
    run = planned.calibrated()
    data = _data(members, run)
    module = _module(model, data, run)
    timer = StepTimer() if run.context.calibration is not None else None
    folder = _checkpoint_folder(model, members, label, run, data)
    trainer = _trainer(label, run, folder, timer)
    resume = "last" if folder is not None else None
    if folder is not None and (folder / LAST).exists():
        print(f"{label}: resuming from checkpoint {folder / LAST}", file=sys.stderr, flush=True)
    trainer.fit(module, datamodule=data, ckpt_path=resume, weights_only=True)
    if folder is not None:
        save_final(trainer, folder)
    if run.context.calibration is not None and timer is not None:
        run.context.calibration.record(
            _cost(label, len(members), model, module, planned.plan, timer, started)
        )
    module.to("cpu")
    return TrainedEnsemble(
        module=module,
        members=list(members),
        test_batch=data.test_batch(),
        eval_batch=run.plan.batch_size,
    )


def _checkpoint_folder(
    model: nn.Module,
    members: Sequence[Member],
    label: str,
    run: _Run,
    data: MarkovEnsembleData,
) -> Path | None:
    """This training's checkpoint folder (None: the context keeps no checkpoints)."""
    scope = run.context.checkpoints
    if scope is None or scope.every <= 0:
        return None
    test_batch = data.test_batch()
    return scope.folder(
        training_digest(model, members, run.plan, run.optim, label, run.objective, test_batch)
    )


def _trainer(label: str, run: _Run, folder: Path | None, timer: StepTimer | None) -> L.Trainer:
    """The Lightning Trainer of one training: its progress bar, checkpoints and step timer
    as the context asks."""
    import lightning as L

    from replicate.training.callbacks import LabelledProgressBar

    # Lightning sets its own logger to INFO when imported: its notices (the device found, a
    # logging tip) would fill every rule's log.
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    callbacks: list[L.Callback] = [] if timer is None else [timer]
    if run.context.progress:
        callbacks.append(LabelledProgressBar(label, run.plan.steps))
    if folder is not None and run.context.checkpoints is not None:
        callbacks.append(checkpoint_callback(folder, run.context.checkpoints.every))
    return L.Trainer(
        accelerator="auto",
        devices=1,
        max_steps=run.plan.steps,
        logger=False,
        enable_checkpointing=folder is not None,
        enable_model_summary=False,
        enable_progress_bar=run.context.progress,
        callbacks=callbacks,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        precision=run.context.device.precision,
    )


def _cost(
    label: str,
    members: int,
    model: nn.Module,
    module: EnsembleModule,
    plan: TrainingPlan,
    timer: StepTimer,
    started: float,
) -> TrainingCost:
    """What a calibrated training (begun at ``started``, `time.perf_counter`) measured, for
    the full ``plan``."""
    return TrainingCost(
        label=label,
        members=members,
        steps=plan.steps,
        eval_every=plan.eval_every,
        parameters=sum(p.numel() for p in model.parameters()),
        step_seconds=timer.step_seconds(),
        eval_seconds=timer.eval_seconds(),
        device=str(module.device),
        calibration_seconds=time.perf_counter() - started,
    )
