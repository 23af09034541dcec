"""Paper B: the canonical 3-scalar model (e, w, b) trained with SGD from basin inits (Fig. 4 rule).

The authors' `Markov-Fixed` code trains the scalars of logit = e^2 (1 + 2w|w|) x + b - e^2/2
(Eq. 6) with SGD on sampled sequences (ours: an extra, not a figure of the paper). With a
small learning rate SGD follows the gradient flow, so each run should end in the limit
class that Thm 2 (p + q > 1) / Thm 8 (p + q < 1) gives for its (e_0, w_0). The bias starts
at b*(theta_0) (Lemma 5): with b_0 = 0 a near-separatrix init can cross the separatrix
while b catches up (our observation).

Training goes through `train_ensemble`, as every other training in the harness: the
`EnsembleCanonical` model, the `BinaryLogitCE` objective, plain SGD, and a probe that
records (e, w, b) every ``record_every`` steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field

from lightning_modules import BinaryLogitCE, ChainMember, OptimConfig
from lightning_modules.canonical import EnsembleCanonical
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global.flows import PositiveFloat
from replicate.markov import binary_kernel, binary_stationary
from replicate.settings import BinaryChainSettings, PositiveInt, Strict
from replicate.theory import local_global as lg
from replicate.training import TrainedEnsemble, TrainingPlan, train_ensemble


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


def _parameters(model: EnsembleCanonical) -> np.ndarray:
    """(E, 3) parameters (e, w, b) of every run."""
    return np.stack([p.detach().cpu().numpy() for p in (model.e, model.w, model.b)], 1)


def train_canonical(s: CanonicalSGDSettings, ctx: RunContext) -> TrainedEnsemble:
    """One SGD run per (chain, init), all in one module and one Trainer."""
    runs = _runs(s)
    members = [
        ChainMember(binary_kernel(c.p, c.q), binary_stationary(c.p, c.q), s.seed) for c, _ in runs
    ]
    e0 = np.array([e for _, (e, _) in runs])
    w0 = np.array([w for _, (_, w) in runs])
    b0 = np.array([float(lg.optimal_bias(e, w, c.p, c.q)) for c, (e, w) in runs])
    plan = TrainingPlan(
        steps=s.steps,
        batch_size=s.batch_size,
        seq_len=s.seq_len,
        eval_every=s.record_every,
        test_sequences=1,  # the loss that matters is the population loss, in closed form
        test_seed=s.seed,
    )
    return train_ensemble(
        EnsembleCanonical(e0, w0, b0),
        members,
        plan,
        OptimConfig(lr=s.lr, weight_decay=0.0, schedule="constant", algorithm="sgd"),
        ctx.label(f"canonical SGD ({len(members)} runs)"),
        objective=BinaryLogitCE(),
        probes={"theta": _parameters},
        context=ctx.training,
    )


def sgd_paths(s: CanonicalSGDSettings, trained: TrainedEnsemble) -> pd.DataFrame:
    """Tidy (e, w, b) paths with the logit gap Delta and the population loss L(e, w, b),
    every ``record_every`` steps from step 0."""
    recorded = trained.eval_steps % s.record_every == 0
    steps = trained.eval_steps[recorded]
    path = trained.probes["theta"][:, recorded].transpose(1, 0, 2)  # (records, runs, 3)
    frames = []
    for j, (chain, (e0, w0)) in enumerate(_runs(s)):
        e, w, b = path[:, j].T
        frames.append(
            pd.DataFrame(
                {
                    "chain": chain.tag,
                    "init": f"({e0:g}, {w0:g})",
                    "step": steps,
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
