"""Start-up, per-model-step cost and the suite's balance over cores, side by side.

Printed, never asserted. Three measurements:

1. Start-up of a rule that trains nothing (``python -m replicate run attn_markov_table2``,
   its upstream's outputs present), in CPU seconds of the process (user + sys, robust to a
   shared machine) and wall seconds: as it runs now (only its paper imported, Lightning
   and seaborn only where used) vs eager imports (every paper's package, Lightning and
   seaborn imported before the run).
2. Cost of one model-step vs ensemble size E at ci shapes (paper A Fig. 3: n_embd 4, one
   layer, B=16, N=256), from a `replicate.training.Calibration`'s step timer; on a GPU when
   one is present (the same ratios, measured there).
3. The given Snakemake targets at ci scale in a scratch copy of the repository with
   ``--cores`` cores: wall time vs the summed wall time of the jobs (Snakemake's benchmark
   files), i.e. how close the run comes to compute / cores.

    python benchmarks/startup_and_scaling.py [--repeats 3] [--sizes 1 2 4 8 16]
        [--suite attn_markov_table1 attn_markov_theorems ...] [--cores 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# The eager start-up, for comparison: params.yaml parsed by PyYAML's pure-Python loader and
# every experiment's settings validated (every paper imported), Lightning and seaborn at import.
EAGER = (
    "import lightning, seaborn, yaml\n"
    "from replicate.config import load_params\n"
    "load_params(yaml.safe_load(open('params.yaml')))\n"
    "from replicate.cli import main\n"
    "raise SystemExit(main())\n"
)


def _cpu_and_wall(command: list[str], cwd: Path) -> tuple[float, float]:
    """(user + sys CPU seconds of the child, wall seconds)."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=ENV, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return cpu, wall


def bench_startup(repeats: int) -> None:
    run = ["--scale", "ci", "run", "attn_markov_table2", "--no-progress"]
    fig3 = REPO / "results" / "ci" / "attn_markov" / "fig3" / "provenance.json"
    if not fig3.exists():
        print(f"start-up: skipped ({fig3} missing: run attn_markov_fig3 first)")
        return
    cases = {
        "now (lazy imports)": [sys.executable, "-m", "replicate", *run],
        "eager (all imports at start-up)": [sys.executable, "-c", EAGER, *run],
    }
    print("start-up of a rule that trains nothing (attn_markov_table2), median of", repeats)
    for label, command in cases.items():
        samples = [_cpu_and_wall(command, REPO) for _ in range(repeats)]
        cpu = statistics.median(s[0] for s in samples)
        wall = statistics.median(s[1] for s in samples)
        print(f"  {label:22s} {cpu:6.2f} CPU-s  {wall:6.2f} s wall")


def bench_scaling(sizes: list[int], steps: int) -> None:
    import torch

    from lightning_modules import ChainMember, GPTConfig, OptimConfig
    from replicate.markov import binary_kernel, binary_stationary
    from replicate.training import (
        Calibration,
        TrainingContext,
        TrainingPlan,
        configure_torch,
        gpt_ensemble,
        train_ensemble,
    )

    configure_torch(1)
    kernel, pi = binary_kernel(0.5, 0.8), binary_stationary(0.5, 0.8)
    cfg = GPTConfig(vocab_size=2, n_embd=4, n_layer=1, n_head=1, block_size=256)
    plan = TrainingPlan(steps, 16, 256, eval_every=steps, test_sequences=64, test_seed=0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"cost per model-step vs ensemble size (B=16, N=256, n_embd=4, {device}):")
    base = None
    for e in sizes:
        members = [ChainMember(kernel, pi, seed) for seed in range(e)]
        calibration = Calibration(steps)
        model = gpt_ensemble(cfg, range(e))
        context = TrainingContext(calibration=calibration)
        train_ensemble(model, members, plan, OptimConfig(), "b", context=context)
        costs = calibration.costs
        per_model = costs[0].step_seconds / e * 1e3
        base = base or per_model
        print(
            f"  E={e:3d}  {costs[0].step_seconds * 1e3:8.2f} ms/step"
            f"  {per_model:7.2f} ms/model-step"
            f"  ({base / per_model:4.2f}x the E={sizes[0]} rate)"
        )


def bench_suite(targets: list[str], cores: int) -> None:
    """Run ``targets`` in a scratch copy (results and logs its own) and compare wall time
    with the summed job times."""
    with tempfile.TemporaryDirectory(prefix="replicate-suite-") as scratch:
        work = Path(scratch)
        files = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for name in files:
            source = REPO / name
            if source.is_file() and not name.startswith(("results/", "logs/")):
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, work / name)
        snakemake = Path(sys.executable).with_name("snakemake")
        start = time.perf_counter()
        subprocess.run(
            [str(snakemake), "--cores", str(cores), *targets],
            cwd=work,
            env=ENV,
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        jobs = {}
        for tsv in sorted((work / "logs" / "benchmarks").glob("*.tsv")):
            jobs[tsv.stem] = float(tsv.read_text().splitlines()[-1].split("\t")[0])
    total = sum(jobs.values())
    print(f"ci suite {' '.join(targets)} on {cores} cores:")
    for name, seconds in sorted(jobs.items(), key=lambda kv: -kv[1]):
        print(f"  {name:36s} {seconds:8.1f} s")
    ideal = total / cores
    print(
        f"  wall {wall:.1f} s vs summed job time {total:.1f} s "
        f"(ideal {ideal:.1f} s on {cores} cores; wall / ideal = {wall / ideal:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--steps", type=int, default=12, help="timed steps per ensemble size")
    parser.add_argument("--suite", nargs="*", default=[], help="Snakemake targets (none: skip)")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    bench_startup(args.repeats)
    bench_scaling(args.sizes, args.steps)
    if args.suite:
        bench_suite(args.suite, args.cores)


if __name__ == "__main__":
    main()
