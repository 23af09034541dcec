"""What every experiment shares: its run context.

An experiment is a function ``run(settings, ctx) -> metrics`` that trains or computes, writes
its figure/CSV outputs through ``ctx`` and returns a flat dict of numbers; the runner
(`replicate.experiments.runner`) calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from matplotlib.figure import Figure

from replicate import io
from replicate.params import Classification, ExperimentEntry

if TYPE_CHECKING:
    from replicate.training import TrainingContext

Metrics = dict[str, float]
CHECKPOINT_DIR = Path("checkpoints")


@dataclass
class RunContext:
    """Where and how one experiment writes, the shared run-classification thresholds, and
    what its trainings take from outside their settings (``training``, handed to every
    `replicate.training.train_ensemble` call)."""

    name: str
    entry: ExperimentEntry
    scale: str
    out_dir: Path
    shared: Classification
    training: TrainingContext
    written: list[str] = field(default_factory=list)
    read: set[str] = field(default_factory=set)
    layout_problems: list[str] = field(default_factory=list)
    """Text collisions of the saved figures, "stem: problem" (`plotting.layout_problems`);
    recorded for the tests and the log, they never fail a run."""

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

    @property
    def upstream_dir(self) -> Path:
        """The output folder of the experiment this one reads (its ``upstream``, an item of
        the same paper), beside its own in the same scale's results tree."""
        if self.entry.upstream is None:
            raise RuntimeError(f"{self.name} reads no other experiment (no upstream)")
        return Path(self.out_dir).parent / self.entry.upstream

    def save_figure(self, fig: Figure, stem: str = "figure") -> None:
        """Check the figure's layout (into `layout_problems`), write ``stem``.png (the pixels
        of the very draw the check read, not a second draw) and ``stem``.pdf (one vector draw
        at the positions that draw laid out: the figure's layout engine is removed, or
        `Figure.savefig` would lay it out by a draw of its own first), then release it."""
        import matplotlib as mpl
        import matplotlib.pyplot as plt

        from replicate.plotting import layout_problems

        self.layout_problems += [f"{stem}: {problem}" for problem in layout_problems(fig)]
        io.save_drawn_png(fig, self.out_dir / f"{stem}.png")
        with mpl.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
            fig.set_layout_engine(None)  # none at all: a placeholder would still ask for a pass
        io.save_figure(fig, self.out_dir / f"{stem}.pdf")
        self.written += [f"{stem}.png", f"{stem}.pdf"]
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
