"""Paper D, App. H.1 (Figs. 5-16): two-layer single-head models trained on orders k = 1, 2, 3.

This experiment trains the models every other trained item of paper D reuses (`models.pt`:
one ensemble of seeds per order; the k = 2 one is the shared model of Fig. 1, Fig. 2, Table 2,
the eps = 0 point of Tables 3/4 and the bit table; this reuse is ours). Per order it draws the H.1
figures (layer-1 average and single sequence; layer-2 average and single sequence, each as
model / pseudo map / |difference|; the test loss) and measures the layer-1 diagonal masses
and the layer-2 matched mass (ours, beside H.1), each also per seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from pydantic import Field

from replicate import plotting
from replicate.analysis import kgram_estimate, next_token_nll, order_lags, still_falling
from replicate.experiments import hyperparameter_tables as hp
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer import plots
from replicate.experiments.two_layer.darch import (
    ArchSettings,
    ClippedOptimSettings,
    EvalSettings,
    darch_config,
    eval_set,
    excess_stats,
    load_models,
    train_darch,
)
from replicate.experiments.two_layer.statistics import MapStats, layer1_checks, map_stats
from replicate.markov import InContextSource
from replicate.settings import PositiveInt, Strict, TrainingSettings
from replicate.training.chunking import select_members


class OrderRun(Strict):
    order: PositiveInt
    step_scale: float = Field(gt=0.0)  # steps = round(step_scale * training.steps)


class ConvergenceSettings(Strict):
    """Whether a seed was still learning when its run stopped (`still_falling`): the slope
    of the test loss over the last ``fraction`` of the steps, below zero by more than ``z``
    standard errors and by at least ``min_drop`` nats across that window."""

    fraction: Annotated[float, Field(gt=0.0, le=1.0)]
    z: Annotated[float, Field(gt=0.0)]
    min_drop: Annotated[float, Field(ge=0.0)]


class MapsSettings(Strict):
    states: PositiveInt
    orders: list[OrderRun] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    per_kernel: PositiveInt  # training sequences per kernel (Sec. 2.1; code: batch_size_per_chain)
    arch: ArchSettings
    training: TrainingSettings
    optim: ClippedOptimSettings
    evaluation_set: EvalSettings
    convergence: ConvergenceSettings

    def order_training(self, order: int) -> TrainingSettings:
        """The training of order ``order``'s models: ``training`` with its steps scaled by
        the order's ``step_scale``."""
        run = next((r for r in self.orders if r.order == order), None)
        if run is None:
            trained = [r.order for r in self.orders]
            raise ValueError(f"order {order} is not among the shared models' orders {trained}")
        return self.training.model_copy(
            update={"steps": max(1, round(run.step_scale * self.training.steps))}
        )


def order_source(s: MapsSettings, order: int, per_kernel: int | None = None) -> InContextSource:
    """The clean k-th-order source with Dirichlet(1) rows (Sec. 2.1)."""
    return InContextSource(s.states, order, 1.0, per_kernel=per_kernel or s.per_kernel)


def member_metrics(stats: MapStats, excess: dict[str, np.ndarray], order: int) -> pd.DataFrame:
    """One row per member: excess CE vs the Laplace floor, layer-1 checks, layer-2 MM."""
    rows = []
    for e in range(stats.mm.size):
        rows.append(
            {
                "member": e,
                "excess": excess["excess"][e],
                "excess_se": excess["excess_se"][e],
                "laplace_excess": excess["laplace"][e],
                "excess_minus_laplace": excess["excess"][e] - excess["laplace"][e],
                "floor_z": (excess["excess"][e] - excess["laplace"][e])
                / excess["above_laplace_se"][e],
                **{f"l1_{k}": v for k, v in layer1_checks(stats.abar[e], order).items()},
                "mm": stats.mm[e],
                "mm_chance": stats.chance,
                "mm_shifted": stats.mm_shifted[e],
                "frobenius": float(stats.frobenius[e].mean()),
                **{f"abar_{m}": stats.abar[e, m] for m in range(min(8, stats.abar.shape[1]))},
            }
        )
    return pd.DataFrame(rows)


