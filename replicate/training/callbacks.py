"""Lightning callbacks of `replicate.training.train_ensemble`, in their own module so that
importing `replicate.training` does not import Lightning (start-up time).

The class names are part of the checkpoints' callback state keys: a renamed class finds
no state of its own in a checkpoint written before.
"""

from __future__ import annotations

import re
import sys
import time
from typing import TextIO

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm


class IntermediateCheckpoints(ModelCheckpoint):
    """Lightning's step checkpoints, except at the last step: callbacks run before the
    module records that step's evaluation, so the finished training is saved after `fit`
    instead (`replicate.training.checkpoints.save_final`)."""

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


class LabelledProgressBar(TQDMProgressBar):
    """One progress line per ensemble, named after what it trains. On a terminal it is
    redrawn in place; written to a file (a rule's log) it is one whole line every tenth of
    the training, with no carriage-return frames."""

    REDRAWS_ON_TERMINAL = 50
    REDRAWS_IN_FILE = 10

    def __init__(self, label: str, steps: int) -> None:
        self.terminal = sys.stdout.isatty()
        redraws = self.REDRAWS_ON_TERMINAL if self.terminal else self.REDRAWS_IN_FILE
        super().__init__(refresh_rate=max(1, steps // redraws))
        self.label = label

    def init_train_tqdm(self) -> Tqdm:
        return Tqdm(
            desc=self.label,
            position=2 * self.process_position,
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=self.terminal,
            ncols=None if self.terminal else 100,
            file=sys.stdout if self.terminal else _Lines(sys.stdout),
            smoothing=0,
            bar_format=self.BAR_FORMAT,
        )

    def on_train_epoch_start(self, trainer: L.Trainer, *args: object) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description(self.label, refresh=self.terminal)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        """In a file, the step count and the loss in one line (Lightning's own hook redraws
        for each)."""
        if self.terminal:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        bar, steps = self.train_progress_bar, batch_idx + 1
        if steps % self.refresh_rate == 0 or steps == bar.total:
            bar.n = steps
            bar.set_postfix(self.get_metrics(trainer, pl_module))


class _Lines:
    """A text stream for tqdm that writes a redraw as one line of ``stream`` where it shows
    steps done that the line before did not (the redraws before the first step and those
    that repeat a count are left out)."""

    COUNT = re.compile(r"\b(\d+)/\d+\b")

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.steps = 0

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        count = self.COUNT.search(line)
        if count is not None and int(count[1]) > self.steps:
            self.stream.write(line + "\n")
            self.steps = int(count[1])

    def flush(self) -> None:
        self.stream.flush()


class StepTimer(L.Callback):
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
        no evaluation falls inside these intervals (a `Calibration` evaluates only at the
        first and last step)."""
        intervals = np.diff(self.batch_starts)[1:]
        return float(np.median(intervals)) if intervals.size else float("nan")

    def eval_seconds(self) -> float:
        """From train start to the first batch: the step-0 evaluation (plus one fetch)."""
        return self.batch_starts[0] - self.started if self.batch_starts else float("nan")
