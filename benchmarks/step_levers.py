"""Speed levers that change a training's bits, measured side by side on one model step
(printed, never asserted): what each would gain before anyone pays for the stability check
that admitting it needs (docs/performance.md, "Levers that change bits").

Two models at their ci settings in params.yaml, each an ensemble of six as trained: paper
D's two-layer D-arch of `two_layer_maps` (relative positions, the App. B.1 MLP; B = 64,
N = 32, d = 32) and paper A's one-layer theory model of `attn_markov_fig3`, tied (B = 16,
N = 128, d = 4, head size 4). One step is the forward pass with the next-token
cross-entropy, the backward pass and AdamW's update (the experiment's lr, betas and weight
decay from params.yaml, the decay on the linear weights only), timed as:

- ``as trained``: float32, AdamW's default (for-each) update: what the experiments run;
- ``fused AdamW``: the same update by one fused kernel (``torch.optim.AdamW(fused=True)``);
- ``bf16 autocast``: the forward under ``torch.autocast(dtype=torch.bfloat16)`` (what
  ``runtime.precision: bf16-mixed`` does), weights and update in float32;
- ``torch.compile`` (with ``--compile``): the forward and loss compiled by Inductor (it
  needs a C compiler; its compile time is printed apart, once per model shape).

Each variant runs from the same initial weights and batch; rounds alternate between the
variants (a shared machine drifts) and the fastest round is kept. "same loss" says whether
the variant's loss after the timed steps equals the as-trained one to the last bit.

And one sampler lever: the Dirichlet(1) kernels of paper C's Fig. 4 and of every paper D
source (`replicate.markov.incontext.draw_kernels`, Marsaglia-Tsang rejection in log space)
against the exact one-draw form Gamma(1) = -log(1 - U) (an exponential variate), the same
law from another stream; the rows' mean and variance against Dirichlet(1)'s, 1/S and
(S - 1) / (S^2 (S + 1)), say that the candidate draws that law. Tried in a full ci run, it
was not taken: another stream is another draw of the data, and 15 verdicts moved with it
(docs/reproducibility.md, "Verdicts that depend on the data drawn").

    python benchmarks/step_levers.py [--steps 20] [--rounds 3] [--compile]
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from lightning_modules import GPTConfig
from lightning_modules.ensemble_gpt import EnsembleGPT
from replicate.config import load_params
from replicate.experiments.two_layer.darch import darch_config
from replicate.markov import draw_kernels

Step = Callable[[], torch.Tensor]
ENSEMBLE = 6


def ci_settings(experiment: str) -> Any:
    """``experiment``'s typed settings at ci scale, from params.yaml."""
    params = Path(__file__).resolve().parents[1] / "params.yaml"
    return load_params(params, scale="ci", only=[experiment]).settings(experiment)


class Model(NamedTuple):
    """A model as an experiment trains it: its configuration, its batch (sequences,
    length) and its optimiser settings (lr, beta1, beta2, weight_decay)."""

    cfg: GPTConfig
    batch: tuple[int, int]
    optim: Any


def paper_d() -> Model:
    """`two_layer_maps`' ci model."""
    s = ci_settings("two_layer_maps")
    cfg = darch_config(s.arch, s.states, s.training.seq_len, layers=2)
    return Model(cfg, (s.training.batch_size, s.training.seq_len), s.optim)


def paper_a() -> Model:
    """`attn_markov_fig3`'s ci model (tied)."""
    s = ci_settings("attn_markov_fig3")
    cfg = GPTConfig(vocab_size=2, block_size=s.training.seq_len, tied=True, **s.model.model_dump())
    return Model(cfg, (s.training.batch_size, s.training.seq_len), s.optim)


def make_step(spec: Model, variant: str) -> Step:
    """One training step of a fresh ensemble (seeds 0..5) on a fixed batch, as ``variant``."""
    cfg, batch, o = spec
    model = EnsembleGPT(cfg, ENSEMBLE)
    model.init_members(list(range(ENSEMBLE)))
    tokens = torch.randint(0, cfg.vocab_size, (ENSEMBLE, batch[0], batch[1] + 1),
                           generator=torch.Generator().manual_seed(0))  # fmt: skip
    decay, no_decay = model.decay_parameters()
    groups = [
        {"params": decay, "weight_decay": o.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = variant == "fused AdamW"
    opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), fused=fused)

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "bf16 autocast"):
            logits = model(x[..., :-1])
        return F.cross_entropy(logits.float().flatten(0, -2), x[..., 1:].flatten())

    loss_fn = torch.compile(loss_of) if variant == "torch.compile" else loss_of

    def step() -> torch.Tensor:
        loss = loss_fn(tokens)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return step


