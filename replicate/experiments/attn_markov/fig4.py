"""Paper A, Fig. 4: the (p, q) sweep of the mean predicted probability, tied vs untied.

Each heat-map cell is the average over runs of f-bar_0, the model's mean predicted
P(x_{n+1}=1 | x_n=0), whose correct (bigram) value is p. The paper: without tying every
cell is ~p; with tying p+q<1 cells are ~p, while for p+q>1 "some of the runs predict the
stationary probability instead, causing the average to diverge from the correct p". The
grid values are not printed in the paper; ours is {0.1, 0.3, 0.5, 0.7, 0.9}^2,
whose anti-diagonal p+q=1 holds control cells (there p = pi_1 and the gap is zero).
All cells and seeds of one tying train as one ensemble.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from replicate import analysis, plotting
from replicate.experiments.attn_markov.common import BinaryRun, InitialLaw, train_binary_runs
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import binary_kernel, binary_stationary, mutual_information_gap
from replicate.settings import (
    BinaryChainSettings,
    ModelSettings,
    OpenUnit,
    OptimSettings,
    Strict,
    TrainingSettings,
)

Side = Literal["below", "boundary", "above"]
UNCLASSIFIED = "unclassified"


class Fig4Settings(Strict):
    ps: list[OpenUnit] = Field(min_length=1)  # heat-map rows
    qs: list[OpenUnit] = Field(min_length=1)  # heat-map columns
    tying: list[bool] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    initial_law: InitialLaw
    min_gap: Annotated[float, Field(ge=0.0)]  # cells with I < min_gap are not classified
    model: ModelSettings
    training: TrainingSettings
    optim: OptimSettings

    @property
    def chains(self) -> list[BinaryChainSettings]:
        return [BinaryChainSettings(p=p, q=q) for p in self.ps for q in self.qs]


def switching_side(p: float, q: float) -> Side:
    """Where (p, q) lies relative to the switching boundary p + q = 1 (paper A, Thm. 2)."""
    if math.isclose(p + q, 1.0, abs_tol=1e-9):
        return "boundary"
    return "below" if p + q < 1 else "above"


def run_table(runs: list[BinaryRun], min_gap: float) -> pd.DataFrame:
    """One row per run; runs on cells with gap I < ``min_gap`` are left unclassified."""
    rows = []
    for r in runs:
        p, q = r.chain.p, r.chain.q
        gap = mutual_information_gap(binary_kernel(p, q))
        classified = gap >= min_gap
        rows.append(
            {
                "p": p,
                "q": q,
                "tying": r.tying,
                "seed": r.seed,
                "side": switching_side(p, q),
                "gap": gap,
                "pi1": float(binary_stationary(p, q)[1]),
                "final_loss": r.final_loss,
                "f0_bar": float(r.transition_means[0, 1]),
                "kappa": r.kappa if classified else float("nan"),
                "run_class": r.run_class.name if classified else UNCLASSIFIED,
            }
        )
    return pd.DataFrame(rows)


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (tying, p, q): the heat-map value (mean f-bar_0 over runs) and the run classes."""

    def summary(group: pd.DataFrame) -> pd.Series:
        classified = (group.run_class != UNCLASSIFIED).all()
        frac = (lambda name: float(np.mean(group.run_class == name))) if classified else None
        mean_f0 = float(group.f0_bar.mean())
        return pd.Series(
            {
                "side": group.side.iloc[0],
                "gap": group.gap.iloc[0],
                "pi1": group.pi1.iloc[0],
                "runs": len(group),
                "mean_f0": mean_f0,
                "cell_dev_f0": abs(mean_f0 - group.name[1]),
                "frac_unigram": frac("UNIGRAM") if frac else float("nan"),
                "frac_bigram": frac("BIGRAM") if frac else float("nan"),
            }
        )

    cells = runs.groupby(["tying", "p", "q"], sort=False).apply(summary, include_groups=False)
    return cells.reset_index()


