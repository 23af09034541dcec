"""How paper C's figures draw what their claims read: the add-alpha k-gram levels (the
dashed lines of every figure, paper C Fig. 1 caption), the plateaus the stage analysis
finds and the k-gram order each is assigned (`stages`), and the loss-and-gradient panels
of Figs. 1, 6 and 7 (paper C, Fig. 1 and App. I.3), and the first-layer attention maps of
Figs. 3 and 4 (paper C, Fig. 3 (b); App. I.1, Fig. 4 (b, d)).

Every figure lays out with matplotlib's constrained layout, its legend of shared entries
below the panels and its title wrapped to the canvas (`finish`), so no text is drawn over
another.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import ScaledTranslation

from replicate import plotting
from replicate.analysis import running_median
from replicate.experiments.subngrams.stages import OFFSETS, Stages, masses_of

LEVEL_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#a6761d")
"""Colour of the k-gram level b_k and of the plateaus assigned order k (Dark2: no blue,
which the loss curves use)."""
LEVEL_DASHES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 2)), (0, (6, 2)))
SEED_COLORS = ("tab:blue", "tab:red", "0.2", "tab:olive", "tab:cyan", "tab:pink", "tab:brown")
"""Colour of the i-th seed's run where several share a panel (none is a level's colour)."""
UNASSIGNED = "0.55"
"""Colour of a plateau no level band holds (order None)."""
SPAN_ALPHA = 0.16


def level_color(order: int | None) -> str:
    """The colour of level b_k and of the plateaus assigned to k (`UNASSIGNED` for None)."""
    return UNASSIGNED if order is None else LEVEL_COLORS[(order - 1) % len(LEVEL_COLORS)]


def seed_color(index: int) -> str:
    """The colour of the ``index``-th seed's run (`SEED_COLORS`)."""
    return SEED_COLORS[index % len(SEED_COLORS)]


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural but for one: 1 seed, 3 seeds."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, list[Axes]]:
    """`plotting.figure`'s grid in the project style, laid out by constrained layout."""
    fig, axes = plotting.figure(nrows, ncols, width=width, height=height)
    fig.set_layout_engine("constrained")
    return fig, axes


def panel_grid(
    nrows: int, ncols: int, width: float, height: float, width_ratios: Sequence[float]
) -> tuple[Figure, GridSpec]:
    """An empty ``width`` x ``height`` inch figure in the project style, laid out by
    constrained layout, and its grid of ``nrows`` x ``ncols`` cells for panels that span
    several (a loss panel beside a block of attention maps)."""
    import matplotlib.pyplot as plt

    plotting.style()
    fig = plt.figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_gridspec(nrows, ncols, width_ratios=list(width_ratios))


def first_seed_with(
    seeds: Sequence[int], metrics: Mapping[str, float], key: Callable[[int], str]
) -> int:
    """The first seed whose per-seed indicator ``metrics[key(seed)]`` is 1 (the seed whose
    maps a figure shows: one whose heads do what the figure is about), else the first seed."""
    return next((seed for seed in seeds if metrics.get(key(seed)) == 1.0), seeds[0])