def measure(name: str, spec: Model, variants: list[str], steps: int, rounds: int) -> None:
    """Print each variant's ms per step, its ratio to ``as trained`` and whether its loss
    after the timed steps is bit-identical."""
    runs: dict[str, Step] = {}
    for variant in variants:
        start = time.perf_counter()
        runs[variant] = make_step(spec, variant)
        runs[variant]()  # warm-up (and, compiled, the compilation)
        if variant == "torch.compile":
            print(f"  {name}: torch.compile's first step {time.perf_counter() - start:.1f} s")
    best = dict.fromkeys(variants, float("inf"))
    losses: dict[str, torch.Tensor] = {}
    for _ in range(rounds):
        for variant, step in runs.items():
            start = time.perf_counter()
            for _ in range(steps):
                losses[variant] = step()
            best[variant] = min(best[variant], (time.perf_counter() - start) / steps * 1e3)
    base = best["as trained"]
    for variant in variants:
        same = torch.equal(losses[variant], losses["as trained"])
        print(f"{name:<34} {variant:<15} {best[variant]:8.2f} ms {base / best[variant]:8.2f}x"
              f"   same loss: {same}")  # fmt: skip


def exponential_kernels(shape: tuple[int, int, int], generator: torch.Generator) -> torch.Tensor:
    """The candidate: rows of Gamma(1) = -log(1 - U) variates over their sums (Dirichlet(1))."""
    gamma = torch.rand(shape, dtype=torch.float64, generator=generator).neg_().log1p_().neg_()
    return gamma / gamma.sum(-1, keepdim=True)


def kernel_lever(rounds: int) -> None:
    """Print the Dirichlet(1) kernel draw of one batch, as drawn against the candidate."""
    batches = {  # (kernels, states S, order k) of one batch: kernels of S^k rows
        "paper C Fig. 4 (128 kernels, S = 3, k = 3)": (128, 3, 3),
        "paper D maps, k = 3 (E = 6 x 64 kernels, S = 2)": (384, 2, 3),
    }
    for name, (count, states, order) in batches.items():
        gen = torch.Generator().manual_seed(0)
        shape = (count, states**order, states)
        draws: dict[str, Callable[[], torch.Tensor]] = {
            "as drawn": functools.partial(draw_kernels, states, order, 1.0, count, gen),
            "-log(1 - U)": functools.partial(exponential_kernels, shape, gen),
        }
        best = dict.fromkeys(draws, float("inf"))
        for _ in range(rounds):
            for variant, draw in draws.items():
                start = time.perf_counter()
                for _ in range(50):
                    draw()
                best[variant] = min(best[variant], (time.perf_counter() - start) / 50 * 1e3)
        rows = torch.cat([exponential_kernels(shape, gen) for _ in range(50)])
        variance = (states - 1) / (states**2 * (states + 1))
        print(f"{name:<48} as drawn {best['as drawn']:6.3f} ms, -log(1 - U) "
              f"{best['-log(1 - U)']:6.3f} ms, {best['as drawn'] / best['-log(1 - U)']:5.2f}x; "
              f"candidate's rows: mean {rows.mean():.4f} (1/S {1 / states:.4f}), "
              f"variance {rows.var():.5f} ({variance:.5f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; fastest kept")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = ["as trained", "fused AdamW", "bf16 autocast"]
    if args.compile:
        variants.append("torch.compile")
    print(f"one CPU thread; ensembles of {ENSEMBLE}; ms per step (forward, loss, backward, "
          "AdamW), fastest of the rounds; speed-up against as trained")  # fmt: skip
    models = (("paper D two_layer_maps", paper_d()), ("paper A attn_markov_fig3", paper_a()))
    for label, spec in models:
        name = f"{label} (E={ENSEMBLE} B={spec.batch[0]} N={spec.batch[1]})"
        measure(name, spec, variants, args.steps, args.rounds)
    print("\nDirichlet(1) kernels of one batch, ms, fastest of the rounds:")
    kernel_lever(args.rounds)


if __name__ == "__main__":
    main()
