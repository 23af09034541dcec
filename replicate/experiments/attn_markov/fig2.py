"""Paper A, Fig. 2b: the data the models see follow the Markov kernel (generated-data check).

Fig. 2b is the state diagram of P(p, q) (paper A, Sec. 2.2); it has no experiment. We add
checks of the samplers instead (ours, not the paper's): sample sequences with
`replicate.markov.sample_chain` (the sampler that feeds training) from x_1 ~ pi and compare
(i) empirical transition frequencies with the kernel (binary: |P^_01 - p|, |P^_10 - q| <= 0.01;
symmetric S-state chain of the journal version's Sec. 4.3: stay frequency within 0.01 of
1 - p and off-diagonal frequencies within 0.01 of p/(S-1)) and (ii) the empirical law of x_n
at positions n in {1, N/2, N} with pi (within 0.02).

With B sequences the frequency of x_n = s at one position has the standard deviation
sqrt(pi_s (1 - pi_s) / B) (0.031 for B = 256, pi_1 = 0.4), so (ii) is also reported as the
largest z-score over every position and state, which has a known null distribution; the
claims bound it by 5, and panel (c) draws it against that bound.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from pydantic import Field

from replicate import plotting
from replicate.experiments.attn_markov.common import initial_law
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import binary_kernel, sample_chain, symmetric_kernel
from replicate.settings import BinaryChainSettings, OpenUnit, PositiveInt, Strict


class SymmetricChainSettings(Strict):
    """Stay with probability 1 - p, else jump uniformly to one of the other S - 1 states."""

    n_states: int = Field(ge=3)
    p: OpenUnit

    @property
    def tag(self) -> str:
        return f"S{self.n_states}_p{self.p:g}"


class Fig2Settings(Strict):
    binary_chains: list[BinaryChainSettings] = Field(min_length=1)
    symmetric_chains: list[SymmetricChainSettings]
    sequences: PositiveInt  # B
    seq_len: PositiveInt = Field(ge=2)  # N
    seed: int = Field(ge=0)


# ----------------------------------------------------------------------------- statistics
def transition_frequencies(tokens: torch.Tensor, n_states: int) -> np.ndarray:
    """P^_ij = #(x_n = i, x_{n+1} = j) / #(x_n = i) over all consecutive pairs."""
    pairs = tokens[:, :-1] * n_states + tokens[:, 1:]
    counts = torch.bincount(pairs.flatten(), minlength=n_states**2).reshape(n_states, n_states)
    counts = counts.double().numpy()
    return counts / counts.sum(axis=1, keepdims=True)


def marginal_frequencies(tokens: torch.Tensor, n_states: int) -> np.ndarray:
    """(N, S): empirical P(x_n = s) over the B sequences, at every position n."""
    onehot = torch.nn.functional.one_hot(tokens, n_states).double()
    return onehot.mean(dim=0).numpy()


