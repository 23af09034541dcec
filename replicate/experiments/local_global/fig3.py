"""Paper B, Fig. 3: from a tiny Gaussian init, the trained weights are rank one along e.

App. A.3.1: p = 0.2, q = 0.3, N = 1024, d = 8, every parameter N(0, 0.001^2), B = 16,
800 iterations. The text says "SGD"; Table 2 says AdamW, used here (ours: "SGD" read
generically). At convergence W_V and W_1 (and W_2, W_Q, W_K) are approximately rank one,
with the embedding-side factor along e, and e is on the hypercube up to scale.
"""

from __future__ import annotations

from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global.lowrank import LowRankSettings, run_low_rank
from replicate.experiments.local_global.transformer import InitOptions


class Fig3Settings(LowRankSettings):
    """The init is standard N(0, init_std^2): set model.init_std (the paper: 0.001)."""


def fig3(s: Fig3Settings, ctx: RunContext) -> Metrics:
    """Fig. 3: rank-one structure at convergence from a standard (tiny) Gaussian init."""
    return run_low_rank(s, "standard", InitOptions(), ctx, "Fig. 3 (Gaussian init)")
