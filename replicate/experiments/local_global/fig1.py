"""Paper B, Fig. 1: gradient flow of theta = (e, w) on energy contours, and the basins.

Panels (a, c): the flow lines of (GF) on the contour lines of the energy E(e, w) (Eq. 4),
with the critical sets of Thm 1. Panels (b, d): the basins I_* and I_min of Thm 8
(p + q < 1) and Thm 2 (p + q > 1), the saddle separatrix I_sad, and where integrated flows
from Gaussian initialisations ended. The claims are checked on Gaussian, grid, e-axis and
I_common initialisations (paper B, Fig. 1a-d), plus the closed forms behind them
(Lemmas 5, 7, 8 and Thm 1) and, with the bias b, Lemmas 2, 3, 4, 6 and Thm 7
(`bias_checks`) and Thm 6 (`thm6_checks`), and Thms 4-5 on the full transformer at App. D's
construction and App. C's closed-form prediction (`full_model_checks`). No training happens here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from pydantic import Field, model_validator
from scipy.optimize import minimize_scalar

from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global.bias_checks import bias_checks, thm6_checks
from replicate.experiments.local_global.flows import (
    CLASS_COLORS,
    CLASS_NAMES,
    FlowSettings,
    PositiveFloat,
    chain_label,
    integrate,
    near_separatrix,
    outcome_table,
    theorem_loss_error,
    trajectory_frame,
)
from replicate.experiments.local_global.full_model_checks import full_model_checks
from replicate.settings import BinaryChainSettings, PositiveInt, Strict
from replicate.theory import local_global as lg

STAR, MIN = lg.LimitClass.STAR, lg.LimitClass.MIN
PLOT_EXTENT = 3.0
"""Fig. 1's axes: w and e in [-3, 3] (paper B, Fig. 1a/1c)."""


class Fig1Settings(Strict):
    panels: list[BinaryChainSettings] = Field(min_length=2, max_length=2)
    """Chains of panels (a, b) (p + q < 1) and (c, d) (p + q > 1)."""
    chains: list[BinaryChainSettings] = Field(min_length=1)
    """Chains of the basin checks."""
    sigmas: list[PositiveFloat] = Field(min_length=1)
    inits_per_sigma: PositiveInt
    assert_sigma_max: PositiveFloat
    """Energy drift and limit error are asserted for sigma <= this (ours; Lemma 1)."""
    grid_points: PositiveInt
    extent: PositiveFloat
    common_inits: PositiveInt
    axis_inits: list[float] = Field(min_length=1)
    check_points: PositiveInt
    separatrix_margin: PositiveFloat
    plotted_per_axis: PositiveInt
    seed: int
    flow: FlowSettings

    @model_validator(mode="after")
    def _panel_sides(self) -> Fig1Settings:
        below, above = self.panels
        if not (below.p + below.q < 1 < above.p + above.q):
            raise ValueError("panels must be one chain with p+q<1, then one with p+q>1")
        return self


