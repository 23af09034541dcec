"""Writing the figures as the experiments do, against a candidate that draws each figure once
for the layout check and the PNG and once for the PDF, side by side (printed, never
asserted).

Every experiment's figure is drawn five times (`RunContext.save_figure`): once on the Agg
canvas for the layout check (`replicate.plotting.layout_problems`), then by `Figure.savefig`
for the PNG and for the PDF, each of which lays a figure with a layout engine (even the
placeholder `tight_layout` leaves) out by a draw of its own before the draw it renders. The
candidate writes the PNG from the pixels of the check's own draw (`drawn_png`:
`FigureCanvasAgg.print_png`'s write without its draw), so the PNG is the very image whose
layout was checked, and the PDF with the layout engine removed: one vector draw at the
positions the check read. This script runs the experiments at ci scale with every training
cut to ``--steps`` steps (`replicate.training.Calibration`: the figures have the ci layout,
their curves are short), keeps each figure, and times, in alternating rounds (the fastest
kept), the check with both files written as the experiments write them and by the
candidate; and counts the figures whose PNG bytes are the same both ways (a figure whose
constrained layout still moves from one draw to the next is not). Taking it changes every
experiment's code: docs/performance.md says what that needs.

    python benchmarks/figure_output.py [--steps 8] [--rounds 2] [EXPERIMENT ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave

from replicate import io
from replicate.config import load_params
from replicate.experiments.base import RunContext
from replicate.experiments.runner import run_in_context
from replicate.plotting import layout_problems
from replicate.training import Calibration

REPO = Path(__file__).resolve().parents[1]
Kept = list[tuple[RunContext, Figure]]
"""An experiment's figures, each with the run context that saved it."""


def figures(experiments: list[str], steps: int) -> dict[str, Kept]:
    """Each experiment's figures as it saves them, with their run contexts, from runs at ci
    scale with every training cut to ``steps`` steps, in params.yaml's order (an upstream
    first). The figures stay open only while `plt.close` is held off (`main`)."""
    params = load_params(REPO / "params.yaml", scale="ci")
    chosen = experiments or list(params.experiments)
    unknown = sorted(set(chosen) - set(params.experiments))
    if unknown:
        raise SystemExit(f"unknown experiment(s): {', '.join(unknown)}")
    needed: set[str] = set()
    for name in chosen:  # its upstreams run too, for it to read them
        upstream: str | None = name
        while upstream is not None:
            needed.add(upstream)
            upstream = params.upstream_of(upstream)
    kept: dict[str, Kept] = {}
    keep = RunContext.save_figure

    def keeping(ctx: RunContext, fig: Figure, stem: str = "figure") -> None:
        keep(ctx, fig, stem)
        kept.setdefault(ctx.name, []).append((ctx, fig))

    RunContext.save_figure = keeping  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as root:
            for name in (n for n in params.experiments if n in needed):
                run_in_context(name, params, Path(root), False, Calibration(steps))
    finally:
        RunContext.save_figure = keep  # type: ignore[method-assign]
    return {name: kept.get(name, []) for name in chosen}


def drawn_png(fig: Figure, path: Path) -> None:
    """The candidate: the pixels of ``fig``'s last draw on its Agg canvas written as a PNG,
    without drawing it again (what `FigureCanvasAgg.print_png` writes after its own draw;
    no Software key, as `replicate.io.save_figure`)."""
    canvas = fig.canvas
    if not isinstance(canvas, FigureCanvasAgg) or getattr(canvas, "renderer", None) is None:
        raise ValueError(f"{path}: the figure has not been drawn on an Agg canvas")
    imsave(path, canvas.buffer_rgba(), format="png", origin="upper", dpi=fig.dpi,
           metadata={"Software": None})  # fmt: skip


def as_written(ctx: RunContext, fig: Figure, folder: Path) -> None:
    """`RunContext.save_figure` itself, into ``folder``: the check, then the PNG and the PDF
    each drawn by savefig."""
    replace(ctx, out_dir=folder, written=[], layout_problems=[]).save_figure(fig, "as_written")


def candidate(ctx: RunContext, fig: Figure, folder: Path) -> None:
    """The check, the PNG from its draw (`drawn_png`), then the PDF by savefig with the
    figure's layout engine removed, so that it is one draw at the positions the check read
    (``ctx`` unused: the same signature). The engine is put back for the next round."""
    layout_problems(fig)
    drawn_png(fig, folder / "candidate.png")
    engine = fig.get_layout_engine()
    # None, not "none": the placeholder "none" leaves would still ask savefig for a pass
    with mpl.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)
    try:
        io.save_figure(fig, folder / "candidate.pdf")
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)


def report(kept: dict[str, Kept], steps: int, rounds: int) -> None:
    """Time both ways on the ``kept`` figures, alternately, and print them."""
    ways: dict[str, Callable[[RunContext, Figure, Path], None]] = {
        "as written": as_written,
        "candidate": candidate,
    }
    best = {(name, way): float("inf") for name in kept for way in ways}
    same = 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for _ in range(rounds):
            for name, figs in kept.items():
                for way, write in ways.items():
                    start = time.perf_counter()
                    for ctx, fig in figs:
                        write(ctx, fig, folder)
                    best[name, way] = min(best[name, way], time.perf_counter() - start)
        for figs in kept.values():
            for ctx, fig in figs:
                as_written(ctx, fig, folder)
                candidate(ctx, fig, folder)
                png = (folder / "as_written.png").read_bytes()
                same += png == (folder / "candidate.png").read_bytes()
    total = {way: sum(best[name, way] for name in kept) for way in ways}
    count = sum(len(figs) for figs in kept.values())
    print(f"{count} figures of {len(kept)} experiments (ci layout, trainings cut to "
          f"{steps} steps); seconds to check and write each experiment's figures as "
          f"written and by the candidate, fastest "
          f"of {rounds} alternating rounds")  # fmt: skip
    for name in sorted(kept, key=lambda n: -best[n, "as written"]):
        b, n = best[name, "as written"], best[name, "candidate"]
        print(f"  {name:<28} as-written {b:6.2f} s   candidate {n:6.2f} s   {b / n:5.2f}x")
    b, n = total["as written"], total["candidate"]
    print(f"  {'all':<28} as-written {b:6.2f} s   candidate {n:6.2f} s   {b / n:5.2f}x")
    print(f"PNG bytes the same both ways: {same} of {count} figures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", help="default: every experiment")
    parser.add_argument("--steps", type=int, default=8, help="training steps per training")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; fastest kept")
    args = parser.parse_args()
    close, plt.close = plt.close, lambda *_: None  # each figure is written again below
    try:
        kept = figures(args.experiments, args.steps)
        report(kept, args.steps, args.rounds)
    finally:
        plt.close = close


if __name__ == "__main__":
    main()
