"""GPU readiness: per-model-step cost vs ensemble size, float32 vs bfloat16, an
ensemble trained in chunks of members vs in one piece, and (on a CPU) one ensemble on T
threads vs T processes training a T-th of its members each, on the device present.

Printed, never asserted. On a CPU it measures the CPU (bf16 autocast runs there, through
oneDNN, and is usually slower than float32); on a CUDA machine the same command measures
the GPU and adds the measured bytes per member that automatic chunking uses
(`replicate.training.chunking.cuda_member_bytes`) and the chunk size it would pick. Step times come
from a `replicate.training.Calibration`'s step timer (median step, warm-up step left out); a
chunked training's step time is the sum over its chunks, which train one after the other;
chunks in parallel processes take the slowest process's step time.

    python benchmarks/gpu_readiness.py [--sizes 1 4 16] [--steps 10] [--chunk 4]
        [--seq-len 256] [--n-embd 4] [--threads 1] [--processes 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

from lightning_modules import ChainMember, GPTConfig, NextTokenCE, OptimConfig
from replicate.markov import binary_kernel, binary_stationary
from replicate.params import Precision
from replicate.training import (
    Calibration,
    DeviceSettings,
    TrainingContext,
    TrainingPlan,
    configure_torch,
    gpt_ensemble,
    train_ensemble,
)
from replicate.training.context import AUTOCAST_DTYPES


def _precisions() -> list[Precision]:
    """float32 everywhere; bfloat16 where the device has it (any CPU; CUDA with bf16)."""
    if not torch.cuda.is_available():
        return ["32-true", "bf16-mixed"]
    found: list[Precision] = ["32-true", "16-mixed"]
    if torch.cuda.is_bf16_supported():
        found.insert(1, "bf16-mixed")
    return found


def step_seconds(
    cfg: GPTConfig,
    members: int,
    plan: TrainingPlan,
    steps: int,
    threads: int,
    precision: Precision,
    chunk: int | None,
) -> float:
    """Wall seconds of one training step of ``members`` members (summed over chunks)."""
    kernel, pi = binary_kernel(0.5, 0.8), binary_stationary(0.5, 0.8)
    configure_torch(threads)
    calibration = Calibration(steps)
    train_ensemble(
        gpt_ensemble(cfg, range(members)),
        [ChainMember(kernel, pi, seed) for seed in range(members)],
        plan,
        OptimConfig(),
        "bench",
        context=TrainingContext(DeviceSettings(precision, chunk), calibration=calibration),
    )
    return sum(c.step_seconds for c in calibration.costs)


def bench_precision(cfg: GPTConfig, plan: TrainingPlan, args: argparse.Namespace) -> None:
    precisions = _precisions()
    print(
        f"ms per model-step vs ensemble size E (B={plan.batch_size}, N={plan.seq_len}, "
        f"n_embd={cfg.n_embd}, {_device()}, {args.threads} thread(s)):"
    )
    print(
        "  " + "E".rjust(5) + "".join(p.rjust(14) for p in precisions) + "  speed-up over 32-true"
    )
    for e in args.sizes:
        ms = [
            step_seconds(cfg, e, plan, args.steps, args.threads, p, None) / e * 1e3
            for p in precisions
        ]
        ratios = "  ".join(
            f"{p}: {ms[0] / m:4.2f}x" for p, m in zip(precisions[1:], ms[1:], strict=True)
        )
        print(f"  {e:5d}" + "".join(f"{m:14.2f}" for m in ms) + f"  {ratios}")


def bench_chunks(cfg: GPTConfig, plan: TrainingPlan, args: argparse.Namespace) -> None:
    e = max(args.sizes)
    whole = step_seconds(cfg, e, plan, args.steps, args.threads, "32-true", None)
    chunked = step_seconds(cfg, e, plan, args.steps, args.threads, "32-true", args.chunk)
    print(
        f"E={e} in one piece vs in chunks of {args.chunk} (float32): "
        f"{whole / e * 1e3:.2f} vs {chunked / e * 1e3:.2f} ms per model-step "
        f"(chunked / unchunked = {chunked / whole:.2f})"
    )


def bench_processes(cfg: GPTConfig, plan: TrainingPlan, args: argparse.Namespace) -> None:
    """One ensemble of E members on T threads vs T concurrent processes of E/T members on
    one thread each (the ensemble split into per-core chunks)."""
    e, t = max(args.sizes), args.processes
    one_thread = step_seconds(cfg, e, plan, args.steps, 1, "32-true", None)
    threaded = step_seconds(cfg, e, plan, args.steps, t, "32-true", None)
    command = [
        sys.executable, __file__, "--worker", str(e // t), "--steps", str(args.steps),
        "--seq-len", str(args.seq_len), "--n-embd", str(args.n_embd),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, env=env) for _ in range(t)]
    split = max(json.loads(w.communicate()[0])["step_seconds"] for w in workers)
    print(
        f"E={e}: one process on 1 thread {one_thread * 1e3:.1f} ms per step, on {t} threads "
        f"{threaded * 1e3:.1f} ms, {t} processes of {e // t} members on 1 thread each "
        f"{split * 1e3:.1f} ms (speed-up over 1 thread: {t} threads {one_thread / threaded:.2f}x, "
        f"{t} processes {one_thread / split:.2f}x)"
    )


def bench_memory(cfg: GPTConfig, plan: TrainingPlan) -> None:
    """Measured CUDA bytes per member and the chunk size automatic chunking picks."""
    from lightning_modules import member_generator
    from lightning_modules.sources import sample_members
    from replicate.training.chunking import cuda_member_bytes, members_that_fit

    member = ChainMember(binary_kernel(0.5, 0.8), binary_stationary(0.5, 0.8), 0)
    batch = sample_members(
        [member], plan.batch_size, plan.seq_len + 1, [member_generator(0, "memory")]
    )
    free, total = torch.cuda.mem_get_info()
    for precision in _precisions():
        needed = cuda_member_bytes(
            gpt_ensemble(cfg, [0]), NextTokenCE(), batch, AUTOCAST_DTYPES[precision]
        )
        fit = members_that_fit(needed, free, DeviceSettings.memory_fraction)
        print(
            f"  {precision:10s} {needed / 2**20:9.2f} MiB per member; {free / 2**30:.1f} of "
            f"{total / 2**30:.1f} GiB free: automatic chunks of {fit} members"
        )


def _device() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--chunk", type=int, default=4, help="members per chunk (chunked run)")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--n-embd", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--processes", type=int, default=2, help="threads / processes of the split (CPU only)"
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cfg = GPTConfig(vocab_size=2, n_embd=args.n_embd, n_layer=1, n_head=1, block_size=args.seq_len)
    plan = TrainingPlan(
        args.steps, 16, args.seq_len, eval_every=args.steps, test_sequences=64, test_seed=0
    )
    if args.worker is not None:  # one process of `bench_processes`
        seconds = step_seconds(cfg, args.worker, plan, args.steps, 1, "32-true", None)
        print(json.dumps({"step_seconds": seconds}))
        return
    bench_precision(cfg, plan, args)
    bench_chunks(cfg, plan, args)
    if not torch.cuda.is_available():
        bench_processes(cfg, plan, args)
    if torch.cuda.is_available():
        print("measured training-step memory per member (automatic chunking):")
        bench_memory(cfg, plan)
    configure_torch(args.threads)


if __name__ == "__main__":
    main()
