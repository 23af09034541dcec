"""Paper C: theta_*^k against the k-gram estimator, the dashed-line estimator against brute
force, and the population-gradient estimator against closed forms (Def. 2.1, Secs. 4.1-4.2); the
stationary conditionals (Lemma H.5, App. H.2), Prop. 3.2 / Remark C.2 and Lemma 3.1 exactly
on enumerated chains or by finite differences; App. F's constructions and theta_*^k on empty
match sets by hand; App. F.1's general-architecture theta_*^k against its matrices written out."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from lightning_modules import LastTokenLawCE, SequenceBatch
from lightning_modules.disentangled import DisentangledConfig, EnsembleDisentangled
from lightning_modules.measures import member_gradients, population_grad_norm
from replicate.analysis import kgram_estimate, paper_c_kgram_lags
from replicate.experiments.subngrams.common import DataSettings, expand, fixed_set, history_losses
from replicate.experiments.subngrams.fig2 import constructions
from replicate.experiments.subngrams.prop32 import Prop32Settings, lag_set_row
from replicate.markov import context_indices, draw_kernels, lifted_stationary
from replicate.theory.subngrams import (
    GeneralConstruction,
    construction_limit,
    enumerate_chain,
    lagset_conditional,
    lagset_construction_limit,
    lemma31_surrogate,
    set_all_heads_bigram,
    set_lagset_construction,
    table_gradient,
)

EXAMPLE = [2, 0, 1, 2, 0, 2, 1, 1, 0, 2]  # our example for Fig. 2 (Sec. 4.1), S = 3, H = 2, c = 30
# supports and outputs of theta_*^1, theta_*^2, theta_*^3 computed by hand from Eqs. (8a)-(8c)
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
    """Check (a), Lemma B.1: k = 1 exactly; k >= 2 within 20 T e^{-c} at c = 20."""
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
    """`history_losses` (the dashed lines) recomputed with explicit loops (paper C, Fig. 1)."""
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


def _enumerate_chain(states: int, order: int, length: int, seed: int):
    """Every sequence of a stationary-start chain (App. H.1) with its probability and the
    law of the next token: kernel (S**m, S), tokens (N, L), probs (N,), next laws (N, S)."""
    kernel = draw_kernels(states, order, 0.5, 1, torch.Generator().manual_seed(seed))[0]
    tokens, probs = enumerate_chain(kernel[None], length)
    return kernel, tokens, probs[0], kernel[context_indices(tokens, order, states)[:, -1]]


def test_enumerate_chain_by_hand() -> None:
    """`enumerate_chain` against the chain rule written out token by token: a law on S**L
    sequences whose first window has the stationary law and whose steps follow the kernel."""
    kernel = draw_kernels(2, 2, 0.5, 1, torch.Generator().manual_seed(5))[0].double()
    pi = lifted_stationary(kernel[None])[0]
    tokens, probs = enumerate_chain(kernel[None], 5)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-14)
    for x, p in zip(tokens.tolist(), probs[0].tolist(), strict=True):
        by_hand = pi[2 * x[0] + x[1]].item()
        for t in range(2, 5):
            by_hand *= kernel[2 * x[t - 2] + x[t - 1], x[t]].item()
        assert p == pytest.approx(by_hand, rel=1e-13)


@pytest.mark.parametrize(
    ("order", "lags"), [(2, ()), (2, (1,)), (2, (2,)), (2, (1, 2)), (3, (1, 3)), (3, (2,))]
)
def test_lagset_conditional_brute_force(order: int, lags: tuple[int, ...]) -> None:
    """Lemma H.5 / App. H.2: the stationary conditional given any lag set against the
    conditional of the next token computed by summing over every sequence."""
    kernel, tokens, probs, law = _enumerate_chain(2, order, 6, seed=order)
    closed = lagset_conditional(kernel.expand(len(tokens), -1, -1), tokens, lags)
    for key in itertools.product(range(2), repeat=len(lags)):
        rows = torch.ones(len(tokens), dtype=torch.bool)
        for h, v in zip(lags, key, strict=True):
            rows &= tokens[:, -h] == v
        brute = (probs[rows, None] * law[rows]).sum(0) / probs[rows].sum()
        torch.testing.assert_close(closed[rows], brute.expand(int(rows.sum()), -1))
    assert closed.sub(law).abs().max() > 1e-3 or lags == tuple(range(1, order + 1))


def test_table_gradient_is_lemma31() -> None:
    """`table_gradient` against Lemma 3.1's closed form for a softmax table: the gradient of
    row r is E_k sum_{x: key(x) = r} p_tau(x) (p_theta(x) - y(x)) (paper C, Sec. 3)."""
    generator = torch.Generator().manual_seed(3)
    kernels = draw_kernels(2, 2, 0.5, 3, generator)
    tokens, probs = enumerate_chain(kernels, 5)
    keys = tokens[:, -1] * 2 + tokens[:, -3]  # lags 1 and 3
    table = torch.randn(3, 4, 2, dtype=torch.float64, generator=generator)
    target = torch.rand(3, len(tokens), 2, dtype=torch.float64, generator=generator)
    gradient, loss = table_gradient(table, keys, probs, target)
    residual = probs[..., None] * (
        table[:, keys].softmax(-1) * target.sum(-1, keepdim=True) - target
    )
    closed = torch.zeros_like(table).index_add_(1, keys, residual) / 3
    torch.testing.assert_close(gradient, closed, rtol=1e-12, atol=1e-15)
    assert loss > 0


@pytest.mark.parametrize("lags", [(1,), (1, 2), (2,), (1, 3)])
def test_proposition32_and_remark_c2(lags: tuple[int, ...]) -> None:
    """Prop. 3.2 (contiguous suffix) and Remark C.2 (any lag set), exactly, through the
    experiment's own row: the two gradients agree, theta_* is stationary above the Bayes
    loss, and a table reading one more lag breaks the identity (the check can fail)."""
    generator = torch.Generator().manual_seed(11)
    kernels = draw_kernels(2, 3, 0.5, 4, generator)
    row = lag_set_row(kernels, 6, lags, generator)
    assert row["identity_error"] < 1e-13
    assert row["gradient_norm"] > 1e-2
    assert row["stationary_gradient"] < 1e-14
    assert row["loss_gap"] > 1e-2
    assert row["control_error"] > 1e-2


def test_prop32_settings_refuse_bad_lag_sets() -> None:
    base = {"states": [2], "order": 3, "length": 6, "kernels": 2, "alpha": 0.5, "seed": 0}
    for suffixes, subsets, word in [
        ([[2]], [[1, 3]], "not a suffix"),
        ([[1]], [[1, 2]], "is a suffix"),
        ([[1, 2, 3]], [[2]], "reads every lag"),
        ([[1]], [[4]], "distinct lags in 1..3"),
    ]:
        with pytest.raises(ValueError, match=word):
            Prop32Settings(**base, suffixes=suffixes, subsets=subsets)


def _max_partial_match_loop(x: list[int], k: int, states: int) -> np.ndarray:
    """theta_*^k's c -> infinity output by hand: keys with the most matching lags (padded)."""
    t = len(x)
    matches = [sum(x[max(i - h, 0)] == x[t - h] for h in range(1, k)) for i in range(t)]
    best = [i for i in range(t) if matches[i] == max(matches)]
    return np.bincount([x[i] for i in best], minlength=states) / len(best)