def attention_maps(
    rows: Sequence[Sequence[Axes]], maps: Sequence[torch.Tensor], titles: Sequence[str]
) -> AxesImage:
    """First-layer attention softmax(A1^(h)), one head per row of axes ``rows`` and one map
    set (H, T, T) of ``maps`` per column, on one colour scale from 0 to 1; each titled with
    its column's title and the head's offset masses m_h(1), m_h(2) (`stages.masses_of`, the
    masses the claims read). Returns the last image, for a colour bar."""
    one, two = OFFSETS.index(1), OFFSETS.index(2)
    image = None
    for col, (heads, title) in enumerate(zip(maps, titles, strict=True)):
        masses = masses_of(heads)  # (H, len(OFFSETS))
        for h, row in enumerate(rows):
            ax = row[col]
            image = ax.imshow(heads[h].numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.grid(False)
            ax.set(
                title=f"{title}\nhead {h + 1}: m(1) = {masses[h, one]:.2f}, "
                f"m(2) = {masses[h, two]:.2f}",
                xlabel="key position j",
                ylabel="query position l",
            )
            ax.title.set_fontsize(9)
    if image is None:
        raise ValueError("no map to draw")
    return image


def kgram_lines(ax: Axes, levels: Sequence[float]) -> list[Line2D]:
    """The add-alpha k-gram losses b_1 > ... > b_n as horizontal lines, one colour and dash
    per k (paper C, Fig. 1: the dashed lines); returns them for a legend."""
    return [
        ax.axhline(
            float(b),
            color=level_color(k),
            linestyle=LEVEL_DASHES[(k - 1) % len(LEVEL_DASHES)],
            linewidth=1.2,
            label=f"$b_{k}$: {k}-gram (add-α) = {b:.4f}",
        )
        for k, b in enumerate(levels, start=1)
    ]


@dataclass(frozen=True)
class PlateauMark:
    """A plateau to draw: its span, level, assigned order and every order a level within
    the test loss's noise gets (`Stages.calls`; one when the call is firm)."""

    t0: float
    t1: float
    level: float
    order: int | None
    calls: tuple[int | None, ...]

    @property
    def label(self) -> str:
        """The order as drawn: k=2; k=2/3 when noise decides between orders; k=? in no band."""
        named = sorted({"?" if o is None else str(o) for o in self.calls or (self.order,)})
        return "k=" + "/".join(named)


def within_noise_note(marks: Iterable[PlateauMark]) -> str:
    """What a label "k=a/b" means, for a title, when some plateau has one; else ""."""
    if any(len(set(m.calls)) > 1 for m in marks):
        return "; k=a/b: the plateau's level is order a or b within the test loss's noise"
    return ""


def plateau_marks(stage: Stages) -> list[PlateauMark]:
    """The plateaus of one run's stage analysis, in time."""
    return [
        PlateauMark(p.t0, p.t1, p.level, order, tuple(sorted(calls, key=lambda o: o or 0)))
        for p, order, calls in zip(stage.plateaus, stage.orders, stage.calls, strict=True)
    ]


def marks_from_frame(frame: pd.DataFrame) -> list[PlateauMark]:
    """`PlateauMark`s from rows of Fig. 1's plateaus.csv (t0, t1, level, order,
    orders_within_noise: space-separated, "none" for no band)."""

    def order(value: object) -> int | None:
        return None if value in ("none", None) or pd.isna(value) else int(float(value))

    return [
        PlateauMark(
            float(row.t0),
            float(row.t1),
            float(row.level),
            order(row.order),
            tuple(order(o) for o in str(row.orders_within_noise).split()),
        )
        for row in frame.itertuples()
    ]


def shade_plateaus(ax: Axes, marks: Sequence[PlateauMark], label: bool) -> None:
    """Each plateau as a band over its steps in its order's colour; with ``label``, its
    order written above its level at its middle."""
    for mark in marks:
        color = level_color(mark.order)
        ax.axvspan(mark.t0, mark.t1, color=color, alpha=SPAN_ALPHA, linewidth=0)
        if label:
            ax.annotate(
                mark.label,
                xy=(0.5 * (mark.t0 + mark.t1), mark.level),
                xytext=(0, 5),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color=color if mark.order is not None else "0.3",
                fontweight="bold",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 0.6},
            )


def plateau_key(marks: Iterable[PlateauMark]) -> list[Artist]:
    """Legend entries for `shade_plateaus`' bands: one per order among ``marks``."""
    orders = sorted({m.order for m in marks}, key=lambda o: (o is None, o or 0))
    return [
        Patch(
            color=level_color(o),
            alpha=SPAN_ALPHA * 2.5,
            label="plateau in no level band" if o is None else f"plateau at order k={o}",
        )
        for o in orders
    ]


def legend_below(ax: Axes, ncol: int = 1) -> None:
    """``ax``'s legend centred under its tick labels and x label (a fixed distance in points
    below the axes, which constrained layout keeps as it resizes the axes)."""
    renderer = ax.figure.canvas.get_renderer()
    drop = ax.get_window_extent(renderer).y0 - ax.get_tightbbox(renderer).y0
    shift = ScaledTranslation(0, -(drop * 72 / ax.figure.dpi + 3) / 72, ax.figure.dpi_scale_trans)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=ax.transAxes + shift,
        ncol=ncol,
        fontsize=7,
    )


