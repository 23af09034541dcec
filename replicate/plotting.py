"""One seaborn style for every figure, the reference-line and curve helpers, and the layout
check every saved figure passes through (`layout_problems`).

seaborn (with scipy) and pyplot are imported by the helpers that draw, so an experiment
that imports this module but draws nothing does not load them (start-up time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib
import numpy as np

matplotlib.use("Agg")

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Text

REFERENCE_STYLES = {
    "unigram": {"color": "0.35", "linestyle": "--"},
    "bigram": {"color": "black", "linestyle": ":"},
    "target": {"color": "tab:green", "linestyle": "-."},
}

QUANTITY_COLORS = {
    "W1": "tab:blue",
    "W2": "tab:orange",
    "WV": "tab:green",
    "WQ": "tab:red",
    "WK": "tab:purple",
}
"""One colour per named quantity, the same in every panel that draws it (paper B's weight
matrices W_1, W_2, W_V, W_Q, W_K: App. A.3.1's rank and alignment curves)."""


def style() -> None:
    """The project style (seaborn's paper context on a white grid) for the figures to come."""
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", font_scale=1.05)


def figure(nrows: int, ncols: int, width: float = 5.0, height: float = 3.6) -> tuple[Figure, list]:
    """A grid of axes in the project style."""
    import matplotlib.pyplot as plt

    style()
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
    """Draw `switching_boundary` on a heat-map as thick red lines (a staircase, doubled
    along a p+q=1 anti-diagonal; on a 2 x 2 grid with p+q=1 corners, a cross)."""
    for start, end in switching_boundary(ps, qs):
        ax.plot(
            [start[0], end[0]],
            [start[1], end[1]],
            color="tab:red",
            linewidth=2.5,
            solid_capstyle="projecting",
        )


# ----------------------------------------------------------------------------- layout check
LAYOUT_TOLERANCE_PX = 1.0
"""Texts whose boxes intersect by at most this depth (pixels) only touch; a text may run past
the canvas edge by as much."""


@dataclass(frozen=True)
class _Placed:
    """A drawn text: the artist, what it is (``role``) and its box's 4 corners (pixels)."""

    artist: Text
    role: str
    corners: np.ndarray

    @property
    def extent(self) -> tuple[float, float, float, float]:
        (x0, y0), (x1, y1) = self.corners.min(axis=0), self.corners.max(axis=0)
        return float(x0), float(y0), float(x1), float(y1)

    def describe(self) -> str:
        return f'{self.role} "{_shortened(" / ".join(self.artist.get_text().splitlines()))}"'


def _shortened(words: str, limit: int = 48) -> str:
    return words if len(words) <= limit else f"{words[: limit - 1]}…"


def _panel(fig: Figure, ax: Axes | None) -> str:
    """An axes named by its title, else by its place in ``fig.axes``; None: the figure."""
    if ax is None or ax not in fig.axes:
        return "figure"
    title = ax.get_title()
    return f'panel "{_shortened(title, 32)}"' if title else f"panel {fig.axes.index(ax)}"


def _roles(fig: Figure) -> dict[int, str]:
    """id(text) -> what the text is ("x tick label of panel ...", "legend text of ...")."""
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    roles: dict[int, str] = {}
    for ax in fig.axes:
        panel = _panel(fig, ax)
        roles |= {id(text): f"text of {panel}" for text in ax.findobj(Text)}
        for name in ("x", "y", "z"):  # z: a 3-D axes
            axis = getattr(ax, f"{name}axis", None)
            if axis is None:
                continue
            for tick in [*axis.majorTicks, *axis.minorTicks]:
                roles[id(tick.label1)] = roles[id(tick.label2)] = f"{name} tick label of {panel}"
            roles[id(axis.label)] = f"{name} label of {panel}"
            roles[id(axis.get_offset_text())] = f"{name} offset text of {panel}"
        roles[id(ax.title)] = "title"
    for legend in fig.findobj(Legend):
        panel = _panel(fig, legend.axes)
        roles |= {id(text): f"legend text of {panel}" for text in legend.findobj(Text)}
    for text in fig.texts:
        suptitle = text.get_text() == fig.get_suptitle()
        roles.setdefault(id(text), "suptitle" if suptitle else "figure text")
    return roles


def _box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])


def _outline(text: Text, renderer: RendererBase) -> np.ndarray | None:
    """The 4 corners of ``text``'s box as drawn (turned with a rotated text), cut to its
    clip box (then unrotated); None when clipped away."""
    from matplotlib.transforms import Bbox

    extent = text.get_window_extent(renderer)
    clip = text.get_clip_box() if text.get_clip_on() else None
    if clip is not None:
        cut = Bbox.intersection(extent, clip)
        if cut is None or cut.width <= 0 or cut.height <= 0:
            return None
        if not np.allclose(cut.bounds, extent.bounds):
            return _box(*cut.extents)
    rotation = text.get_rotation()
    if min(rotation % 90.0, 90.0 - rotation % 90.0) < 1e-6:
        return _box(*extent.extents)
    # the drawn extent is the axis-aligned hull of the turned box, so both share a centre;
    # the turned box's sides are those of the unrotated text
    text.set_rotation(0.0)
    flat = text.get_window_extent(renderer)
    text.set_rotation(rotation)
    theta = np.deg2rad(rotation)
    along = 0.5 * flat.width * np.array([np.cos(theta), np.sin(theta)])
    across = 0.5 * flat.height * np.array([-np.sin(theta), np.cos(theta)])
    centre = np.array([0.5 * (extent.x0 + extent.x1), 0.5 * (extent.y0 + extent.y1)])
    return np.array([-along - across, along - across, along + across, -along + across]) + centre


