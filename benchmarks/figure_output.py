"""Writing the figures, before and after the PNG became the layout check's own draw, side by
side (printed, never asserted).

Every experiment's figure is drawn three ways or more: once on the Agg canvas for the layout
check (`replicate.plotting.layout_problems`), then by `Figure.savefig` for the PNG and for
the PDF, each of which lays a figure with a layout engine out by a draw of its own before
the draw it renders. `RunContext.save_figure` now writes the PNG from the check's draw
(`replicate.io.save_drawn_png`). This script runs the experiments at ci scale with every
training cut to ``--steps`` steps (`replicate.training.Calibration`: the figures have the
ci layout, their curves are short), keeps each figure, and times, in alternating rounds
(the fastest kept), the check with both files written as before (a PNG of its own draw) and
as now; and counts the figures whose PNG bytes are the same both ways (a figure whose
constrained layout still moves from one draw to the next is not).

    python benchmarks/figure_output.py [--steps 8] [--rounds 2] [EXPERIMENT ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from replicate import io
from replicate.config import load_params
from replicate.experiments.base import RunContext
from replicate.experiments.runner import run_in_context
from replicate.plotting import layout_problems
from replicate.training import Calibration

REPO = Path(__file__).resolve().parents[1]


def figures(experiments: list[str], steps: int) -> dict[str, list[Figure]]:
    """Each experiment's figures as it saves them (kept open), from runs at ci scale with
    every training cut to ``steps`` steps, in params.yaml's order (an upstream first)."""
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
    kept: dict[str, list[Figure]] = {}
    keep = RunContext.save_figure

    def keeping(ctx: RunContext, fig: Figure, stem: str = "figure") -> None:
        keep(ctx, fig, stem)
        kept.setdefault(ctx.name, []).append(fig)

    RunContext.save_figure = keeping  # type: ignore[method-assign]
    close, plt.close = plt.close, lambda *args: None
    try:
        with tempfile.TemporaryDirectory() as root:
            for name in (n for n in params.experiments if n in needed):
                run_in_context(name, params, Path(root), False, Calibration(steps))
    finally:
        RunContext.save_figure, plt.close = keep, close  # type: ignore[method-assign]
    return {name: kept.get(name, []) for name in chosen}


def before(fig: Figure, folder: Path) -> None:
    """The check, then the PNG and the PDF each drawn by savefig."""
    layout_problems(fig)
    io.save_figure(fig, folder / "before.png")
    io.save_figure(fig, folder / "before.pdf")


def now(fig: Figure, folder: Path) -> None:
    """The check, the PNG from its draw, the PDF drawn by savefig (`RunContext.save_figure`)."""
    layout_problems(fig)
    io.save_drawn_png(fig, folder / "now.png")
    io.save_figure(fig, folder / "now.pdf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*", help="default: every experiment")
    parser.add_argument("--steps", type=int, default=8, help="training steps per training")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; fastest kept")
    args = parser.parse_args()
    kept = figures(args.experiments, args.steps)
    ways: dict[str, Callable[[Figure, Path], None]] = {"before": before, "now": now}
    best = {(name, way): float("inf") for name in kept for way in ways}
    same = 0
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for _ in range(args.rounds):
            for name, figs in kept.items():
                for way, write in ways.items():
                    start = time.perf_counter()
                    for fig in figs:
                        write(fig, folder)
                    best[name, way] = min(best[name, way], time.perf_counter() - start)
        for figs in kept.values():
            for fig in figs:
                before(fig, folder)
                now(fig, folder)
                same += (folder / "before.png").read_bytes() == (folder / "now.png").read_bytes()
    total = {way: sum(best[name, way] for name in kept) for way in ways}
    count = sum(len(figs) for figs in kept.values())
    print(f"{count} figures of {len(kept)} experiments (ci layout, trainings cut to "
          f"{args.steps} steps); seconds to check and write each experiment's figures, fastest "
          f"of {args.rounds} alternating rounds")  # fmt: skip
    for name in sorted(kept, key=lambda n: -best[n, "before"]):
        b, n = best[name, "before"], best[name, "now"]
        print(f"  {name:<28} before {b:6.2f} s   now {n:6.2f} s   {b / n:5.2f}x")
    print(f"  {'all':<28} before {total['before']:6.2f} s   now {total['now']:6.2f} s   "
          f"{total['before'] / total['now']:5.2f}x")  # fmt: skip
    print(f"PNG bytes the same both ways: {same} of {count} figures")


if __name__ == "__main__":
    main()
