"""Paper B, Fig. 5: the (e, w, a) gradient flow near the origin (zoom of Fig. 2).

The caption's claim: "the local minima are repellors for p + q < 1, while attracting for
p + q > 1". Near e = 0 the flow has d log|e|/dt = -2 pi0 pi1 (p+q-1)(1 + 2w|w|) (Lemma 8's
Hessian, linearised by us; cf. App. M.5), checked on integrated flows from e_0 = 1e-4. Near
the origin (w > -1/sqrt 2) the plane e = 0 is made of local *maxima* when p + q < 1 (the
Hessian's e-e entry is negative; the figure colours them purple): the caption mislabels
them, as Thm 10(iii) labels Theta_max "Theta_min" (typo 3 of `lg`'s docstring). So the rate checks
classify every point of the plane by the sign of that Hessian entry (`lg.hessian_on_w_axis`)
and test "maxima repel, minima attract" each where it applies, with points at w_0 <
-1/sqrt 2 so that the p + q < 1 minima are tested too; the fraction of the p + q < 1 points
in the zoom box that are minima measures the caption's label. App. M.5 integrates half the
rate; that printed formula is checked too, and does not reproduce. No training.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from pydantic import Field

from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global import plot3d
from replicate.experiments.local_global.flows import (
    FlowSettings,
    PositiveFloat,
    chain_label,
    integrate,
    trajectory_frame,
)
from replicate.settings import BinaryChainSettings, PositiveInt, Strict
from replicate.theory import local_global as lg


class Fig5Settings(Strict):
    panels: list[BinaryChainSettings] = Field(min_length=2, max_length=2)
    """Chains drawn: p + q < 1, then p + q > 1."""
    chains: list[BinaryChainSettings] = Field(min_length=1)
    box: PositiveFloat
    """Half-width of the zoom box around the origin; bound on |w_0|, |a_0| of the rate checks."""
    rate_points: list[tuple[float, float]] = Field(min_length=1)
    """(w_0, a_0) of the rate checks (ours, Lemma 8's rate; w_0 < -1/sqrt 2 reaches the other
    half of the plane), plus ``random_rate_points`` drawn in the box."""
    random_rate_points: int = Field(ge=0)
    e0: PositiveFloat
    rate_time: PositiveFloat
    arrows_per_axis: PositiveInt
    plotted_trajectories: PositiveInt
    zoom_time: PositiveFloat
    seed: int
    flow: FlowSettings


def paper_m5_rate(chain: BinaryChainSettings) -> float:
    """d log|e|/dt as App. M.5 integrates it: -(p+q-1)(pi1 - pi1^2) (half the correct rate)."""
    constants = lg.chain_constants(chain.p, chain.q)
    return -constants.switching * (constants.pi1 - constants.pi1**2)


def measured_rate(path: np.ndarray, t: np.ndarray) -> float:
    """Average d log|e|/dt between the first and last point of an (n, 3) path."""
    return math.log(abs(path[-1, 0]) / abs(path[0, 0])) / (t[-1] - t[0])


def rate_table(s: Fig5Settings, rng: np.random.Generator) -> pd.DataFrame:
    """Integrated vs linearised small-e rates from (e_0, w_0, a_0), |w_0|, |a_0| <= box."""
    points = np.array(s.rate_points, dtype=float).reshape(-1, 2)
    points = np.concatenate([points, rng.uniform(-s.box, s.box, (s.random_rate_points, 2))])
    inits = np.column_stack([np.full(len(points), s.e0), points])
    rows = []
    for chain in s.chains:
        results = lg.integrate_gradient_flows(
            inits,
            chain.p,
            chain.q,
            t_max=s.rate_time,
            rtol=s.flow.rtol,
            atol=s.flow.atol,
            t_eval=[0.0, s.rate_time],
        )
        for init, result in zip(inits, results, strict=True):
            predicted = float(lg.small_e_log_rate(init[1], chain.p, chain.q))
            curvature = lg.hessian_on_w_axis(float(init[1]), chain.p, chain.q, attention=True)
            rows.append(
                {
                    "chain": chain.tag,
                    "switching": chain.p + chain.q - 1,
                    "critical": "minimum" if curvature[0, 0] > 0 else "maximum",
                    "in_box": abs(init[1]) <= s.box and abs(init[2]) <= s.box,
                    "w0": init[1],
                    "a0": init[2],
                    "measured_rate": measured_rate(result.theta, result.t),
                    "predicted_rate": predicted,
                    "paper_m5_rate": paper_m5_rate(chain),
                }
            )
    return pd.DataFrame(rows)


def rate_metrics(rates: pd.DataFrame) -> Metrics:
    """Fig. 5's rate: relative error of the linearised rate; maxima repel and minima attract, each
    where it applies; the caption's label; and App. M.5's printed rate."""
    relative = (rates.measured_rate / rates.predicted_rate - 1.0).abs()
    minima = rates[rates.critical == "minimum"]
    maxima = rates[rates.critical == "maximum"]
    caption = rates[rates.in_box & (rates.switching < 0)]  # "local minima ... repellors"
    m5 = rates[rates.w0 == 0.0]  # M.5 neglects every product of parameters: w = 0, a e^2 ~ 0
    m5_error = (m5.paper_m5_rate / m5.measured_rate - 1.0).abs()
    return {
        "rate_max_rel_error": float(relative.max()),
        "minima_attract_fraction": float(np.mean(minima.measured_rate < 0)),
        "maxima_repel_fraction": float(np.mean(maxima.measured_rate > 0)),
        "minima_checks": float(len(minima)),
        "maxima_checks": float(len(maxima)),
        "caption_repellers_frac_minima": float(np.mean(caption.critical == "minimum")),
        "paper_m5_rate_min_rel_error": float(m5_error.min()) if len(m5) else math.nan,
        "rate_checks": float(len(rates)),
    }


# ----------------------------------------------------------------------------- figure
def _zoom_panel(ax: Axes, chain: BinaryChainSettings, s: Fig5Settings, traj: pd.DataFrame) -> None:
    """Normalised -grad L arrows on a grid in the box, and short flows from inside it."""
    axis = np.linspace(-s.box * 0.9, s.box * 0.9, s.arrows_per_axis)
    e, w, a = np.meshgrid(axis, axis, axis, indexing="ij")
    velocity = lg.gradient_flow_velocity(np.stack([e, w, a], -1), chain.p, chain.q)
    with np.errstate(invalid="ignore"):  # -grad L = 0 on the critical plane e = 0
        unit = np.nan_to_num(velocity / np.linalg.norm(velocity, axis=-1, keepdims=True))
    length = 0.25 * s.box
    ax.quiver(
        w,
        a,
        e,
        unit[..., 1],
        unit[..., 2],
        unit[..., 0],
        length=length,
        color="0.45",
        linewidth=0.6,
        arrow_length_ratio=0.35,
    )
    box = (s.box, s.box, s.box)
    plot3d.critical_sets(ax, chain, box)
    plot3d.trajectories(ax, traj[traj.chain == chain.tag], box)


def _rate_panel(ax: Axes, rates: pd.DataFrame, s: Fig5Settings) -> None:
    """Measured vs linearised d log|e|/dt, one point per (chain, w_0, a_0)."""
    for tag, group in rates.groupby("chain"):
        ax.scatter(group.predicted_rate, group.measured_rate, s=14, label=f"{tag}: integrated GF")
    span = np.array([rates.predicted_rate.min(), rates.predicted_rate.max()]) * 1.1
    ax.plot(span, span, "k--", lw=1, label="Lemma 8 rate: −2π₀π₁(p+q−1)(1+2w|w|)")
    m5 = rates.drop_duplicates("chain")
    ax.scatter(
        2 * m5.paper_m5_rate,
        m5.paper_m5_rate,
        marker="x",
        s=45,
        color="k",
        label="App. M.5 as printed (w₀ = 0): −(p+q−1)(π₁−π₁²)",
    )
    ax.axhline(0, color="0.6", lw=0.8)
    ax.axvline(0, color="0.6", lw=0.8)
    ax.set(
        xlabel="predicted d log|e|/dt (1/time)",
        ylabel=f"measured d log|e|/dt over t ∈ [0, {s.rate_time:g}] (1/time)",
        title=f"(c) small-e rate from e₀ = {s.e0:g}, |w₀|, |a₀| ≤ {s.box:g}\n"
        "(> 0: e = 0 repels, < 0: attracts)",
    )
    ax.legend(fontsize=7)


def _plot(s: Fig5Settings, traj: pd.DataFrame, rates: pd.DataFrame, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, 3, width=5.6, height=5.2)
    for col, chain in enumerate(s.panels):
        ax = plot3d.make_3d(fig, axes[col])
        _zoom_panel(ax, chain, s, traj)
        kind = "maxima repel" if chain.p + chain.q < 1 else "minima attract"
        ax.set_title(
            f"({'ab'[col]}) {chain_label(chain)}: e = 0 near 0 is local {kind}\n"
            '(the caption says "local minima" for both)',
            fontsize=9,
        )
        ax.view_init(elev=18, azim=-60)
    _rate_panel(axes[2], rates, s)
    plotting.finish(
        fig,
        f"Paper B, Fig. 5 — {ctx.scale} scale: (e, w, a) flow near the origin, box ±{s.box:g}; "
        f"{s.plotted_trajectories} flows over t ∈ [0, {s.zoom_time:g}], arrows −∇L/|∇L|\n"
        "plane e = 0: red local minima, purple local maxima; flows coloured by where they end "
        "(green Θ*, red local minimum)",
    )
    ctx.save_figure(fig)


def _zoom_paths(inits: np.ndarray, chain: BinaryChainSettings, s: Fig5Settings) -> pd.DataFrame:
    """The flows over t <= zoom_time, labelled by where the full flow (to T) ends."""
    paths = trajectory_frame(integrate(inits, chain, s.flow), chain, max_points=5000)
    return paths[paths.t <= s.zoom_time]


def fig5(s: Fig5Settings, ctx: RunContext) -> Metrics:
    """Fig. 5: zoom near the origin, and the repel/attract rate of the plane e = 0."""
    rng = np.random.default_rng(s.seed)
    rates = rate_table(s, rng)
    inits = rng.uniform(-s.box, s.box, (s.plotted_trajectories, 3))
    traj = pd.concat([_zoom_paths(inits, c, s) for c in s.panels], ignore_index=True)
    ctx.save_csv(rates, "rates.csv")
    ctx.save_csv(traj, "trajectories.csv")
    _plot(s, traj, rates, ctx)
    return rate_metrics(rates)
