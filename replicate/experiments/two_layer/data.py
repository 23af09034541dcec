"""Paper D, Sec. 2 and App. A.1: the source, the k-gram estimator, the Bayes floor, the LN.

Checks of the shared primitives against brute force and closed forms (Sec. 2.1, App. A.1):

* D-DATA-1: the in-context source draws its tokens from its kernel (per-context frequencies
  within 4 standard errors over 10^6 tokens), uniform initial tokens (chi^2), one kernel per
  group of ``per_kernel`` sequences;
* D-EST-1: `replicate.analysis.kgram_estimate` equals a brute-force count over the match
  set I_n, its add-1 version equals the authors' cumulative-count formula (`empirical_est`);
* D-EST-2: the add-1 order-k estimator (the Bayes predictive under Dirichlet(1)) has the
  lowest Monte-Carlo loss among add-beta and neighbouring orders;
* D-EST-3: `true_next_token_nll` equals an independent loop;
* D-LN-1: the modified layer norm v / ||v|| (`lightning_modules.layers.L2Norm`) equals
  standard LN of [v; -v], first d coordinates, divided by sqrt(d) (App. A.1).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from pydantic import Field
from scipy.stats import chisquare

from lightning_modules.layers import L2Norm
from replicate.analysis import kgram_estimate, next_token_nll, order_lags
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import InContextSource
from replicate.markov.incontext import context_indices, true_next_token_nll
from replicate.settings import PositiveInt, Strict


class DataSettings(Strict):
    states: list[PositiveInt]
    orders: list[PositiveInt]
    frequency_sequences: PositiveInt  # one fixed kernel, sequences x length tokens (D-DATA-1)
    frequency_length: PositiveInt
    brute_force_sequences: PositiveInt  # D-EST-1 / D-EST-3 loops
    brute_force_length: PositiveInt
    floor_sequences: PositiveInt  # D-EST-2 Monte Carlo
    floor_lengths: list[PositiveInt]
    ln_vectors: PositiveInt
    ln_dims: list[PositiveInt]
    seed: int = Field(ge=0)


def _generator(s: DataSettings, *parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(
        s.seed * 10**6 + sum(p * 10 ** (2 * i) for i, p in enumerate(parts))
    )


def _frequencies(s: DataSettings, states: int, order: int) -> dict[str, float]:
    """Max |z| of per-context transition frequencies against P and the chi^2 p-value of the
    initial windows (D-DATA-1)."""
    source = InContextSource(states, order, 1.0, per_kernel=s.frequency_sequences)
    drawn = source.draw(s.frequency_sequences, s.frequency_length, _generator(s, 1, states, order))
    kernel = drawn.kernels[0]
    ctx = context_indices(drawn.tokens[:, :-1], order, states)[:, : s.frequency_length - order]
    nxt = drawn.tokens[:, order:]
    counts = torch.zeros(states**order, states, dtype=torch.float64)
    counts.index_put_(
        (ctx.flatten(), nxt.flatten()),
        torch.ones(ctx.numel(), dtype=torch.float64),
        accumulate=True,
    )
    total = counts.sum(-1, keepdim=True)
    se = torch.sqrt(kernel * (1 - kernel) / total)
    z = ((counts / total - kernel) / se).abs().max()
    first = context_indices(drawn.tokens[:, :order], order, states)[:, 0]
    observed = torch.bincount(first, minlength=states**order).numpy()
    return {
        "max_abs_z": float(z),
        "initial_chi2_p": float(chisquare(observed).pvalue) if states**order > 1 else 1.0,
        "tokens": float(drawn.tokens.numel()),
    }


def _kernels_per_batch(states: int, order: int, per_kernel: int, groups: int) -> float:
    """1 if a batch of groups * per_kernel rows uses exactly ``groups`` distinct kernels,
    each on per_kernel consecutive rows."""
    source = InContextSource(states, order, 1.0, per_kernel=per_kernel)
    kernels = source.draw(groups * per_kernel, 16, torch.Generator().manual_seed(7)).kernels
    distinct = torch.unique(kernels.flatten(1), dim=0).shape[0]
    blocks = kernels.view(groups, per_kernel, -1)
    return float(distinct == groups and bool((blocks == blocks[:, :1]).all()))


def brute_force_estimate(seq: list[int], order: int, states: int, n: int) -> list[float] | None:
    """p_hat_k(. | x_{1:n}) by counting i in I_n (Sec. 2.1, 1-indexed); None if I_n = {}."""
    counts = [0] * states
    for i in range(order + 1, n + 1):
        if all(seq[i - j - 1] == seq[n - j] for j in range(1, order + 1)):
            counts[seq[i - 1]] += 1
    total = sum(counts)
    return None if total == 0 else [c / total for c in counts]


def authors_laplace(seq: list[int], order: int, beta: float) -> list[float]:
    """The authors' binary add-beta estimate of P(x_{n+1} = 1) at n = 1..T: per context,
    (cumulative count of next-token 1s + beta) / (cumulative count + 2 beta) (`empirical_est`)."""
    ones: dict[tuple[int, ...], int] = {}
    seen: dict[tuple[int, ...], int] = {}
    out = []
    for n in range(1, len(seq) + 1):
        if n > order:  # record the transition x_{n-k..n-1} -> x_n before predicting x_{n+1}
            key = tuple(seq[n - order - 1 : n - 1])
            seen[key] = seen.get(key, 0) + 1
            ones[key] = ones.get(key, 0) + seq[n - 1]
        current = tuple(seq[n - order : n]) if n >= order else None
        a = ones.get(current, 0) if current is not None else 0
        c = seen.get(current, 0) if current is not None else 0
        out.append((a + beta) / (c + 2 * beta))
    return out


def _estimator_checks(s: DataSettings, states: int, order: int) -> dict[str, float]:
    """D-EST-1 and D-EST-3 on random sequences against the loops above."""
    source = InContextSource(states, order, 1.0)
    drawn = source.draw(
        s.brute_force_sequences, s.brute_force_length, _generator(s, 2, states, order)
    )
    estimate = kgram_estimate(drawn.tokens, order_lags(order), states)
    worst, defined_mismatch = 0.0, 0
    for b, seq in enumerate(drawn.tokens.tolist()):
        for n in range(1, len(seq) + 1):
            brute = brute_force_estimate(seq, order, states, n)
            row = estimate[b, n - 1]
            if brute is None:
                defined_mismatch += int(not bool(row.isnan().all()))
            else:
                worst = max(
                    worst, float((row - torch.tensor(brute, dtype=torch.float64)).abs().max())
                )
    laplace_gap = float("nan")
    if states == 2:
        smooth = kgram_estimate(drawn.tokens, order_lags(order), 2, alpha=1.0)[..., 1]
        code = torch.tensor(
            [authors_laplace(seq, order, 1.0) for seq in drawn.tokens.tolist()], dtype=torch.float64
        )
        laplace_gap = float((smooth - code.double()).abs().max())
    loop = []
    for kernel, seq in zip(drawn.kernels.tolist(), drawn.clean.tolist(), strict=True):
        row = []
        for t in range(1, len(seq)):
            if t < order:
                row.append(math.log(states))
            else:
                c = sum(x * states ** (order - 1 - j) for j, x in enumerate(seq[t - order : t]))
                row.append(-math.log(kernel[c][seq[t]]))
        loop.append(row)
    true_gap = float(
        (true_next_token_nll(drawn.kernels, drawn.clean) - torch.tensor(loop, dtype=torch.float64))
        .abs()
        .max()
    )
    return {
        "max_brute_force_gap": worst,
        "undefined_mismatches": float(defined_mismatch),
        "max_authors_laplace_gap": laplace_gap,
        "max_true_loss_gap": true_gap,
    }


def _floor(s: DataSettings, order: int, length: int) -> dict[str, float]:
    """D-EST-2: paired Monte-Carlo losses of add-beta / neighbouring-order estimators."""
    source = InContextSource(2, order, 1.0)
    drawn = source.draw(s.floor_sequences, length + 1, _generator(s, 3, order, length))
    true = true_next_token_nll(drawn.kernels, drawn.clean).mean(-1)

    def loss(lags: tuple[int, ...], beta: float) -> torch.Tensor:
        probs = kgram_estimate(drawn.tokens, lags, 2, alpha=beta)
        return next_token_nll(probs, drawn.tokens).mean(-1)

    bayes = loss(order_lags(order), 1.0)
    rivals = {
        "beta0.5": loss(order_lags(order), 0.5),
        "beta2": loss(order_lags(order), 2.0),
        "order_minus_1": loss(order_lags(order - 1), 1.0),
        "order_plus_1": loss(order_lags(order + 1), 1.0),
    }
    n = math.sqrt(s.floor_sequences)
    out = {"L_true": float(true.mean()), "bayes_excess": float((bayes - true).mean())}
    for name, rival in rivals.items():
        diff = rival - bayes
        out[f"{name}_excess"] = float((rival - true).mean())
        out[f"{name}_z"] = float(diff.mean() / (diff.std() / n))
    return out


def _layer_norm(s: DataSettings) -> dict[str, float]:
    """D-LN-1: max |LN([v; -v])[:d] / sqrt(d) - v / ||v|||, eps_LN = 0 and PyTorch's 1e-5."""
    gen = torch.Generator().manual_seed(s.seed)
    exact, torch_eps = 0.0, 0.0
    for d in s.ln_dims:
        v = torch.randn(s.ln_vectors, d, dtype=torch.float64, generator=gen)
        v = v * (1.0 + 9.0 * torch.rand(s.ln_vectors, 1, dtype=torch.float64, generator=gen))
        target = L2Norm()(v)
        both = torch.cat([v, -v], dim=-1)
        exact = max(
            exact,
            float(
                (F.layer_norm(both, (2 * d,), eps=0.0)[:, :d] / math.sqrt(d) - target).abs().max()
            ),
        )
        big = v.norm(dim=-1) >= 1.0
        default = F.layer_norm(both, (2 * d,), eps=1e-5)[:, :d] / math.sqrt(d)
        torch_eps = max(torch_eps, float((default - target)[big].abs().max()))
    zero = float(L2Norm()(torch.zeros(1, 4)).abs().max())
    return {"max_gap_eps0": exact, "max_gap_eps_1e-5": torch_eps, "ln_of_zero": zero}


