"""Paper D, Fig. 1: the learned layer-2 attention of the shared k = 2 model vs the pseudo map.

Reads the models trained by `two_layer_maps` (no retraining). On ``sequences`` evaluation
sequences, each with its own kernel: matched mass MM of the layer-2 map on I_n, against its
chance level and the maps shifted by one column (D-F1-1), and the excess CE against the
Laplace-k (Bayes) excess on the full evaluation set (D-F1-2; ours, beside Fig. 1); each difference
also per seed, whose worst case over seeds the claims read.
"""

from __future__ import annotations

import pandas as pd
from pydantic import Field

from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer import plots
from replicate.experiments.two_layer.darch import eval_set, excess_stats
from replicate.experiments.two_layer.maps import load_shared, order_source
from replicate.experiments.two_layer.statistics import map_stats
from replicate.settings import PositiveInt, Strict


class Fig1Settings(Strict):
    order: PositiveInt  # the order of the shared model (ours, Fig. 1 omits k: 2 at ci)
    sequences: PositiveInt  # D-F1-1: averaged over 10 sequences (ours)
    shown: int = Field(ge=0)  # the sequence drawn in the figure


def fig1(s: Fig1Settings, ctx: RunContext) -> Metrics:
    """D-F1-1, D-F1-2 on the shared model (every seed)."""
    up, models = load_shared(ctx)
    model = models[s.order]
    data = eval_set(order_source(up, s.order, per_kernel=1), up.training.seq_len, up.evaluation_set)
    stats = map_stats(model, data, s.sequences)
    excess = excess_stats(model, data)
    frame = pd.DataFrame(
        {
            "seed": up.seeds,
            "mm": stats.mm,
            "mm_chance": stats.chance,
            "mm_shifted": stats.mm_shifted,
            "frobenius_mean": stats.frobenius.mean(1),
            "excess": excess["excess"],
            "laplace_excess": excess["laplace"],
        }
    )
    differences = {
        "mm_minus_chance": frame.mm - stats.chance,
        "mm_minus_shifted": frame.mm - frame.mm_shifted,
        "excess_minus_laplace": frame.excess - frame.laplace_excess,
    }
    per_seed = {
        f"seed{seed}/{name}": float(frame.loc[i, name])
        for i, seed in enumerate(up.seeds)
        for name in ("mm", "mm_shifted", "excess")
    } | {
        f"seed{seed}/{name}": float(values.iloc[i])
        for name, values in differences.items()
        for i, seed in enumerate(up.seeds)
    }
    metrics: Metrics = {
        **per_seed,
        "mm_chance": stats.chance,
        "min_mm_minus_chance": float(differences["mm_minus_chance"].min()),
        "min_mm_minus_shifted": float(differences["mm_minus_shifted"].min()),
        "laplace_excess": float(excess["laplace"][0]),
        "max_excess_minus_laplace": float(differences["excess_minus_laplace"].max()),
        "frobenius_mean": float(stats.frobenius.mean()),
    }
    ctx.save_csv(frame, "alignment.csv")
    fig, axes = plotting.figure(2, 3, width=4.2, height=3.8)
    tokens = data.tokens[s.shown, :-1].numpy()
    last, pseudo = stats.last[0].numpy(), stats.pseudo.numpy()
    plots.triptych(
        axes[:3], last[s.shown], pseudo[s.shown], f"(a-c) layer 2, sequence {s.shown}", tokens
    )
    plots.triptych(
        axes[3:], last.mean(0), pseudo.mean(0), f"(d-f) layer 2, mean of {s.sequences}", None
    )
    plotting.finish(
        fig,
        f"Paper D, Fig. 1 — order {s.order}, seed {up.seeds[0]} ({ctx.scale} scale): MM = "
        f"{stats.mm[0]:.3f} vs chance {stats.chance:.3f}, shifted ±1: {stats.mm_shifted[0]:.3f}",
    )
    ctx.save_figure(fig)
    return metrics
