"""Paper D, Sec. 3-4 and App. A-B: the explicit constructions compute the k-gram estimate.

Every construction of `replicate.theory.two_layer.constructions` is materialised as an
`EnsembleGPT` (members = (k, c) points) and run on sequences of Dirichlet(1) kernels; its
output is compared with the shared conditional k-gram estimator (App. A.2, B: c -> inf;
D-CON-1..5) at every position where the estimator is defined (I_n non-empty, n >= k + 1).
D-CON-6: the smallest temperature on a log grid at which the 2L1H construction is within a
given error, per order k, against the sufficient temperature ln((T - 1) / eps) / delta_k.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import NullFormatter
from pydantic import Field

from replicate import plotting
from replicate.analysis import kgram_estimate, order_lags
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import InContextSource
from replicate.settings import PositiveInt, Strict
from replicate.theory.two_layer.constructions import (
    Layout,
    Member,
    build,
    matching_margin,
    sufficient_temperature,
    triadic_normaliser,
)

GATED = ("2l2h", "2l1h", "3l1h")


class UngatedSettings(Strict):
    states: PositiveInt
    orders: list[PositiveInt]
    lengths: list[PositiveInt] = Field(min_length=2)
    sequences: PositiveInt
    temperature: float = Field(gt=0.0)


class TemperatureSettings(Strict):
    states: PositiveInt
    orders: list[PositiveInt] = Field(min_length=2)
    length: PositiveInt
    sequences: PositiveInt
    errors: list[float] = Field(min_length=1)  # the target max errors eps
    decades: tuple[int, int]  # the grid runs from c = 10^first to 10^second
    per_decade: PositiveInt


class ConstructionSettings(Strict):
    states: list[PositiveInt]
    orders: list[PositiveInt]
    lengths: list[PositiveInt]
    sequences: PositiveInt
    temperatures: list[float] = Field(min_length=2)  # increasing; the last one is D-CON-1's c
    big: float = Field(gt=0.0)  # C, the "-infinity" outside the layer-1 windows
    ungated: UngatedSettings
    temperature: TemperatureSettings
    seed: int = Field(ge=0)


def sample_tokens(states: int, order: int, length: int, count: int, seed: int) -> torch.Tensor:
    """``count`` sequences of ``length``, each from its own Dirichlet(1) order-k kernel."""
    source = InContextSource(states, order, 1.0)
    gen = torch.Generator().manual_seed(seed * 1000 + 100 * states + 10 * order + length)
    return source.sample(count, length, gen)[0]


def kgram_errors(output: torch.Tensor, tokens: torch.Tensor, order: int) -> torch.Tensor:
    """max_s |Pr - p_hat_k| at every position where p_hat_k is defined: output (..., N, T, S)
    against tokens (N, T) gives (..., positions)."""
    estimate = kgram_estimate(tokens, order_lags(order), int(output.shape[-1]))
    defined = ~estimate.isnan().any(-1)
    return (output.double() - estimate).abs().amax(-1)[..., defined]


def _expected_blocks(tokens: torch.Tensor, order: int, states: int) -> dict[str, torch.Tensor]:
    """u-hat, v-hat, e_{x_{n-k}} and r at positions n >= k + 1 (App. B.1, D-CON-3)."""
    one_hot = torch.nn.functional.one_hot(tokens, states).double()
    length = tokens.shape[1]
    rows = torch.arange(order, length)

    def triadic(offsets: range) -> torch.Tensor:
        total = sum(3.0**m * one_hot[:, rows - m] for m in offsets)
        return total / total.norm(dim=-1, keepdim=True)

    return {
        "uhat": triadic(range(order)),
        "vhat": triadic(range(1, order + 1)),
        "mask": one_hot[:, rows - order],
        "r": torch.full(
            (tokens.shape[0], rows.numel()),
            3.0**order / triadic_normaliser(order),
            dtype=torch.float64,
        ),
    }


def _intermediates(
    states: int, order: int, length: int, tokens: torch.Tensor, big: float
) -> dict[str, float]:
    """D-CON-3 on the 2L1H construction: max deviation of each block from its formula."""
    model = build("2l1h", states, length, [Member(order, 1e4, big)])
    traces: list[dict[str, torch.Tensor]] = []
    with torch.no_grad():
        model(tokens[None], traces)
    stream = traces[-1]["input"][0]  # the input of layer 2
    layout = Layout(states)
    expected = _expected_blocks(tokens, order, states)
    rows = slice(order, length)
    att = traces[0]["attention"][0, :, 0]
    z = triadic_normaliser(order)
    n = torch.arange(order, length)
    weights = torch.stack([att[:, n, n - m] for m in range(1, order + 1)], dim=-1)
    target = torch.tensor([3.0**m / z for m in range(1, order + 1)], dtype=torch.float64)
    outside = att[:, rows].sum(-1) - weights.sum(-1)
    return {
        "mask": float((stream[:, rows, layout.block("mask")] - expected["mask"]).abs().max()),
        "uhat": float((stream[:, rows, layout.block("uhat")] - expected["uhat"]).abs().max()),
        "vhat": float((stream[:, rows, layout.block("vhat")] - expected["vhat"]).abs().max()),
        "r": float((stream[:, rows, layout.r] - expected["r"]).abs().max()),
        "r_early": float(stream[:, :order, layout.r].abs().max()),
        "layer1_weights": float((weights - target).abs().max()),
        "layer1_outside": float(outside.abs().max()),
    }


def _structure(states: int, length: int) -> dict[str, float]:
    """D-CON-4: sublayers, biased sublayers and ReLU sublayers of the 2L1H / ungated MLPs."""
    out: dict[str, float] = {}
    for kind in ("2l1h", "ungated"):
        cfg = build(kind, states, length, [Member(1, 1e4)]).cfg.layer(0)
        subs = cfg.sublayers
        out[f"{kind}/sublayers"] = float(len(subs))
        out[f"{kind}/biased_sublayers"] = float(sum(s.bias for s in subs))
        out[f"{kind}/bias_in_first"] = float(subs[0].bias)
        out[f"{kind}/relu_sublayers"] = float(sum(s.activation == "relu" for s in subs))
        out[f"{kind}/relu_in_first"] = float(subs[0].activation == "relu")
    return out


def constructions(s: ConstructionSettings, ctx: RunContext) -> Metrics:
    """D-CON-1..5 (App. A.2.1 and B.1 as c -> inf; App. A.2.2 and B.2)."""
    points = [(k, c) for k in s.orders for c in s.temperatures]
    rows = []
    for kind in GATED:
        for states in s.states:
            for length in s.lengths:
                data = [sample_tokens(states, k, length, s.sequences, s.seed) for k, _ in points]
                members = [Member(k, c, s.big) for k, c in points]
                for dtype in (torch.float64, torch.float32):
                    if dtype == torch.float32:  # float32 only at the largest temperature
                        keep = [i for i, (_, c) in enumerate(points) if c == s.temperatures[-1]]
                    else:
                        keep = list(range(len(points)))
                    model = build(kind, states, length, [members[i] for i in keep], dtype)
                    with torch.no_grad():
                        out = model(torch.stack([data[i] for i in keep]))
                    for j, i in enumerate(keep):
                        err = kgram_errors(out[j], data[i], points[i][0])
                        rows.append(
                            {
                                "construction": kind,
                                "states": states,
                                "T": length,
                                "order": points[i][0],
                                "c": points[i][1],
                                "dtype": str(dtype).removeprefix("torch."),
                                "max_error": float(err.max()),
                                "mean_error": float(err.mean()),
                                "positions": int(err.numel()),
                            }
                        )
    frame = pd.DataFrame(rows)
    metrics = _gated_metrics(frame, s)
    checks = [
        {
            "states": st,
            "order": k,
            **_intermediates(
                st,
                k,
                max(s.lengths),
                sample_tokens(st, k, max(s.lengths), s.sequences, s.seed),
                s.big,
            ),
        }
        for st in s.states
        for k in s.orders
    ]
    check_frame = pd.DataFrame(checks)
    for name in ("mask", "uhat", "vhat", "r", "r_early", "layer1_weights", "layer1_outside"):
        metrics[f"con3/max_{name}"] = float(check_frame[name].max())
    metrics.update({f"con4/{k}": v for k, v in _structure(min(s.states), min(s.lengths)).items()})
    ungated = _ungated(s)
    metrics.update(_ungated_metrics(ungated, s.ungated))
    scan = _temperature_scan(s)
    needed = _needed_temperatures(scan, s.temperature)
    metrics.update(_temperature_metrics(needed, s.temperature))
    ctx.save_csv(frame, "errors.csv")
    ctx.save_csv(check_frame, "intermediates.csv")
    ctx.save_csv(ungated, "ungated.csv")
    ctx.save_csv(scan, "temperature_scan.csv")
    ctx.save_csv(needed, "temperature.csv")
    _plot(frame, ungated, scan, needed, s, ctx)
    return metrics


def smallest_passing(values: np.ndarray, errors: np.ndarray, bound: float) -> float:
    """The smallest of the increasing ``values`` from which every error is <= ``bound``
    (at that value and at every larger one); NaN where the last error exceeds ``bound``."""
    tail = np.flip(np.logical_and.accumulate(np.flip(errors <= bound)))
    return float(values[tail.argmax()]) if tail[-1] else math.nan


def temperature_grid(t: TemperatureSettings) -> np.ndarray:
    """c = 10^(j / per_decade) from 10^decades[0] to 10^decades[1]."""
    first, last = t.decades
    return 10.0 ** (np.arange(first * t.per_decade, last * t.per_decade + 1) / t.per_decade)


def _temperature_scan(s: ConstructionSettings) -> pd.DataFrame:
    """D-CON-6: the 2L1H max error on the temperature grid and at each sufficient
    temperature ln((T - 1) / eps) / delta_k (``grid`` False), one ensemble per order."""
    t = s.temperature
    rows = []
    for k in t.orders:
        grid = [(float(c), True) for c in temperature_grid(t)]
        bounds = [(sufficient_temperature(k, t.length, eps), False) for eps in t.errors]
        points = grid + bounds
        tokens = sample_tokens(t.states, k, t.length, t.sequences, s.seed)
        model = build("2l1h", t.states, t.length, [Member(k, c, s.big) for c, _ in points])
        with torch.no_grad():
            out = model(tokens[None].expand(len(points), -1, -1))
        errors = kgram_errors(out, tokens, k).amax(-1)
        for (c, on_grid), err in zip(points, errors.tolist(), strict=True):
            rows.append({"order": k, "c": c, "grid": on_grid, "max_error": err})
    return pd.DataFrame(rows)


def _needed_temperatures(scan: pd.DataFrame, t: TemperatureSettings) -> pd.DataFrame:
    """Per (k, eps): the smallest grid c with max error <= eps, the sufficient temperature
    and the error there (D-CON-6)."""
    rows = []
    for k in t.orders:
        sub = scan[scan.order == k]
        grid = sub[sub.grid]
        for eps in t.errors:
            bound = sufficient_temperature(k, t.length, eps)
            at_bound = sub[~sub.grid & np.isclose(sub.c, bound, rtol=1e-12, atol=0.0)]
            rows.append(
                {
                    "order": k,
                    "error": eps,
                    "margin": matching_margin(k),
                    "c_needed": smallest_passing(grid.c.to_numpy(), grid.max_error.to_numpy(), eps),
                    "c_sufficient": bound,
                    "error_at_sufficient": float(at_bound.max_error.iloc[0]),
                }
            )
    return pd.DataFrame(rows)


def _temperature_metrics(needed: pd.DataFrame, t: TemperatureSettings) -> Metrics:
    metrics: Metrics = {}
    steps = []
    for eps, g in needed.groupby("error"):
        g = g.sort_values("order")
        for row in g.itertuples():
            key = f"con6/eps{eps:g}/k{row.order}"
            metrics[f"{key}/c_needed"] = float(row.c_needed)
            metrics[f"{key}/c_sufficient"] = float(row.c_sufficient)
        log_c = np.log10(g.c_needed.to_numpy())
        steps.append(np.round(np.diff(log_c) * t.per_decade).min())
    metrics["con6/min_grid_steps_between_orders"] = float(np.min(steps))
    metrics["con6/max_error_at_sufficient_over_eps"] = float(
        (needed.error_at_sufficient / needed.error).max()
    )
    return metrics


def _gated_metrics(frame: pd.DataFrame, s: ConstructionSettings) -> Metrics:
    top = s.temperatures[-1]
    metrics: Metrics = {}
    for kind in GATED:
        sub = frame[frame.construction == kind]
        f64, f32 = sub[sub.dtype == "float64"], sub[sub.dtype == "float32"]
        metrics[f"con1/{kind}/max_error_f64"] = float(f64[f64.c == top].max_error.max())
        metrics[f"con1/{kind}/max_error_f32"] = float(f32.max_error.max())
        low = f64[(f64.c == s.temperatures[0]) & (f64.order >= 2)]
        metrics[f"con2/{kind}/min_error_lowest_c_k23"] = float(low.max_error.min())
        increases = [
            np.diff(g.sort_values("c").max_error.to_numpy()).max()
            for _, g in f64.groupby(["states", "T", "order"])
        ]
        metrics[f"con2/{kind}/max_error_increase_along_c"] = float(max(increases))
    for key in ("max_error_f64", "max_error_f32"):
        metrics[f"con1/{key}"] = max(metrics[f"con1/{k}/{key}"] for k in GATED)
    metrics["con2/min_error_lowest_c_k23"] = min(
        metrics[f"con2/{k}/min_error_lowest_c_k23"] for k in GATED
    )
    metrics["con2/max_error_increase_along_c"] = max(
        metrics[f"con2/{k}/max_error_increase_along_c"] for k in GATED
    )
    return metrics


def _ungated(s: ConstructionSettings) -> pd.DataFrame:
    """D-CON-5: mean and max error of the ungated variant over T (App. A.2.2, B.2)."""
    u = s.ungated
    rows = []
    for length in u.lengths:
        members = [Member(k, u.temperature, s.big) for k in u.orders]
        model = build("ungated", u.states, length, members)
        data = [sample_tokens(u.states, k, length, u.sequences, s.seed) for k in u.orders]
        with torch.no_grad():
            out = model(torch.stack(data))
        for j, k in enumerate(u.orders):
            err = kgram_errors(out[j], data[j], k)
            rows.append(
                {
                    "T": length,
                    "order": k,
                    "mean_error": float(err.mean()),
                    "max_error": float(err.max()),
                }
            )
    return pd.DataFrame(rows)


def _ungated_metrics(frame: pd.DataFrame, u: UngatedSettings) -> Metrics:
    metrics: Metrics = {}
    for k, g in frame.groupby("order"):
        g = g.sort_values("T")
        metrics[f"con5/k{k}/min_decrease_over_T"] = float(-np.diff(g.mean_error.to_numpy()).max())
        metrics[f"con5/k{k}/mean_error_longest"] = float(g.mean_error.iloc[-1])
        for length, value in zip(g["T"], g.mean_error, strict=True):
            metrics[f"con5/k{k}/T{length}/mean_error"] = float(value)
    return metrics


def coinciding_curves(
    worst: pd.DataFrame,
) -> list[tuple[list[str], np.ndarray, np.ndarray]]:
    """The max-error curves over c of the constructions of one order, those that coincide on
    a log scale (within 0.1 %, errors floored at 1e-17) drawn once: (constructions, c, error)."""
    curves: list[tuple[list[str], np.ndarray, np.ndarray]] = []
    for kind, g in worst.groupby("construction", sort=False):
        c, error = g.c.to_numpy(), g.max_error.clip(lower=1e-17).to_numpy()
        same = next(
            (
                curve
                for curve in curves
                if np.array_equal(curve[1], c) and np.allclose(curve[2], error, rtol=1e-3, atol=0)
            ),
            None,
        )
        if same is None:
            curves.append(([str(kind)], c, error))
        else:
            same[0].append(str(kind))
    return curves


def _plot(
    frame: pd.DataFrame,
    ungated: pd.DataFrame,
    scan: pd.DataFrame,
    needed: pd.DataFrame,
    s: ConstructionSettings,
    ctx: RunContext,
) -> None:
    fig, axes = plotting.figure(1, 3)
    f64 = frame[(frame.dtype == "float64") & (frame["T"] == max(s.lengths))]
    worst = f64.groupby(["construction", "order", "c"], as_index=False).max_error.max()
    for k, g in worst.groupby("order"):
        for kinds, c, error in coinciding_curves(g):
            shared = "all" if len(kinds) == len(GATED) else ", ".join(kinds)
            axes[0].loglog(c, error, "o-", label=f"k = {k}: {shared}")
    axes[0].axhline(1e-6, color="black", linestyle=":", label="D-CON-1 bound 1e-6")
    states = ", ".join(map(str, s.states))
    axes[0].set(
        title=f"(a) {', '.join(GATED)}: max |Pr - p_hat_k| "
        f"(T = {max(s.lengths)}, S in {{{states}}})",
        xlabel="temperature c",
        ylabel="max error (floored at 1e-17)",
    )
    axes[0].legend(fontsize=7, loc="lower left")
    for k, g in ungated.groupby("order"):
        axes[1].loglog(g["T"], g.mean_error, "o-", label=f"mean, k = {k}")
        axes[1].loglog(g["T"], g.max_error, "s:", label=f"max, k = {k}")
    axes[1].axhline(0.02, color="black", linestyle=":", label="D-CON-5 bound 0.02 (k = 2)")
    axes[1].set(
        title=f"(b) ungated (LN after Q/K) variant, c = {s.ungated.temperature:g}",
        xlabel="sequence length T",
        ylabel="error vs p_hat_k",
    )
    axes[1].set_xticks(s.ungated.lengths, labels=[str(n) for n in s.ungated.lengths])
    axes[1].xaxis.set_minor_formatter(NullFormatter())
    axes[1].legend(fontsize=7)
    t = s.temperature
    grid = scan[scan.grid]
    for k, g in grid.groupby("order"):
        axes[2].loglog(g.c, g.max_error.clip(lower=1e-17), "-", label=f"max error, k = {k}")
    for eps, g in needed.groupby("error"):
        axes[2].axhline(eps, color="gray", linestyle=":", linewidth=0.8)
        axes[2].plot(g.c_needed, [eps] * len(g), "k^", markersize=5)
        axes[2].plot(g.c_sufficient, [eps] * len(g), "kx", markersize=5)
    axes[2].plot([], [], "k^", label="smallest grid c with error <= eps")
    axes[2].plot([], [], "kx", label="ln((T-1)/eps) / delta_k")
    axes[2].set(
        title=f"(c) 2L1H: max error vs c by order k (S = {t.states}, T = {t.length})",
        xlabel="temperature c",
        ylabel="max error (floored at 1e-17)",
    )
    axes[2].legend(fontsize=6)
    plotting.finish(
        fig,
        f"Paper D, Sec. 3-4 / App. A-B constructions ({ctx.scale} scale): c is the temperature, "
        f"C = {s.big:g} the layer-1 window constant (every panel)",
    )
    ctx.save_figure(fig)
