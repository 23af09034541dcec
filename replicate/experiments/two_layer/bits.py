"""Paper D, App. H.4: bit precision of the shared k = 2 model (2 / 4 / 8 / 32 bits).

Weights and activations of the trained model (from `two_layer_maps`, no retraining) are
fake-quantised (spec D §5.9 [PROPOSAL]): symmetric uniform per-tensor quantisation
q(w) = s clip(round(w / s), -(2^(b-1) - 1), 2^(b-1) - 1), s = max|w| / (2^(b-1) - 1), so
b = 2 gives {-s, 0, s}; every parameter tensor (per member), and the input of every linear
map (Q/K/V, MLP sublayers, readout) with a dynamic per-tensor scale. Softmax, layer norms,
residual adds and the q.k / attention-times-value products run in float32 (the products of
two activations are not quantised here; spec D asks for "every matmul"). b = 32 is plain
float32. On ``sequences`` evaluation sequences (one kernel each): F = ||A2 - A_ps||_F of the
layer-2 map (the paper's metric, mean and std) and the matched mass MM (spec D §5.9).
"""

from __future__ import annotations

import copy

import pandas as pd
import torch

from lightning_modules.layers import EnsembleLinear, Readout
from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer.darch import eval_set
from replicate.experiments.two_layer.maps import load_shared, order_source
from replicate.experiments.two_layer.statistics import map_stats
from replicate.settings import PositiveInt, Strict


class BitsSettings(Strict):
    order: PositiveInt
    sequences: PositiveInt  # paper H.4: 10 random sequences, each from a different kernel
    bits: list[PositiveInt]  # the largest is the float32 reference


def fake_quantise(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Symmetric per-member (axis 0) per-tensor quantisation to ``bits`` bits (>= 32: x)."""
    if bits >= 32:
        return x
    levels = 2 ** (bits - 1) - 1
    scale = x.detach().abs().flatten(1).amax(1).clamp(min=1e-30) / levels
    scale = scale.view(-1, *([1] * (x.ndim - 1)))
    return scale * torch.clamp(torch.round(x / scale), -levels, levels)


def quantised(model: torch.nn.Module, bits: int) -> torch.nn.Module:
    """A copy of ``model`` with quantised weights and quantised linear-map inputs."""
    copy_ = copy.deepcopy(model)
    with torch.no_grad():
        for param in copy_.parameters():
            param.copy_(fake_quantise(param, bits))
    for module in copy_.modules():
        if isinstance(module, (EnsembleLinear, Readout)):
            module.register_forward_pre_hook(lambda _, args: (fake_quantise(args[0], bits),))
    return copy_


def bits(s: BitsSettings, ctx: RunContext) -> Metrics:
    """D-BIT-1..3."""
    up, models = load_shared(ctx)
    data = eval_set(order_source(up, s.order, per_kernel=1), up.training.seq_len, up.evaluation_set)
    rows = []
    for b in s.bits:
        stats = map_stats(quantised(models[s.order], b), data, s.sequences)
        for i, seed in enumerate(up.seeds):
            rows.append(
                {
                    "bits": b,
                    "seed": seed,
                    "frobenius_mean": float(stats.frobenius[i].mean()),
                    "frobenius_std": float(stats.frobenius[i].std()),
                    "mm": float(stats.mm[i]),
                    "mm_chance": stats.chance,
                }
            )
    frame = pd.DataFrame(rows)
    ctx.save_csv(frame, "bits.csv")
    ref = max(s.bits)
    by = {b: frame[frame.bits == b].set_index("seed") for b in s.bits}
    metrics: Metrics = {}
    for b in s.bits:
        metrics[f"b{b}/frobenius_mean"] = float(by[b].frobenius_mean.mean())
        metrics[f"b{b}/mm_mean"] = float(by[b].mm.mean())
    if {2, 4, 8} <= set(s.bits):
        metrics["max_rel_frobenius_change_8"] = float(
            ((by[8].frobenius_mean - by[ref].frobenius_mean).abs() / by[ref].frobenius_mean).max()
        )
        metrics["min_mm8_minus_mm_ref"] = float((by[8].mm - by[ref].mm).min())
        metrics["max_mm2_minus_mm_ref"] = float((by[2].mm - by[ref].mm).max())
        metrics["max_mm4_minus_mm8"] = float((by[4].mm - by[8].mm).max())
        for seed in up.seeds:  # per-seed values: the claims' seed verdicts and seed range
            metrics[f"seed{seed}/mm8_minus_mm_ref"] = float(by[8].mm[seed] - by[ref].mm[seed])
            metrics[f"seed{seed}/mm4_minus_mm8"] = float(by[4].mm[seed] - by[8].mm[seed])
    _plot(frame, s, ctx)
    return metrics


def _plot(frame: pd.DataFrame, s: BitsSettings, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, 2)
    for seed, g in frame.groupby("seed"):
        axes[0].errorbar(
            g.bits,
            g.frobenius_mean,
            yerr=g.frobenius_std,
            marker="o",
            capsize=3,
            label=f"seed {seed}",
        )
        axes[1].plot(g.bits, g.mm, "o-", label=f"seed {seed}")
    axes[1].plot(
        frame.bits.unique(), [frame.mm_chance.iloc[0]] * frame.bits.nunique(), "k:", label="chance"
    )
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(s.bits, labels=[str(b) for b in s.bits])
        ax.legend(fontsize=7)
    axes[0].set(
        title="(a) ||A2 - A_ps||_F (mean ± std)", xlabel="bits", ylabel="Frobenius distance"
    )
    axes[1].set(title="(b) layer-2 matched mass", xlabel="bits", ylabel="MM")
    plotting.finish(
        fig, f"Paper D, App. H.4 — order {s.order}, {s.sequences} sequences ({ctx.scale} scale)"
    )
    ctx.save_figure(fig)