def test_construction_limit_on_empty_match_sets() -> None:
    """`construction_limit` against the loop above, and theta_*^k at c = 40 against it on
    sequences whose padded match set is empty (our back-off derivation)."""
    data = DataSettings(states=5, order=4, alpha=0.5, seq_len=16)
    tokens = fixed_set(data, 300, 3, "test").tokens[0]
    for k in (2, 3, 4):
        limit = construction_limit(tokens, k, 5)
        loop = np.stack([_max_partial_match_loop(x, k, 5) for x in tokens.tolist()])
        np.testing.assert_allclose(limit.numpy(), loop, atol=1e-15)
        empty = kgram_estimate(tokens, paper_c_kgram_lags(k), 5, pad=True, last_position=True)
        empty = empty.isnan().any(-1)
        assert empty.sum() >= 5  # the check covers empty match sets
        with torch.no_grad():
            probs = constructions(5, 4, 16, [(k, 40.0)])(tokens[None])[0]
        assert (probs - limit).abs().max() < 1e-12


def test_appendix_f_constructions() -> None:
    """Eq. (30) at c = 40 computes the padded bigram; Eq. (36) computes the padded N-MLE
    counts of keys i < T-1 plus x_{T-1} (`lagset_construction_limit`), both by hand."""
    data = DataSettings(states=3, order=4, alpha=0.5, seq_len=12)
    tokens = fixed_set(data, 200, 4, "test").tokens[0]
    model = EnsembleDisentangled(DisentangledConfig(3, 3, 12, hidden="D"), 2, torch.float64)
    set_all_heads_bigram(model, 0, 40.0)
    set_lagset_construction(model, 1, (1, 3), 40.0)
    with torch.no_grad():
        probs = model(tokens[None].expand(2, -1, -1))
    for b, x in enumerate(tokens.tolist()):
        t = len(x)
        bigram = [x[i] for i in range(t) if x[max(i - 1, 0)] == x[t - 1]]
        if bigram:
            np.testing.assert_allclose(probs[0, b], np.bincount(bigram, minlength=3) / len(bigram))
        keys = [x[i] for i in range(t - 1) if all(x[max(i - h, 0)] == x[t - h] for h in (1, 3))]
        counts = np.bincount([*keys, x[-1]], minlength=3)
        np.testing.assert_allclose(probs[1, b], counts / counts.sum(), atol=1e-12)
    limit = lagset_construction_limit(tokens, (1, 3), 3)
    torch.testing.assert_close(probs[1], limit, rtol=0, atol=1e-12)


