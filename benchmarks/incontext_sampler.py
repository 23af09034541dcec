"""Side-by-side speed ratios of the in-context k-th-order sampler (printed, never asserted).

1. `sample_from_kernels` (one vectorised step per position) vs `sample_from_kernels_loop` (a
   Python step per sequence and position), on the same kernels and uniforms, so both return
   the same paths (checked and printed).
2. One training batch of an ensemble (`sample_members`: kernels, paths and next-token laws
   of every member) at the shapes of paper C's Figs. 1 and 3 and paper D's maps, and the
   Dirichlet kernels of one batch of paper C's Figs. 1, 3 and 4 alone (`draw_kernels`), in
   this tree and in a scratch worktree of ``--baseline`` (an older commit to compare with),
   each in its own process; the digests say whether both drew the same bytes (they differ
   where the sampler draws the same law from a different stream).

Times are the fastest of several runs.

    python benchmarks/incontext_sampler.py [--threads 1] [--baseline 4b2ddb4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from step_profile import REPO, baseline_tree

from replicate.markov import draw_kernels, sample_from_kernels, sample_from_kernels_loop

SHAPES = ((128, 32, 5, 2), (64, 128, 3, 3))  # (batch, length, states, order)
ENSEMBLE_BATCHES = {  # name: (members' (states, order, alpha) sources, batch, length)
    "paper C Fig. 1 (E = 2)": ([(3, 4, 0.5)] * 2, 128, 129),
    "paper C Fig. 3 (E = 3)": ([(5, 3, 0.5)] * 3, 128, 33),
    "paper D maps, k = 1 and 3 (E = 6)": ([(2, 1, 1.0)] * 3 + [(2, 3, 1.0)] * 3, 64, 33),
}
CHILD = """
import hashlib, json, sys, time, torch
from pathlib import Path
import lightning_modules
from lightning_modules import Member
from replicate.markov import InContextSource
# Older commits kept the sources with the DataModule. (The editable install would find
# this tree's sources.py for the baseline's package too: look in the package's own folder.)
if (Path(lightning_modules.__file__).parent / "sources.py").exists():
    from lightning_modules.sources import sample_members
else:
    from lightning_modules.markov_data import sample_members
from replicate.markov import draw_kernels
torch.set_num_threads(int(sys.argv[1]))
def fastest(draw, digest_of):  # [fastest of 20 draws, digest of the first draw's bytes]
    digest = hashlib.sha256(digest_of(draw())).hexdigest()[:12]
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        draw()
        best = min(best, time.perf_counter() - start)
    return [best, digest]
out = {}
for name, (sources, batch, length) in json.loads(sys.argv[2]).items():
    members = [Member(InContextSource(*s), seed) for seed, s in enumerate(sources)]
    draw = lambda: sample_members(
        members, batch, length, [torch.Generator().manual_seed(m.seed) for m in members]
    )
    out[name] = fastest(draw, lambda b: b.tokens.numpy().tobytes() + b.next_law.numpy().tobytes())
for name, (states, order, alpha, count) in json.loads(sys.argv[3]).items():
    draw = lambda: draw_kernels(states, order, alpha, count, torch.Generator().manual_seed(0))
    out[name] = fastest(draw, lambda k: k.numpy().tobytes())
print(json.dumps(out))
"""
KERNEL_DRAWS = {  # name: (states, order, alpha, kernels): one training batch's kernels
    "kernels of paper C Fig. 1 (128 x 3^4 rows, alpha 1/2)": (3, 4, 0.5, 128),
    "kernels of paper C Fig. 3 (128 x 5^3 rows, alpha 1/2)": (5, 3, 0.5, 128),
    "kernels of paper C Fig. 4 (128 x 3^3 rows, alpha 1)": (3, 3, 1.0, 128),
}


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


def ensemble_batches(tree: Path, threads: int) -> dict[str, list]:
    """{name: [fastest seconds, digest]} of `ENSEMBLE_BATCHES` drawn by ``tree``'s code."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(threads), json.dumps(ENSEMBLE_BATCHES),
         json.dumps(KERNEL_DRAWS)],
        cwd=tree, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the sampler in {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", default="4b2ddb4", help="commit before the sampler changes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for shape in SHAPES:
        bench(*shape)
    with tempfile.TemporaryDirectory() as scratch:
        tree = baseline_tree(args.baseline, Path(scratch))
        try:
            before = ensemble_batches(tree, args.threads)
            after = ensemble_batches(REPO, args.threads)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           check=True)  # fmt: skip
    print(
        f"\none training batch of an ensemble, and its kernels alone, {args.baseline} vs this tree:"
    )
    for name, (old, old_digest) in before.items():
        new, new_digest = after[name]
        print(
            f"{name}: {old * 1e3:.2f} ms -> {new * 1e3:.2f} ms, {old / new:.2f}x "
            f"(same bytes: {old_digest == new_digest})"
        )


if __name__ == "__main__":
    main()