def data(s: DataSettings, ctx: RunContext) -> Metrics:
    """D-DATA-1, D-EST-1..3, D-LN-1 (Sec. 2.1, App. A.1)."""
    rows, metrics = [], {}
    for states in s.states:
        for order in s.orders:
            values = {**_frequencies(s, states, order), **_estimator_checks(s, states, order)}
            rows.append({"states": states, "order": order, **values})
    checks = pd.DataFrame(rows)
    metrics["data1/max_abs_z"] = float(checks.max_abs_z.max())
    metrics["data1/min_initial_chi2_p"] = float(checks.initial_chi2_p.min())
    metrics["data1/kernels_per_batch_ok"] = _kernels_per_batch(2, 2, per_kernel=4, groups=8)
    metrics["est1/max_brute_force_gap"] = float(checks.max_brute_force_gap.max())
    metrics["est1/undefined_mismatches"] = float(checks.undefined_mismatches.sum())
    metrics["est1/max_authors_laplace_gap"] = float(checks.max_authors_laplace_gap.max())
    metrics["est3/max_true_loss_gap"] = float(checks.max_true_loss_gap.max())
    hand = brute_force_estimate([0, 1, 1, 0, 1, 1], 2, 2, 6)
    shared = kgram_estimate(torch.tensor([[0, 1, 1, 0, 1, 1]]), order_lags(2), 2)[0, 5]
    metrics["est1/hand_example_gap"] = float(
        (shared - torch.tensor(hand or [np.nan, np.nan])).abs().max()
    )
    floor_rows = [
        {"order": k, "T": t, **_floor(s, k, t)} for k in s.orders for t in s.floor_lengths
    ]
    floor = pd.DataFrame(floor_rows)
    z_columns = [c for c in floor.columns if c.endswith("_z")]
    metrics["est2/min_rival_z"] = float(floor[z_columns].min().min())
    for r in floor_rows:
        metrics[f"est2/k{r['order']}/T{r['T']}/bayes_excess"] = r["bayes_excess"]
    metrics.update({f"ln1/{k}": v for k, v in _layer_norm(s).items()})
    ctx.save_csv(checks, "checks.csv")
    ctx.save_csv(floor, "reference_losses.csv")
    return metrics
