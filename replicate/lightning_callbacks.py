"""Lightning callbacks of `replicate.training.train_ensemble`, in their own module so that
importing `replicate.training` does not import Lightning (issue 13: start-up).

The class names are part of the checkpoints' callback state keys: keep them.
"""

from __future__ import annotations

import lightning as L
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
