"""Paper D, App. H.4: bit precision of the shared k = 2 model (2 / 4 / 8 / 32 bits).

Weights and activations of the trained model (from `two_layer_maps`, no retraining) are
fake-quantised (ours; App. H.4 does not state how): symmetric uniform per-tensor quantisation
q(w) = s clip(round(w / s), -(2^(b-1) - 1), 2^(b-1) - 1), s = max|w| / (2^(b-1) - 1), so
b = 2 gives {-s, 0, s}; every parameter tensor (per member), and the input of every linear
map (Q/K/V, MLP sublayers, readout) with a dynamic per-tensor scale. Softmax, layer norms,
residual adds and the q.k / attention-times-value products run in float32 (the products of
two activations are not quantised here; App. H.4 quantises "activations"). b = 32 is plain
float32. On ``sequences`` evaluation sequences (one kernel each): F = ||A2 - A_ps||_F of the
layer-2 map (the paper's metric, mean and std) and the matched mass MM (ours: App. H.4 has F only).

Remark 2 ("O(log T + k) bits per parameter suffice for O(1/T) additive error"), measured by
us (D-BIT-R2): the 2L1H construction at order k, length T and the sufficient temperature
for error 1 / (2T) (`sufficient_temperature`, leaving the other half of 1 / T to rounding)
is quantised by the same `quantised` at b = bits[0]..bits[1] (one ensemble member per b);
b*(k, T) is the smallest b from which the max error against p_hat_k stays <= 1 / T.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lightning_modules.layers import EnsembleLinear, Readout
from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.two_layer.constructions import (
    kgram_errors,
    sample_tokens,
    smallest_passing,
)
from replicate.experiments.two_layer.darch import eval_set
from replicate.experiments.two_layer.maps import load_shared, order_source
from replicate.experiments.two_layer.statistics import map_stats
from replicate.settings import PositiveInt, Strict
from replicate.theory.two_layer.constructions import Member, build, sufficient_temperature


class Remark2Settings(Strict):
    states: PositiveInt
    points: list[tuple[PositiveInt, PositiveInt]] = Field(min_length=2)  # (k, T)
    sequences: PositiveInt
    bits: tuple[PositiveInt, PositiveInt]  # the scanned widths, first to last
    big: float = Field(gt=0.0)  # C of the layer-1 windows
    seed: int = Field(ge=0)


class BitsSettings(Strict):
    order: PositiveInt
    sequences: PositiveInt  # paper H.4: 10 random sequences, each from a different kernel
    bits: list[PositiveInt]  # the largest is the float32 reference
    remark2: Remark2Settings


def fake_quantise(x: torch.Tensor, bits: int | torch.Tensor) -> torch.Tensor:
    """Symmetric per-member (axis 0) per-tensor quantisation to ``bits`` bits, one width for
    every member or one per member (E,); a member at >= 32 bits keeps x."""
    shape = (-1, *([1] * (x.ndim - 1)))
    width = torch.as_tensor(bits, dtype=x.dtype).expand(x.shape[0]).reshape(shape)
    levels = 2.0 ** (width - 1) - 1
    scale = x.detach().abs().flatten(1).amax(1).clamp(min=1e-30).reshape(shape) / levels
    rounded = scale * torch.clamp(torch.round(x / scale), -levels, levels)
    return torch.where(width >= 32, x, rounded)


def quantised(model: torch.nn.Module, bits: int | torch.Tensor) -> torch.nn.Module:
    """A copy of ``model`` with quantised weights and quantised linear-map inputs
    (``bits``: as in `fake_quantise`)."""
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
        per_seed = {
            "rel_frobenius_change_8": (by[8].frobenius_mean - by[ref].frobenius_mean).abs()
            / by[ref].frobenius_mean,
            "mm8_minus_mm_ref": by[8].mm - by[ref].mm,
            "mm2_minus_mm_ref": by[2].mm - by[ref].mm,
            "mm4_minus_mm8": by[4].mm - by[8].mm,
        }
        metrics["max_rel_frobenius_change_8"] = float(per_seed["rel_frobenius_change_8"].max())
        metrics["min_mm8_minus_mm_ref"] = float(per_seed["mm8_minus_mm_ref"].min())
        metrics["max_mm2_minus_mm_ref"] = float(per_seed["mm2_minus_mm_ref"].max())
        metrics["max_mm4_minus_mm8"] = float(per_seed["mm4_minus_mm8"].max())
        for seed in up.seeds:  # per-seed values: the claims' seed verdicts and seed range
            for name, values in per_seed.items():
                metrics[f"seed{seed}/{name}"] = float(values[seed])
    remark2 = _remark2(s.remark2)
    ctx.save_csv(remark2, "remark2.csv")
    metrics.update(_remark2_metrics(remark2))
    _plot(frame, s, ctx)
    return metrics


def _remark2(r: Remark2Settings) -> pd.DataFrame:
    """Max error of the quantised 2L1H construction per (k, T, b) (D-BIT-R2)."""
    widths = torch.arange(r.bits[0], r.bits[1] + 1)
    rows = []
    for k, length in r.points:
        c = sufficient_temperature(k, length, 1 / (2 * length))
        model = build("2l1h", r.states, length, [Member(k, c, r.big)] * len(widths))
        tokens = sample_tokens(r.states, k, length, r.sequences, r.seed)
        with torch.no_grad():
            out = quantised(model, widths)(tokens[None].expand(len(widths), -1, -1))
        errors = kgram_errors(out, tokens, k).amax(-1)
        for b, err in zip(widths.tolist(), errors.tolist(), strict=True):
            rows.append({"order": k, "T": length, "c": c, "bits": b, "max_error": err})
    return pd.DataFrame(rows)


def _remark2_metrics(frame: pd.DataFrame) -> Metrics:
    """b*(k, T), its growth in T at fixed k and in k at fixed T, and its excess over the
    budget ceil(log2 T) + 2k + 8 (ours: Remark 2, Sec. 4, states only O(log T + k) bits)."""
    needed: dict[tuple[int, int], float] = {}
    metrics: Metrics = {}
    for (k, length), g in frame.groupby(["order", "T"]):
        g = g.sort_values("bits")
        b = smallest_passing(g.bits.to_numpy(), g.max_error.to_numpy(), 1 / length)
        needed[(k, length)] = b
        metrics[f"remark2/k{k}/T{length}/bits_needed"] = b
    pairs = list(needed)
    growth_t = [needed[q] - needed[p] for p in pairs for q in pairs if p[0] == q[0] and p[1] < q[1]]
    growth_k = [needed[q] - needed[p] for p in pairs for q in pairs if p[1] == q[1] and p[0] < q[0]]
    metrics["remark2/min_bits_increase_over_T"] = float(np.min(growth_t))
    metrics["remark2/min_bits_increase_over_k"] = float(np.min(growth_k))
    budget = [b - (np.ceil(np.log2(t)) + 2 * k + 8) for (k, t), b in needed.items()]
    metrics["remark2/max_bits_over_spec_budget"] = float(np.max(budget))
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
