"""Attention-map panels of paper D (App. H.1 style: map, pseudo map, |difference|)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from replicate import plotting


def map_panel(ax: Axes, values: np.ndarray, title: str, colorbar: bool = False) -> None:
    """One T x T map on the common scale [0, 1] (rows: query n, columns: key i, 1-indexed)."""
    image = ax.imshow(values, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.grid(False)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    length = values.shape[0]
    ticks = np.arange(0, length, max(1, length // 4))
    ax.set_xticks(ticks, labels=[str(t + 1) for t in ticks])
    ax.set_yticks(ticks, labels=[str(t + 1) for t in ticks])
    ax.set(title=title, xlabel="key position i", ylabel="query position n")


def triptych(
    axes: list[Axes], att: np.ndarray, pseudo: np.ndarray, label: str, tokens: np.ndarray | None
) -> None:
    """(map, pseudo map, |map - pseudo|) on three axes (the authors' `save_images` layout);
    the tokens of a single sequence go into the first title."""
    shown = "" if tokens is None else "\nx = " + "".join(str(int(t)) for t in tokens)
    map_panel(axes[0], att, f"{label}: model{shown}")
    map_panel(axes[1], pseudo, f"{label}: pseudo map")
    map_panel(axes[2], np.abs(att - pseudo), f"{label}: |difference|", colorbar=True)


def shown_sequence(tokens: np.ndarray, states: int) -> int:
    """The sequence of (B, T) input ``tokens`` drawn as "one sequence": the first in which
    every symbol fills at least 1 / (2S) of the T inputs, else the most balanced one. A
    near-constant sequence (at ci, the first evaluation sequence of order 2 is all zeros)
    matches every context, so its pseudo map (paper D, App. H.1) carries nothing."""
    counts = np.stack([(tokens == s).sum(-1) for s in range(states)]).min(0)
    enough = np.flatnonzero(counts >= tokens.shape[-1] / (2 * states))
    return int(enough[0]) if enough.size else int(counts.argmax())


def shown_rule(states: int) -> str:
    """How `shown_sequence` chose the drawn sequence, for a figure's title."""
    return f"one sequence: the first with every symbol in >= 1/{2 * states} of its inputs"


def curves_panel(ax: Axes, curves: pd.DataFrame, title: str, floor: float) -> None:
    """Test-loss curves, one colour per order (labelled k = ...), with the Bayes (Laplace)
    loss as reference."""
    labelled = curves.assign(order=[f"k = {k}" for k in curves.order])
    plotting.loss_curves(ax, labelled, hue="order", title=title)
    plotting.reference_line(ax, floor, "Laplace-k (Bayes) loss", "target")
    ax.legend(fontsize=7)
