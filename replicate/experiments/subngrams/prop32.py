"""Paper C, Prop. 3.2 and Remark C.2: a model that reads a subset of the tokens is driven by
the conditional given that subset, and is stationary where it computes it.

Exact float64 checks on chains small enough to enumerate every sequence
(`replicate.theory.subngrams.enumerate_chain`), in the in-context setting of Sec. 2.2
(kernels drawn with Dirichlet(alpha) rows, the expectation over tasks as in Prop. 3.2). For
each lag set N the model is a softmax table per task indexed by the tokens at the lags in N
(`table_gradient`): its score depends on the task and those tokens only. Then

* at a random table the population gradient taken against the full next-token law
  p_tau(. | x^L) equals the one taken against p_tau(. | x_N) (Prop. 3.2 for the suffixes
  N = {1..l}, Remark C.2 for any other N), and is not zero (the identity is not 0 = 0);
* at theta_* = log p_tau(. | x_N) (`lagset_conditional`, App. H.2) the gradient vanishes,
  while the loss stays above the Bayes loss: a stationary point that is not the optimum;
* the control: a table that reads one lag beyond N is not driven by p_tau(. | x_N), so the
  identity's check fails there, as it must.
"""

from __future__ import annotations

import math
from typing import Annotated

import pandas as pd
import torch
from pydantic import Field, model_validator

from replicate.experiments.base import Metrics, RunContext
from replicate.markov import context_indices, draw_kernels
from replicate.settings import PositiveInt, Strict
from replicate.theory.subngrams import enumerate_chain, lagset_conditional, table_gradient


class Prop32Settings(Strict):
    states: list[PositiveInt] = Field(min_length=1)
    order: PositiveInt  # of the chains (m = n - 1)
    length: PositiveInt  # L: S**L sequences are enumerated
    kernels: PositiveInt  # tasks drawn per chain size (the expectation over p_tau)
    alpha: Annotated[float, Field(gt=0.0)]
    suffixes: list[list[PositiveInt]] = Field(min_length=1)  # Prop. 3.2: N = {1..l}
    subsets: list[list[PositiveInt]] = Field(min_length=1)  # Remark C.2: any other N
    seed: int

    @model_validator(mode="after")
    def _lag_sets(self) -> Prop32Settings:
        if self.length < self.order:
            raise ValueError(f"length {self.length} must be >= order {self.order}")
        for lags in [*self.suffixes, *self.subsets]:
            if len(set(lags)) != len(lags) or not all(h <= self.order for h in lags):
                raise ValueError(f"lag set {lags}: distinct lags in 1..{self.order} needed")
            if len(lags) == self.order:
                raise ValueError(f"lag set {lags} reads every lag: the control needs one more")
        for lags in self.suffixes:
            if sorted(lags) != list(range(1, len(lags) + 1)):
                raise ValueError(f"suffixes: {lags} is not a suffix 1..l (put it in subsets)")
        for lags in self.subsets:
            if sorted(lags) == list(range(1, len(lags) + 1)):
                raise ValueError(f"subsets: {lags} is a suffix (put it in suffixes)")
        return self


def _keys(tokens: torch.Tensor, lags: tuple[int, ...], states: int) -> torch.Tensor:
    """Row of the table for every sequence: the tokens at ``lags`` before the next one."""
    length = tokens.shape[-1]
    keys = torch.zeros(tokens.shape[0], dtype=torch.long)
    for h in lags:
        keys = keys * states + tokens[:, length - h]
    return keys


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def lag_set_row(
    kernels: torch.Tensor, length: int, lags: tuple[int, ...], generator: torch.Generator
) -> dict[str, float]:
    """The checks of Prop. 3.2 / Remark C.2 for one lag set on the given tasks."""
    count, rows_in, states = kernels.shape
    order = round(math.log(rows_in) / math.log(states))
    tokens, probs = enumerate_chain(kernels, length)
    windows = context_indices(tokens, order, states)[:, -1]
    law = kernels.to(torch.float64)[:, windows]  # (K, N, S): p_tau(. | x^L)
    flat = tokens.expand(count, -1, -1).reshape(-1, length)
    given = lagset_conditional(kernels.repeat_interleave(len(tokens), 0), flat, lags).view(
        count, len(tokens), states
    )  # p_tau(. | x_N)
    keys = _keys(tokens, lags, states)
    rows = states ** len(lags)
    random = torch.randn(count, rows, states, dtype=torch.float64, generator=generator)
    full, _ = table_gradient(random, keys, probs, law)
    reduced, _ = table_gradient(random, keys, probs, given)
    star = torch.zeros(count, rows, states, dtype=torch.float64)
    star[:, keys] = given.log()  # every sequence with one key has one conditional
    at_star, loss = table_gradient(star, keys, probs, law)
    bayes = float(-(probs.unsqueeze(-1) * law * law.log()).sum((-1, -2)).mean())
    beyond = min(h for h in range(1, order + 1) if h not in lags)
    wider = _keys(tokens, (*lags, beyond), states)
    wide = torch.randn(count, rows * states, states, dtype=torch.float64, generator=generator)
    wide_full, _ = table_gradient(wide, wider, probs, law)
    wide_reduced, _ = table_gradient(wide, wider, probs, given)
    return {
        "identity_error": _relative(reduced, full),
        "gradient_norm": float(full.norm()),
        "stationary_gradient": float(at_star.norm()),
        "loss_gap": loss - bayes,
        "control_error": _relative(wide_reduced, wide_full),
    }


def prop32(s: Prop32Settings, ctx: RunContext) -> Metrics:
    """Prop. 3.2 (suffixes) and Remark C.2 (any subset), exactly, for every chain size."""
    generator = torch.Generator().manual_seed(s.seed)
    rows = []
    for states in s.states:
        kernels = draw_kernels(states, s.order, s.alpha, s.kernels, generator)
        for kind, sets in (("prop32", s.suffixes), ("remarkC2", s.subsets)):
            for lags in sets:
                row = lag_set_row(kernels, s.length, tuple(lags), generator)
                rows.append({"result": kind, "states": states, "lags": str(lags), **row})
    table = pd.DataFrame(rows)
    ctx.save_csv(table, "prop32.csv")
    metrics: Metrics = {}
    for kind, group in table.groupby("result", sort=False):
        metrics[f"{kind}/max_identity_error"] = float(group.identity_error.max())
        metrics[f"{kind}/min_gradient_norm"] = float(group.gradient_norm.min())
        metrics[f"{kind}/max_stationary_gradient"] = float(group.stationary_gradient.max())
        metrics[f"{kind}/min_loss_gap"] = float(group.loss_gap.min())
        metrics[f"{kind}/min_control_error"] = float(group.control_error.min())
    return metrics