def checked_positions(seq_len: int) -> list[int]:
    """1-based positions {1, N/2, N} of our Fig. 2 check."""
    return [1, seq_len // 2, seq_len]


def marginal_z(marginals: np.ndarray, pi: np.ndarray, sequences: int) -> np.ndarray:
    """(marginal - pi) / sqrt(pi (1 - pi) / B), per position and state."""
    return (marginals - pi) / np.sqrt(pi * (1 - pi) / sequences)


def _sample(kernel: np.ndarray, pi: np.ndarray, s: Fig2Settings, index: int) -> torch.Tensor:
    seed = int(np.random.SeedSequence([s.seed, index]).generate_state(1)[0])
    generator = torch.Generator().manual_seed(seed)
    return sample_chain(
        torch.from_numpy(kernel), torch.from_numpy(pi), s.sequences, s.seq_len, generator
    )


def _marginal_metrics(marginals: np.ndarray, pi: np.ndarray, s: Fig2Settings) -> Metrics:
    at = [n - 1 for n in checked_positions(s.seq_len)]
    return {
        "marginal_error": float(np.abs(marginals[at] - pi).max()),
        "marginal_max_z": float(np.abs(marginal_z(marginals, pi, s.sequences)).max()),
        "marginal_std": float(np.sqrt(pi * (1 - pi) / s.sequences).max()),
    }


def binary_check(
    chain: BinaryChainSettings, s: Fig2Settings, index: int
) -> tuple[Metrics, np.ndarray]:
    """Metrics of one binary chain and its (N,) empirical P(x_n = 1)."""
    kernel, pi = binary_kernel(chain.p, chain.q), initial_law(chain, "stationary")
    tokens = _sample(kernel, pi, s, index)
    freq = transition_frequencies(tokens, 2)
    marginals = marginal_frequencies(tokens, 2)
    metrics = {
        "p_hat": float(freq[0, 1]),
        "q_hat": float(freq[1, 0]),
        "transition_error": float(max(abs(freq[0, 1] - chain.p), abs(freq[1, 0] - chain.q))),
        # one state suffices: P(x_n = 0) = 1 - P(x_n = 1)
        **_marginal_metrics(marginals[:, 1:], pi[1:], s),
    }
    return metrics, marginals[:, 1]


def symmetric_check(chain: SymmetricChainSettings, s: Fig2Settings, index: int) -> Metrics:
    """Metrics of one symmetric S-state chain started from its uniform stationary law."""
    n = chain.n_states
    kernel, pi = symmetric_kernel(n, chain.p), np.full(n, 1 / n)
    tokens = _sample(kernel, pi, s, index)
    freq = transition_frequencies(tokens, n)
    off = ~np.eye(n, dtype=bool)
    return {
        "stay_error": float(np.abs(np.diag(freq) - (1 - chain.p)).max()),
        "offdiag_error": float(np.abs(freq[off] - chain.p / (n - 1)).max()),
        "transition_error": float(np.abs(freq - kernel).max()),
        **_marginal_metrics(marginal_frequencies(tokens, n), pi, s),
    }


AGGREGATES: dict[str, tuple[str, str]] = {
    "binary/max_transition_error": ("binary", "transition_error"),
    "binary/max_marginal_error": ("binary", "marginal_error"),
    "binary/max_marginal_z": ("binary", "marginal_max_z"),
    "symmetric/max_stay_error": ("symmetric", "stay_error"),
    "symmetric/max_offdiag_error": ("symmetric", "offdiag_error"),
    "symmetric/max_marginal_error": ("symmetric", "marginal_error"),
    "symmetric/max_marginal_z": ("symmetric", "marginal_max_z"),
}


def aggregate(per_chain: dict[str, dict[str, Metrics]]) -> Metrics:
    """Worst case over the chains of each kind ("binary", "symmetric")."""
    return {
        key: max((m[name] for m in per_chain[kind].values()), default=math.nan)
        for key, (kind, name) in AGGREGATES.items()
    }


# ----------------------------------------------------------------------------- outputs
def summary_frame(per_chain: dict[str, dict[str, Metrics]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"kind": kind, "chain": tag, **m}
            for kind, chains in per_chain.items()
            for tag, m in chains.items()
        ]
    )


TRANSITION_TOLERANCE = 0.01
"""Ours (paper A, Fig. 2 gives none): largest allowed |P^_ij - P_ij| (the claims' tolerance
on panel (b))."""
Z_BOUND = 5.0
"""The claims' bound on the largest |z| of the law of x_n (panel (c)): x_1 ~ pi gives
x_n ~ pi at every n (paper A, Sec. 2.2), so a correct sampler exceeds it with probability
about 2 Phi(-5) per test."""


