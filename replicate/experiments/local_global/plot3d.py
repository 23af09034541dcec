"""Paper B: 3-D drawing of the (e, w, a) flow and its critical sets (Figs. 2 and 5).

Axes: x = w (feed-forward scalar), y = a (attention scalar), z = e (embedding scalar), so
that each (w, e) slice looks like Fig. 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from mpl_toolkits.mplot3d.art3d import Poly3DCollection

from replicate.experiments.local_global.flows import CLASS_COLORS
from replicate.settings import BinaryChainSettings
from replicate.theory import local_global as lg


def make_3d(fig: Figure, ax: Axes) -> Axes:
    """Replace a 2-D axes of ``fig`` by a 3-D one in the same grid cell."""
    spec = ax.get_subplotspec()
    ax.remove()
    ax3d = fig.add_subplot(spec, projection="3d")
    ax3d.set_xlabel("w (feed-forward)")
    ax3d.set_ylabel("a (attention)")
    ax3d.set_zlabel("e (embedding)")
    for axis in (ax3d.xaxis, ax3d.yaxis, ax3d.zaxis):  # more ticks collide in the projection
        axis.set_major_locator(MaxNLocator(4, steps=[1, 2, 5, 10]))
    return ax3d


def _plane_half(
    ax: Axes, w_range: tuple[float, float], box: tuple[float, float, float], color: str
) -> None:
    """The part of the plane e = 0 with w in ``w_range``, clipped to the box."""
    w_box, a_box, _ = box
    w0, w1 = max(w_range[0], -w_box), min(w_range[1], w_box)
    if w0 >= w1:
        return
    corners = [[(w0, -a_box, 0.0), (w1, -a_box, 0.0), (w1, a_box, 0.0), (w0, a_box, 0.0)]]
    ax.add_collection3d(Poly3DCollection(corners, color=color, alpha=0.18, linewidths=0))


def critical_sets(ax: Axes, chain: BinaryChainSettings, box: tuple[float, float, float]) -> None:
    """Thm 10's sets inside the box (|w| <= box[0], |a| <= box[1], |e| <= box[2]).

    Theta_* (green points on Delta_a = c*, Eq. 49), the plane e = 0 split at w = -1/sqrt 2
    into local minima (red) and maxima (purple), the saddle line (orange) and
    Theta_station = {w = -1/sqrt 2, a = -1/e^2} (brown; saddles, by our check).
    """
    w_box, a_box, e_box = box
    e, w = np.meshgrid(np.linspace(-e_box, e_box, 90), np.linspace(-w_box, w_box, 90))
    a = lg.global_min_surface_a(e, w, chain.p, chain.q)
    inside = np.abs(a) <= a_box
    ax.scatter(
        w[inside], a[inside], e[inside], s=1.0, color="tab:green", alpha=0.4, rasterized=True
    )
    split = lg.SADDLE_W
    inner, outer = (split, w_box), (-w_box, split)  # 1 + 2w|w| > 0 / < 0
    minima, maxima = (inner, outer) if chain.p + chain.q > 1 else (outer, inner)
    _plane_half(ax, minima, box, "tab:red")
    _plane_half(ax, maxima, box, "tab:purple")
    if -w_box <= split:
        ax.plot([split, split], [-a_box, a_box], [0, 0], color="tab:orange", lw=2.5)
        e_station = np.linspace(-e_box, e_box, 400)
        with np.errstate(divide="ignore"):
            a_station = -1.0 / e_station**2
        keep = np.abs(a_station) <= a_box
        ax.plot(
            np.full(keep.sum(), split),
            a_station[keep],
            e_station[keep],
            ".",
            color="tab:brown",
            ms=1.5,
        )
    ax.set(xlim=(-w_box, w_box), ylim=(-a_box, a_box), zlim=(-e_box, e_box))


def trajectories(ax: Axes, traj: pd.DataFrame, box: tuple[float, float, float]) -> None:
    """Each trajectory as a line coloured by its limit class, with a dot at its start.

    Points outside the box are dropped (3-D axes do not clip)."""
    w_box, a_box, e_box = box
    for _, path in traj.groupby("trajectory"):
        color = CLASS_COLORS[lg.LimitClass(path.limit_class.iloc[0])]
        outside = (path.w.abs() > w_box) | (path.a.abs() > a_box) | (path.e.abs() > e_box)
        shown = path.mask(outside)
        ax.plot(shown.w, shown.a, shown.e, color=color, lw=0.9)
        ax.scatter(path.w.iloc[:1], path.a.iloc[:1], path.e.iloc[:1], color=color, s=6)
