"""Paper D, Fig. 2 (Sec. 4 Note): the layer-1 attention is monotone along the first k lower
diagonals, then about zero.

Reads the models trained by `two_layer_maps`, and whether each was still learning when its
training stopped (``k<k>/seed<s>/still_falling``, copied for the claims' `converged`). Per
order k and seed: the diagonal masses
a-bar_m of the layer-1 attention over ``sequences`` evaluation sequences (rows n in
[2k+1, T]), the checks D-F2-1..3 (Sec. 4 Note), and the construction's pattern 3^m / Z on
m in [1, k] drawn beside them (a diagnostic: any digit-decodable weights work).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from replicate import io, plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer import plots
from replicate.experiments.two_layer.darch import eval_set
from replicate.experiments.two_layer.maps import load_shared, order_source
from replicate.experiments.two_layer.statistics import layer1_checks, map_stats
from replicate.params import METRICS_FILE
from replicate.settings import PositiveInt, Strict
from replicate.theory.two_layer.constructions import triadic_normaliser


class Fig2Settings(Strict):
    sequences: PositiveInt  # ours (H.1: "multiple sequences"): >= 256 (ci: 200)
    shown_offsets: PositiveInt  # a-bar_m drawn for m < shown_offsets


def fig2(s: Fig2Settings, ctx: RunContext) -> Metrics:
    """D-F2-1..3 for every order the upstream trained."""
    up, models = load_shared(ctx)
    upstream = io.read_json_object(ctx.upstream_dir / METRICS_FILE)
    metrics: Metrics = {}
    rows = []
    fig, axes = plotting.figure(2, len(models), width=4.4, height=3.8)
    for col, (k, model) in enumerate(sorted(models.items())):
        data = eval_set(order_source(up, k, per_kernel=1), up.training.seq_len, up.evaluation_set)
        stats = map_stats(model, data, s.sequences)
        checks = [layer1_checks(a, k) for a in stats.abar]
        for seed, abar, check in zip(up.seeds, stats.abar, checks, strict=True):
            rows += [{"order": k, "seed": seed, "m": m, "abar": abar[m]} for m in range(abar.size)]
            metrics.update({f"k{k}/seed{seed}/{name}": v for name, v in check.items()})
            falling = f"k{k}/seed{seed}/still_falling"  # the models' training, for `converged`
            metrics[falling] = math.nan if upstream[falling] is None else upstream[falling]
        frame = pd.DataFrame(checks)
        metrics[f"k{k}/frac_topk"] = float(frame.topk.mean())
        metrics[f"k{k}/min_ratio"] = float(frame.ratio.min())
        metrics[f"k{k}/max_beyond"] = float(frame.beyond.max())
        if k >= 2:
            metrics[f"k{k}/min_increase"] = float(frame.increase.min())
        plots.map_panel(axes[col], stats.first[0].mean(0).numpy(), "", colorbar=True)
        axes[col].set(
            title=f"({'abc'[col]}) layer 1, order {k}: mean map (seed {up.seeds[0]})",
            xlabel="key position i",
            ylabel="query position n",
        )
        ax = axes[len(models) + col]
        shown = np.arange(s.shown_offsets)
        for seed, abar in zip(up.seeds, stats.abar, strict=True):
            ax.plot(shown, abar[: s.shown_offsets], "o-", label=f"seed {seed}")
        z = triadic_normaliser(k)
        ax.plot(
            shown,
            [3.0**m / z if 1 <= m <= k else 0.0 for m in shown],
            "k:",
            marker="x",
            label="construction 3^m / Z",
        )
        ax.set(
            title=f"({'def'[col]}) order {k}: diagonal masses",
            xlabel="distance m = n - i",
            ylabel="mean attention a-bar_m",
        )
        ax.legend(fontsize=7)
    plotting.finish(
        fig,
        f"Paper D, Fig. 2 — layer-1 attention of the two-layer models ({ctx.scale} scale, "
        f"{s.sequences} sequences, rows n >= 2k+1)",
    )
    ctx.save_figure(fig)
    ctx.save_csv(pd.DataFrame(rows), "diagonals.csv")
    return metrics