def heatmap_matrix(
    cells: pd.DataFrame, tying: str, column: str, ps: list[float], qs: list[float]
) -> np.ndarray:
    """The (len(ps), len(qs)) matrix of one cell column for one tying (rows p, columns q)."""
    frame = cells[cells.tying == tying].set_index(["p", "q"])[column]
    return np.array([[frame.get((p, q), np.nan) for q in qs] for p in ps], dtype=float)


def _tag(p: float, q: float) -> str:
    return BinaryChainSettings(p=p, q=q).tag


def per_run_metrics(runs: pd.DataFrame) -> Metrics:
    """Per run ``<cell>/<tying>/seed<s>/...``, and under ``<side>/<tying>/<cell>/seed<s>/``
    (side below, above, boundary, and off_boundary for both of the first two) so that a
    claim can pool the cells of one side per seed."""
    metrics: Metrics = {}
    for row in runs.itertuples():
        prefix = f"{_tag(row.p, row.q)}/{row.tying}/seed{row.seed}"
        metrics[f"{prefix}/final_loss"] = row.final_loss
        metrics[f"{prefix}/f0_bar"] = row.f0_bar
        metrics[f"{prefix}/dev_f0"] = abs(row.f0_bar - row.p)
        sides = [row.side] if row.side == "boundary" else [row.side, "off_boundary"]
        for side in sides:
            side_key = f"{side}/{row.tying}/{_tag(row.p, row.q)}/seed{row.seed}"
            metrics[f"{side_key}/f0_minus_p"] = row.f0_bar - row.p
            metrics[f"{side_key}/dev_f0"] = abs(row.f0_bar - row.p)
            if row.run_class != UNCLASSIFIED:
                metrics[f"{side_key}/class"] = float(analysis.RunClass[row.run_class])
        if row.run_class != UNCLASSIFIED:  # the report lists keys ending in /class
            metrics[f"{prefix}/kappa"] = row.kappa
            metrics[f"{prefix}/class"] = float(analysis.RunClass[row.run_class])
    return metrics


def per_cell_metrics(cells: pd.DataFrame) -> Metrics:
    metrics: Metrics = {}
    for row in cells.itertuples():
        prefix = f"{_tag(row.p, row.q)}/{row.tying}"
        metrics[f"{prefix}/mean_f0"] = row.mean_f0
        metrics[f"{prefix}/gap"] = row.gap
        if not np.isnan(row.frac_unigram):
            metrics[f"{prefix}/frac_unigram"] = row.frac_unigram
    return metrics


def group_metrics(runs: pd.DataFrame, cells: pd.DataFrame) -> Metrics:
    """The numbers behind claims A4.1-A4.4 (paper A, Fig. 4), one key per non-empty group.

    ``<tying>/<side>/...`` groups cells by the side of p+q=1; classified runs only for the
    class fractions; ``boundary/max_cell_dev_f0`` pools both tyings (the control cells).
    """
    metrics: Metrics = {}
    runs = runs.assign(dev_f0=(runs.f0_bar - runs.p).abs())
    classified = runs[runs.run_class != UNCLASSIFIED]
    for tying in cells.tying.unique():
        off_boundary = classified[(classified.tying == tying) & (classified.side != "boundary")]
        if len(off_boundary):
            metrics[f"{tying}/frac_bigram"] = float(np.mean(off_boundary.run_class == "BIGRAM"))
            metrics[f"{tying}/max_run_dev_f0"] = float(off_boundary.dev_f0.max())
        tc = cells[(cells.tying == tying) & (cells.side != "boundary")]
        if len(tc):
            metrics[f"{tying}/max_cell_dev_f0"] = float(tc.cell_dev_f0.max())
        for side in ("below", "above"):
            group = classified[(classified.tying == tying) & (classified.side == side)]
            side_cells = cells[(cells.tying == tying) & (cells.side == side)]
            prefix = f"{tying}/{side}"
            if len(group):
                is_uni = group.run_class == "UNIGRAM"
                metrics[f"{prefix}/frac_bigram"] = float(np.mean(group.run_class == "BIGRAM"))
                metrics[f"{prefix}/frac_unigram"] = float(np.mean(is_uni))
                metrics[f"{prefix}/n_unigram"] = float(is_uni.sum())
            if len(side_cells):
                metrics[f"{prefix}/max_cell_dev_f0"] = float(side_cells.cell_dev_f0.max())
    boundary = cells[cells.side == "boundary"]
    if len(boundary):
        metrics["boundary/max_cell_dev_f0"] = float(boundary.cell_dev_f0.max())
    return metrics


