"""Paper C, Fig. 6: the gradient norm along training of the simplified model (App. I.3).

S = 5, n = 3, T = 128, alpha = 0.5 (inferred), d_h = D; every seed one ensemble member. The
test loss, and below it the minibatch gradient norm (averaged between evaluations, as the
authors' code) with a population-gradient norm (ours, not in the paper) on a fixed set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import (
    ChainSettings,
    OptimSettings,
    TrainingSettings,
    curves_frame,
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
from replicate.experiments.subngrams.drawing import PlateauMark, loss_and_gradient, plateau_marks
from replicate.experiments.subngrams.stages import (
    Stages,
    StageSettings,
    gradient_ratio,
    heads_on,
    mass_probe,
    midpoint_index,
    peak_distance,
    spike_factor,
    stages,
    with_call_bounds,
)
from replicate.settings import Strict


class Fig6Settings(Strict):
    chain: ChainSettings
    hidden: Literal["S", "D"]
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings  # gradset_sequences > 0 (F6c)
    optim: OptimSettings
    eps: Annotated[float, Field(gt=0.0)]
    stage: StageSettings


def stagewise(stage: Stages, final_order: int) -> bool:
    """F6a: >= 1 intermediate plateau, all assigned to k < n, then the last assigned to n."""
    inter = stage.orders[:-1]
    return (
        bool(inter)
        and all(o is not None and o < final_order for o in inter)
        and stage.final_order == final_order
    )


AT_TRANSITION = ("grad_ratio", "grad_spike_factor", "pop_grad_ratio", "grad_peak_distance")
"""The per-seed measures of `gradient_metrics` that need a transition, a plateau followed by
another: F6b-F6d (paper C, App. I.3, Fig. 6) reduce them over the seeds that made one
(``made_transition`` = 1; `NO_EVENT` in a seed without)."""


def gradient_metrics(
    steps: np.ndarray, stage: Stages, minibatch: np.ndarray, population: np.ndarray
) -> Metrics:
    """F6b-F6d (App. I.3, Fig. 6; for F6b also `spike_factor`) of one member (NaN / inf without
    a transition)."""
    ratio, peak = gradient_ratio(steps, minibatch, stage, smooth=True)
    pop_ratio, _ = gradient_ratio(steps, population, stage, smooth=False)
    return {
        "grad_ratio": ratio,
        "grad_spike_factor": spike_factor(steps, minibatch, stage),
        "pop_grad_ratio": pop_ratio,
        "grad_peak_step": peak,
        "grad_peak_distance": peak_distance(peak, stage),
    }


def fig6(s: Fig6Settings, ctx: RunContext) -> Metrics:
    """Fig. 6: plateaus of low gradient norm, spikes at the transitions (F6a-F6d)."""
    trained = train_simplified(
        s.chain, s.hidden, s.seeds, s.training, s.optim, s.eps, {"masses": mass_probe}, ctx
    )
    steps, losses = trained.eval_steps, trained.test_loss
    grads, pop = trained.grad_norm, trained.population_grad_norm
    masses = trained.probes["masses"]
    refs = history_losses(member_test_set(trained), s.chain, s.eps)
    levels, noise = kgram_levels(refs), level_noise(refs)
    metrics: Metrics = {f"kgram/b{k + 1}": float(b) for k, b in enumerate(levels)}
    per_seed, marks = [], {}
    for i, seed in enumerate(s.seeds):
        stage = stages(steps, losses[i], levels, s.stage, noise)
        marks[seed] = plateau_marks(stage)
        made_transition = len(stage.plateaus) >= 2
        values = gradient_metrics(steps, stage, grads[i], pop[i])
        if not made_transition:
            values |= without_event(AT_TRANSITION)
        longest = stage.longest_intermediate()
        values |= with_call_bounds(
            stage, lambda r: {"stagewise": float(stagewise(r, s.chain.order))}, ["stagewise"]
        )
        values |= {
            "made_transition": float(made_transition),
            "plateaus": float(len(stage.plateaus)),
            "final_loss": float(losses[i, -1]),
            "final_order": float(stage.final_order or 0),
            "plateau_level": longest.level if longest else math.nan,
            "plateau_heads_bigram": (
                float(heads_on(masses[i, midpoint_index(steps, longest)], s.stage) == {1})
                if longest
                else math.nan
            ),
            "final_heads_trigram": float({1, 2} <= heads_on(masses[i, -1], s.stage)),
        }
        per_seed.append(values)
        metrics |= {f"seed{seed}/{key}": value for key, value in values.items()}

    col = partial(seed_column, per_seed)
    made = col("made_transition") == 1

    def over_transitions(reduce: Callable[[np.ndarray], float], key: str) -> float:
        return over_event_seeds(reduce, col(key), made)

    metrics |= {
        "F6a/frac_seeds_stagewise": float(col("stagewise").mean()),
        "F6b/max_grad_ratio": over_transitions(np.max, "grad_ratio"),
        "F6b/min_grad_spike_factor": over_transitions(np.min, "grad_spike_factor"),
        "F6c/max_pop_grad_ratio": over_transitions(np.max, "pop_grad_ratio"),
        "F6d/max_peak_distance": over_transitions(np.max, "grad_peak_distance"),
        "heads/frac_seeds_bigram_heads_on_plateau": over_seeds(
            np.nanmean, col("plateau_heads_bigram")
        ),
        "heads/frac_seeds_trigram_heads_at_end": float(col("final_heads_trigram").mean()),
    }
    curves = curves_frame(
        s.seeds, steps, test_loss=losses, grad_norm=grads, population_grad_norm=pop
    )
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(refs, "references.csv")
    ctx.save_figure(draw(curves, levels, marks, s, ctx.scale))
    return metrics


def draw(
    curves: pd.DataFrame,
    levels: np.ndarray,
    plateaus: Mapping[int, Sequence[PlateauMark]],
    s: Fig6Settings,
    scale: str,
) -> Figure:
    """Fig. 6 from curves.csv, the levels of references.csv and each seed's plateaus: the
    test loss on the k-gram levels, the plateaus and transitions F6a reads, and below it the
    minibatch norm (its running median, whose spike and peak F6b and F6d read) and the
    population norm (F6c)."""
    title = (
        f"Paper C, Fig. 6 — {scale} scale: simplified model, S={s.chain.states}, "
        f"n={s.chain.order}, T={s.training.seq_len}, d_h={s.hidden}, "
        f"{drawing.count(len(s.seeds), 'seed')}; "
        "shaded: the plateaus found and their k-gram orders"
    )
    return loss_and_gradient(curves, levels, plateaus, title)