def figure_legend(fig: Figure, handles: Sequence[Artist]) -> None:
    """One legend of ``handles`` below the panels, in as many columns as fit the canvas."""
    handles = list(handles)
    renderer = fig.canvas.get_renderer()
    for ncol in range(min(len(handles), 4), 0, -1):
        legend = fig.legend(
            handles=handles, loc="outside lower center", ncol=ncol, fontsize=8, frameon=False
        )
        if legend.get_window_extent(renderer).width <= 0.96 * fig.bbox.width or ncol == 1:
            return
        legend.remove()


def fit_title(fig: Figure, title: str) -> None:
    """``title`` as the figure's suptitle, wrapped at spaces until it fits the canvas."""
    text = fig.suptitle(title)
    renderer = fig.canvas.get_renderer()
    available = 0.96 * fig.bbox.width
    width = len(title)
    while text.get_window_extent(renderer).width > available and width > 10:
        width = int(width * 0.9)
        text.set_text("\n".join(textwrap.wrap(title, width, break_on_hyphens=False)))


def finish(fig: Figure, title: str, handles: Sequence[Artist] = ()) -> Figure:
    """The shared legend (if any) and the wrapped title; returns ``fig``."""
    if handles:
        figure_legend(fig, handles)
    fit_title(fig, title)
    return fig


def unique_handles(axes: Sequence[Axes]) -> list[Artist]:
    """The labelled artists of ``axes``, the first of each label."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    return list(seen.values())


def loss_and_gradient(
    curves: pd.DataFrame,
    levels: Sequence[float],
    plateaus: Mapping[int, Sequence[PlateauMark]],
    title: str,
) -> Figure:
    """Per seed (a column), the test loss with the k-gram levels above and the gradient
    norms below on the same steps, the plateaus of the stage analysis shaded in both and
    labelled with their orders (paper C, Fig. 1; App. I.3, Figs. 6-7).

    ``curves``: seed, step, test_loss, grad_norm (minibatch, averaged between evaluations)
    and optionally population_grad_norm; the minibatch norm is drawn with its running
    median, the curve whose peak Figs. 6-7's claims place at the transition."""
    seeds = sorted(curves.seed.unique())
    fig, axes = figure(2, len(seeds), width=max(5.0, 6.5 / len(seeds)), height=2.7)
    for col, seed in enumerate(seeds):
        part = curves[curves.seed == seed].sort_values("step")
        loss_ax, grad_ax = axes[col], axes[len(seeds) + col]
        grad_ax.sharex(loss_ax)
        marks = plateaus.get(seed, [])
        shade_plateaus(loss_ax, marks, label=True)
        shade_plateaus(grad_ax, marks, label=False)
        loss_ax.plot(part.step, part.test_loss, color="tab:blue", label="test loss")
        kgram_lines(loss_ax, levels)
        found = "" if marks else ": no plateau found"
        loss_ax.set(ylabel="test loss (nats)", title=f"seed {seed}{found}")
        loss_ax.tick_params(labelbottom=False)
        smooth = running_median(part.grad_norm.to_numpy())
        grad_ax.plot(
            part.step, part.grad_norm, color="tab:red", alpha=0.35, linewidth=0.8,
            label="minibatch gradient norm",
        )  # fmt: skip
        grad_ax.plot(
            part.step, smooth, color="tab:red", linewidth=1.4,
            label="minibatch, running median (9 evaluations)",
        )  # fmt: skip
        peak = int(np.argmax(smooth))
        grad_ax.plot(
            part.step.iloc[peak], smooth[peak], marker="v", color="black", linestyle="none",
            markersize=6, label="peak of the running median",
        )  # fmt: skip
        if "population_grad_norm" in part:
            grad_ax.plot(
                part.step, part.population_grad_norm, color="tab:purple", linewidth=1.0,
                label="population gradient norm",
            )  # fmt: skip
        grad_ax.set(xlabel="training iteration", ylabel="gradient norm")
    every = [m for ms in plateaus.values() for m in ms]
    handles = unique_handles(axes) + plateau_key(every)
    return finish(fig, title + within_noise_note(every), handles)
