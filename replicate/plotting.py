"""One seaborn style for every figure, plus the reference-line and curve helpers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

REFERENCE_STYLES = {
    "unigram": {"color": "0.35", "linestyle": "--"},
    "bigram": {"color": "black", "linestyle": ":"},
    "target": {"color": "tab:green", "linestyle": "-."},
}


def figure(nrows: int, ncols: int, width: float = 5.0, height: float = 3.6) -> tuple[Figure, list]:
    """A grid of axes in the project style."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.05)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, [ax for row in axes for ax in row]


def reference_line(ax: Axes, value: float, label: str, kind: str) -> None:
    """A horizontal reference line (an entropy, a target probability) with its value."""
    ax.axhline(value, linewidth=1.2, label=f"{label} = {value:.4f}", **REFERENCE_STYLES[kind])


def loss_curves(ax: Axes, curves: pd.DataFrame, hue: str, title: str) -> None:
    """Mean +- std band over seeds per ``hue`` value, plus each seed as a thin line."""
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
