"""Side-by-side speed ratio of the in-context k-th-order sampler (printed, never asserted).

`sample_from_kernels` (one vectorised step per position) vs `sample_from_kernels_loop` (a
Python step per sequence and position), on the same kernels and uniforms, so both return
the same paths (checked and printed). Times are the fastest of several runs.

    python benchmarks/incontext_sampler.py [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from replicate.markov import draw_kernels, sample_from_kernels, sample_from_kernels_loop

SHAPES = ((128, 32, 5, 2), (64, 128, 3, 3))  # (batch, length, states, order)


def _time(fn: Callable[[], object], repeats: int) -> float:
    """Fastest of ``repeats`` runs: the machine is shared, the minimum is the stable figure."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench(batch: int, length: int, states: int, order: int) -> None:
    gen = torch.Generator()
    kernels = draw_kernels(states, order, 0.5, batch, gen.manual_seed(0))
    vectorised = _time(
        lambda: sample_from_kernels(kernels, length, "uniform", gen.manual_seed(1)), 30
    )
    loop = _time(
        lambda: sample_from_kernels_loop(kernels, length, "uniform", gen.manual_seed(1)), 10
    )
    same = torch.equal(
        sample_from_kernels(kernels, length, "uniform", gen.manual_seed(2)),
        sample_from_kernels_loop(kernels, length, "uniform", gen.manual_seed(2)),
    )
    print(
        f"B={batch}, T={length}, S={states}, order {order}: vectorised {vectorised * 1e3:.2f} ms, "
        f"per-sequence loop {loop * 1e3:.2f} ms, speed-up {loop / vectorised:.1f}x "
        f"(identical paths: {same})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for shape in SHAPES:
        bench(*shape)


if __name__ == "__main__":
    main()
