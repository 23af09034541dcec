"""Per-step time of one representative training per paper, before and after, side by side
(at a baseline commit and in this tree). Printed, never asserted.

Each representative experiment runs at ci scale with every training cut to ``--steps``
steps (`python -m replicate calibrate`, the cost plan's own measurement: the median wall
time of one training step, evaluation excluded), in a scratch worktree of the baseline
commit and in this tree, alternately (``--rounds`` of each, the faster kept: a shared
machine drifts by more than these effects over the minutes one experiment takes); the
printed seconds are each training's full step count times that median, summed over the
experiment's trainings at each commit's own settings, and the ms per model step those
seconds over the members times steps: one member's step, the per-step time that compares
fairly when a commit joins trainings into one ensemble or trains longer. Lightning's
own profiler (``PL_TRAINER_PROFILER=simple``, read by every `Trainer`) splits this tree's
steps into where their time goes: drawing the batch, the forward pass with the loss, the
backward pass, the optimiser (with gradient clipping and the step's schedule), and the rest
(Lightning's loop and hooks).

    python benchmarks/step_profile.py [--baseline 7d94dbd] [--steps 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPRESENTATIVES = ("attn_markov_fig3", "local_global_fig3", "subngrams_fig3", "two_layer_maps")
# Lightning's SimpleProfiler actions (mean seconds per call) that make up one training step.
ACTIONS = {
    "step": "run_training_batch",
    "batch": "[_TrainingEpochLoop].train_dataloader_next",
    "forward": "[Strategy]SingleDeviceStrategy.training_step",
    "backward": "[Strategy]SingleDeviceStrategy.backward",
    "optimizer": "[LightningModule]EnsembleModule.optimizer_step",
}
PARTS = ("batch", "forward", "backward", "optimizer", "other")
ROW = re.compile(r"^\|\s+(\S.*?)\s+\|\s+([0-9.eE+-]+)\s+\|\s+(\d+)\s+\|\s+([0-9.eE+-]+)\s+\|")
# Lightning's profiler reports through its logger, which the trainings quiet: the child
# process lets that one logger speak, then runs `python -m replicate` as usual.
CHILD = (
    "import logging, runpy; "
    "logging.getLogger('lightning.pytorch.profilers').setLevel(logging.INFO); "
    "runpy.run_module('replicate', run_name='__main__', alter_sys=True)"
)


def calibrate(tree: Path, experiment: str, steps: int, profile: bool) -> tuple[dict, str]:
    """The calibration of ``experiment`` in ``tree`` and the process's output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if profile:
        env["PL_TRAINER_PROFILER"] = "simple"
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "cost.json"
        command = [sys.executable, "-c", CHILD, "--scale", "ci", "calibrate", experiment,
                   "--root", scratch, "--steps", str(steps), "--out", str(out)]  # fmt: skip
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"{experiment} in {tree}: calibration failed\n{done.stderr[-2000:]}")
        cost = json.loads(out.read_text())
    if cost["status"] != "ok":
        raise SystemExit(f"{experiment} in {tree}: {cost['status']}")
    return cost, done.stdout + done.stderr


def training(cost: dict) -> tuple[float, int]:
    """(seconds, model steps) of the experiment's trainings at full length: each training's
    steps times its median step time (evaluation excluded), summed over its trainings; and
    the members times steps summed likewise (the work, whatever the ensembles' sizes)."""
    seconds = sum(t["steps"] * t["step_seconds"] for t in cost["trainings"])
    return seconds, sum(t["members"] * t["steps"] for t in cost["trainings"])


def breakdown(report: str) -> dict[str, float]:
    """Milliseconds per training step of each part, over every training's report. Lightning
    fetches the batch before its batch span (``run_training_batch``); inside it, the
    optimizer's action holds the forward and backward passes (Lightning's closure), so they
    are subtracted from it, and 'other' is the span minus the optimizer's action (hooks,
    zero_grad, logging, the progress bar)."""
    totals = dict.fromkeys(ACTIONS, 0.0)
    steps = 0
    names = {action: part for part, action in ACTIONS.items()}
    for line in report.splitlines():
        match = ROW.match(line.strip())
        if match and match.group(1) in names:
            totals[names[match.group(1)]] += float(match.group(4))
            if match.group(1) == ACTIONS["step"]:
                steps += int(match.group(3))
    if not steps:
        raise SystemExit("no profiler report in the calibration's output")
    ms = {part: 1e3 * total / steps for part, total in totals.items()}
    return {
        "batch": ms["batch"],
        "forward": ms["forward"],
        "backward": ms["backward"],
        "optimizer": ms["optimizer"] - ms["forward"] - ms["backward"],
        "other": ms["step"] - ms["optimizer"],
    }


def baseline_tree(revision: str, folder: Path) -> Path:
    tree = folder / "baseline"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree),
                    revision], check=True)  # fmt: skip
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="7d94dbd", help="the commit to compare with")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each side")
    args = parser.parse_args()
    before, after, parts = {}, {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        tree = baseline_tree(args.baseline, Path(scratch))
        try:
            for experiment in REPRESENTATIVES:
                runs = {tree: [], REPO: []}
                for _ in range(args.rounds):
                    for side in runs:
                        runs[side].append(calibrate(side, experiment, args.steps, False)[0])
                before[experiment] = min(runs[tree], key=lambda cost: training(cost)[0])
                after[experiment] = min(runs[REPO], key=lambda cost: training(cost)[0])
                parts[experiment] = breakdown(calibrate(REPO, experiment, args.steps, True)[1])
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])
    print(f"ci scale, trainings cut to {args.steps} steps for the timing, one CPU thread; "
          "training s = steps x median step time, summed over trainings, at each commit's own "
          "settings; ms per model step = training s / (members x steps): the time of one "
          "member's step, whatever the run lengths and ensembles")  # fmt: skip
    print(f"{'experiment':<20} {'before s':>9} {'after s':>9} {'ms per model step':>19} "
          f"{'after/before':>13}   where a step goes now, ms: {' / '.join(PARTS)}")  # fmt: skip
    seconds, per_step = [0.0, 0.0], [0.0, 0.0]
    for e in REPRESENTATIVES:
        (b, work_b), (a, work_a), p = training(before[e]), training(after[e]), parts[e]
        ms_b, ms_a = 1e3 * b / work_b, 1e3 * a / work_a
        seconds = [seconds[0] + b, seconds[1] + a]
        per_step = [per_step[0] + ms_b, per_step[1] + ms_a]
        split = " / ".join(f"{p[k]:.1f}" for k in PARTS)
        print(f"{e:<20} {b:9.1f} {a:9.1f} {f'{ms_b:.2f} -> {ms_a:.2f}':>19} {ms_a / ms_b:13.2f}"
              f"   {split}")  # fmt: skip
    (b, a), (ms_b, ms_a) = seconds, per_step
    print(f"{'sum':<20} {b:9.1f} {a:9.1f} {f'{ms_b:.2f} -> {ms_a:.2f}':>19} {ms_a / ms_b:13.2f}"
          f"   (per model step {'down' if ms_a < ms_b else 'up'} {abs(1 - ms_a / ms_b):.0%}, "
          f"training time at each commit's settings {'down' if a < b else 'up'} "
          f"{abs(1 - a / b):.0%}; baseline {args.baseline})")  # fmt: skip


if __name__ == "__main__":
    main()
