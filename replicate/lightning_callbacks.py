"""Lightning callbacks of `replicate.training.train_ensemble`, in their own module so that
importing `replicate.training` does not import Lightning (start-up time).

The class names are part of the checkpoints' callback state keys: keep them.
"""

from __future__ import annotations

import time

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar


class _IntermediateCheckpoints(ModelCheckpoint):
    """Lightning's step checkpoints, except at the last step: callbacks run before the
    module records that step's evaluation, so the finished training is saved after `fit`
    instead (`replicate.training._keep_final_checkpoint`)."""

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        if trainer.global_step < trainer.max_steps:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


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


class _StepTimer(L.Callback):
    """Wall times of the training steps and of the step-0 evaluation (for the cost plan,
    `replicate.plan`). Callback hooks run before the module's own, so the interval from
    Lightning's train start to the first batch holds the module's step-0 evaluation."""

    def __init__(self) -> None:
        self.started = 0.0
        self.batch_starts: list[float] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = time.perf_counter()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self.batch_starts.append(time.perf_counter())

    def step_seconds(self) -> float:
        """Median interval between consecutive batch starts, the first (warm-up) left out;
        no evaluation falls inside these intervals (`calibrating` evaluates only at the
        first and last step)."""
        intervals = np.diff(self.batch_starts)[1:]
        return float(np.median(intervals)) if intervals.size else float("nan")

    def eval_seconds(self) -> float:
        """From train start to the first batch: the step-0 evaluation (plus one fetch)."""
        return self.batch_starts[0] - self.started if self.batch_starts else float("nan")