def test_lemma31_surrogate_gradient() -> None:
    """Lemma 3.1: the gradient of `lemma31_surrogate` is the cross-entropy gradient, checked
    by central finite differences of the loss along a random direction (theta_rand)."""
    data = DataSettings(states=3, order=3, alpha=0.5, seq_len=10)
    batch = expand(fixed_set(data, 64, 5, "gradset"), 1, torch.float64)
    model = EnsembleDisentangled(DisentangledConfig(3, 2, 10, hidden="D"), 1, torch.float64)
    model.init_members([5])
    with torch.no_grad():
        model.A1.normal_(generator=torch.Generator().manual_seed(0))
    params = list(model.parameters())
    surrogate = lemma31_surrogate(model(batch.tokens), batch.next_law, 1e-300).sum()
    grads = torch.autograd.grad(surrogate, params)
    gen = torch.Generator().manual_seed(1)
    direction = [torch.randn(p.shape, dtype=torch.float64, generator=gen) for p in params]
    objective, h = LastTokenLawCE(eps=1e-300), 1e-6

    def loss_at(step: float) -> float:
        with torch.no_grad():
            for p, d in zip(params, direction, strict=True):
                p.add_(step * d)
            value = float(objective.loss(model, SequenceBatch(*batch)).sum())
            for p, d in zip(params, direction, strict=True):
                p.sub_(step * d)
        return value

    numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
    analytic = float(sum((g * d).sum() for g, d in zip(grads, direction, strict=True)))
    assert abs(numeric) > 1e-3
    assert analytic == pytest.approx(numeric, rel=1e-6)


def _general_by_matrices(
    x: list[int], states: int, order: int, k: int, c: float, v2: torch.Tensor, log_eps: float
) -> torch.Tensor:
    """App. F.1's forward at the last query with Eqs. (32)-(35) as matrices on R^{n d}:
    one-hot block embeddings, layer 1's heads h = 1..k-1 (query l on key l - h with logit
    c, rows l < h on key 0), their values copying block 0's token to block h and added to
    r0; layer 2's logits r1[T-1]^T M2 r1[i] over keys i <= T-1; V2 (S, n d); softmax of
    log(|V2 r2| + eps)."""
    t, d = len(x), states + len(x)
    width = order * d

    def lift(vector_index: int, block: int) -> torch.Tensor:
        out = torch.zeros(width, dtype=torch.float64)
        out[block * d + vector_index] = 1.0
        return out

    def s(j: int, block: int) -> torch.Tensor:
        return lift(j, block)

    def p(i: int) -> torch.Tensor:
        return lift(states + i, 0)

    r0 = torch.stack([s(x[i], 0) + p(i) for i in range(t)])
    r1 = r0.clone()
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    for h in range(1, k):
        m1 = sum(torch.outer(p(q), p(max(q - h, 0))) for q in range(t))
        v1 = sum(torch.outer(s(j, h), s(j, 0)) for j in range(states))
        logits = (c * r0 @ m1 @ r0.T).masked_fill(~causal, -math.inf)
        r1 = r1 + logits.softmax(-1) @ r0 @ v1.T
    m2 = torch.zeros(width, width, dtype=torch.float64)
    for h in range(1, k):
        m2 = m2 + c * sum(torch.outer(s(j, h - 1), s(j, h)) for j in range(states))
    attention = (r1[-1] @ m2 @ r1.T).softmax(-1)
    out = (v2 @ (attention @ r1)).abs() + log_eps
    return out / out.sum()


def test_general_construction_against_its_matrices() -> None:
    """App. F.1: `GeneralConstruction` against Eqs. (32)-(35) as matrices (one-hot block
    embeddings of width n (S + T)), output and V2 gradient; at c = 40 its output is
    theta_*^k's limit (`construction_limit`) through the log MLP."""
    states, order, seq_len, eps = 3, 3, 7, 1e-8
    data = DataSettings(states=states, order=order, alpha=0.5, seq_len=seq_len)
    batch = fixed_set(data, 40, 5, "test")
    tokens, law = batch.tokens[0], batch.next_law[0]
    d = states + seq_len
    for k, c in ((1, 3.0), (2, 3.0), (3, 2.5), (3, 40.0)):
        model = GeneralConstruction(states, seq_len, k, c, eps)
        probs = model(tokens[None])[0]
        loss = -(law * probs.log()).sum(-1).mean()
        (compact,) = torch.autograd.grad(loss, [model.V2])
        full = torch.zeros(states, order * d, dtype=torch.float64)
        full[:, :states] = torch.eye(states, dtype=torch.float64)  # Eq. (35)
        full.requires_grad_(True)
        brute = torch.stack(
            [_general_by_matrices(x, states, order, k, c, full, eps) for x in tokens.tolist()]
        )
        torch.testing.assert_close(probs, brute.detach(), rtol=0, atol=1e-13)
        (grad,) = torch.autograd.grad(-(law * brute.log()).sum(-1).mean(), [full])
        torch.testing.assert_close(compact.norm(), grad.norm(), rtol=1e-12, atol=0)
        assert grad.norm() > 1e-3
        if c == 40.0:
            limit = (construction_limit(tokens, k, states) + eps) / (1 + states * eps)
            torch.testing.assert_close(probs, limit, rtol=0, atol=1e-13)