def summary_metrics(frame: pd.DataFrame, prefix: str) -> Metrics:
    """Aggregates over members of `member_metrics` (worst case over seeds for the claims)."""
    return {
        f"{prefix}/excess_mean": float(frame.excess.mean()),
        f"{prefix}/laplace_excess": float(frame.laplace_excess.iloc[0]),
        f"{prefix}/max_excess_minus_laplace": float(frame.excess_minus_laplace.max()),
        f"{prefix}/min_floor_z": float(frame.floor_z.min()),
        f"{prefix}/l1/frac_topk": float(frame.l1_topk.mean()),
        f"{prefix}/l1/min_increase": float(frame.l1_increase.min()),
        f"{prefix}/l1/min_ratio": float(frame.l1_ratio.min()),
        f"{prefix}/l1/max_beyond": float(frame.l1_beyond.max()),
        f"{prefix}/l2/min_mm_minus_chance": float((frame.mm - frame.mm_chance).min()),
        f"{prefix}/l2/min_mm_minus_shifted": float((frame.mm - frame.mm_shifted).min()),
        f"{prefix}/l2/mm_mean": float(frame.mm.mean()),
        f"{prefix}/l2/mm_chance": float(frame.mm_chance.iloc[0]),
        f"{prefix}/l2/frobenius_mean": float(frame.frobenius.mean()),
    }


def seed_metrics(frame: pd.DataFrame, prefix: str) -> Metrics:
    """Per seed (keys ``<prefix>/seed<s>/...``), the values whose worst case over seeds
    `summary_metrics` gives the claims of App. H.1: the excess over the Laplace (Bayes)
    excess, its z score, and the layer-2 matched mass over chance and over the shifted maps;
    the claims' per-seed verdicts and seed range read them."""
    values = {
        "excess_minus_laplace": frame.excess_minus_laplace,
        "floor_z": frame.floor_z,
        "l2/mm_minus_chance": frame.mm - frame.mm_chance,
        "l2/mm_minus_shifted": frame.mm - frame.mm_shifted,
    }
    return {
        f"{prefix}/seed{seed}/{name}": float(column.iloc[i])
        for name, column in values.items()
        for i, seed in enumerate(frame.seed)
    }


@dataclass
class OrderTraining:
    """One order's trained seeds: their models, test set (shared by the seeds), test-loss
    history (E, n_evals) at ``eval_steps``, and the steps trained."""

    model: torch.nn.Module
    test_tokens: torch.Tensor
    eval_steps: np.ndarray
    test_loss: np.ndarray
    steps: int


def train_orders(s: MapsSettings, ctx: RunContext) -> dict[int, OrderTraining]:
    """Every order's ensemble of seeds and its step count. Orders trained for the same number
    of steps train as one ensemble: members are independent, so each order's models are
    those of its own training (`tests/test_ensemble_equivalence.py`; bitwise on the CPUs
    measured), and one ensemble costs less per step than one per order."""
    cfg = darch_config(s.arch, s.states, s.training.seq_len, layers=2)
    by_steps: dict[int, list[int]] = {}
    for run in s.orders:
        by_steps.setdefault(s.order_training(run.order).steps, []).append(run.order)
    n = len(s.seeds)
    trained: dict[int, OrderTraining] = {}
    for steps, orders in by_steps.items():
        training = s.training.model_copy(update={"steps": steps})
        sources = [order_source(s, k) for k in orders for _ in s.seeds]
        label = ("orders " if len(orders) > 1 else "order ") + ", ".join(map(str, orders))
        joint = train_darch(cfg, sources, s.seeds * len(orders), training, s.optim, ctx, label)
        for i, k in enumerate(orders):
            members = range(i * n, (i + 1) * n)
            trained[k] = OrderTraining(
                select_members(joint.model, members),
                joint.test_tokens[members.start],
                joint.eval_steps,
                joint.test_loss[members.start : members.stop],
                steps,
            )
    return trained


