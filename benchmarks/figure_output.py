"""Writing the figures as the experiments do against the way they were written before, side
by side (printed, never asserted).

Before, every figure was drawn five times (the check, then `Figure.savefig` for the PNG and
for the PDF, each of which lays a figure with a layout engine out by a draw of its own
before the draw it renders). As written (`RunContext.save_figure`), one Agg draw serves the
layout check (`replicate.plotting.layout_problems`) and the PNG (`replicate.io.save_drawn_png`:
the pixels of that draw), and the PDF is one vector draw at the positions the check read
(the layout engine removed). This script runs the experiments at ci scale with every
training cut to ``--steps`` steps (`replicate.training.Calibration`: the figures have the ci
layout, their curves are short), keeps each figure, and times, in alternating rounds (the
fastest kept), the check with both files written both ways; and counts the figures whose PNG
bytes are the same both ways (a figure whose constrained layout still moves from one draw to
the next is not: its PNG is now the draw that was checked).

    python benchmarks/figure_output.py [--steps 8] [--rounds 2] [EXPERIMENT ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
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
Kept = list[tuple[RunContext, Figure]]
"""An experiment's figures, each with the run context that saved it."""


@contextmanager
def layout_kept(fig: Figure) -> Iterator[None]:
    """``fig``'s layout engine put back afterwards: `RunContext.save_figure` removes it, and
    every way must start from the figure as the experiment made it."""
    engine = fig.get_layout_engine()
    try:
        yield
    finally:
        if engine is not None:
            fig.set_layout_engine(engine)


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
        with layout_kept(fig):
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


def before(ctx: RunContext, fig: Figure, folder: Path) -> None:
    """The way figures were written before (``ctx`` unused: the same signature): the check,
    then the PNG and the PDF each by `Figure.savefig`, which lays the figure out anew."""
    layout_problems(fig)
    io.save_figure(fig, folder / "before.png")
    io.save_figure(fig, folder / "before.pdf")


def as_written(ctx: RunContext, fig: Figure, folder: Path) -> None:
    """`RunContext.save_figure` itself, into ``folder``."""
    with layout_kept(fig):
        replace(ctx, out_dir=folder, written=[], layout_problems=[]).save_figure(fig, "as_written")


def report(kept: dict[str, Kept], steps: int, rounds: int) -> None:
    """Time both ways on the ``kept`` figures, alternately, and print them."""
    ways: dict[str, Callable[[RunContext, Figure, Path], None]] = {
        "before": before,
        "as written": as_written,
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
                before(ctx, fig, folder)
                as_written(ctx, fig, folder)
                png = (folder / "as_written.png").read_bytes()
                same += png == (folder / "before.png").read_bytes()
    total = {way: sum(best[name, way] for name in kept) for way in ways}
    count = sum(len(figs) for figs in kept.values())
    print(f"{count} figures of {len(kept)} experiments (ci layout, trainings cut to "
          f"{steps} steps); seconds to check and write each experiment's figures as "
          f"before and as written, fastest of {rounds} alternating rounds")  # fmt: skip
    for name in sorted(kept, key=lambda n: -best[n, "before"]):
        b, n = best[name, "before"], best[name, "as written"]
        print(f"  {name:<28} before {b:6.2f} s   as-written {n:6.2f} s   {b / n:5.2f}x")
    b, n = total["before"], total["as written"]
    print(f"  {'all':<28} before {b:6.2f} s   as-written {n:6.2f} s   {b / n:5.2f}x")
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
