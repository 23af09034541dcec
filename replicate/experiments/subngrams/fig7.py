"""Paper C, Fig. 7: gradient norm along training of a transformer with MLP layers (spec C §4.7).

S = 5, n = 3, T = 64, alpha = 0.5 (inferred). Which model the figure used is ambiguous
(spec C §2.3): the caption says "simplified transformer" with MLP layers, the authors' code
passes ``use_mlp`` only to the general transformer. The model is a setting: ``embedding``
and ``mlp`` of the general transformer (`general.general_config`); the spec's proposal,
run here, is one-hot embeddings with the muLinear MLP (X <- X + MLP(delta)).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Annotated

import numpy as np
from pydantic import Field

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams.common import (
    ChainSettings,
    OptimSettings,
    TrainingSettings,
    curves_frame,
    history_losses,
    kgram_levels,
    level_noise,
    member_test_set,
    over_seeds,
    seed_column,
)
from replicate.experiments.subngrams.fig4 import train_general
from replicate.experiments.subngrams.fig6 import plot_loss_and_gradient
from replicate.experiments.subngrams.general import Embedding, MlpKind
from replicate.experiments.subngrams.stages import (
    OFFSETS,
    Stages,
    StageSettings,
    gradient_ratio,
    stages,
    with_call_bounds,
)
from replicate.settings import PositiveInt, Strict


class Fig7Settings(Strict):
    chain: ChainSettings
    embedding: Embedding
    mlp: MlpKind
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings
    optim: OptimSettings
    eps: Annotated[float, Field(gt=0.0)]
    probe_sequences: PositiveInt
    stage: StageSettings
    mixed_head_mass: Annotated[float, Field(gt=0.0, lt=1.0)]  # F7c: m(1), m(2) >= this


def one_unigram_plateau(stage: Stages) -> dict[str, float]:
    """F7a from one reading of the plateaus' orders: exactly one intermediate plateau, at the
    unigram level, and the model left it."""
    once = len(stage.intermediate) == 1 and stage.orders[0] == 1
    return {"one_unigram_plateau": float(once and (stage.final_order or 0) >= 2)}


def fig7(s: Fig7Settings, ctx: RunContext) -> Metrics:
    """Fig. 7: one intermediate plateau at the unigram level, a gradient spike (F7a-F7d)."""
    trained = train_general(
        s.chain, s.embedding, s.mlp, s.seeds, s.training, s.optim, s.eps, s.probe_sequences, ctx
    )
    steps, losses, grads = trained.eval_steps, trained.test_loss, trained.grad_norm
    masses = trained.probes["masses"]
    refs = history_losses(member_test_set(trained), s.chain, s.eps)
    levels, noise = kgram_levels(refs), level_noise(refs)
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    metrics: Metrics = {f"kgram/b{k + 1}": float(b) for k, b in enumerate(levels)}
    per_seed = []
    for i, seed in enumerate(s.seeds):
        stage = stages(steps, losses[i], levels, s.stage, noise)
        inter = stage.intermediate
        end = masses[i, -1]
        values = with_call_bounds(stage, one_unigram_plateau, ["one_unigram_plateau"])
        values |= {
            "intermediate_plateaus": float(len(inter)),
            "plateau_minus_b1": float(inter[0].level - levels[0]) if inter else math.nan,
            "grad_ratio": gradient_ratio(steps, grads[i], stage, smooth=True)[0],
            "mixed_head_at_end": float(
                ((end[:, one] >= s.mixed_head_mass) & (end[:, two] >= s.mixed_head_mass)).any()
            ),
            "final_minus_b2": float(losses[i, -1] - levels[1]),
        }
        per_seed.append(values)
        metrics |= {f"seed{seed}/{key}": value for key, value in values.items()}

    col = partial(seed_column, per_seed)
    metrics |= {
        "F7a/frac_seeds_one_unigram_plateau": float(col("one_unigram_plateau").mean()),
        "F7a/max_abs_plateau_minus_b1": over_seeds(np.nanmax, np.abs(col("plateau_minus_b1"))),
        "F7b/max_grad_ratio": over_seeds(np.nanmax, col("grad_ratio")),
        "F7c/frac_seeds_mixed_head": float(col("mixed_head_at_end").mean()),
        "F7d/max_final_minus_b2": float(col("final_minus_b2").max()),
    }
    curves = curves_frame(s.seeds, steps, test_loss=losses, grad_norm=grads)
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(refs, "references.csv")
    title = (
        f"Paper C, Fig. 7 — {ctx.scale} scale: transformer ({s.embedding} embeddings, "
        f"MLP {s.mlp}), S={s.chain.states}, n={s.chain.order}, T={s.training.seq_len}, "
        f"{len(s.seeds)} seeds"
    )
    plot_loss_and_gradient(curves, levels, ctx, title)
    return metrics