def _plot(
    s: Fig2Settings,
    per_chain: dict[str, dict[str, Metrics]],
    marginals: dict[str, np.ndarray],
    ctx: RunContext,
) -> None:
    fig, axes = plotting.figure(1, 3, width=4.6, height=3.6)
    _plot_marginals(axes[0], s, marginals)
    frame = summary_frame(per_chain)
    _bars(axes[1], frame, "transition_error", "(b) max |P̂ − P| over kernel entries")
    axes[1].set_ylabel("absolute error")
    _limit(axes[1], TRANSITION_TOLERANCE, f"our tolerance {TRANSITION_TOLERANCE:g}")
    _bars(axes[2], frame, "marginal_max_z", "(c) max |z| of P̂(x_n = s), every n and s")
    axes[2].set_ylabel("|z| = |P̂ − π_s| / √(π_s(1 − π_s)/B)")
    _limit(axes[2], Z_BOUND, f"bound |z| = {Z_BOUND:g} (x_n ~ π, Sec. 2.2)")
    plotting.finish(
        fig,
        f"Paper A, Fig. 2b — generated data ({s.sequences} × {s.seq_len} tokens "
        "per chain, replicate.markov.sample_chain)",
    )
    ctx.save_figure(fig)


def _plot_marginals(ax: Axes, s: Fig2Settings, marginals: dict[str, np.ndarray]) -> None:
    """Empirical P(x_n = 1) of each binary chain against n, with pi_1 +- 2 sampling std."""
    positions = np.arange(1, s.seq_len + 1)
    at = checked_positions(s.seq_len)
    for chain in s.binary_chains:
        pi1 = float(initial_law(chain, "stationary")[1])
        band = 2 * math.sqrt(pi1 * (1 - pi1) / s.sequences)
        line = ax.plot(
            positions, marginals[chain.tag], linewidth=0.6, label=f"{chain.tag}: P̂(x_n=1)"
        )
        color = line[0].get_color()
        ax.axhline(pi1, color=color, linestyle="--", linewidth=1)
        ax.fill_between(positions, pi1 - band, pi1 + band, color=color, alpha=0.15)
        ax.scatter(at, marginals[chain.tag][np.array(at) - 1], color=color, zorder=3, s=18)
    ax.set(
        title=f"(a) law of $x_n$ (B={s.sequences}): π₁ ± 2σ, dots at n ∈ {{1, N/2, N}}",
        xlabel="position n",
        ylabel="empirical P(x_n = 1)",
    )
    ax.legend(fontsize=7)


def _bars(ax: Axes, frame: pd.DataFrame, column: str, title: str) -> None:
    """One bar per chain (binary blue, symmetric orange)."""
    ax.bar(
        frame.chain,
        frame[column],
        color=["tab:blue" if k == "binary" else "tab:orange" for k in frame.kind],
    )
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)


def _limit(ax: Axes, limit: float, label: str) -> None:
    """The claims' upper limit: a dashed red line, with room above the tallest bar."""
    ax.axhline(limit, color="tab:red", linestyle="--", linewidth=1, label=label)
    ax.set_ylim(0.0, 1.3 * max(limit, ax.get_ylim()[1]))
    ax.legend(fontsize=7, loc="upper right")


# ----------------------------------------------------------------------------- experiment
def fig2(s: Fig2Settings, ctx: RunContext) -> Metrics:
    """Fig. 2b data check: transition and stationary frequencies of the sampled chains."""
    per_chain: dict[str, dict[str, Metrics]] = {"binary": {}, "symmetric": {}}
    marginals: dict[str, np.ndarray] = {}
    for i, chain in enumerate(s.binary_chains):
        per_chain["binary"][chain.tag], marginals[chain.tag] = binary_check(chain, s, i)
    offset = len(s.binary_chains)
    for i, chain in enumerate(s.symmetric_chains):
        per_chain["symmetric"][chain.tag] = symmetric_check(chain, s, offset + i)
    metrics: Metrics = {
        f"{tag}/{k}": v
        for chains in per_chain.values()
        for tag, m in chains.items()
        for k, v in m.items()
    }
    metrics.update(aggregate(per_chain))
    ctx.save_csv(summary_frame(per_chain), "frequencies.csv")
    _plot(s, per_chain, marginals, ctx)
    return metrics
