"""Paper C: theta_*^k against the k-gram estimator, the dashed-line estimator against brute
force, and the population-gradient estimator against closed forms (spec C §1.5, §3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_modules import LastTokenLawCE, SequenceBatch
from lightning_modules.measures import member_gradients, population_grad_norm
from replicate.analysis import kgram_estimate, paper_c_kgram_lags
from replicate.experiments.subngrams.common import DataSettings, expand, fixed_set, history_losses
from replicate.experiments.subngrams.fig2 import constructions

EXAMPLE = [2, 0, 1, 2, 0, 2, 1, 1, 0, 2]  # spec C §3.3 (Fig. 2), S = 3, H = 2, c = 30
# supports and outputs of theta_*^1, theta_*^2, theta_*^3 computed by hand in spec C §3.3
SUPPORTS = [set(range(10)), {0, 1, 4, 6}, {6}]
OUTPUTS = [(0.3, 0.3, 0.4), (0.5, 0.25, 0.25), (0.0, 1.0, 0.0)]


def test_fig2_worked_example() -> None:
    model = constructions(3, 3, 10, [(k, 30.0) for k in (1, 2, 3)])
    tokens = torch.tensor(EXAMPLE)[None, None].expand(3, 1, -1)
    with torch.no_grad():
        probs = model(tokens)[:, 0]
        attention = model.second_layer_attention(tokens)[:, 0]
    for k in range(3):
        support = set((attention[k] > 1e-6).nonzero().flatten().tolist())
        assert support == SUPPORTS[k]
        np.testing.assert_allclose(probs[k].numpy(), OUTPUTS[k], atol=1e-6)


def test_constructions_compute_the_padded_kgram() -> None:
    """Check (a), spec C §3.2: k = 1 exactly; k >= 2 within 20 T e^{-c} at c = 20."""
    data = DataSettings(states=4, order=3, alpha=0.5, seq_len=24)
    tokens = fixed_set(data, 200, 0, "test").tokens[0]
    for k in (1, 2, 3):
        c = 20.0
        model = constructions(4, 3, 24, [(k, c)])
        with torch.no_grad():
            probs = model(tokens[None])[0]
        padded = kgram_estimate(tokens, paper_c_kgram_lags(k), 4, pad=True, last_position=True)
        ok = ~padded.isnan().any(-1)
        error = (probs - padded)[ok].abs().max().item()
        assert error <= (1e-12 if k == 1 else 20 * 24 * math.exp(-c))
    assert ok.float().mean() > 0.5  # the comparison covered most sequences


def _brute_force_addalpha(x: list[int], lags: tuple[int, ...], s: int, alpha: float, lo: int):
    t = len(x)
    counts = np.zeros(s)
    for i in range(lo, t):
        if all(x[i - h] == x[t - h] for h in lags):
            counts[x[i]] += 1
    return (counts + alpha) / (counts.sum() + s * alpha)


def test_dashed_lines_match_brute_force() -> None:
    """`history_losses` (the dashed lines) recomputed with explicit loops (spec C §1.5)."""
    data = DataSettings(states=3, order=4, alpha=0.5, seq_len=20)
    batch = fixed_set(data, 50, 1, "test")
    table = history_losses(batch, data, eps=1e-8).set_index("history")
    tokens, law = batch.tokens[0].tolist(), batch.next_law[0].numpy()
    for lags, name in [((), "lags_none"), ((1, 2), "lags_1_2"), ((1, 3), "lags_1_3")]:
        lo = 0 if not lags else data.order - 1  # the authors' code: keys i >= n - 1
        losses = [
            -(law[b] * np.log(_brute_force_addalpha(x, lags, 3, 0.5, lo) + 1e-8)).sum()
            for b, x in enumerate(tokens)
        ]
        assert table.loss[name] == pytest.approx(np.mean(losses), abs=1e-12)


def test_population_gradient_estimator_closed_forms() -> None:
    """theta_*^1 is an exact saddle (Q = Kt = 0, V1 = 0: every gradient is 0); elsewhere the
    estimate and floor satisfy g^2 + floor^2 = ||mean gradient over the set||^2 exactly."""
    data = DataSettings(states=3, order=3, alpha=0.5, seq_len=12)
    points = [(1, 10.0), (2, 10.0), (3, 5.0)]
    model = constructions(3, 3, 12, points)
    batch = expand(fixed_set(data, 64, 2, "gradset"), len(points), torch.float64)
    objective = LastTokenLawCE(eps=1e-8)
    estimate, floor = population_grad_norm(model, objective, batch, chunks=16)
    assert estimate[0] == 0.0 and floor[0] == 0.0
    full = member_gradients(model, objective, SequenceBatch(*batch))
    full_sq = sum(g.flatten(1).pow(2).sum(1) for g in full).numpy()
    assert (estimate[1:] > 0).all()
    np.testing.assert_allclose(estimate**2 + floor**2, full_sq, rtol=1e-9, atol=1e-15)
