"""Train one ensemble of models with one Lightning Trainer and return what it learned."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import TQDMProgressBar

from lightning_modules import (
    ChainMember,
    EnsembleGPT,
    EnsembleLM,
    GPTConfig,
    MarkovEnsembleData,
    OptimConfig,
)


@dataclass(frozen=True)
class TrainingPlan:
    """Length and data shape of one training run (shared by every member)."""

    steps: int
    batch_size: int
    seq_len: int
    eval_every: int
    test_sequences: int
    test_seed: int
    snapshot_steps: tuple[int, ...] = ()


@dataclass
class TrainedEnsemble:
    """A trained ensemble: the module (with its test-loss history) and its fixed test set."""

    module: EnsembleLM
    members: list[ChainMember]
    test_tokens: torch.Tensor

    @property
    def eval_steps(self) -> np.ndarray:
        return np.asarray(self.module.eval_steps)

    @property
    def test_loss(self) -> np.ndarray:
        """(E, n_evals) test-loss history."""
        return np.stack(self.module.eval_losses, axis=1)


def configure_torch(threads: int) -> None:
    """Fix the CPU thread count (results are reproducible for a given device and count)."""
    torch.set_num_threads(threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")  # lightning 2.6 vs torch 2.13 pytree notice


def train_ensemble(
    cfg: GPTConfig,
    members: Sequence[ChainMember],
    plan: TrainingPlan,
    optim: OptimConfig,
    label: str,
    progress: bool = True,
    initialize: Callable[[EnsembleGPT], None] | None = None,
) -> TrainedEnsemble:
    """Train ``len(members)`` models as one batched computation (one Trainer, one progress bar).

    ``initialize`` runs (under no_grad) after the default per-seed initialisation, for
    experiments that start from a special point (e.g. paper B's rank-one initialisation);
    ``plan.snapshot_steps`` keeps parameter copies in ``module.snapshots``.
    """
    data = MarkovEnsembleData(
        members, plan.batch_size, plan.seq_len, plan.steps, plan.test_sequences, plan.test_seed
    )
    module = EnsembleLM(
        cfg,
        [m.seed for m in members],
        optim,
        plan.steps,
        data.test_tokens(),
        plan.eval_every,
        eval_batch=plan.batch_size,
        snapshot_steps=plan.snapshot_steps,
        initialize=initialize,
    )
    bar = _LabelledProgressBar(label, refresh_rate=max(1, plan.steps // 50))
    trainer = L.Trainer(
        accelerator="auto",
        devices=1,
        max_steps=plan.steps,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        callbacks=[bar] if progress else [],
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=data)
    module.to("cpu")
    return TrainedEnsemble(module=module, members=list(members), test_tokens=data.test_tokens())


class _LabelledProgressBar(TQDMProgressBar):
    """One progress line per ensemble, named after what it trains."""

    def __init__(self, label: str, refresh_rate: int) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.label = label

    def init_train_tqdm(self):
        bar = super().init_train_tqdm()
        bar.set_description(self.label)
        return bar

    def on_train_epoch_start(self, trainer: L.Trainer, *args: object) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description(self.label)
