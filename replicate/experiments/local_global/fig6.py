"""Paper B, Fig. 6: a rank-one init stays rank one through unconstrained training.

App. A.3.1: weights initialised as random rank-one matrices and embeddings on {+-1}^d,
then trained without constraints. The recipe is the authors' ``--init lowrank``
(spec B §3.3, `transformer.InitName` "rank_one"); (p, q) is not stated, and the authors'
scripts use p = 0.2, q = 0.3.
"""

from __future__ import annotations

from pydantic import Field

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global.lowrank import LowRankSettings, run_low_rank
from replicate.experiments.local_global.transformer import InitOptions


class Fig6Settings(LowRankSettings):
    value_std: float = Field(ge=0.0)
    """Std of v in W_V = alpha v^T at init; the authors' default 0 makes W_V = 0."""


def fig6(s: Fig6Settings, ctx: RunContext) -> Metrics:
    """Fig. 6: rank one at every logged iteration from the rank-one init."""
    options = InitOptions(value_std=s.value_std)
    return run_low_rank(s, "rank_one", options, ctx, "Fig. 6 (rank-one init)")
