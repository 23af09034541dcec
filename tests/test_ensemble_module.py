"""The ensemble module's measurements: population-gradient estimator, schedules."""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch import nn

from lightning_modules import OptimConfig, SequenceBatch
from lightning_modules.ensemble_module import EnsembleModule
from lightning_modules.measures import population_grad_norm


class _Linear(nn.Module):
    """E members with loss_e = mean_b <w_e, x_b>: member e's gradient is mean_b x_b."""

    def __init__(self, ensemble: int, dim: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(ensemble, dim, dtype=torch.float64))


class _MeanFeature:
    def loss(self, model: _Linear, batch: SequenceBatch) -> torch.Tensor:
        x = batch.tokens.double()  # (E, B, dim) real features stand in for tokens here
        return torch.einsum("ed,ebd->eb", model.w, x).mean(1)


def _estimate_by_hand(x: np.ndarray, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.stack([c.mean(1) for c in np.array_split(x, chunks, axis=1)])  # (M, E, dim)
    m = chunks
    total = (g.sum(0) ** 2).sum(-1)
    squares = (g**2).sum(-1).sum(0)
    estimate = np.sqrt(np.clip((total - squares) / (m * (m - 1)), 0, None))
    floor = np.sqrt((g.var(0, ddof=1)).sum(-1)) / np.sqrt(m)
    return estimate, floor


def test_population_gradient_matches_the_formula_member_by_member() -> None:
    gen = np.random.default_rng(0)
    x = gen.normal(size=(3, 64, 5)) + np.array([0.0, 0.3, 1.0])[:, None, None]
    estimate, floor = population_grad_norm(
        _Linear(3, 5), _MeanFeature(), SequenceBatch(torch.from_numpy(x)), chunks=8
    )
    want_estimate, want_floor = _estimate_by_hand(x, 8)
    np.testing.assert_allclose(estimate, want_estimate, rtol=1e-10)
    np.testing.assert_allclose(floor, want_floor, rtol=1e-10)


def test_population_gradient_is_unbiased_where_the_naive_norm_is_not() -> None:
    """Closed form: the population gradient is E[x] = mu; with mu = 0 the norm of a chunk
    mean is ~ sqrt(dim / chunk size) > 0, the unbiased estimate stays near 0."""
    gen = np.random.default_rng(1)
    dim, n = 5, 4096
    mu = np.array([0.0, 0.0, 0.5])
    x = gen.normal(size=(3, n, dim)) + mu[:, None, None] / np.sqrt(dim)
    estimate, floor = population_grad_norm(
        _Linear(3, dim), _MeanFeature(), SequenceBatch(torch.from_numpy(x)), chunks=16
    )
    naive = np.linalg.norm(x[:, : n // 16].mean(1), axis=-1)
    assert np.all(np.abs(estimate - mu) <= 4 * floor + 1e-3)
    assert np.all(naive[:2] > 3 * estimate[:2])


def test_warmup_cosine_schedule_shape() -> None:
    module = EnsembleModule(
        _Linear(1, 2),
        OptimConfig(schedule="warmup_cosine", pct_start=0.1),
        steps=100,
        test_batch=SequenceBatch(torch.zeros(1, 2, 2)),
        eval_every=10,
        eval_batch=2,
    )
    factors = [module._warmup_cosine(t) for t in range(100)]
    assert factors[0] == 0.1 and factors[9] == 1.0
    assert all(a >= b for a, b in itertools.pairwise(factors[9:]))
    assert factors[-1] < 0.01
