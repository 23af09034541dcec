"""Side-by-side speed ratios (printed, never asserted).

1. An ensemble of E models trained as one batched module vs E single-model runs one after
   another (each its own Trainer, as a per-run script would do minus the process start).
2. The scan sampler (`sample_chain`) vs a per-step loop (`sample_chain_loop`, the authors'
   style), for the same paths.

    python benchmarks/ensemble_and_sampler.py [--ensemble 16] [--seq-len 256] [--steps 60]
"""

from __future__ import annotations

import argparse
import time

import torch

from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate.markov import binary_kernel, binary_stationary, sample_chain, sample_chain_loop
from replicate.training import TrainingPlan, configure_torch, gpt_ensemble, train_ensemble


def _time(fn, repeats: int = 1) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def bench_ensemble(ensemble: int, seq_len: int, steps: int) -> None:
    kernel, pi = binary_kernel(0.5, 0.8), binary_stationary(0.5, 0.8)
    members = [ChainMember(kernel, pi, seed) for seed in range(ensemble)]
    plan = TrainingPlan(steps, 16, seq_len, eval_every=steps, test_sequences=16, test_seed=0)
    cfg = GPTConfig(block_size=seq_len)
    optim = OptimConfig()

    def run(group: list[ChainMember], label: str) -> None:
        model = gpt_ensemble(cfg, [m.seed for m in group])
        train_ensemble(model, group, plan, optim, label)

    run(members[:1], "warm-up")
    batched = _time(lambda: run(members, "batched"))
    sequential = _time(lambda: [run([m], "single") for m in members])
    total = ensemble * steps
    print(
        f"ensemble E={ensemble}, B=16, N={seq_len}, {steps} steps, device "
        f"{'cuda' if torch.cuda.is_available() else 'cpu'}:\n"
        f"  batched    {batched:7.2f} s  ({total / batched:8.1f} model-steps/s)\n"
        f"  sequential {sequential:7.2f} s  ({total / sequential:8.1f} model-steps/s)\n"
        f"  speed-up (sequential / batched): {sequential / batched:.2f}x"
    )


def bench_sampler(batch: int, length: int) -> None:
    kernel = torch.from_numpy(binary_kernel(0.5, 0.8))
    pi = torch.from_numpy(binary_stationary(0.5, 0.8))
    gen = torch.Generator()
    scan = _time(lambda: sample_chain(kernel, pi, batch, length, gen.manual_seed(0)), 20)
    loop = _time(lambda: sample_chain_loop(kernel, pi, batch, length, gen.manual_seed(0)), 5)
    same = torch.equal(
        sample_chain(kernel, pi, batch, length, gen.manual_seed(1)),
        sample_chain_loop(kernel, pi, batch, length, gen.manual_seed(1)),
    )
    print(
        f"sampler B={batch}, N={length}: scan {scan * 1e3:.2f} ms, per-step loop "
        f"{loop * 1e3:.2f} ms, speed-up {loop / scan:.1f}x (identical paths: {same})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ensemble", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    configure_torch(args.threads)
    for length in (256, 1024):
        bench_sampler(16, length + 1)
    bench_ensemble(args.ensemble, args.seq_len, args.steps)


if __name__ == "__main__":
    main()