def _off_canvas(corners: np.ndarray, fig: Figure, tolerance: float) -> bool:
    (x0, y0), (x1, y1) = corners.min(axis=0), corners.max(axis=0)
    return min(x0, y0, fig.bbox.width - x1, fig.bbox.height - y1) < -tolerance


def _intersect(a: np.ndarray, b: np.ndarray, tolerance: float) -> bool:
    """Whether two convex outlines overlap deeper than ``tolerance`` along every axis that
    could separate them (the separating-axis theorem)."""
    for poly in (a, b):
        edges = np.roll(poly, -1, axis=0) - poly
        for normal in np.stack([-edges[:, 1], edges[:, 0]], axis=1):
            length = float(np.hypot(*normal))
            if length == 0.0:
                continue
            pa, pb = a @ normal / length, b @ normal / length
            if min(pa.max(), pb.max()) - max(pa.min(), pb.min()) <= tolerance:
                return False
    return True


def _drawn_texts(canvas: FigureCanvasAgg) -> list[Text]:
    """Draw ``canvas``'s figure and return the texts the draw rendered, in drawing order.

    `Text.draw` (which `Annotation.draw` and the 3-D texts call once they are to be drawn)
    is wrapped for the draw; a text counts when that call got past `Text.draw`'s own early
    returns: visible, not empty, at a finite position."""
    from matplotlib.text import Text

    drawn: dict[int, Text] = {}
    original = Text.draw

    def recording(text: Text, renderer: RendererBase) -> None:
        original(text, renderer)
        position = text.get_transform().transform(text.get_unitless_position())
        if text.get_visible() and text.get_text() and np.isfinite(position).all():
            drawn[id(text)] = text

    Text.draw = recording  # type: ignore[method-assign]
    try:
        canvas.draw()
    finally:
        Text.draw = original  # type: ignore[method-assign]
    return list(drawn.values())


def layout_problems(fig: Figure, tolerance: float = LAYOUT_TOLERANCE_PX) -> list[str]:
    """Draw ``fig`` and list its text collisions, one sentence each:

    * two drawn texts (titles, suptitle, axis and tick labels, legend texts, annotations,
      heat-map cells) whose boxes overlap; tick labels of one axis against each other too;
    * a text that runs off the canvas;
    * a legend whose frame covers a text that is not its own (a neighbour's labels, an
      annotation under it); a legend over its axes' data is not looked for.

    Only what the draw renders counts (`_drawn_texts`): texts that are invisible, empty,
    outside their axis' view or clipped away are ignored. A rotated text is compared by its
    turned box, not by that box's axis-aligned hull.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.legend import Legend
    from matplotlib.text import Text

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    drawn = _drawn_texts(canvas)
    renderer = canvas.get_renderer()
    roles = _roles(fig)
    placed = [
        _Placed(text, roles.get(id(text), "text"), corners)
        for text in drawn
        if text.get_text().strip() and (corners := _outline(text, renderer)) is not None
    ]
    drawn_ids = {id(text) for text in drawn}
    owner = {
        id(text): legend
        for legend in fig.findobj(Legend)
        for text in legend.findobj(Text)
        if id(text) in drawn_ids
    }
    drawn_legends = list({id(legend): legend for legend in owner.values()}.values())
    frames = {
        id(legend): _box(*legend.get_window_extent(renderer).extents) for legend in drawn_legends
    }
    problems = [
        f"{item.describe()} runs off the canvas"
        for item in placed
        if id(item.artist) not in owner and _off_canvas(item.corners, fig, tolerance)
    ]
    problems += [
        f"the legend of {_panel(fig, legend.axes)} runs off the canvas"
        for legend in drawn_legends
        if _off_canvas(frames[id(legend)], fig, tolerance)
    ]
    extents = np.array([item.extent for item in placed]).reshape(-1, 4)
    for i, a in enumerate(placed):
        rest = extents[i + 1 :]
        width = np.minimum(extents[i, 2], rest[:, 2]) - np.maximum(extents[i, 0], rest[:, 0])
        height = np.minimum(extents[i, 3], rest[:, 3]) - np.maximum(extents[i, 1], rest[:, 1])
        for j in np.nonzero((width > tolerance) & (height > tolerance))[0] + i + 1:
            b = placed[j]
            # a legend's text against another's: the frame check below reports it
            same_legend = owner.get(id(a.artist)) is owner.get(id(b.artist))
            if same_legend and _intersect(a.corners, b.corners, tolerance):
                problems.append(f"{a.describe()} overlaps {b.describe()}")
    for legend in drawn_legends:
        for item in placed:
            mine = owner.get(id(item.artist)) is legend
            if not mine and _intersect(frames[id(legend)], item.corners, tolerance):
                problems.append(
                    f"the legend of {_panel(fig, legend.axes)} covers {item.describe()}"
                )
    return problems
