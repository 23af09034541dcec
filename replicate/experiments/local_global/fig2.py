"""Paper B, Fig. 2: gradient flow of theta = (e, w, a) with the attention scalar a.

The flow (GF-attn) conserves E(e, w, a) = e^2 - (w^2 + sign(w) log|w|) - 2a^2 (Eq. 10,
Lemma 14) and converges to a critical point of Thm 10 (Thm 3). Paper B has no closed-form
basins in 3-D; its Fig. 2 (and the informal Thm 11, App. M.5) shows that small Gaussian
inits end at local minima for p + q > 1 and at global minima for p + q < 1. Checked here
on Gaussian inits (Fig. 2; Lemma 14, Thm 11, Thm 10, and reported fractions), plus the
critical sets of the same model with the bias b in R^4 (Thm 9, `thm9_checks`). No training.
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
from replicate.experiments.local_global.attention_bias_checks import thm9_checks
from replicate.experiments.local_global.flows import (
    CLASS_COLORS,
    CLASS_NAMES,
    FlowSettings,
    PositiveFloat,
    chain_label,
    integrate,
    outcome_table,
    theorem_loss_error,
    trajectory_frame,
)
from replicate.settings import BinaryChainSettings, PositiveInt, Strict
from replicate.theory import local_global as lg

STAR, MIN = lg.LimitClass.STAR, lg.LimitClass.MIN
BOX = (2.5, 2.0, 2.5)  # |w|, |a|, |e| drawn


class Fig2Settings(Strict):
    panels: list[BinaryChainSettings] = Field(min_length=2, max_length=2)
    """Chains drawn in 3-D: p + q < 1, then p + q > 1."""
    chains: list[BinaryChainSettings] = Field(min_length=1)
    small_sigmas: list[PositiveFloat] = Field(min_length=1)
    """Sigmas of the asserted small-init claim (Thm 11, Fig. 2)."""
    report_sigmas: list[PositiveFloat]
    """Sigmas whose outcome fractions are reported only (no theorem covers them)."""
    inits_per_sigma: PositiveInt
    plane_inits: PositiveInt
    check_points: PositiveInt
    station_radius: PositiveFloat
    plotted_sigma: PositiveFloat
    plotted_trajectories: PositiveInt
    seed: int
    flow: FlowSettings


# ----------------------------------------------------------------------------- Thm 10 sets
def critical_points(
    chain: BinaryChainSettings, rng: np.random.Generator, n: int
) -> dict[lg.LimitClass, np.ndarray]:
    """n points (e, w, a) of each critical set of Thm 10, Theta_station included.

    Theta_* points are (e, w) with a from Eq. (49), kept where |a| <= 3: near w = -1/sqrt 2
    that a diverges, and the gradient's factors (1 + 2 a e^2, ...) amplify the rounding of
    Phi'(c*) = 0 beyond any fixed tolerance.
    """
    constants = lg.chain_constants(chain.p, chain.q)
    e_star = rng.uniform(0.3, 1.5, 50 * n) * rng.choice([-1.0, 1.0], 50 * n)
    w_star = rng.uniform(-1.5, 1.5, 50 * n)
    a_star = lg.global_min_surface_a(e_star, w_star, chain.p, chain.q)  # Eq. (49)
    bounded = np.flatnonzero(np.abs(a_star) <= 3.0)[:n]
    e = rng.uniform(0.3, 1.5, n) * rng.choice([-1.0, 1.0], n)
    a_free = rng.uniform(-1.5, 1.5, n)
    inner = rng.uniform(lg.SADDLE_W + 0.01, 1.5, n)  # 1 + 2w|w| > 0
    outer = rng.uniform(-2.5, lg.SADDLE_W - 0.01, n)
    minima, maxima = (inner, outer) if constants.switching > 0 else (outer, inner)
    zero, saddle_w = np.zeros(n), np.full(n, lg.SADDLE_W)
    return {
        STAR: np.stack([e_star, w_star, a_star], -1)[bounded],
        MIN: np.stack([zero, minima, a_free], -1),
        lg.LimitClass.MAX: np.stack([zero, maxima, a_free], -1),
        lg.LimitClass.SAD: np.stack([zero, saddle_w, a_free], -1),
        lg.LimitClass.STATION: np.stack([e, saddle_w, -1.0 / e**2], -1),
    }


def _loss(points: np.ndarray, chain: BinaryChainSettings) -> np.ndarray:
    return lg.loss(points[..., 0], points[..., 1], chain.p, chain.q, points[..., 2])


def station_is_saddle(point: np.ndarray, chain: BinaryChainSettings, radius: float) -> bool:
    """L - H(x_{n+1}) takes both signs at the 8 cube corners at distance ``radius``.

    At Theta_station, Delta_a = e^2 (1 + a e^2)(1 + 2w|w|) is a product of two factors
    that change sign independently, and L = Phi(Delta_a) with Phi monotone near 0, so the
    corners straddle L = H(x_{n+1}) (ours: the points are saddles).
    """
    corners = np.array(np.meshgrid(*[[-1.0, 1.0]] * 3)).reshape(3, -1).T * radius / math.sqrt(3)
    excess = _loss(point + corners, chain) - lg.chain_constants(chain.p, chain.q).unigram_loss
    return bool(excess.min() < 0.0 < excess.max())


def crit_metrics(s: Fig2Settings, rng: np.random.Generator) -> Metrics:
    """Thm 10: grad L = 0 on every set, L = H_bi on Theta_*, H_uni elsewhere; station saddles."""
    gradient, loss_error, saddles, stations = 0.0, 0.0, 0, 0
    for chain in s.chains:
        constants = lg.chain_constants(chain.p, chain.q)
        for label, points in critical_points(chain, rng, s.check_points).items():
            grad = lg.gradient_flow_velocity(points, chain.p, chain.q)
            gradient = max(gradient, float(np.abs(grad).max()))
            target = constants.bigram_loss if label is STAR else constants.unigram_loss
            loss_error = max(loss_error, float(np.abs(_loss(points, chain) - target).max()))
            if label is lg.LimitClass.STATION:
                stations += len(points)
                saddles += sum(station_is_saddle(x, chain, s.station_radius) for x in points)
    return {
        "crit_max_gradient_norm": gradient,
        "crit_max_loss_error": loss_error,
        "station_frac_saddle": saddles / stations,
    }


# ----------------------------------------------------------------------------- flows
def _run_gaussian(s: Fig2Settings, rng: np.random.Generator) -> pd.DataFrame:
    frames = []
    for sigma in [*s.small_sigmas, *s.report_sigmas]:
        inits = rng.normal(0.0, sigma, (s.inits_per_sigma, 3))
        for chain in s.chains:
            results = integrate(inits, chain, s.flow)
            frames.append(outcome_table(inits, results, chain, sigma=sigma))
    return pd.concat(frames, ignore_index=True)


def _plane_metrics(s: Fig2Settings, rng: np.random.Generator) -> Metrics:
    """Thm 3(ii): the ea-plane {w = 0} is invariant (w_t = 0 exactly)."""
    inits = rng.normal(0.0, 1.0, (s.plane_inits, 3))
    inits[:, 1] = 0.0
    largest = 0.0
    for chain in s.chains:
        for result in integrate(inits, chain, s.flow):
            largest = max(largest, float(np.abs(result.theta[:, 1]).max()))
    return {"plane_max_abs_w": largest}


def _flow_metrics(s: Fig2Settings, runs: pd.DataFrame) -> Metrics:
    """Lemma 14 drift, Thm 3 convergence, and the small-init outcome per side of p + q = 1."""
    runs = runs.assign(loss_error=0.0)
    for chain in s.chains:
        mine = runs.chain == chain.tag
        runs.loc[mine, "loss_error"] = theorem_loss_error(runs[mine], chain)
    ended = runs.limit_class.isin([STAR, MIN])
    metrics: Metrics = {
        "max_energy_drift": float(runs.energy_drift.max()),
        "max_final_gradient_norm": float(runs.gradient_norm.max()),
        "limit_max_loss_error": float(runs.loss_error[ended].max()),
        "frac_not_star_or_min": float(1.0 - ended.mean()),
    }
    small = runs[runs.sigma.isin(s.small_sigmas)]
    above = small[small.chain.isin([c.tag for c in s.chains if c.p + c.q > 1])]
    below = small[small.chain.isin([c.tag for c in s.chains if c.p + c.q < 1])]
    by_cell = ["chain", "sigma"]
    metrics["small_sigma_min_frac_min_above"] = float(
        above.groupby(by_cell).limit_class.apply(lambda c: np.mean(c == MIN)).min()
    )
    metrics["small_sigma_min_frac_star_below"] = float(
        below.groupby(by_cell).limit_class.apply(lambda c: np.mean(c == STAR)).min()
    )
    for (tag, sigma), cell in runs.groupby(by_cell):
        metrics[f"{tag}/sigma{sigma:g}/frac_star"] = float(np.mean(cell.limit_class == STAR))
        metrics[f"{tag}/sigma{sigma:g}/frac_min"] = float(np.mean(cell.limit_class == MIN))
    return metrics


# ----------------------------------------------------------------------------- figure
def _fractions_panel(ax: Axes, s: Fig2Settings, runs: pd.DataFrame) -> None:
    """Stacked bars: share of Gaussian inits ending at each critical set, per chain and sigma."""
    cells = runs.groupby(["chain", "sigma"]).limit_class.value_counts(normalize=True)
    table = cells.unstack(fill_value=0.0)
    labels = [f"{tag}\nσ={sigma:g}" for tag, sigma in table.index]
    bottom = np.zeros(len(table))
    for label in table.columns:
        code = lg.LimitClass(label)
        ax.bar(
            labels, table[label], bottom=bottom, color=CLASS_COLORS[code], label=CLASS_NAMES[code]
        )
        bottom += table[label].to_numpy()
    ax.set(
        ylabel="fraction of N(0, σ² I₃) inits",
        ylim=(0, 1),
        title=f"(c) where the flow ends ({s.inits_per_sigma} inits per bar)",
    )
    ax.tick_params(axis="x", labelsize=6.5, rotation=90)
    ax.legend(fontsize=7, loc="lower right", framealpha=0.9)


def _plot(s: Fig2Settings, runs: pd.DataFrame, traj: pd.DataFrame, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, 3, width=5.6, height=5.4)
    for col, chain in enumerate(s.panels):
        ax = plot3d.make_3d(fig, axes[col])
        plot3d.critical_sets(ax, chain, BOX)
        plot3d.trajectories(ax, traj[traj.chain == chain.tag], BOX)
        ax.set_title(f"({'ab'[col]}) {chain_label(chain)}", fontsize=9)
        ax.view_init(elev=18, azim=-60)
    _fractions_panel(axes[2], s, runs)
    plotting.finish(
        fig,
        f"Paper B, Fig. 2 — {ctx.scale} scale: gradient flow of (e, w, a), T = {s.flow.t_max:g}; "
        f"(a, b) {s.plotted_trajectories} flows from N(0, {s.plotted_sigma:g}² I₃); green dots "
        "Θ*, red/purple plane e = 0: local min/max, orange: saddle line, brown: Θstation",
    )
    ctx.save_figure(fig)


def fig2(s: Fig2Settings, ctx: RunContext) -> Metrics:
    """Fig. 2: the attention model's flow, its energy, limits and small-init behaviour."""
    rng = np.random.default_rng(s.seed)
    metrics = crit_metrics(s, rng)
    runs = _run_gaussian(s, rng)
    metrics |= _flow_metrics(s, runs) | _plane_metrics(s, rng)
    # Thm 9 (with bias) draws from its own generator, so the draws above do not move
    metrics |= thm9_checks(s.chains, np.random.default_rng([s.seed, 1]), s.check_points)
    shown = rng.normal(0.0, s.plotted_sigma, (s.plotted_trajectories, 3))
    traj = pd.concat(
        [trajectory_frame(integrate(shown, c, s.flow), c) for c in s.panels], ignore_index=True
    )
    ctx.save_csv(runs, "inits.csv")
    ctx.save_csv(traj, "trajectories.csv")
    _plot(s, runs, traj, ctx)
    return metrics
