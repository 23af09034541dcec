"""Paper D, Sec. 5 / App. C: two-stage gradient descent on the reduced two-layer model.

For each sequence length T: full-batch GD on a fixed training set (stage 1 on the layer-1
positional scalars p, stage 2 on the layer-2 attention scalar a), then the excess loss
L(theta_hat) - L* and the total-variation distance to the conditional 1-gram estimate on a
held-out set (ours, checking Thm 5 and App. C; D-GD-1..5).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import NullFormatter
from pydantic import Field

from replicate import plotting
from replicate.analysis.kgram import kgram_estimate, order_lags
from replicate.experiments.base import Metrics, RunContext
from replicate.settings import OpenUnit, PositiveInt, Strict
from replicate.theory.two_layer.gd import (
    GDResult,
    GDSchedule,
    ReducedData,
    layer1_attention,
    optimal_loss,
    reduced_loss,
    reduced_prediction,
    sample_reduced_data,
    train_two_stage,
)


class GDSettings(Strict):
    states: PositiveInt
    gamma: OpenUnit  # rows (1 - gamma) Dir(1) + gamma / S (ours; App. C's assumptions)
    eps: float = Field(gt=0.0)  # additive constant of the loss (App. C, Eq. (2))
    lengths: list[PositiveInt] = Field(min_length=2)
    sequences: PositiveInt  # training set (full-batch GD)
    eval_sequences: PositiveInt  # held-out set for the excess loss and TV
    a0: float = Field(gt=0.0)
    lr_p: float = Field(gt=0.0)
    steps_p: PositiveInt
    lr_a: float = Field(gt=0.0)
    steps_a: PositiveInt
    seed: int = Field(ge=0)


def _tv_to_one_gram(p: torch.Tensor, a: torch.Tensor, data: ReducedData) -> float:
    """Mean TV(f_theta_hat, p_hat_1) over sequences whose last context has counts (D-GD-5)."""
    states = data.one_hot.shape[-1]
    estimate = kgram_estimate(data.tokens, order_lags(1), states, last_position=True)
    defined = ~estimate.isnan().any(-1)
    f = reduced_prediction(p, a, data, normalize=True)
    return float(0.5 * (f - estimate)[defined].abs().sum(-1).mean())


def _length_metrics(result: GDResult, held_out: ReducedData, eps: float) -> Metrics:
    grad = -result.initial_grad_p
    p, a = torch.from_numpy(result.p), torch.tensor(result.a, dtype=torch.float64)
    others = np.delete(result.p, 1)
    return {
        "init/argmax_neg_grad": float(np.argmax(grad)),
        "init/neg_grad_p1": float(grad[1]),
        "init/neg_grad_p0": float(grad[0]),
        "stage1/p1_min_increment": float(np.diff(result.p_history[:, 1]).min()),
        "stage1/p1": float(result.p[1]),
        "stage1/p1_margin": float(result.p[1] - others.max()),
        "stage1/att_prev": float(layer1_attention(p)[-1, -2]),
        "stage2/a_min_increment": float(np.diff(result.a_history).min()),
        "stage2/a": result.a,
        "excess_loss": float(reduced_loss(p, a, held_out, eps, True)) - optimal_loss(held_out, eps),
        "tv_one_gram": _tv_to_one_gram(p, a, held_out),
    }


def _sequence_metrics(per_length: dict[int, Metrics], lengths: list[int]) -> Metrics:
    """Orderings over T (D-GD-3..5): minimum step of a, excess and TV, log-log slope."""
    excess = np.array([per_length[t]["excess_loss"] for t in lengths])
    tv = np.array([per_length[t]["tv_one_gram"] for t in lengths])
    a = np.array([per_length[t]["stage2/a"] for t in lengths])
    slope = np.polyfit(np.log(lengths), np.log(excess), 1)[0]
    return {
        "all/init_argmax_is_1": float(
            all(per_length[t]["init/argmax_neg_grad"] == 1 for t in lengths)
        ),
        "all/min_neg_grad_p1": min(per_length[t]["init/neg_grad_p1"] for t in lengths),
        "all/max_neg_grad_p0": max(per_length[t]["init/neg_grad_p0"] for t in lengths),
        "all/p1_min_increment": min(per_length[t]["stage1/p1_min_increment"] for t in lengths),
        "all/min_p1_margin": min(per_length[t]["stage1/p1_margin"] for t in lengths),
        "all/min_att_prev": min(per_length[t]["stage1/att_prev"] for t in lengths),
        "all/a_min_increment": min(per_length[t]["stage2/a_min_increment"] for t in lengths),
        "a_final_min_increase_over_T": float(np.diff(a).min()),
        "excess_min_decrease_over_T": float(-np.diff(excess).max()),
        "excess_loglog_slope": float(slope),
        "tv_min_decrease_over_T": float(-np.diff(tv).max()),
    }


def gd(s: GDSettings, ctx: RunContext) -> Metrics:
    """D-GD-1..5: the two-stage GD of App. C at every T of ``s.lengths``."""
    schedule = GDSchedule(s.a0, s.lr_p, s.steps_p, s.lr_a, s.steps_a, s.eps)
    metrics: Metrics = {}
    per_length: dict[int, Metrics] = {}
    p_rows, a_rows, summary = [], [], []
    for length in s.lengths:
        train_gen = torch.Generator().manual_seed(s.seed * 1000 + length)
        test_gen = torch.Generator().manual_seed(s.seed * 1000 + length + 1_000_000)
        data = sample_reduced_data(s.states, s.gamma, s.sequences, length, train_gen)
        held_out = sample_reduced_data(s.states, s.gamma, s.eval_sequences, length, test_gen)
        result = train_two_stage(data, schedule)
        values = _length_metrics(result, held_out, s.eps)
        per_length[length] = values
        metrics.update({f"T{length}/{k}": v for k, v in values.items()})
        summary.append({"T": length, **values})
        for step, row in enumerate(result.p_history):
            p_rows += [{"T": length, "step": step, "m": m, "p_m": row[m]} for m in range(4)]
        a_rows += [
            {"T": length, "step": step, "a": a, "loss": loss}
            for step, (a, loss) in enumerate(zip(result.a_history, result.loss_stage2, strict=True))
        ]
    metrics.update(_sequence_metrics(per_length, s.lengths))
    p_frame, a_frame = pd.DataFrame(p_rows), pd.DataFrame(a_rows)
    ctx.save_csv(pd.DataFrame(summary), "summary.csv")
    ctx.save_csv(p_frame, "stage1.csv")
    ctx.save_csv(a_frame, "stage2.csv")
    _plot(s, p_frame, a_frame, pd.DataFrame(summary), ctx)
    return metrics


def _plot(
    s: GDSettings,
    p_frame: pd.DataFrame,
    a_frame: pd.DataFrame,
    summary: pd.DataFrame,
    ctx: RunContext,
) -> None:
    fig, axes = plotting.figure(1, 3)
    largest = p_frame[p_frame["T"] == max(s.lengths)]
    for m, group in largest.groupby("m"):
        axes[0].plot(group.step, group.p_m, label=f"$p_{m}$")
    axes[0].set(
        title=f"(a) stage 1: positional scalars, T = {max(s.lengths)}",
        xlabel="GD step (stage 1)",
        ylabel="$p_m$",
    )
    axes[0].legend(fontsize=8)
    for length, group in a_frame.groupby("T"):
        axes[1].plot(group.step, group.a, label=f"T = {length}")
    axes[1].set(title="(b) stage 2: attention scalar a", xlabel="GD step (stage 2)", ylabel="a")
    axes[1].legend(fontsize=8)
    axes[2].loglog(summary["T"], summary.excess_loss, "o-", label="$L(\\hat\\theta) - L^*$")
    axes[2].loglog(summary["T"], summary.tv_one_gram, "s--", label="mean TV to $\\hat p_1$")
    axes[2].set(
        title="(c) Thm 5 / Thm C: error vs T", xlabel="sequence length T", ylabel="nats / TV"
    )
    axes[2].set_xticks(s.lengths, labels=[str(n) for n in s.lengths])
    axes[2].xaxis.set_minor_formatter(NullFormatter())
    axes[2].legend(fontsize=8)
    plotting.finish(
        fig,
        f"Paper D, App. C — reduced model, S = {s.states}, gamma = {s.gamma}, "
        f"N = {s.sequences}, tau1 = {s.steps_p}, tau2 = {s.steps_a} ({ctx.scale} scale)",
    )
    ctx.save_figure(fig)
