"""Paper C, Fig. 7: gradient norm along training of a transformer with MLP layers (App. I.3).

S = 5, n = 3, T = 64. Paper C (App. I.3, Fig. 7) leaves alpha, the learning rate, its
schedule and the readout's initialisation unstated; the setting ``reading`` chooses how they
are read (`Fig7Reading`, params.yaml): ``spec``, our inference (alpha 0.5; lr 0.005,
constant, as Fig. 4; the zero readout of the authors' code of Feb. 2025), or ``code``, the
authors' code defaults (train.py: alpha 1, lr 1e-3, optax.cosine_decay_schedule to 0 with no
warm-up; models.py from commit 767e22c: readout N(0, 1/d)).

Which model the figure used is ambiguous (App. I.3): the caption says "simplified
transformer" with MLP layers, the authors' code passes ``use_mlp`` only to the general
transformer. The model is a setting: ``embedding`` and ``mlp`` of the general transformer
(`general.general_config`); our choice, run here, is one-hot embeddings with the
muLinear MLP (X <- X + MLP(delta)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field, model_validator

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
    over_seeds,
    seed_column,
)
from replicate.experiments.subngrams.drawing import PlateauMark, loss_and_gradient, plateau_marks
from replicate.experiments.subngrams.fig4 import train_general
from replicate.experiments.subngrams.general import Embedding, MlpKind, ReadoutInit
from replicate.experiments.subngrams.stages import (
    OFFSETS,
    Stages,
    StageSettings,
    gradient_ratio,
    stages,
    with_call_bounds,
)
from replicate.settings import PositiveInt, Strict

ReadingName = Literal["spec", "code"]  # params.yaml `reading`: see the module docstring


READOUT_NAMES = {"zero": "zero", "normal": "N(0, 1/d)"}
"""The readout initialisation as the figure's title names it."""


class ChainShape(Strict):
    """The chain (`ChainSettings`) without its Dirichlet alpha, which the reading sets."""

    states: Annotated[int, Field(ge=2)]
    order: Annotated[int, Field(ge=2)]
    initial: Literal["uniform", "stationary"] = "uniform"


class Fig7Reading(Strict):
    """The settings paper C's Fig. 7 (App. I.3) leaves unstated, as one reading sets them:
    ``spec``, our inference; ``code``, the authors' code defaults (train.py's alpha,
    lr and optax cosine decay; models.py's N(0, 1/d) readout). See params.yaml."""

    alpha: Annotated[float, Field(gt=0.0)]
    lr: Annotated[float, Field(gt=0.0)]
    schedule: Literal["constant", "cosine"]
    readout: ReadoutInit


class Fig7Optim(Strict):
    """AdamW's settings but the learning rate and its schedule, which the reading sets."""

    beta1: Annotated[float, Field(ge=0.0, lt=1.0)]
    beta2: Annotated[float, Field(ge=0.0, lt=1.0)]
    weight_decay: Annotated[float, Field(ge=0.0)]


class Fig7Settings(Strict):
    reading: ReadingName  # which of ``readings`` the run uses
    readings: dict[ReadingName, Fig7Reading]
    chain: ChainShape
    embedding: Embedding
    mlp: MlpKind
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings
    optim: Fig7Optim
    eps: Annotated[float, Field(gt=0.0)]
    probe_sequences: PositiveInt
    stage: StageSettings
    mixed_head_mass: Annotated[float, Field(gt=0.0, lt=1.0)]  # F7c: m(1), m(2) >= this

    @model_validator(mode="after")
    def _reading_is_defined(self) -> Fig7Settings:
        if self.reading not in self.readings:
            raise ValueError(
                f"reading = {self.reading!r} is not among readings ({sorted(self.readings)})"
            )
        return self

    @property
    def read(self) -> Fig7Reading:
        """The reading the run uses."""
        return self.readings[self.reading]

    @property
    def full_chain(self) -> ChainSettings:
        """The chain with the reading's alpha."""
        return ChainSettings(**self.chain.model_dump(), alpha=self.read.alpha)

    @property
    def full_optim(self) -> OptimSettings:
        """The optimiser with the reading's learning rate and schedule."""
        r = self.read
        return OptimSettings(**self.optim.model_dump(), lr=r.lr, schedule=r.schedule)


def one_unigram_plateau(stage: Stages) -> dict[str, float]:
    """F7a from one reading of the plateaus' orders: exactly one intermediate plateau, at the
    unigram level, and the model left it."""
    once = len(stage.intermediate) == 1 and stage.orders[0] == 1
    return {"one_unigram_plateau": float(once and (stage.final_order or 0) >= 2)}


def fig7(s: Fig7Settings, ctx: RunContext) -> Metrics:
    """Fig. 7: one intermediate plateau at the unigram level, a gradient spike (F7a-F7d),
    under the settings' reading of what the paper leaves unstated."""
    chain = s.full_chain
    trained = train_general(
        chain,
        s.embedding,
        s.mlp,
        s.seeds,
        s.training,
        s.full_optim,
        s.eps,
        s.probe_sequences,
        ctx,
        readout=s.read.readout,
    )
    steps, losses, grads = trained.eval_steps, trained.test_loss, trained.grad_norm
    masses = trained.probes["masses"]
    refs = history_losses(member_test_set(trained), chain, s.eps)
    levels, noise = kgram_levels(refs), level_noise(refs)
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    metrics: Metrics = {f"kgram/b{k + 1}": float(b) for k, b in enumerate(levels)}
    per_seed, marks = [], {}
    for i, seed in enumerate(s.seeds):
        stage = stages(steps, losses[i], levels, s.stage, noise)
        marks[seed] = plateau_marks(stage)
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
    ctx.save_figure(draw(curves, levels, marks, s, ctx.scale))
    return metrics


def draw(
    curves: pd.DataFrame,
    levels: np.ndarray,
    plateaus: Mapping[int, Sequence[PlateauMark]],
    s: Fig7Settings,
    scale: str,
) -> Figure:
    """Fig. 7 from curves.csv, the levels of references.csv and each seed's plateaus: the
    test loss on the k-gram levels with the plateaus F7a reads (one, at b_1, then a final
    one at k >= 2), and the minibatch gradient norm F7b reads below."""
    r = s.read
    title = (
        f"Paper C, Fig. 7 — {scale} scale, {s.reading} reading: transformer ({s.embedding} "
        f"embeddings, MLP {s.mlp}, {READOUT_NAMES[r.readout]} readout), S={s.chain.states}, "
        f"n={s.chain.order}, alpha={r.alpha:g}, T={s.training.seq_len}, "
        f"lr {r.lr:g} {r.schedule}, "
        f"{drawing.count(len(s.seeds), 'seed')}; shaded: the plateaus found and their "
        "k-gram orders"
    )
    return loss_and_gradient(curves, levels, plateaus, title)