# ----------------------------------------------------------------------------- closed forms
def _random_theta(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Points with |e| <= 1.5 and 0.05 <= |w| <= 1.5 (away from the |w| kink at w = 0)."""
    return rng.uniform(-1.5, 1.5, n), rng.choice([-1.0, 1.0], n) * rng.uniform(0.05, 1.5, n)


def _bias_error(chain: BinaryChainSettings, e: np.ndarray, w: np.ndarray) -> float:
    """max |b*(theta) - argmin_b L(theta, b)|: Lemma 5 (Eq. 33) against Brent's method."""
    p, q = chain.p, chain.q
    numeric = [
        minimize_scalar(
            lambda b, ei=ei, wi=wi: float(lg.loss_with_bias(ei, wi, b, p, q)),
            bracket=(-5.0, 5.0),
            tol=1e-12,
        ).x
        for ei, wi in zip(e, w, strict=True)
    ]
    return float(np.max(np.abs(lg.optimal_bias(e, w, p, q) - np.array(numeric))))


def _gradient_error(chain: BinaryChainSettings, e: np.ndarray, w: np.ndarray) -> float:
    """max |Lemma 7 gradient - central finite difference of L(theta)| (step 1e-6)."""
    p, q, h = chain.p, chain.q, 1e-6
    fd_e = (lg.loss(e + h, w, p, q) - lg.loss(e - h, w, p, q)) / (2 * h)
    fd_w = (lg.loss(e, w + h, p, q) - lg.loss(e, w - h, p, q)) / (2 * h)
    return float(np.max(np.abs(lg.loss_gradient(e, w, p, q) - np.stack([fd_e, fd_w], -1))))


def _critical_points(
    chain: BinaryChainSettings, rng: np.random.Generator, n: int
) -> dict[lg.LimitClass, np.ndarray]:
    """n points of each critical set of Thm 1 (Theta_*, Theta_min, Theta_max, Theta_sad)."""
    constants = lg.chain_constants(chain.p, chain.q)
    # Theta_* needs sign(1 + 2w|w|) = sign(c*): w > -1/sqrt 2 iff c* > 0 (p + q < 1)
    w_star = rng.uniform(-0.69, 3.0, n) if constants.c_star > 0 else rng.uniform(-3.0, -0.72, n)
    e_star = lg.global_min_locus_e(w_star, chain.p, chain.q) * rng.choice([-1.0, 1.0], n)
    star = np.stack([e_star, w_star], -1)
    inner = rng.uniform(lg.SADDLE_W + 0.01, 3.0, n)  # 1 + 2w|w| > 0
    outer = rng.uniform(-3.0, lg.SADDLE_W - 0.01, n)  # 1 + 2w|w| < 0
    minima, maxima = (inner, outer) if constants.switching > 0 else (outer, inner)
    on_axis = np.zeros(n)
    return {
        lg.LimitClass.STAR: star,
        lg.LimitClass.MIN: np.stack([on_axis, minima], -1),
        lg.LimitClass.MAX: np.stack([on_axis, maxima], -1),
        lg.LimitClass.SAD: np.array([[0.0, lg.SADDLE_W]]),
    }


def _critical_set_errors(
    chain: BinaryChainSettings, rng: np.random.Generator, n: int
) -> tuple[float, float]:
    """(max |grad L|, max |L - theorem loss|) over sampled points of each set of Thm 1."""
    constants = lg.chain_constants(chain.p, chain.q)
    gradient, loss_error = 0.0, 0.0
    for label, points in _critical_points(chain, rng, n).items():
        e, w = points.T
        gradient = max(gradient, float(np.abs(lg.loss_gradient(e, w, chain.p, chain.q)).max()))
        target = constants.bigram_loss if label is STAR else constants.unigram_loss
        loss_error = max(loss_error, float(np.abs(lg.loss(e, w, chain.p, chain.q) - target).max()))
    return gradient, loss_error


def _hessian_error(chain: BinaryChainSettings, w: np.ndarray) -> float:
    """Max relative error of the FD d^2L/de^2 at e = 0 against Lemma 8 (Eq. 36):
    2 pi0 pi1 (p+q-1)(1 + 2w|w|)."""
    h = 1e-4
    p, q = chain.p, chain.q
    numeric = (lg.loss(h, w, p, q) - 2 * lg.loss(0.0, w, p, q) + lg.loss(-h, w, p, q)) / h**2
    exact = np.array([lg.hessian_on_w_axis(wi, p, q)[0, 0] for wi in w])
    return float(np.max(np.abs(numeric / exact - 1.0)))


def closed_form_checks(s: Fig1Settings, rng: np.random.Generator) -> Metrics:
    """Lemma 5 (b*), Lemma 7 (gradients), Thm 1 (critical sets, losses) and Lemma 8 (Hessian)."""
    errors: dict[str, list[float]] = {k: [] for k in ("bias", "gradient", "crit", "loss", "hess")}
    for chain in s.chains:
        e, w = _random_theta(rng, s.check_points)
        errors["bias"].append(_bias_error(chain, e[:20], w[:20]))
        errors["gradient"].append(_gradient_error(chain, e, w))
        crit, loss_error = _critical_set_errors(chain, rng, s.check_points)
        errors["crit"].append(crit)
        errors["loss"].append(loss_error)
        away_from_saddle = w[np.abs(w - lg.SADDLE_W) > 0.05]
        errors["hess"].append(_hessian_error(chain, away_from_saddle))
    return {
        "bias_max_error": max(errors["bias"]),
        "gradient_max_fd_error": max(errors["gradient"]),
        "crit_max_gradient_norm": max(errors["crit"]),
        "crit_max_loss_error": max(errors["loss"]),
        "hessian_max_rel_error": max(errors["hess"]),
    }


# ----------------------------------------------------------------------------- initialisations
def _grid(points: int, extent: float) -> np.ndarray:
    """points x points grid on [-extent, extent]^2 (an even count avoids the axes e = 0, w = 0)."""
    axis = np.linspace(-extent, extent, points)
    e, w = np.meshgrid(axis, axis, indexing="ij")
    return np.stack([e.ravel(), w.ravel()], -1)


def _common_basin_inits(rng: np.random.Generator, n: int) -> np.ndarray:
    """n points uniform in I_common ∩ [-3, 3] x [-3, 0) by rejection (paper B §4)."""
    found: list[np.ndarray] = []
    while sum(len(f) for f in found) < n:
        e, w = rng.uniform(-3.0, 3.0, 4 * n), rng.uniform(-3.0, 0.0, 4 * n)
        inside = lg.is_in_common_basin(e, w)
        found.append(np.stack([e[inside], w[inside]], -1))
    return np.concatenate(found)[:n]


def _run_inits(s: Fig1Settings, rng: np.random.Generator) -> pd.DataFrame:
    """Integrate the flow from Gaussian, grid, I_common and (0.5, -1) inits for every chain."""
    sets: dict[str, np.ndarray] = {
        f"gauss{sigma:g}": rng.normal(0.0, sigma, (s.inits_per_sigma, 2)) for sigma in s.sigmas
    }
    sets["grid"] = _grid(s.grid_points, s.extent)
    sets["common"] = _common_basin_inits(rng, s.common_inits)
    sets["point_0.5_-1"] = np.array([[0.5, -1.0]])
    frames = []
    for chain in s.chains:
        for name, inits in sets.items():
            sigma = float(name[5:]) if name.startswith("gauss") else math.nan
            results = integrate(inits, chain, s.flow)
            frames.append(outcome_table(inits, results, chain, init_set=name, sigma=sigma))
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- metrics
def _basin_metrics(s: Fig1Settings, runs: pd.DataFrame) -> Metrics:
    """Thm 2/8 agreement, limit points, energy drift and convergence over all inits."""
    runs = runs.assign(loss_error=0.0)
    for chain in s.chains:
        mine = runs.chain == chain.tag
        runs.loc[mine, "loss_error"] = theorem_loss_error(runs[mine], chain)
    counted = runs[~near_separatrix(runs, s.separatrix_margin)]
    asserted = counted[~(counted.sigma > s.assert_sigma_max)]  # NaN sigma (grid, ...) is kept
    common = runs[runs.init_set == "common"].groupby("chain").limit_class
    return {
        "basin_agreement": float(np.mean(counted.limit_class == counted.basin)),
        "inits_counted": float(len(counted)),
        "inits_near_separatrix": float(len(runs) - len(counted)),
        "max_energy_drift": float(asserted.energy_drift.max()),
        "limit_max_error": float(asserted.limit_error.max()),
        "max_final_gradient_norm": float(counted.gradient_norm.max()),
        "limit_max_loss_error": float(counted.loss_error.max()),
        "common_min_frac_star": float(common.apply(lambda c: np.mean(c == STAR)).min()),
        "point_0.5_-1_frac_star": float(
            np.mean(runs[runs.init_set == "point_0.5_-1"].limit_class == STAR)
        ),
    }


def _gaussian_metrics(s: Fig1Settings, runs: pd.DataFrame) -> Metrics:
    """Per (chain, sigma): fractions ending at Theta_* / Theta_min, and the quadrature P(I_*).

    ``prob_max_abs_z`` is the largest |frac_* - P(I_*)| in binomial standard errors, over
    the cells where at least one init is expected on each side (n P (1 - P) >= 1).
    """
    metrics: Metrics = {}
    z_scores = []
    small = min(s.sigmas)
    above, below = [], []
    for chain in s.chains:
        for sigma in s.sigmas:
            cell = runs[(runs.chain == chain.tag) & (runs.init_set == f"gauss{sigma:g}")]
            n = len(cell)
            frac_star = float(np.mean(cell.limit_class == STAR))
            frac_min = float(np.mean(cell.limit_class == MIN))
            expected = lg.gaussian_basin_probability(sigma, chain.p, chain.q)
            prefix = f"{chain.tag}/sigma{sigma:g}"
            metrics |= {
                f"{prefix}/frac_star": frac_star,
                f"{prefix}/frac_min": frac_min,
                f"{prefix}/expected_frac_star": expected,
            }
            if n * expected * (1 - expected) >= 1:
                z_scores.append(
                    abs(frac_star - expected) / math.sqrt(expected * (1 - expected) / n)
                )
            if sigma == small:
                (above if chain.p + chain.q > 1 else below).append(frac_min)
    metrics["prob_max_abs_z"] = max(z_scores) if z_scores else math.nan
    metrics["small_sigma_min_frac_min_above"] = min(above) if above else math.nan
    metrics["small_sigma_max_frac_min_below"] = max(below) if below else math.nan
    return metrics


def _axis_metrics(s: Fig1Settings) -> tuple[Metrics, pd.DataFrame]:
    """Lemma 1's e-axis case: w_0 = 0 keeps w_t = 0; the limit is 0 (p+q>1) or ±sqrt(c*) (p+q<1)."""
    frames, max_w, max_error = [], 0.0, 0.0
    for chain in s.chains:
        inits = np.stack([np.array(s.axis_inits), np.zeros(len(s.axis_inits))], -1)
        results = integrate(inits, chain, s.flow)
        max_w = max(max_w, max(float(np.abs(r.theta[:, 1]).max()) for r in results))
        frame = outcome_table(inits, results, chain, init_set="axis", sigma=math.nan)
        max_error = max(max_error, float(frame.limit_error.max()))
        frames.append(frame)
    return {"axis_max_abs_w": max_w, "axis_max_limit_error": max_error}, pd.concat(frames)


# ----------------------------------------------------------------------------- figure
CONTOUR_LEVELS = sorted([*range(-9, 0), lg.ENERGY_SADDLE, *range(0, 12)])


def _critical_sets(ax: Axes, chain: BinaryChainSettings, extent: float) -> None:
    """Theta_* (dashed), Theta_min / Theta_max on e = 0 and the saddle (Thm 1), in (w, e)."""
    w = np.linspace(-extent, extent, 1201)
    e_star = lg.global_min_locus_e(w, chain.p, chain.q)
    ax.plot(w, e_star, "k--", lw=1.3, label=r"global minima $\Theta_\star$")
    ax.plot(w, -e_star, "k--", lw=1.3)
    curvature = (chain.p + chain.q - 1) * (1 + 2 * w * np.abs(w))
    ax.plot(np.where(curvature > 0, w, np.nan), 0 * w, color="tab:red", lw=3, label=r"local minima")
    ax.plot(
        np.where(curvature < 0, w, np.nan), 0 * w, color="tab:purple", lw=3, label="local maxima"
    )
    ax.plot(lg.SADDLE_W, 0.0, "*", color="tab:orange", ms=13, mec="k", label="saddle", zorder=5)


def _flow_panel(ax: Axes, chain: BinaryChainSettings, traj: pd.DataFrame) -> None:
    """(a)/(c): energy contours, the normalised -grad L field, integrated trajectories."""
    extent = PLOT_EXTENT
    axis = np.linspace(-extent, extent, 301)
    w_grid, e_grid = np.meshgrid(axis, axis)
    contours = ax.contour(
        w_grid,
        e_grid,
        lg.energy(e_grid, w_grid),
        levels=CONTOUR_LEVELS,
        cmap="Blues_r",
        linewidths=0.6,
    )
    ax.clabel(contours, contours.levels[::3], fontsize=6, fmt="%.0f")
    arrows = np.arange(-extent, extent + 1e-9, 0.2)
    w_a, e_a = np.meshgrid(arrows, arrows)
    velocity = lg.gradient_flow_velocity(np.stack([e_a, w_a], -1), chain.p, chain.q)
    norm = np.linalg.norm(velocity, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = np.ma.masked_invalid(velocity / norm[..., None])  # -grad L = 0 on e = 0
    ax.quiver(w_a, e_a, unit[..., 1], unit[..., 0], color="0.6", scale=45, width=0.0025)
    for _, path in traj[traj.chain == chain.tag].groupby("trajectory"):
        color = CLASS_COLORS[lg.LimitClass(path.limit_class.iloc[0])]
        ax.plot(path.w, path.e, color=color, lw=1.2)
        ax.plot(path.w.iloc[0], path.e.iloc[0], "o", color=color, ms=3)
    _critical_sets(ax, chain, extent)
    ax.set(
        xlim=(-extent, extent),
        ylim=(-extent, extent),
        xlabel="w (feed-forward scalar)",
        ylabel="e (embedding scalar)",
    )


def _basin_panel(ax: Axes, chain: BinaryChainSettings, runs: pd.DataFrame) -> None:
    """(b)/(d): basins of Thm 8 / Thm 2, the separatrix I_sad, and where Gaussian inits ended."""
    extent = PLOT_EXTENT
    axis = np.linspace(-extent, extent, 601)
    w_grid, e_grid = np.meshgrid(axis, axis)
    basin = lg.basin_of(e_grid, w_grid, chain.p, chain.q)
    colors = ListedColormap(["#c7e9c0", "#fcbba1"])  # I_* green, I_min red
    ax.pcolormesh(
        w_grid,
        e_grid,
        np.where(basin == MIN, 1, 0),
        cmap=colors,
        vmin=0,
        vmax=1,
        shading="auto",
        rasterized=True,
    )
    w_sad = (
        np.linspace(lg.SADDLE_W, -1e-4, 400)
        if chain.p + chain.q > 1
        else np.linspace(-extent, lg.SADDLE_W, 400)
    )
    g = lg.separatrix_half_width(w_sad)
    ax.plot(w_sad, g, color="orange", lw=2.2, label=r"$\mathcal{I}_{sad}$: $|e| = g(w)$")
    ax.plot(w_sad, -g, color="orange", lw=2.2)
    _critical_sets(ax, chain, extent)
    gauss = runs[(runs.chain == chain.tag) & runs.init_set.str.startswith("gauss")]
    for label, group in gauss.groupby("limit_class"):
        ax.scatter(
            group.w0,
            group.e0,
            s=9,
            color=CLASS_COLORS[lg.LimitClass(label)],
            edgecolors="k",
            linewidths=0.3,
            zorder=4,
            label=f"init → {CLASS_NAMES[lg.LimitClass(label)]}",
        )
    wrong = gauss[gauss.limit_class != gauss.basin]
    ax.scatter(
        wrong.w0,
        wrong.e0,
        marker="x",
        s=40,
        color="k",
        zorder=6,
        label=f"GF ≠ theorem ({len(wrong)})",
    )
    ax.set(
        xlim=(-extent, extent),
        ylim=(-extent, extent),
        xlabel="w (feed-forward scalar)",
        ylabel="e (embedding scalar)",
    )


def _plot(s: Fig1Settings, runs: pd.DataFrame, traj: pd.DataFrame, ctx: RunContext) -> None:
    fig, axes = plotting.figure(2, 2, width=6.2, height=5.6)
    for col, chain in enumerate(s.panels):
        flow_letter, basin_letter = ("a", "b") if col == 0 else ("c", "d")
        _flow_panel(axes[col], chain, traj)
        axes[col].set_title(f"({flow_letter}) flow on energy contours, {chain_label(chain)}")
        _basin_panel(axes[2 + col], chain, runs)
        theorem = "Thm 8" if col == 0 else "Thm 2"
        axes[2 + col].set_title(
            f"({basin_letter}) basins ({theorem}): green $\\mathcal{{I}}_\\star$, "
            f"red $\\mathcal{{I}}_{{min}}$"
        )
    # (a), (c) draw the critical sets as (b), (d) do: their legends name them; one in (a)
    # would lie over the contour labels
    for ax in axes[2:]:
        ax.legend(fontsize=6.5, loc="lower left", framealpha=0.9)
    sigmas = ", ".join(f"{x:g}" for x in s.sigmas)
    plotting.finish(
        fig,
        f"Paper B, Fig. 1 — {ctx.scale} scale: gradient flow of (e, w), T = {s.flow.t_max:g}; "
        f"dots: {s.inits_per_sigma} N(0, σ²) inits per σ ∈ {{{sigmas}}}, coloured by GF limit\n"
        "(a), (c): flows from a grid, coloured by GF limit; critical sets as in the legends of "
        "(b), (d)",
    )
    ctx.save_figure(fig)


def _plotted_trajectories(s: Fig1Settings) -> pd.DataFrame:
    inits = _grid(s.plotted_per_axis, 2.5)
    frames = [trajectory_frame(integrate(inits, c, s.flow), c) for c in s.panels]
    return pd.concat(frames, ignore_index=True)


def fig1(s: Fig1Settings, ctx: RunContext) -> Metrics:
    """Fig. 1: 2D gradient flow, energy conservation, basins and Gaussian-init outcomes."""
    rng = np.random.default_rng(s.seed)
    metrics = closed_form_checks(s, rng)
    runs = _run_inits(s, rng)
    axis_metrics, axis_runs = _axis_metrics(s)
    metrics |= axis_metrics | _basin_metrics(s, runs) | _gaussian_metrics(s, runs)
    # the with-bias checks draw from their own generator, so the draws above do not move
    metrics |= bias_checks(s.chains, np.random.default_rng([s.seed, 1]), s.check_points)
    metrics |= thm6_checks(s.chains, np.random.default_rng([s.seed, 2]), min(s.check_points, 25))
    metrics |= full_model_checks(s.chains, np.random.default_rng([s.seed, 3]))
    traj = _plotted_trajectories(s)
    ctx.save_csv(pd.concat([runs, axis_runs], ignore_index=True), "inits.csv")
    ctx.save_csv(traj, "trajectories.csv")
    _plot(s, runs, traj, ctx)
    return metrics