def maps(s: MapsSettings, ctx: RunContext) -> Metrics:
    """Train every order's ensemble, save it, measure and draw the H.1 maps."""
    metrics: Metrics = {}
    states, frames, curves = {}, [], []
    trainings = train_orders(s, ctx)
    for run in s.orders:
        k = run.order
        trained = trainings[k]
        model = trained.model.eval()
        states[f"k{k}"] = {name: t.detach().clone() for name, t in model.state_dict().items()}
        data = eval_set(order_source(s, k, per_kernel=1), s.training.seq_len, s.evaluation_set)
        stats = map_stats(model, data, s.evaluation_set.map_sequences)
        frame = member_metrics(stats, excess_stats(model, data), k).assign(
            order=k, seed=s.seeds, steps=trained.steps
        )
        frames.append(frame)
        metrics.update(summary_metrics(frame, f"k{k}"))
        metrics.update(seed_metrics(frame, f"k{k}"))
        test = trained.test_tokens
        floor = float(
            next_token_nll(kgram_estimate(test, order_lags(k), s.states, alpha=1.0), test).mean()
        )
        for e, seed in enumerate(s.seeds):
            falling = still_falling(
                trained.eval_steps, trained.test_loss[e], **s.convergence.model_dump()
            )
            metrics[f"k{k}/seed{seed}/still_falling"] = (
                math.nan if falling is None else float(falling)
            )
            curves.append(
                pd.DataFrame(
                    {
                        "order": k,
                        "seed": seed,
                        "step": trained.eval_steps,
                        "test_loss": trained.test_loss[e],
                    }
                )
            )
        order_curves = pd.concat(curves[-len(s.seeds) :], ignore_index=True)
        fig = order_figure(k, s.states, stats, data.tokens, floor, order_curves, ctx.scale)
        ctx.save_figure(fig, f"maps_k{k}")
    ctx.save_torch({"seeds": s.seeds, "models": states}, "models.pt")
    ctx.save_csv(pd.concat(frames, ignore_index=True), "members.csv")
    ctx.save_csv(pd.concat(curves, ignore_index=True), "curves.csv")
    return metrics


def order_figure(
    order: int,
    states: int,
    stats: MapStats,
    tokens: torch.Tensor,
    floor: float,
    curves: pd.DataFrame,
    scale: str,
) -> Figure:
    """App. H.1 figure of one order (seed 0): the layer-1 maps (mean over sequences and one
    sequence; the paper draws no pseudo map for layer 1, App. H.1), the test-loss curves,
    and the layer-2 maps as (model, pseudo, |diff|), mean and one sequence. The one sequence
    is `plots.shown_sequence` of the map sequences (at ci the first is constant for k = 2)."""
    fig, axes = plotting.figure(3, 3, width=4.2, height=3.8)
    first, last = stats.first[0].numpy(), stats.last[0].numpy()
    pseudo = stats.pseudo.numpy()
    shown = plots.shown_sequence(tokens[: pseudo.shape[0], :-1].numpy(), states)
    seq = tokens[shown, :-1].numpy()
    plots.map_panel(axes[0], first.mean(0), "layer 1, mean over sequences: model")
    plots.map_panel(axes[1], first[shown], f"layer 1, sequence {shown}: model")
    plots.curves_panel(axes[2], curves, f"test loss, order {order}", floor)
    plots.triptych(axes[3:6], last.mean(0), pseudo.mean(0), "layer 2, mean over sequences", None)
    plots.triptych(axes[6:9], last[shown], pseudo[shown], f"layer 2, sequence {shown}", seq)
    plotting.finish(
        fig,
        f"Paper D, App. H.1 — order k = {order}, two-layer single-head model, seed 0 "
        f"({scale} scale)\n{plots.shown_rule(states)}; the paper draws no pseudo map for layer 1",
    )
    return fig


def load_shared(ctx: RunContext) -> tuple[MapsSettings, dict[int, torch.nn.Module]]:
    """The upstream `maps` settings and its trained ensembles by order (DAG edge, no retrain)."""
    settings = hp.upstream_settings(ctx, MapsSettings)
    path = ctx.upstream_dir / "models.pt"
    saved = torch.load(path, weights_only=True)
    cfg = darch_config(settings.arch, settings.states, settings.training.seq_len, layers=2)
    models = {
        run.order: load_models(saved["models"][f"k{run.order}"], cfg) for run in settings.orders
    }
    return settings, models
