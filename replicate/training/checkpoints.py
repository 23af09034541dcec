"""A training's checkpoints, by Lightning's own mechanism: `ModelCheckpoint(save_last=True)`
writes ``last.ckpt`` every so many steps, ``fit(ckpt_path="last")`` resumes from it, and the
finished training is saved there too, so the rerun of a killed experiment restores a
finished training instead of repeating it and continues an unfinished one.

Each training has its own folder (`replicate.training.context.CheckpointScope`), named after
what it trains (`training_digest`): a checkpoint of other weights, data or settings is never
resumed from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    import lightning as L

    from lightning_modules import Member, Objective, OptimConfig, SequenceBatch
    from replicate.training.ensemble import TrainingPlan

LAST = "last.ckpt"
"""The file Lightning's ``save_last`` writes and ``ckpt_path="last"`` finds."""


def training_digest(
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


def checkpoint_callback(folder: Path, every: int) -> L.Callback:
    """Lightning's checkpoint callback saving only ``folder``/last.ckpt, every ``every``
    steps but the last (`replicate.training.callbacks.IntermediateCheckpoints`)."""
    from replicate.training.callbacks import IntermediateCheckpoints

    return IntermediateCheckpoints(
        dirpath=folder,
        every_n_train_steps=every,
        save_top_k=0,
        save_last=True,
        enable_version_counter=False,
    )


def save_final(trainer: L.Trainer, folder: Path) -> None:
    """Save the finished training (with its last evaluation, recorded after the callbacks
    ran) as the checkpoint that ``ckpt_path="last"`` resumes from."""
    trainer.save_checkpoint(folder / LAST)