def fig4(s: Fig4Settings, ctx: RunContext) -> Metrics:
    """Fig. 4: heat-maps of the mean f-bar_0 over the (p, q) grid, tied and untied."""
    runs: list[BinaryRun] = []
    for tied in s.tying:
        tied_runs, _ = train_binary_runs(
            s.chains, tied, s.seeds, s.model, s.training, s.optim, s.initial_law, ctx
        )
        runs += tied_runs
    table = run_table(runs, s.min_gap)
    cells = cell_table(table)
    ctx.save_csv(table, "runs.csv")
    ctx.save_csv(cells, "cells.csv")
    _plot_fig4(s, cells, ctx)
    return {**per_run_metrics(table), **per_cell_metrics(cells), **group_metrics(table, cells)}


def _annotations(cells: pd.DataFrame, tying: str, s: Fig4Settings) -> tuple[np.ndarray, ...]:
    mean = heatmap_matrix(cells, tying, "mean_f0", s.ps, s.qs)
    frac = heatmap_matrix(cells, tying, "frac_unigram", s.ps, s.qs)
    runs = heatmap_matrix(cells, tying, "runs", s.ps, s.qs)
    pi1 = heatmap_matrix(cells, tying, "pi1", s.ps, s.qs)
    mean_text = np.array(
        [
            [f"{v:.3f}\np={p:g}\nπ₁={pi:.2f}" for v, pi in zip(row, pi_row, strict=True)]
            for p, row, pi_row in zip(s.ps, mean, pi1, strict=True)
        ]
    )
    frac_text = np.array(
        [
            [
                ("I≈0\n(control)" if np.isnan(f) else f"{f * n:.0f}/{n:.0f}")
                for f, n in zip(fr, nr, strict=True)
            ]
            for fr, nr in zip(frac, runs, strict=True)
        ]
    )
    return mean, mean_text, frac, frac_text


def _plot_fig4(s: Fig4Settings, cells: pd.DataFrame, ctx: RunContext) -> None:
    tyings = ["tied" if t else "untied" for t in s.tying]
    fig, axes = plotting.figure(2, len(tyings), width=5.2, height=4.4)
    rows, cols = [f"p={p:g}" for p in s.ps], [f"q={q:g}" for q in s.qs]
    for k, tying in enumerate(tyings):
        mean, mean_text, frac, frac_text = _annotations(cells, tying, s)
        top, bottom = axes[k], axes[len(tyings) + k]
        plotting.heatmap(top, mean, mean_text, rows, cols, r"mean $\bar f_0$ over runs")
        top.set_title(f"{tying}: mean predicted $P(x_{{n+1}}=1 \\mid x_n=0)$ (target p)")
        plotting.heatmap(bottom, frac, frac_text, rows, cols, "fraction of UNIGRAM runs")
        bottom.set_title(f"{tying}: UNIGRAM runs per cell (I<{s.min_gap:g}: not classified)")
        for ax in (top, bottom):
            plotting.staircase(ax, s.ps, s.qs)
            ax.set(xlabel="q (flip probability 1→0)", ylabel="p (flip probability 0→1)")
    plotting.finish(
        fig,
        f"Paper A, Fig. 4 — {ctx.scale} scale: {s.model.variant} model, d={s.model.n_embd}, "
        f"N={s.training.seq_len}, {s.training.steps} iterations, {len(s.seeds)} seeds per cell\n"
        "red lines: cell edges between p + q < 1, p + q = 1 (controls, p = π₁) and p + q > 1",
    )
    ctx.save_figure(fig)
