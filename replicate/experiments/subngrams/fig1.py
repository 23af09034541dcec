"""Paper C, Fig. 1: stage-wise test loss on a 4-gram task (Sec. 1).

S = 3, n = 4, T = 128, alpha = 0.5 (ours: inferred from the dashed lines), simplified
model with H = 3 heads; every seed one ensemble member. Plateaus are assigned to k-gram
levels (ours); the heads at each plateau's midpoint record which history (contiguous
or not, App. F.2) the model uses there.
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from pydantic import Field

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import (
    NO_EVENT,
    ChainSettings,
    OptimSettings,
    TrainingSettings,
    curves_frame,
    history_losses,
    kgram_levels,
    level_noise,
    member_test_set,
    over_event_seeds,
    train_simplified,
)
from replicate.experiments.subngrams.drawing import loss_and_gradient, marks_from_frame
from replicate.experiments.subngrams.stages import (
    Stages,
    StageSettings,
    heads_on,
    mass_probe,
    max_rise,
    midpoint_index,
    stages,
    with_call_bounds,
)
from replicate.settings import Strict

PLATEAU_COLUMNS = ("seed", "t0", "t1", "level", "order", "orders_within_noise", "head_lags")
"""plateaus.csv: one row per plateau found (none when no flat stretch lasts rho t_ref steps,
nor rho T on the scale T of the steps elapsed: `stages`); ``orders_within_noise`` every
order a level within the call width gets (`level_calls`)."""


class Fig1Settings(Strict):
    chain: ChainSettings
    hidden: Literal["S", "D"]
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings
    optim: OptimSettings
    eps: Annotated[float, Field(gt=0.0)]
    stage: StageSettings


CALLED = ("strict_stages", "reduced_stages")
"""The per-seed values that rest on the plateaus' k-gram order calls (`with_call_bounds`)."""


def stage_calls(stage: Stages, orders: int) -> dict[str, float]:
    """F1a's and F1b's per-seed values from one reading of the plateaus' orders (of k-gram
    orders 1..``orders``).

    F1b (paper C, Fig. 1) is about the first stage of training: the first plateau the run leaves
    (an intermediate plateau; the last one is where it ends, and a run that learns nothing is
    one plateau from start to end). ``has_stage`` says whether the seed has one,
    ``first_order`` is its order (``orders`` + 1 when no band holds its level: above every
    order), `NO_EVENT` without one; the claim reads the seeds with one (``per_seed.only``)."""
    first = next(iter(stage.intermediate), None)
    orders = [o for o in stage.orders if o is not None]
    inter = [o for o in stage.orders[:-1] if o is not None]
    final = stage.final_order
    return {
        "plateaus": float(len(stage.plateaus)),
        "intermediate": float(len(stage.intermediate)),
        # F1a (paper C, Fig. 1): >= 2 intermediate plateaus, assigned orders strictly
        # increasing, 2 and 3 among them (a 2-lag history of any lags sits at b_3)
        "strict_stages": float(
            len(stage.intermediate) >= 2
            and all(a < b for a, b in itertools.pairwise(orders))
            and {2, 3} <= set(orders)
        ),
        # F1a at ci scale (ours): >= 1 intermediate plateau at k >= 2, the last at k >= 3,
        # assigned orders never decreasing
        "reduced_stages": float(
            any(o >= 2 for o in inter)
            and final is not None
            and final >= 3
            and all(a <= b for a, b in itertools.pairwise(orders))
        ),
        "has_stage": float(first is not None),
        "first_order": NO_EVENT if first is None else float(stage.orders[0] or orders + 1),
    }


def fig1(s: Fig1Settings, ctx: RunContext) -> Metrics:
    """Fig. 1: plateaus at the k-gram losses in increasing k (F1a-F1d)."""
    trained = train_simplified(
        s.chain, s.hidden, s.seeds, s.training, s.optim, s.eps, {"masses": mass_probe}, ctx
    )
    steps, losses, masses = trained.eval_steps, trained.test_loss, trained.probes["masses"]
    refs = history_losses(member_test_set(trained), s.chain, s.eps)
    levels = kgram_levels(refs)
    metrics: Metrics = {f"kgram/b{k + 1}": float(b) for k, b in enumerate(levels)}
    noise = level_noise(refs)
    rows, per_seed = [], []
    for i, seed in enumerate(s.seeds):
        stage = stages(steps, losses[i], levels, s.stage, noise)
        values = with_call_bounds(stage, partial(stage_calls, orders=len(levels)), CALLED)
        values |= {
            "max_rise": max_rise(losses[i]),
            "final_minus_bayes": float(losses[i, -1] - levels[-1]),
            "final_loss": float(losses[i, -1]),
        }
        per_seed.append(values)
        metrics |= {f"seed{seed}/{key}": value for key, value in values.items()}
        for p, order, calls in zip(stage.plateaus, stage.orders, stage.calls, strict=True):
            lags = sorted(heads_on(masses[i, midpoint_index(steps, p)], s.stage) - {0})
            rows.append(
                {
                    "seed": seed,
                    "t0": p.t0,
                    "t1": p.t1,
                    "level": p.level,
                    "order": order,
                    "orders_within_noise": " ".join(sorted(str(o or "none") for o in calls)),
                    "head_lags": " ".join(map(str, lags)),
                }
            )

    def col(key: str) -> np.ndarray:
        return np.array([v[key] for v in per_seed])

    metrics |= {
        "F1a/frac_seeds_strict_stages": float(col("strict_stages").mean()),
        "F1a/frac_seeds_reduced_stages": float(col("reduced_stages").mean()),
        "F1b/max_first_stage_order": over_event_seeds(
            np.max, col("first_order"), col("has_stage") == 1
        ),
        "F1c/max_rise": float(col("max_rise").max()),
        "F1d/min_final_minus_bayes": float(col("final_minus_bayes").min()),
    }
    curves = curves_frame(s.seeds, steps, test_loss=losses, grad_norm=trained.grad_norm)
    ctx.save_csv(curves, "curves.csv")
    plateaus = pd.DataFrame(rows, columns=list(PLATEAU_COLUMNS))
    ctx.save_csv(plateaus, "plateaus.csv")
    ctx.save_csv(refs, "references.csv")
    ctx.save_figure(draw(curves, plateaus, levels, s, ctx.scale))
    return metrics


def draw(
    curves: pd.DataFrame, plateaus: pd.DataFrame, levels: np.ndarray, s: Fig1Settings, scale: str
) -> Figure:
    """Fig. 1 from what the experiment saves (curves.csv, plateaus.csv, the levels of
    references.csv): per seed the test loss on the k-gram levels b_1..b_n with its plateaus
    and their orders, which F1a-F1d read, and the minibatch gradient norm below."""
    marks = {
        seed: marks_from_frame(plateaus[plateaus.seed == seed]) for seed in curves.seed.unique()
    }
    title = (
        f"Paper C, Fig. 1 — {scale} scale: simplified model, S={s.chain.states}, "
        f"n={s.chain.order}, T={s.training.seq_len}, d_h={s.hidden}, "
        f"{drawing.count(len(s.seeds), 'seed')}; "
        "shaded: the plateaus found and their k-gram orders"
    )
    return loss_and_gradient(curves, levels, marks, title)
