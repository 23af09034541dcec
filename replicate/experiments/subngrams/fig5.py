"""Paper C, Fig. 5: first-layer attention at the second plateau over seeds (App. I.2).

Derived from Fig. 3 (`upstream: fig3`): reads the saved loss curves and first-layer maps of
every seed (`histories.pt`) instead of retraining. Per seed: the first step some head is on
the (-1)-token and on the (-2)-token, and the heads at the midpoint of the second plateau,
the first one below the n-gram level (`Stages.second_plateau`). F5b is about that plateau:
it reads the seeds with one (``seed<s>/has_second_plateau`` = 1; their margin is `NO_EVENT`
in a seed without).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import NO_EVENT, over_event_seeds
from replicate.experiments.subngrams.stages import (
    OFFSETS,
    StageSettings,
    first_step_on,
    heads_on,
    masses_of,
    midpoint_index,
    stages,
)
from replicate.settings import Strict


class Fig5Settings(Strict):
    stage: StageSettings


def upstream_histories(ctx: RunContext) -> dict:
    """What Fig. 3 saved: seeds, steps, test loss, first-layer maps, k-gram levels and the
    test loss's standard error."""
    path = ctx.upstream_dir / "histories.pt"
    return torch.load(path, weights_only=True)


def fig5(s: Fig5Settings, ctx: RunContext) -> Metrics:
    """Fig. 5: the (-1)-token head forms first, in every seed (F5a-F5c)."""
    saved = upstream_histories(ctx)
    steps = saved["steps"].numpy()
    losses = saved["test_loss"].numpy()
    levels = saved["levels"].numpy()
    attention = saved["attention"]
    masses = masses_of(attention)  # (E, n, H, len(OFFSETS))
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    rows = []
    for i, seed in enumerate(saved["seeds"]):
        stage = stages(steps, losses[i], levels, s.stage, saved["level_noise"])
        second = stage.second_plateau(len(levels))
        t1 = first_step_on(steps, masses[i], 1, s.stage)
        t2 = first_step_on(steps, masses[i], 2, s.stage)
        row = {"seed": seed, "t_first_on_1": t1, "t_first_on_2": t2, "first_1_before_2": t1 < t2}
        if second is None:
            rows.append(
                row
                | {
                    "plateau_mid": math.nan,
                    "margin_1_over_2": math.nan,
                    "both_heads_on_1": math.nan,
                }
            )
            continue
        j = midpoint_index(steps, second)
        mid = masses[i, j]
        row |= {
            "plateau_mid": float(steps[j]),
            "margin_1_over_2": float(mid[:, one].max() - mid[:, two].max()),
            "both_heads_on_1": float(all(heads_on(m[None], s.stage) == {1} for m in mid)),
        }
        rows.append(row)
    table = pd.DataFrame(rows)
    ctx.save_csv(table, "heads.csv")
    ctx.save_figure(draw(table, saved, ctx.scale))
    with_plateau = table.plateau_mid.notna().to_numpy()
    margins = table.margin_1_over_2.to_numpy()
    metrics: Metrics = {
        "F5a/frac_seeds_1_before_2": float(table.first_1_before_2.mean()),
        "F5b/min_margin_1_over_2": over_event_seeds(np.min, margins, with_plateau),
        "F5c/frac_seeds_both_heads_on_1": float(table.both_heads_on_1.mean()),
    }
    for r, has, margin in zip(rows, with_plateau, margins, strict=True):
        metrics |= {
            f"seed{r['seed']}/has_second_plateau": float(has),
            f"seed{r['seed']}/margin_1_over_2": float(margin) if has else NO_EVENT,
            f"seed{r['seed']}/t_first_on_1": r["t_first_on_1"],
        }
    return metrics


def draw(table: pd.DataFrame, saved: Mapping[str, Any], scale: str) -> Figure:
    """Fig. 5 (paper C, App. I.2) from heads.csv and Fig. 3's histories.pt: per seed with a
    second plateau (a column), both heads' softmax(A1) at its middle, with each head's
    m_h(1) and m_h(2) (F5b's margin, F5c) and the first steps some head is on the (-1)- and
    on the (-2)-token (F5a)."""
    steps = saved["steps"].numpy()
    seeds = [int(x) for x in saved["seeds"]]
    rows = table[table.plateau_mid.notna()]
    heads = saved["attention"].shape[2]
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    fig, axes = drawing.figure(heads, max(1, len(rows)), width=3.4, height=3.3)
    image = None
    for col, row in enumerate(rows.itertuples()):
        j = int(np.flatnonzero(steps == row.plateau_mid)[0])
        maps = saved["attention"][seeds.index(int(row.seed)), j]  # (H, T, T)
        masses = masses_of(maps)
        for h in range(heads):
            ax = axes[h * len(rows) + col]
            image = ax.imshow(maps[h].numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.grid(False)
            lines = [f"head {h + 1}: m(1) = {masses[h, one]:.2f}, m(2) = {masses[h, two]:.2f}"]
            if h == 0:
                lines = [
                    f"seed {row.seed}, t = {int(row.plateau_mid)}",
                    f"first on −1: {_when(row.t_first_on_1)}; on −2: {_when(row.t_first_on_2)}",
                    *lines,
                ]
            ax.set(title="\n".join(lines), xlabel="key position j", ylabel="query position l")
            ax.title.set_fontsize(8.5)
    if image is None:
        for ax in axes:
            ax.axis("off")
        axes[0].text(0.5, 0.5, "no seed has a second plateau", ha="center", va="center")
    else:
        fig.colorbar(image, ax=axes, shrink=0.7, label="attention weight")
    title = (
        f"Paper C, Fig. 5 — {scale} scale: softmax(A1) at the middle of the second plateau, "
        "the first below the n-gram level (Fig. 3's runs)"
    )
    return drawing.finish(fig, title)


def _when(step: float) -> str:
    return "never" if math.isinf(step) else f"t = {int(step)}"
