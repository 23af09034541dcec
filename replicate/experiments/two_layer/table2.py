"""Paper D, Table 2 and Figs. 17-19 (App. H.2): one- vs two-layer models on second-order chains.

The two-layer side is the shared model of `two_layer_maps` (no retraining); the one-layer
baseline (layer 1 + MLP + readout, same width and optimiser) is trained here on the same
source with the same seeds and the same training (steps, batch, length) as the shared model
of the order: equal budgets (at 1,500 steps against 3,000 the one-layer loss was still
falling). Excess CE over L_true on the paired evaluation set (Table 2), the Bayes floor
(Laplace-2), and the one-layer attention maps (Figs. 17-19).

The one- over two-layer excess ratio depends on where it is read: it is also given over the
last ``late_fraction`` of the positions, and, without training, for the two estimators the
models approach, Laplace-1 (the in-context first-order level a one-layer model reaches) over
Laplace-k (Bayes), at every T of ``estimator_seq_lens``.

Every difference, z score and attention check the claims read as a mean, minimum or
maximum over seeds is also given per seed; the excess ratios (ratios of means) are not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer import plots
from replicate.experiments.two_layer.darch import (
    darch_config,
    eval_set,
    excess_stats,
    laplace_position_nll,
    train_darch,
)
from replicate.experiments.two_layer.maps import MapsSettings, load_shared, order_source
from replicate.experiments.two_layer.statistics import MapStats, map_stats
from replicate.settings import OpenUnit, PositiveInt, Strict


class Table2Settings(Strict):
    order: PositiveInt
    map_sequences: PositiveInt
    near_diagonals: PositiveInt = Field(le=8)  # D-F17-1: mass on m = 1..near_diagonals
    late_fraction: OpenUnit  # the excess ratio also over this last fraction of the positions
    estimator_seq_lens: list[PositiveInt] = Field(min_length=1)  # T of the estimator ratios


def late_start(seq_len: int, fraction: float) -> int:
    """First position of the last ``fraction`` of ``seq_len`` predicted positions."""
    return seq_len - max(1, round(fraction * seq_len))


def estimator_ratios(up: MapsSettings, s: Table2Settings) -> Metrics:
    """Laplace-1 and Laplace-k excess CE over L_true and their ratio, over every position and
    over the late ones, at every T of ``estimator_seq_lens`` (our Bayes-floor argument
    for Table 2: a one-layer model at the in-context first-order level over a two-layer model
    at Bayes shows this ratio)."""
    metrics: Metrics = {}
    for seq_len in s.estimator_seq_lens:
        data = eval_set(order_source(up, s.order, per_kernel=1), seq_len, up.evaluation_set)
        first = laplace_position_nll(data.tokens, 1, up.states) - data.true_position_nll
        bayes = data.laplace_position_nll - data.true_position_nll
        for where, start in (("all", 0), ("late", late_start(seq_len, s.late_fraction))):
            prefix = f"estimators/T{seq_len}/{where}"
            one, k = float(first[:, start:].mean()), float(bayes[:, start:].mean())
            metrics |= {
                f"{prefix}/laplace1_excess": one,
                f"{prefix}/laplace{s.order}_excess": k,
                f"{prefix}/ratio": one / k,
            }
    return metrics


def table2(s: Table2Settings, ctx: RunContext) -> Metrics:
    """D-T2-1..3 and D-F17-1..2."""
    up, models = load_shared(ctx)
    source = order_source(up, s.order)
    cfg = darch_config(up.arch, up.states, up.training.seq_len, layers=1)
    training = up.order_training(s.order)
    trained = train_darch(
        cfg, [source] * len(up.seeds), up.seeds, training, up.optim, ctx, "one layer"
    )
    one = trained.model.eval()
    data = eval_set(order_source(up, s.order, per_kernel=1), up.training.seq_len, up.evaluation_set)
    ex1, ex2 = excess_stats(one, data), excess_stats(models[s.order], data)
    late = late_start(up.training.seq_len, s.late_fraction)
    late1, late2 = excess_stats(one, data, late), excess_stats(models[s.order], data, late)
    st1 = map_stats(one, data, s.map_sequences)
    st2 = map_stats(models[s.order], data, s.map_sequences)
    near = st1.abar[:, 1 : s.near_diagonals + 1].sum(1)
    argmax = st1.abar.argmax(1)
    mean1, mean2 = float(ex1["excess"].mean()), float(ex2["excess"].mean())
    laplace = float(ex2["laplace"][0])
    metrics: Metrics = {
        "excess_1l_mean": mean1,
        "excess_2l_mean": mean2,
        "laplace_excess": laplace,
        "difference_1l_minus_2l": mean1 - mean2,
        "ratio_1l_over_2l": mean1 / mean2,
        "max_excess_2l_minus_laplace": float((ex2["excess"] - laplace).max()),
        "min_floor_z": float(
            min(
                ((ex["excess"] - ex["laplace"]) / ex["above_laplace_se"]).min() for ex in (ex1, ex2)
            )
        ),
        "f17/min_near_mass": float(near.min()),
        "f17/frac_argmax_near": float(np.mean((argmax >= 1) & (argmax <= s.near_diagonals))),
        "f17/max_mm_1l_minus_mm_2l": float((st1.mm - st2.mm).max()),
        "f17/mm_1l_mean": float(st1.mm.mean()),
        "f17/mm_2l_mean": float(st2.mm.mean()),
        "late/excess_1l_mean": float(late1["excess"].mean()),
        "late/excess_2l_mean": float(late2["excess"].mean()),
        "late/laplace_excess": float(late2["laplace"][0]),
        "late/ratio_1l_over_2l": float(late1["excess"].mean() / late2["excess"].mean()),
        **estimator_ratios(up, s),
    }
    rows = []
    for i, seed in enumerate(up.seeds):
        for depth, ex, st in ((1, ex1, st1), (2, ex2, st2)):
            rows.append(
                {
                    "layers": depth,
                    "seed": seed,
                    "excess": ex["excess"][i],
                    "excess_se": ex["excess_se"][i],
                    "laplace_excess": ex["laplace"][i],
                    "last_layer_mm": st.mm[i],
                    "mm_chance": st.chance,
                    **{f"layer1_abar_{m}": st.abar[i, m] for m in range(6)},
                }
            )
            metrics[f"{depth}l/seed{seed}/excess"] = float(ex["excess"][i])
            metrics[f"{depth}l/seed{seed}/floor_z"] = float(
                (ex["excess"][i] - ex["laplace"][i]) / ex["above_laplace_se"][i]
            )
        metrics |= {
            f"seed{seed}/difference_1l_minus_2l": float(ex1["excess"][i] - ex2["excess"][i]),
            f"2l/seed{seed}/excess_minus_laplace": float(ex2["excess"][i] - laplace),
            f"f17/seed{seed}/near_mass": float(near[i]),
            f"f17/seed{seed}/argmax_near": float(1 <= argmax[i] <= s.near_diagonals),
            f"f17/seed{seed}/mm_1l_minus_mm_2l": float(st1.mm[i] - st2.mm[i]),
        }
    frame = pd.DataFrame(rows)
    ctx.save_csv(frame, "table2.csv")
    curves = pd.DataFrame(
        [
            {"seed": seed, "step": step, "test_loss": loss, "model": "one layer"}
            for i, seed in enumerate(up.seeds)
            for step, loss in zip(trained.eval_steps, trained.test_loss[i], strict=True)
        ]
    )
    ctx.save_csv(curves, "curves.csv")
    _plot(s, up.states, st1, data.tokens, frame, laplace, ctx)
    return metrics


def _plot(
    s: Table2Settings,
    states: int,
    st1: MapStats,
    tokens: torch.Tensor,
    frame: pd.DataFrame,
    laplace: float,
    ctx: RunContext,
) -> None:
    """Figs. 17-19 (App. H.2): one-layer maps (seed 0's mean, one sequence, another seed's
    mean) against the pseudo map; the one sequence is `plots.shown_sequence`."""
    fig, axes = plotting.figure(3, 3, width=4.2, height=3.8)
    first, pseudo = st1.first.numpy(), st1.pseudo.numpy()
    plots.triptych(axes[:3], first[0].mean(0), pseudo.mean(0), "Fig. 17: 1L mean (seed 0)", None)
    shown = plots.shown_sequence(tokens[: pseudo.shape[0], :-1].numpy(), states)
    seq = tokens[shown, :-1].numpy()
    plots.triptych(axes[3:6], first[0, shown], pseudo[shown], f"Fig. 18: 1L sequence {shown}", seq)
    other = min(1, first.shape[0] - 1)
    plots.triptych(
        axes[6:],
        first[other].mean(0),
        pseudo.mean(0),
        f"Fig. 19: 1L mean (seed index {other})",
        None,
    )
    one, two = (frame[frame.layers == n].excess.mean() for n in (1, 2))
    plotting.finish(
        fig,
        f"Paper D, Table 2 / Figs. 17-19 — order {s.order} ({ctx.scale} scale): excess CE "
        f"1L {one:.4f} vs 2L {two:.4f} (Laplace-{s.order}: {laplace:.4f})\n"
        f"{plots.shown_rule(states)}",
    )
    ctx.save_figure(fig)
