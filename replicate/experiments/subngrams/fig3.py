"""Paper C, Fig. 3: evolution of the first-layer heads of the simplified model (Sec. 5).

S = 5, n = 3, T = 32, alpha = 0.5, d_h = S; every seed is one member of one ensemble.
(a) test loss with the add-alpha k-gram losses as dashed lines; (b) the heads'
softmax(A1^(h)) of the first seed whose heads switch to the (-2)-token (the figure's point,
paper C Fig. 3b) at the steps F3a, F3b and F3d read: the paper's first marked step, the
middle of the second plateau, the end; (c) the KL to the k-gram estimators; (d) that seed's
m_h(1), m_h(2) along training. The first-layer maps of every evaluation are saved for
Fig. 5 (`histories.pt`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Annotated, Any, Literal

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from pydantic import Field

from replicate import plotting
from replicate.analysis import Plateau
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import (
    ChainSettings,
    OptimSettings,
    TrainingSettings,
    curves_frame,
    estimator_distance_probe,
    fixed_set,
    history_losses,
    kgram_levels,
    level_noise,
    member_test_set,
    over_event_seeds,
    over_seeds,
    seed_column,
    train_simplified,
    without_event,
)
from replicate.experiments.subngrams.stages import (
    OFFSETS,
    StageSettings,
    gradient_ratio,
    heads_on,
    index_at,
    masses_of,
    midpoint_index,
    stages,
)
from replicate.settings import PositiveInt, Strict

AT_PLATEAU = (
    "plateau_level",
    "plateau_bigram_only",
    "plateau_both_heads_m1",
    "plateau_nearest_bigram",
    "plateau_nearest_bigram_tv",
)
"""The per-seed measures at the second plateau that F3b and F3c (paper C, Sec. 5, Fig. 3)
reduce over the seeds with one (``has_second_plateau`` = 1; `NO_EVENT` in a seed without)."""


class Fig3Settings(Strict):
    chain: ChainSettings
    hidden: Literal["S", "D"]  # d_h of Q Kt ("S", the authors' first code, reproduces the plateau)
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings  # gradset_sequences > 0: F3e needs population gradients
    optim: OptimSettings
    eps: Annotated[float, Field(gt=0.0)]
    marked_steps: list[int] = Field(min_length=1)  # the paper's t = 115, 5000, 16000
    stage: StageSettings
    probe_sequences: PositiveInt  # fixed sequences the k-gram-estimator distances average over


def _attention(model: torch.nn.Module) -> np.ndarray:
    return model.first_layer_attention().float().cpu().numpy()


def seed_metrics(
    first_mark: int,
    steps: np.ndarray,
    loss: np.ndarray,
    masses: np.ndarray,
    pop_grad: np.ndarray,
    distances: np.ndarray,
    levels: np.ndarray,
    noise: float,
    s: StageSettings,
) -> Metrics:
    """F3a-F3e for one seed; masses (n, H, len(OFFSETS)), distances (n, orders, 2) from
    `estimator_distances`. The plateau of F3b-F3c is the paper's second plateau, the first one
    below the n-gram level (`Stages.second_plateau`; the run may end on it: the switch is slow);
    ``has_second_plateau`` says whether the seed has one, and without it the `AT_PLATEAU`
    measures are `NO_EVENT` (the claims on the plateau leave the seed out)."""
    stage = stages(steps, loss, levels, s, noise)
    second = stage.second_plateau(len(levels))
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    out: Metrics = {
        "plateaus": float(len(stage.plateaus)),
        "final_loss": float(loss[-1]),
        "first_mark_max_mass": float(masses[index_at(steps, first_mark)].max()),
        "pop_grad_ratio": gradient_ratio(steps, pop_grad, stage, smooth=False)[0],
    }
    final_on = heads_on(masses[-1], s)
    out["final_switch"] = float({1, 2} <= final_on)
    out["has_second_plateau"] = float(second is not None)
    if second is None:
        return out | without_event(AT_PLATEAU)
    middle = midpoint_index(steps, second)
    mid = masses[middle]
    on = heads_on(mid, s)
    kl, tv = distances[middle, :, 0], distances[middle, :, 1]
    out |= {f"plateau_kl_k{k + 1}": float(v) for k, v in enumerate(kl)}
    out |= {f"plateau_tv_k{k + 1}": float(v) for k, v in enumerate(tv)}
    out |= {
        "plateau_level": second.level,
        "plateau_t0": second.t0,
        "plateau_t1": second.t1,
        "plateau_order": float(stage.orders[stage.plateaus.index(second)] or 0),
        # 0: a level within the test loss's noise would get another order (`level_calls`)
        "plateau_order_firm": float(len(stage.calls[stage.plateaus.index(second)]) == 1),
        "plateau_bigram_only": float(1 in on and not any(d >= 2 for d in on)),
        "plateau_both_heads_m1": float((mid[:, one] >= s.threshold).all()),
        "plateau_margin_1_over_2": float(mid[:, one].max() - mid[:, two].max()),
        "final_drop": float(second.level - loss[-1]),
        # the k-gram estimator nearest the model's law (k = 2: the bigram estimator)
        "plateau_nearest_order": float(kl.argmin() + 1),
        "plateau_nearest_bigram": float(kl.argmin() == 1),
        "plateau_nearest_bigram_tv": float(tv.argmin() == 1),
    }
    return out


def fig3(s: Fig3Settings, ctx: RunContext) -> Metrics:
    """Fig. 3: stage-wise loss and first-layer heads of the simplified model (F3a-F3e)."""
    probe_set = fixed_set(
        s.chain.at(s.training.seq_len), s.probe_sequences, s.training.test_seed, "test"
    )
    probes = {"attention": _attention, "distances": estimator_distance_probe(probe_set, s.chain)}
    trained = train_simplified(s.chain, s.hidden, s.seeds, s.training, s.optim, s.eps, probes, ctx)
    steps, losses = trained.eval_steps, trained.test_loss
    attention = trained.probes["attention"]  # (E, n, H, T, T)
    masses = masses_of(torch.tensor(attention))  # (E, n, H, len(OFFSETS))
    refs = history_losses(member_test_set(trained), s.chain, s.eps)
    levels, noise = kgram_levels(refs), level_noise(refs)
    pop = (
        trained.population_grad_norm
        if s.training.gradset_sequences
        else np.full_like(losses, np.nan)
    )
    distances = trained.probes["distances"]  # (E, n, orders, 2)
    per_seed = {
        seed: seed_metrics(
            s.marked_steps[0],
            steps,
            losses[i],
            masses[i],
            pop[i],
            distances[i],
            levels,
            noise,
            s.stage,
        )
        for i, seed in enumerate(s.seeds)
    }
    saved = {
        "seeds": s.seeds,
        "steps": torch.tensor(steps),
        "test_loss": torch.tensor(losses),
        "attention": torch.tensor(attention),
        "levels": torch.tensor(levels),
        "level_noise": noise,
    }
    ctx.save_torch(saved, "histories.pt")
    kl = {f"kl_{k + 1}-gram": distances[:, :, k, 0] for k in range(distances.shape[2])}
    curves = curves_frame(s.seeds, steps, test_loss=losses, **kl)
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(refs, "references.csv")
    metrics = _summary(per_seed, levels, s)
    ctx.save_figure(draw(saved, curves, metrics, s, ctx.scale))
    return metrics


def _summary(per_seed: dict[int, Metrics], levels: np.ndarray, s: Fig3Settings) -> Metrics:
    metrics: Metrics = {f"kgram/b{k + 1}": float(b) for k, b in enumerate(levels)}
    for seed, values in per_seed.items():
        metrics |= {f"seed{seed}/{key}": value for key, value in values.items()}

    col = partial(seed_column, per_seed.values())
    switched = col("final_switch") == 1
    with_plateau = col("has_second_plateau") == 1

    def at_plateau(reduce: Callable[[np.ndarray], float], key: str) -> float:
        return over_event_seeds(reduce, col(key), with_plateau)

    metrics |= {
        "F3a/max_mass_at_first_mark": float(col("first_mark_max_mass").max()),
        "F3b/frac_seeds_bigram_heads_at_plateau": at_plateau(np.mean, "plateau_bigram_only"),
        "F3b/frac_seeds_both_heads_m1_at_plateau": at_plateau(np.mean, "plateau_both_heads_m1"),
        "F3b/frac_seeds_nearest_bigram_at_plateau": at_plateau(np.mean, "plateau_nearest_bigram"),
        "F3b/frac_seeds_nearest_bigram_at_plateau_tv": at_plateau(
            np.mean, "plateau_nearest_bigram_tv"
        ),
        "F3c/median_plateau_level": at_plateau(np.median, "plateau_level"),
        "F3d/frac_seeds_switched": float(switched.mean()),
        "F3d/min_drop_switched": float(col("final_drop")[switched].min())
        if switched.any()
        else math.nan,
        "F3e/max_pop_grad_ratio": over_seeds(np.nanmax, col("pop_grad_ratio")),
        "final_loss/median": float(np.median(col("final_loss"))),
    }
    return metrics


def shown_seed(seeds: Sequence[int], metrics: Mapping[str, float]) -> int:
    """The seed whose maps Fig. 3 shows: the first whose heads end on the (-1)- and the
    (-2)-token (``final_switch``, F3d), the switch the figure is about (paper C, Fig. 3b);
    the first seed when none switches."""
    return drawing.first_seed_with(seeds, metrics, lambda seed: f"seed{seed}/final_switch")


def map_columns(
    steps: np.ndarray, metrics: Mapping[str, float], seed: int, s: Fig3Settings
) -> list[tuple[int, str]]:
    """(evaluation index, what it is) of the maps' three columns, the steps F3a, F3b and F3d
    read: the paper's first marked step, the middle of the seed's second plateau (the
    paper's second marked step without one) and the end of training."""
    if metrics.get(f"seed{seed}/has_second_plateau") == 1.0:
        second = Plateau(metrics[f"seed{seed}/plateau_t0"], metrics[f"seed{seed}/plateau_t1"], 0.0)
        middle = (midpoint_index(steps, second), "middle of the second plateau")
    else:
        middle = (index_at(steps, s.marked_steps[1]), "the paper's second mark")
    return [
        (index_at(steps, s.marked_steps[0]), "the paper's first mark"),
        middle,
        (len(steps) - 1, "end of training"),
    ]


def draw(
    saved: Mapping[str, Any],
    curves: pd.DataFrame,
    metrics: Mapping[str, float],
    s: Fig3Settings,
    scale: str,
) -> Figure:
    """Fig. 3 from what the experiment saves (histories.pt, curves.csv, metrics.json).

    Row 0: (a) the test loss of every seed on the k-gram levels, (c) the KL to the k-gram
    estimators (F3b's nearest estimator), (d) the shown seed's head masses m_h(1), m_h(2)
    along training; below, (b) the shown seed's first-layer maps (`shown_seed`: the first
    whose heads switch to the (-2)-token) at the steps F3a, F3b and F3d read
    (`map_columns`), each with its heads' m_h(1) and m_h(2) (`stages.masses_of`)."""
    import seaborn as sns  # only to draw (`replicate.plotting`: start-up)

    seeds = [int(x) for x in saved["seeds"]]
    steps = saved["steps"].numpy()
    attention = saved["attention"]  # (E, n, H, T, T)
    levels = saved["levels"].numpy()
    seed = shown_seed(seeds, metrics)
    i = seeds.index(seed)
    heads = attention.shape[2]
    columns = map_columns(steps, metrics, seed, s)
    masses = masses_of(attention[i])  # (n, H, len(OFFSETS))
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    fig, axes = drawing.figure(1 + heads, len(columns), width=3.9, height=3.3)
    loss_ax, kl_ax, mass_ax = axes[0], axes[1], axes[2]
    plateau = []
    if metrics.get(f"seed{seed}/has_second_plateau") == 1.0:
        order = int(metrics[f"seed{seed}/plateau_order"]) or None
        plateau = [
            drawing.PlateauMark(
                metrics[f"seed{seed}/plateau_t0"],
                metrics[f"seed{seed}/plateau_t1"],
                metrics[f"seed{seed}/plateau_level"],
                order,
                (order,),
            )
        ]
    for ax in (loss_ax, mass_ax):
        drawing.shade_plateaus(ax, plateau, label=ax is loss_ax)
        for j, _ in columns:
            ax.axvline(steps[j], color="0.45", linewidth=0.8, linestyle=(0, (4, 2)))
    runs = [
        loss_ax.plot(
            steps, saved["test_loss"][k].numpy(), color=drawing.seed_color(k),
            linewidth=1.4 if other == seed else 0.8,
            label=f"seed {other}" + (" (maps)" if other == seed else ""),
        )[0]
        for k, other in enumerate(seeds)
    ]  # fmt: skip
    levels_drawn = drawing.kgram_lines(loss_ax, levels)
    loss_ax.set(xlabel="training iteration", ylabel="test loss (nats)", title="(a) test loss")
    loss_ax.legend(handles=runs, fontsize=7, loc="center right")
    distances = curves.melt(
        id_vars=["seed", "step"],
        value_vars=[c for c in curves.columns if c.startswith("kl_")],
        var_name="estimator",
        value_name="kl",
    )
    distances["estimator"] = distances["estimator"].str.removeprefix("kl_") + " estimator"
    plotting.per_seed_lines(kl_ax, distances, x="step", y="kl", hue="estimator")
    kl_ax.set(
        xlabel="training iteration",
        ylabel="mean KL(model ‖ estimator) (nats)",
        title=f"(c) KL to the add-α k-gram estimators\n(every seed, {s.probe_sequences} sequences)",
    )
    kl_ax.legend(fontsize=7, loc="upper right")
    head_colors = sns.color_palette("dark", n_colors=heads)
    masses_drawn = [
        mass_ax.plot(
            steps, masses[:, h, delta], color=head_colors[h], linestyle=style,
            label=f"seed {seed}, head {h + 1}: $m_{h + 1}({OFFSETS[delta]})$",
        )[0]
        for h in range(heads)
        for delta, style in ((one, "-"), (two, "--"))
    ]  # fmt: skip
    threshold = mass_ax.axhline(
        s.stage.threshold, color="black", linewidth=0.8, linestyle=":",
        label=f"head threshold {s.stage.threshold:g}",
    )  # fmt: skip
    mass_ax.set(
        xlabel="training iteration",
        ylabel="attention mass at offset δ",
        ylim=(0, 1),
        title=f"(d) seed {seed}: mass on the (−1)- and (−2)-token",
    )
    image = drawing.attention_maps(
        [axes[(1 + h) * len(columns) : (2 + h) * len(columns)] for h in range(heads)],
        [attention[i, j] for j, _ in columns],
        [f"(b) {what}, t = {int(steps[j])}" for j, what in columns],
    )
    fig.colorbar(image, ax=axes[len(columns) :], shrink=0.6, label="attention weight")
    about = (
        f"seed {seed}, the first seed whose heads switch to the (−2)-token"
        if metrics.get(f"seed{seed}/final_switch") == 1.0
        else f"seed {seed} (no seed's heads switch to the (−2)-token)"
    )
    title = (
        f"Paper C, Fig. 3 — {scale} scale: simplified model, S={s.chain.states}, "
        f"n={s.chain.order}, T={s.training.seq_len}, d_h={s.hidden}, "
        f"{drawing.count(len(seeds), 'seed')}; "
        f"(b) and (d): {about}"
    )
    key = drawing.plateau_key(plateau)
    for handle in key:
        handle.set_label(f"{handle.get_label()}: seed {seed}'s second plateau")
    return drawing.finish(fig, title, [*levels_drawn, *masses_drawn, threshold, *key])
