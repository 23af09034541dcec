"""Paper B: batches of gradient-flow integrations and their outcome tables (Figs. 1, 2, 5).

No training happens here: each initial point is integrated with scipy's `solve_ivp`
(`replicate.theory.local_global.integrate_gradient_flow`), and the outcome is compared with
the theorems (Thm 2/8 basins in 2D, Thm 3/10 in 3D) in closed form.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import Field

from replicate.settings import BinaryChainSettings, Strict
from replicate.theory import local_global as lg

PositiveFloat = Annotated[float, Field(gt=0.0)]


class FlowSettings(Strict):
    """Integrator of (GF) / (GF-attn): our conventions (LSODA, rtol 1e-9, atol 1e-11, T)."""

    t_max: PositiveFloat
    rtol: PositiveFloat
    atol: PositiveFloat


def chain_label(chain: BinaryChainSettings) -> str:
    """'p=0.2, q=0.3 (p+q<1)' for titles and legends."""
    side = "<" if chain.p + chain.q < 1 else ">"
    return f"p={chain.p:g}, q={chain.q:g} (p+q{side}1)"


def integrate(
    inits: np.ndarray, chain: BinaryChainSettings, flow: FlowSettings
) -> list[lg.GradientFlowResult]:
    """Integrate the flow from each row of ``inits`` ((n, 2) or (n, 3))."""
    return lg.integrate_gradient_flows(
        inits, chain.p, chain.q, t_max=flow.t_max, rtol=flow.rtol, atol=flow.atol
    )


def outcome_table(
    inits: np.ndarray,
    results: list[lg.GradientFlowResult],
    chain: BinaryChainSettings,
    **labels: object,
) -> pd.DataFrame:
    """One row per trajectory: init, energy, limit and its class, drift, |grad L|, end loss.

    In 2D it adds the basin of Thm 2/8 (``basin``) and our closed-form limit (proofs of Thms 2/8)
    (``e_pred``, ``w_pred``); ``limit_error`` is the sup-norm distance between the two limits.
    """
    dim = inits.shape[1]
    names = ["e", "w", "a"][:dim]
    limits = np.array([r.limit for r in results])
    a_limit = limits[:, 2] if dim == 3 else 0.0
    frame = pd.DataFrame(
        {
            "chain": chain.tag,
            **labels,
            **{f"{n}0": inits[:, i] for i, n in enumerate(names)},
            "energy0": lg.energy(*inits.T),
            **{f"{n}_lim": limits[:, i] for i, n in enumerate(names)},
            "limit_class": [int(r.limit_class) for r in results],
            "energy_drift": [r.energy_drift for r in results],
            "gradient_norm": [r.gradient_norm for r in results],
            "loss_lim": lg.loss(limits[:, 0], limits[:, 1], chain.p, chain.q, a_limit),
        }
    )
    if dim == 2:
        predicted = np.array([lg.predicted_limit(e, w, chain.p, chain.q) for e, w in inits])
        frame["basin"] = lg.basin_of(inits[:, 0], inits[:, 1], chain.p, chain.q)
        frame["e_pred"], frame["w_pred"] = predicted[:, 0], predicted[:, 1]
        frame["limit_error"] = np.abs(limits - predicted).max(axis=1)
    return frame


def near_separatrix(frame: pd.DataFrame, margin: float) -> pd.Series:
    """Inits with |E0 - E_sad| < margin: their flow ends next to the saddle, where the rate
    1 + 2w|w| vanishes, and no finite T classifies them reliably (the Thm 2/8 checks skip them)."""
    return (frame.energy0 - lg.ENERGY_SADDLE).abs() < margin


def theorem_loss_error(frame: pd.DataFrame, chain: BinaryChainSettings) -> pd.Series:
    """|L(theta_lim) - H|: H = H(x_{n+1}|x_n) on Theta_*, H(x_{n+1}) elsewhere (Thm 1, 10)."""
    constants = lg.chain_constants(chain.p, chain.q)
    star = frame.limit_class == lg.LimitClass.STAR
    target = np.where(star, constants.bigram_loss, constants.unigram_loss)
    return (frame.loss_lim - target).abs()


def trajectory_frame(
    results: list[lg.GradientFlowResult], chain: BinaryChainSettings, max_points: int = 400
) -> pd.DataFrame:
    """Tidy trajectories for plotting (each thinned to at most ``max_points`` points)."""
    frames = []
    for i, result in enumerate(results):
        keep = np.unique(np.linspace(0, len(result.t) - 1, max_points).astype(int))
        theta = result.theta[keep]
        columns = {n: theta[:, j] for j, n in enumerate(["e", "w", "a"][: theta.shape[1]])}
        frames.append(
            pd.DataFrame(
                {
                    "chain": chain.tag,
                    "trajectory": i,
                    "limit_class": int(result.limit_class),
                    "t": result.t[keep],
                    **columns,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


CLASS_NAMES = {
    lg.LimitClass.STAR: "global min (Θ*)",
    lg.LimitClass.MIN: "local min (Θmin)",
    lg.LimitClass.SAD: "saddle",
    lg.LimitClass.MAX: "local max",
    lg.LimitClass.STATION: "Θstation",
    lg.LimitClass.UNCONVERGED: "unconverged",
}
CLASS_COLORS = {
    lg.LimitClass.STAR: "tab:green",
    lg.LimitClass.MIN: "tab:red",
    lg.LimitClass.SAD: "tab:orange",
    lg.LimitClass.MAX: "tab:purple",
    lg.LimitClass.STATION: "tab:brown",
    lg.LimitClass.UNCONVERGED: "black",
}
