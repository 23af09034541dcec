"""One seaborn style for every figure, plus the reference-line and curve helpers.

seaborn (with scipy) and pyplot are imported by the helpers that draw, so an experiment
that imports this module but draws nothing does not load them (issue 13: start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import matplotlib
import numpy as np

matplotlib.use("Agg")

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

REFERENCE_STYLES = {
    "unigram": {"color": "0.35", "linestyle": "--"},
    "bigram": {"color": "black", "linestyle": ":"},
    "target": {"color": "tab:green", "linestyle": "-."},
}


def figure(nrows: int, ncols: int, width: float = 5.0, height: float = 3.6) -> tuple[Figure, list]:
    """A grid of axes in the project style."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", font_scale=1.05)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, [ax for row in axes for ax in row]


def reference_line(ax: Axes, value: float, label: str, kind: str) -> None:
    """A horizontal reference line (an entropy, a target probability) with its value."""
    ax.axhline(value, linewidth=1.2, label=f"{label} = {value:.4f}", **REFERENCE_STYLES[kind])


def loss_curves(ax: Axes, curves: pd.DataFrame, hue: str, title: str) -> None:
    """Mean +- std band over seeds per ``hue`` value, plus each seed as a thin line."""
    import seaborn as sns

    sns.lineplot(data=curves, x="step", y="test_loss", hue=hue, errorbar="sd", ax=ax, linewidth=1.6)
    sns.lineplot(
        data=curves,
        x="step",
        y="test_loss",
        hue=hue,
        units="seed",
        estimator=None,
        ax=ax,
        linewidth=0.5,
        alpha=0.35,
        legend=False,
    )
    ax.set(title=title, xlabel="training iteration", ylabel="test loss (nats)")


def per_seed_lines(ax: Axes, frame: pd.DataFrame, x: str, y: str, hue: str) -> None:
    """One line per seed, coloured by ``hue`` (no averaging)."""
    import seaborn as sns

    sns.lineplot(
        data=frame,
        x=x,
        y=y,
        hue=hue,
        units="seed",
        estimator=None,
        ax=ax,
        linewidth=0.9,
        alpha=0.8,
    )


def finish(fig: Figure, title: str) -> None:
    fig.suptitle(title)
    fig.tight_layout()


def heatmap(
    ax: Axes,
    values: np.ndarray,
    annotations: np.ndarray,
    row_labels: list[str],
    col_labels: list[str],
    colorbar_label: str,
    vmin: float = 0.0,
    vmax: float = 1.0,
) -> None:
    """Annotated heat-map; row i, column j fills the unit cell [j, j+1] x [i, i+1] (row 0 on
    top). NaN cells stay blank (hatched), so "not measured" never looks like a value."""
    import seaborn as sns

    sns.heatmap(
        values,
        ax=ax,
        annot=annotations,
        fmt="",
        cmap="viridis",
        vmin=vmin,
        vmax=vmax,
        xticklabels=col_labels,
        yticklabels=row_labels,
        linewidths=0.5,
        linecolor="white",
        cbar_kws={"label": colorbar_label},
        annot_kws={"fontsize": 7},
    )
    ax.patch.set(hatch="//", edgecolor="0.8")
    ax.tick_params(axis="y", rotation=0)
    for i, j in zip(*np.nonzero(np.isnan(values)), strict=True):  # seaborn skips NaN cells
        ax.text(j + 0.5, i + 0.5, annotations[i, j], ha="center", va="center", fontsize=7)


def switching_boundary(ps: list[float], qs: list[float]) -> list[tuple[tuple[int, int], ...]]:
    """Cell edges of a (p rows) x (q columns) grid that separate different signs of p+q-1.

    Paper A's Fig. 4 demarcation: drawn along these edges, the boundary is a staircase
    between the p+q<1 cells and the p+q>1 cells; cells with p+q=1 (the anti-diagonal of a
    symmetric grid) get edges on both sides. Each segment is ((x0, y0), (x1, y1)) in the
    cell coordinates of `heatmap`.
    """

    def side(p: float, q: float) -> int:
        s = p + q - 1.0
        return 0 if abs(s) <= 1e-9 else int(np.sign(s))

    segments = []
    for i, p in enumerate(ps):
        for j, q in enumerate(qs):
            if j + 1 < len(qs) and side(p, q) != side(p, qs[j + 1]):
                segments.append(((j + 1, i), (j + 1, i + 1)))
            if i + 1 < len(ps) and side(p, q) != side(ps[i + 1], q):
                segments.append(((j, i + 1), (j + 1, i + 1)))
    return segments


def staircase(ax: Axes, ps: list[float], qs: list[float]) -> None:
    """Draw `switching_boundary` on a heat-map as a thick red staircase."""
    for start, end in switching_boundary(ps, qs):
        ax.plot(
            [start[0], end[0]],
            [start[1], end[1]],
            color="tab:red",
            linewidth=2.5,
            solid_capstyle="projecting",
        )
