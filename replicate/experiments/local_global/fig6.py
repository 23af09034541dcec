"""Paper B, Fig. 6: a rank-one init stays rank one through unconstrained training.

App. A.3.1: "we randomly initialize the weight parameters as rank-one matrices and the
embeddings on the hypercube", then train without constraints. The recipe is the authors'
``--init lowrank`` (`transformer.InitName` "rank_one"), whose default
``v_std = 0`` makes W_V = 0 rather than a random rank-one matrix. The primary run follows the
paper (W_V = alpha v^T with v ~ N(0, value_std^2), value_std > 0); the authors' W_V = 0 is
trained too as a labelled variant (metrics under ``wv_zero/``, structure_wv_zero.csv).
(p, q) is not stated; the authors' scripts use p = 0.2, q = 0.3.
"""

from __future__ import annotations

from pydantic import Field

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global.lowrank import (
    LowRankSettings,
    low_rank_metrics,
    run_low_rank,
    train_low_rank,
)
from replicate.experiments.local_global.transformer import InitOptions


class Fig6Settings(LowRankSettings):
    value_std: float = Field(gt=0.0)
    """Std of v in W_V = alpha v^T at init: a random rank-one W_V, as the paper describes."""
    wv_zero_variant: bool = False
    """Also train the authors' default, W_V = 0 at init, as a labelled variant."""


def fig6(s: Fig6Settings, ctx: RunContext) -> Metrics:
    """Fig. 6: rank one at every logged iteration from the rank-one init (and the variant)."""
    options = InitOptions(value_std=s.value_std)
    metrics = run_low_rank(s, "rank_one", options, ctx, "Fig. 6 (rank-one init, random W_V)")
    if s.wv_zero_variant:
        run = train_low_rank(s, "rank_one", InitOptions(value_std=0.0), ctx)
        ctx.save_csv(run.structure, "structure_wv_zero.csv")
        metrics |= {f"wv_zero/{k}": v for k, v in low_rank_metrics(s, run, ctx).items()}
    return metrics
