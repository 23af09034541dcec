"""Paper B: the canonical 3-scalar model (e, w, b) trained with SGD from basin inits (Fig. 4 rule).

The authors' `Markov-Fixed` code trains the scalars of logit = e^2 (1 + 2w|w|) x + b - e^2/2
(Eq. 6) with SGD on sampled sequences (spec B §3.4, "canonical 3-scalar model"). With a
small learning rate SGD follows the gradient flow, so each run should end in the limit
class that Thm 2 (p + q > 1) / Thm 8 (p + q < 1) gives for its (e_0, w_0). The bias starts
at b*(theta_0) (Lemma 5): with b_0 = 0 a near-separatrix init can cross the separatrix
while b catches up (spec B §3.4).

Training uses Lightning (`lightning_modules.canonical.CanonicalLM`) with the shared
`MarkovEnsembleData` stream, as every other training in the harness; see that module for
the measured per-step cost.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import pandas as pd
from pydantic import Field

from lightning_modules import ChainMember, MarkovEnsembleData
from lightning_modules.canonical import CanonicalLM
from replicate.config import BinaryChainSettings, PositiveInt, Strict
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global.flows import PositiveFloat
from replicate.markov import binary_kernel, binary_stationary
from replicate.theory import local_global as lg


class CanonicalSGDSettings(Strict):
    chains: list[BinaryChainSettings] = Field(min_length=1)
    inits: list[tuple[float, float]] = Field(min_length=1)
    """(e_0, w_0) per run, each run on every chain."""
    lr: PositiveFloat
    batch_size: PositiveInt
    seq_len: PositiveInt
    steps: PositiveInt
    record_every: PositiveInt
    seed: int
    e_tol: PositiveFloat
    """|e| below this at the end: a point of e = 0 (local min / max)."""
    gap_tol: PositiveFloat
    """|Delta - c*| below this at the end (and |e| >= e_tol): a global minimum."""


def _runs(s: CanonicalSGDSettings) -> list[tuple[BinaryChainSettings, tuple[float, float]]]:
    return [(chain, init) for chain in s.chains for init in s.inits]


def train_canonical(s: CanonicalSGDSettings, ctx: RunContext) -> CanonicalLM:
    """One SGD run per (chain, init), all in one module and one Trainer."""
    runs = _runs(s)
    members = [
        ChainMember(binary_kernel(c.p, c.q), binary_stationary(c.p, c.q), s.seed) for c, _ in runs
    ]
    e0 = np.array([e for _, (e, _) in runs])
    w0 = np.array([w for _, (_, w) in runs])
    b0 = np.array([float(lg.optimal_bias(e, w, c.p, c.q)) for c, (e, w) in runs])
    module = CanonicalLM(e0, w0, b0, s.lr, s.record_every)
    data = MarkovEnsembleData(members, s.batch_size, s.seq_len + 1, s.steps, 1, s.seed)
    trainer = L.Trainer(
        accelerator="cpu",  # three scalars per run: a GPU would only add transfers
        devices=1,
        max_steps=s.steps,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=ctx.progress,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=data)
    return module


def sgd_paths(s: CanonicalSGDSettings, module: CanonicalLM) -> pd.DataFrame:
    """Tidy (e, w, b) paths with the logit gap Delta and the population loss L(e, w, b)."""
    path = np.stack(module.path)  # (records, runs, 3)
    frames = []
    for j, (chain, (e0, w0)) in enumerate(_runs(s)):
        e, w, b = path[:, j].T
        frames.append(
            pd.DataFrame(
                {
                    "chain": chain.tag,
                    "init": f"({e0:g}, {w0:g})",
                    "step": module.path_steps,
                    "e": e,
                    "w": w,
                    "b": b,
                    "gap": lg.logit_gap(e, w),
                    "loss": lg.loss_with_bias(e, w, b, chain.p, chain.q),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def sgd_metrics(s: CanonicalSGDSettings, paths: pd.DataFrame) -> Metrics:
    """Per run: end class vs the basin of Thm 2 / Thm 8, and the end point; then the agreement."""
    metrics: Metrics = {}
    agree = []
    for chain, (e0, w0) in _runs(s):
        run = paths[(paths.chain == chain.tag) & (paths.init == f"({e0:g}, {w0:g})")]
        last = run.iloc[-1]
        found = lg.classify_limit(
            [last.e, last.w], chain.p, chain.q, e_tol=s.e_tol, gap_tol=s.gap_tol
        )
        expected = lg.basin_of(e0, w0, chain.p, chain.q)
        agree.append(int(found) == int(expected))
        prefix = f"sgd/{chain.tag}/e{e0:g}_w{w0:g}"
        metrics |= {
            f"{prefix}/class": float(found),
            f"{prefix}/theorem_class": float(expected),
            f"{prefix}/final_e": float(last.e),
            f"{prefix}/final_gap": float(last.gap),
            f"{prefix}/final_loss": float(last.loss),
        }
    metrics["sgd/class_agreement"] = float(np.mean(agree))
    return metrics
