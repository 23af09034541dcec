"""Paper D, Tables 3 and 4 (App. H.3): random token substitution and transition perturbation.

Models are trained *and* evaluated on noisy sequences of the second-order source (spec D
§1.4), eps in ``levels``; the eps = 0 point is the shared model of `two_layer_maps` (no
retraining). Both tables are one experiment because Table 4's claim D-T4-2 compares the two
noise kinds at equal eps (a derived experiment has one upstream).

Reference (spec D §5.7/§5.8 [PROPOSAL], used for the claims): the clean-source loss L_true
of the true kernel P on the *clean* path of the same kernels and uniforms (the evaluation
set of every eps shares kernels and clean paths), so gap(eps) = CE_model(noisy sequences) -
L_true(clean sequences). The alternatives are written to the CSV for comparison: P applied
to the observed noisy context ("P on noisy"), and for perturbation the exact law of the
observed process, (1 - eps) P + eps / S ("marginal"); spec D reports that they give
non-monotone or decreasing gaps.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from replicate import plotting
from replicate.config import OpenUnit, PositiveInt, Strict, TrainingSettings
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer.darch import (
    EvalSet,
    darch_config,
    eval_set,
    model_nll,
    train_darch,
)
from replicate.experiments.two_layer.maps import MapsSettings, load_shared
from replicate.experiments.two_layer.statistics import map_stats
from replicate.markov import InContextSource
from replicate.markov.incontext import true_next_token_nll

Kind = Literal["substitution", "perturbation"]
TABLE = {"substitution": "t3", "perturbation": "t4"}


class NoiseSettings(Strict):
    order: PositiveInt
    levels: list[OpenUnit] = Field(min_length=2)  # increasing
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings  # of the noisy runs
    map_sequences: PositiveInt


def _source(
    up: MapsSettings, order: int, kind: Kind, eps: float, per_kernel: int
) -> InContextSource:
    return InContextSource(up.states, order, 1.0, per_kernel=per_kernel, **{kind: eps})


def _row(
    model: torch.nn.Module, members: list[int], data: EvalSet, kind: str, eps: float, count: int
) -> dict:
    """gap(eps) and the alternative references for the given ensemble members."""
    nll = model_nll(model, data.tokens)[members]
    stats = map_stats(model, data, count)
    observed = true_next_token_nll(data.kernels, data.tokens).mean(-1)
    states = data.kernels.shape[-1]
    marginal = true_next_token_nll((1 - eps) * data.kernels + eps / states, data.tokens).mean(-1)
    return {
        "kind": kind,
        "eps": eps,
        "gap": float((nll - data.true_nll).mean()),
        "gap_P_on_noisy": float((nll - observed).mean()),
        "gap_marginal": float((nll - marginal).mean()) if kind == "perturbation" else float("nan"),
        "laplace_gap": float((data.laplace_nll - data.true_nll).mean()),
        "L_true_clean": float(data.true_nll.mean()),
        "mm": float(stats.mm[members].mean()),
        "mm_chance": stats.chance,
        "members": len(members),
    }


def noise(s: NoiseSettings, ctx: RunContext) -> Metrics:
    """D-T3-1..3 and D-T4-1..3."""
    up, models = load_shared(ctx)
    kinds: tuple[Kind, ...] = ("substitution", "perturbation")
    points = [(kind, eps, seed) for kind in kinds for eps in s.levels for seed in s.seeds]
    sources = [_source(up, s.order, kind, eps, up.per_kernel) for kind, eps, _ in points]
    cfg = darch_config(up.arch, up.states, up.training.seq_len, layers=2)
    trained = train_darch(cfg, sources, [p[2] for p in points], s.training, up.optim, ctx, "noisy")
    model = trained.model.eval()
    shared = models[s.order]
    clean = eval_set(
        _source(up, s.order, "substitution", 0.0, 1), up.training.seq_len, up.evaluation_set
    )
    rows = []
    for kind in kinds:
        rows.append(_row(shared, list(range(len(up.seeds))), clean, kind, 0.0, s.map_sequences))
        for eps in s.levels:
            data = eval_set(
                _source(up, s.order, kind, eps, 1), up.training.seq_len, up.evaluation_set
            )
            members = [i for i, p in enumerate(points) if p[:2] == (kind, eps)]
            rows.append(_row(model, members, data, kind, eps, s.map_sequences))
    frame = pd.DataFrame(rows)
    metrics = _metrics(frame, s)
    ctx.save_csv(frame, "tables.csv")
    _plot(frame, s, ctx)
    return metrics


def _metrics(frame: pd.DataFrame, s: NoiseSettings) -> Metrics:
    metrics: Metrics = {}
    for kind, table in TABLE.items():
        f = frame[frame.kind == kind].sort_values("eps")
        gap, mm = f.gap.to_numpy(), f.mm.to_numpy()
        for eps, g, m in zip(f.eps, gap, mm, strict=True):
            metrics[f"{table}/eps{eps:g}/gap"] = float(g)
            metrics[f"{table}/eps{eps:g}/mm"] = float(m)
        steps = np.diff(gap)
        metrics[f"{table}/min_step_below_last"] = float(steps[:-1].min())
        metrics[f"{table}/last_step"] = float(steps[-1])
        metrics[f"{table}/max_mm_increase"] = float(np.diff(mm).max())
        metrics[f"{table}/mm_first_level_minus_clean"] = float(mm[1] - mm[0])
        metrics[f"{table}/mm_last_level_minus_clean"] = float(mm[-1] - mm[0])
    sub = frame[frame.kind == "substitution"].set_index("eps")
    per = frame[frame.kind == "perturbation"].set_index("eps")
    for eps in s.levels:
        metrics[f"t3_minus_t4/eps{eps:g}"] = float(sub.gap[eps] - per.gap[eps])
    if 0.5 in s.levels:
        metrics["t3/eps0.5/gap_minus_ln2_bound"] = float(
            sub.gap[0.5] - (math.log(2) - sub.L_true_clean[0.5])
        )
    return metrics


def _plot(frame: pd.DataFrame, s: NoiseSettings, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, 3)
    for kind, g in frame.groupby("kind"):
        axes[0].plot(g.eps, g.gap, "o-", label=f"{kind}: gap (clean-source reference)")
        axes[0].plot(g.eps, g.laplace_gap, "x:", label=f"{kind}: Laplace-{s.order} estimator")
        axes[1].plot(g.eps, g.gap_P_on_noisy, "o-", label=f"{kind}: P on the noisy context")
        if kind == "perturbation":
            axes[1].plot(g.eps, g.gap_marginal, "s--", label="perturbation: (1-eps) P + eps/S")
        axes[2].plot(g.eps, g.mm, "o-", label=kind)
    sub = frame[frame.kind == "substitution"]
    axes[0].plot(
        sub.eps, math.log(2) - sub.L_true_clean, "k:", label="ln 2 - L_true (eps = 0.5 bound)"
    )
    axes[0].set(
        title="(a) Tables 3/4: gap = CE - L_true(clean)", xlabel="noise level eps", ylabel="nats"
    )
    axes[1].set(
        title="(b) rejected references (spec D §5.7/5.8)", xlabel="noise level eps", ylabel="nats"
    )
    axes[2].plot(sub.eps, sub.mm_chance, "k:", label="chance (substitution)")
    axes[2].set(title="(c) layer-2 matched mass", xlabel="noise level eps", ylabel="MM")
    for ax in axes:
        ax.legend(fontsize=6)
    plotting.finish(
        fig,
        f"Paper D, Tables 3-4 — order {s.order} ({ctx.scale} scale; eps = 0: shared model, "
        f"noisy levels: {s.training.steps} steps, seeds {s.seeds})",
    )
    ctx.save_figure(fig)
