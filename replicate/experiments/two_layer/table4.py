"""Paper D, Table 4 (App. H.3.2, Eq. 23) and the comparison of App. H.3.3: transition
perturbation, x_{n+1} ~ (1 - eps) P(. | context) + eps Uniform (Eq. 23 averaged over Q_t).

Derived from Table 3 (`two_layer_table3`): the models of the noisy levels are trained here
as the shared model of the order was (its settings, which `table3` recorded in
`table3.json`), with Table 3's seeds; the eps = 0 row is Table 3's (the shared model of
`two_layer_maps` on the clean evaluation set), and D-T4-2 compares this table's gaps with
Table 3's (the same file, full precision) at equal eps, also seed by seed.

Reference: our clean-source L_true (App. H.3 leaves it open), as in Table 3. The alternatives are
written to the CSV: P on the observed noisy context, and the exact law of the observed
process, (1 - eps) P + eps / S ("marginal"); our prototype gave non-monotone or decreasing gaps.
"""

from __future__ import annotations

import json

import pandas as pd
import torch

from replicate import plotting
from replicate.experiments import hyperparameter_tables as hp
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer.darch import EvalSet, model_nll
from replicate.experiments.two_layer.maps import MapsSettings
from replicate.experiments.two_layer.table3 import (
    NoiseSettings,
    finish_noise_figure,
    gap_panel,
    gap_row,
    noisy_levels,
    seed_table_metrics,
    table_metrics,
)
from replicate.markov.incontext import true_next_token_nll


def _marginal_gap(model: torch.nn.Module, members: list[int], data: EvalSet, eps: float) -> float:
    """CE minus the NLL of the perturbed process' exact law (1 - eps) P + eps / S (Eq. 23)."""
    nll = model_nll(model, data.tokens)[members]
    states = data.kernels.shape[-1]
    marginal = true_next_token_nll((1 - eps) * data.kernels + eps / states, data.tokens)
    return float((nll - marginal.mean(-1)).mean())


def _upstream(ctx: RunContext, s: NoiseSettings) -> tuple[MapsSettings, pd.DataFrame, pd.DataFrame]:
    """Table 3's settings check, the shared model's settings, Table 3's rows and its
    per-seed values."""
    directory = ctx.upstream_dir
    t3 = hp.upstream_settings(ctx, NoiseSettings)
    if (t3.order, t3.levels, t3.seeds) != (s.order, s.levels, s.seeds):
        raise ValueError(
            f"{ctx.name}: order/levels/seeds {s.order}, {s.levels}, {s.seeds} differ from "
            f"Table 3's {t3.order}, {t3.levels}, {t3.seeds}: D-T4-2 compares the tables at "
            "equal eps, and the eps = 0 row is Table 3's"
        )
    saved = json.loads((directory / "table3.json").read_text())
    return (
        MapsSettings.model_validate(saved["maps_settings"]),
        pd.DataFrame(saved["rows"]),
        pd.DataFrame(saved["seeds"]),
    )


def table4(s: NoiseSettings, ctx: RunContext) -> Metrics:
    """D-T4-1..3, and D-T4-2 against Table 3 (each also per seed)."""
    up, t3, t3_seeds = _upstream(ctx, s)
    # eps = 0: Table 3's row of the shared model; there (1 - 0) P + 0 / S = P, so the
    # marginal reference equals "P on the noisy context".
    clean = t3[t3.eps == 0.0].assign(kind="perturbation")
    rows = [clean.assign(gap_marginal=clean.gap_P_on_noisy).iloc[0].to_dict()]
    seed_rows = t3_seeds[t3_seeds.eps == 0.0].to_dict("records")
    model, levels = noisy_levels(up, s, "perturbation", ctx)
    for eps, members, data in levels:
        row, per_seed = gap_row(model, members, s.seeds, data, "perturbation", eps, s.map_sequences)
        rows.append({**row, "gap_marginal": _marginal_gap(model, members, data, eps)})
        seed_rows += per_seed
    frame, seeds = pd.DataFrame(rows), pd.DataFrame(seed_rows)
    metrics = table_metrics(frame, "t4") | seed_table_metrics(seeds, "t4")
    sub, per = t3.set_index("eps"), frame.set_index("eps")
    for eps in s.levels:
        metrics[f"t3_minus_t4/eps{eps:g}"] = float(sub.gap[eps] - per.gap[eps])
    both = t3_seeds.merge(seeds, on=["eps", "seed"], suffixes=("_t3", "_t4"))
    for row in both[both.eps > 0.0].itertuples():
        metrics[f"t3_minus_t4/seed{row.seed}/eps{row.eps:g}"] = float(row.gap_t3 - row.gap_t4)
    ctx.save_csv(frame, "table4.csv")
    _plot(frame, t3, s, up.order_training(s.order).steps, ctx)
    return metrics


def _plot(
    frame: pd.DataFrame, t3: pd.DataFrame, s: NoiseSettings, steps: int, ctx: RunContext
) -> None:
    fig, axes = plotting.figure(1, 3)
    gap_panel(axes[0], frame, s.order, "(a) Table 4 vs Table 3: gap = CE - L_true(clean)")
    axes[0].plot(t3.eps, t3.gap, "s--", label="substitution (Table 3): gap")
    axes[1].plot(frame.eps, frame.gap_P_on_noisy, "o-", label="P on the noisy context")
    axes[1].plot(frame.eps, frame.gap_marginal, "s--", label="(1-eps) P + eps/S")
    finish_noise_figure(
        fig,
        axes,
        frame,
        "(b) rejected references (ours)",
        f"Paper D, Table 4 — transition perturbation, order {s.order} ({ctx.scale} scale; "
        f"every eps {steps} steps, seeds {', '.join(map(str, s.seeds))}; "
        "eps = 0: the shared model)",
        ctx,
    )
