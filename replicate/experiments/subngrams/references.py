"""Paper C: the add-alpha k-gram losses behind every figure's dashed lines (Def. 2.1,
smoothed as in the authors' `train.py`).

For each figure's data setting (S, n, T, alpha), one fixed test set, and the loss of the
add-alpha estimator of every history (contiguous k-grams and their non-contiguous variants)
with its Monte-Carlo standard error. Each training figure recomputes its own lines on its
own test set through the same function (`common.history_losses`).
"""

from __future__ import annotations

from typing import Annotated

import pandas as pd
from pydantic import Field

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams.common import DataSettings, fixed_set, history_losses
from replicate.settings import PositiveInt, Strict


class ReferencesSettings(Strict):
    settings: dict[str, DataSettings] = Field(min_length=1)  # figure -> data setting
    test_sequences: PositiveInt
    test_seed: int
    eps: Annotated[float, Field(gt=0.0)]


def references(s: ReferencesSettings, ctx: RunContext) -> Metrics:
    """One table of k-gram (and non-contiguous history) losses per figure setting."""
    frames = []
    metrics: Metrics = {}
    for figure, data in s.settings.items():
        table = history_losses(fixed_set(data, s.test_sequences, s.test_seed, "test"), data, s.eps)
        frames.append(table.assign(figure=figure, setting=data.tag))
        for row in table.itertuples():
            metrics[f"{figure}/{row.history}/loss"] = row.loss
            metrics[f"{figure}/{row.history}/sem"] = row.sem
        for size, group in table[table.lags > 0].groupby("lags"):
            if len(group) > 1:
                metrics[f"{figure}/spread_{size}lag"] = float(group.loss.max() - group.loss.min())
    frame = pd.concat(frames, ignore_index=True)
    ctx.save_csv(frame, "references.csv")
    ctx.save_text(_markdown(frame, s), "references.md")
    return metrics


def _markdown(frame: pd.DataFrame, s: ReferencesSettings) -> str:
    lines = [
        "# Paper C: add-alpha k-gram losses (the dashed lines of Figs. 1, 3, 6 and 7)",
        "",
        f"{s.test_sequences} test sequences per setting, loss -Σ y log(f + {s.eps:g}); "
        "k = 0 marks a non-contiguous history (App. F.2).",
        "",
        "| figure | setting | history | k | loss | s.e. |",
        "|---|---|---|---|---|---|",
    ]
    for row in frame.itertuples():
        lines.append(
            f"| {row.figure} | {row.setting} | {row.history} | {row.k} | "
            f"{row.loss:.4f} | {row.sem:.4f} |"
        )
    return "\n".join(lines) + "\n"
