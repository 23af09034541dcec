"""The in-context k-th-order sampler against brute force and its statistics (paper D
Sec. 2.1, App. H.3; paper C Sec. 2.2, Eq. (1))."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from replicate.markov import (
    ChainParameterError,
    InContextSource,
    context_indices,
    draw_kernels,
    lifted_kernel,
    lifted_stationary,
    sample_from_kernels,
    sample_from_kernels_loop,
    true_next_token_nll,
)
from replicate.markov.incontext import _half_gamma, _log_gamma


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _transition_counts(tokens: torch.Tensor, order: int, states: int) -> torch.Tensor:
    """counts[c, s] of (context, next token) over every window of every path."""
    contexts = context_indices(tokens[:, :-1], order, states)
    nxt = tokens[:, order:]
    flat = (contexts * states + nxt).reshape(-1)
    return torch.bincount(flat, minlength=states**order * states).view(-1, states).double()


def _within_standard_errors(counts: torch.Tensor, kernel: torch.Tensor, z: float = 4.0) -> None:
    totals = counts.sum(-1, keepdim=True)
    assert (totals > 100).all(), "every context must be visited for the check to mean anything"
    freq = counts / totals
    se = (kernel * (1 - kernel) / totals).sqrt()
    assert ((freq - kernel).abs() <= z * se + 1e-12).all(), (freq - kernel).abs() / se


@pytest.mark.parametrize("states", [2, 3])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_transition_frequencies_match_a_fixed_kernel(states: int, order: int) -> None:
    """Paper D's source (Sec. 2.1): ~1e6 tokens from one kernel; every frequency within 4
    standard errors."""
    kernel = draw_kernels(states, order, 2.0, 1, _gen(order * 10 + states))
    batch, length = 4000, 250
    tokens = sample_from_kernels(kernel.expand(batch, -1, -1), length, "uniform", _gen(1))
    _within_standard_errors(_transition_counts(tokens, order, states), kernel[0])


def test_uniform_initial_tokens_pass_chi_square() -> None:
    source = InContextSource(states=3, order=2, alpha=0.5)
    tokens, _ = source.sample(20000, 4, _gen(3))
    windows = context_indices(tokens[:, :2], 2, 3).squeeze(-1)
    observed = torch.bincount(windows, minlength=9).numpy()
    assert stats.chisquare(observed).pvalue > 1e-3
    # the test has power: the (triangular) law of x_0 + x_1 is rejected as uniform
    skewed = torch.bincount(tokens[:, 0] + tokens[:, 1], minlength=5).numpy()
    assert stats.chisquare(skewed).pvalue < 1e-6


def test_lifted_stationary_is_the_power_iteration_limit() -> None:
    kernels = draw_kernels(3, 2, 0.7, 5, _gen(4))
    lifted = lifted_kernel(kernels)
    assert torch.allclose(lifted.sum(-1), torch.ones(5, 9, dtype=torch.float64))
    start = torch.full((5, 1, 9), 1 / 9, dtype=torch.float64)
    limit = (start @ torch.linalg.matrix_power(lifted, 4096)).squeeze(1)
    assert torch.allclose(lifted_stationary(kernels), limit, atol=1e-10)


def test_lifted_kernel_moves_the_window() -> None:
    """Xi[c, c'] = P[c, s] exactly when c' = (x_2, ..., x_k, s) (oldest most significant)."""
    kernel = draw_kernels(2, 3, 1.0, 1, _gen(5))[0]
    lifted = lifted_kernel(kernel)
    for c in range(8):
        bits = [(c >> 2) & 1, (c >> 1) & 1, c & 1]
        for s in range(2):
            nxt = bits[1] * 4 + bits[2] * 2 + s
            assert lifted[c, nxt] == kernel[c, s]
        assert lifted[c].count_nonzero() == 2


def test_stationary_initial_windows_follow_the_lifted_law() -> None:
    """The first window and a later window are both distributed as pi (chi-square)."""
    source = InContextSource(states=2, order=2, alpha=1.0, initial="stationary", per_kernel=30000)
    drawn = source.draw(30000, 8, _gen(6))
    pi = lifted_stationary(drawn.kernels[:1])[0]
    for start in (0, 5):
        windows = context_indices(drawn.tokens[:, start : start + 2], 2, 2).squeeze(-1)
        observed = torch.bincount(windows, minlength=4).numpy()
        assert stats.chisquare(observed, (pi * 30000).numpy()).pvalue > 1e-3
    long_run = sample_from_kernels(drawn.kernels[:200], 2000, "uniform", _gen(7))
    freq = torch.bincount(context_indices(long_run[:, 100:], 2, 2).reshape(-1), minlength=4)
    assert torch.allclose(freq.double() / freq.sum(), pi, atol=5e-3)


def test_per_kernel_groups_use_exactly_batch_over_per_kernel_kernels() -> None:
    drawn = InContextSource(states=3, order=2, alpha=1.0, per_kernel=4).draw(12, 10, _gen(8))
    assert torch.unique(drawn.kernels, dim=0).shape[0] == 3
    for group in range(3):
        block = drawn.kernels[4 * group : 4 * group + 4]
        assert (block == block[0]).all()
    assert not torch.equal(drawn.tokens[0], drawn.tokens[1])  # same kernel, own paths
    with pytest.raises(ChainParameterError, match="multiple of per_kernel"):
        InContextSource(states=3, order=2, alpha=1.0, per_kernel=5).sample(12, 10, _gen(8))


@pytest.mark.parametrize("initial", ["uniform", "stationary"])
def test_scan_equals_the_per_sequence_loop(initial: str) -> None:
    kernels = draw_kernels(3, 3, 0.5, 7, _gen(9))
    fast = sample_from_kernels(kernels, 60, initial, _gen(10))
    slow = sample_from_kernels_loop(kernels, 60, initial, _gen(10))
    assert torch.equal(fast, slow)
    assert fast.dtype == torch.int64 and fast.shape == (7, 60)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_next_law_is_the_kernel_row_of_the_last_context(order: int) -> None:
    """Paper C's soft target y = P_tau[last n-1 tokens] (Eq. (1))."""
    drawn = InContextSource(states=3, order=order, alpha=0.5).draw(50, 17, _gen(11))
    for b in range(50):
        last = drawn.tokens[b, -order:].tolist()
        context = sum(tok * 3 ** (order - 1 - j) for j, tok in enumerate(last))
        assert torch.equal(drawn.next_law[b], drawn.kernels[b, context])
    tokens, law = InContextSource(states=3, order=order, alpha=0.5).sample(50, 17, _gen(11))
    assert torch.equal(tokens, drawn.tokens) and torch.equal(law, drawn.next_law)
    assert law.dtype == torch.float64 and law.shape == (50, 3)


def test_dirichlet_rows_have_the_dirichlet_moments() -> None:
    """Mean 1/S and variance alpha (S alpha - alpha) / ((S alpha)^2 (S alpha + 1))."""
    for alpha in (0.1, 0.5, 1.0, 3.0):
        rows = draw_kernels(4, 1, alpha, 10000, _gen(12)).reshape(-1, 4)
        a0 = 4 * alpha
        variance = alpha * (a0 - alpha) / (a0**2 * (a0 + 1))
        se_mean = math.sqrt(variance / rows.shape[0])
        assert (rows.mean(0) - 0.25).abs().max() < 4 * se_mean
        assert abs(rows.var(0).mean().item() / variance - 1) < 0.05
        assert (rows > 0).all() and torch.allclose(rows.sum(-1), torch.ones(rows.shape[0]).double())


@pytest.mark.parametrize("alpha", [0.5, 1.0, 0.7, 2.0])
def test_gamma_variates_follow_the_gamma_law(alpha: float) -> None:
    """The Gamma(alpha, 1) variates behind every Dirichlet row, by a Kolmogorov-Smirnov test
    against scipy's Gamma law: the one-draw form of alpha = 1/2 (E cos^2(2 pi U')) and the
    rejection sampler (any other alpha)."""
    cpu = torch.device("cpu")
    if alpha == 0.5:
        gamma = _half_gamma(200_000, _gen(14), cpu)
    else:
        gamma = _log_gamma(alpha, 200_000, _gen(14), cpu).exp()
    assert stats.kstest(gamma.numpy(), stats.gamma(alpha).cdf).pvalue > 1e-3
    # A wrong shape is rejected at this sample size: the test has the power to fail.
    assert stats.kstest(gamma.numpy(), stats.gamma(alpha * 1.05).cdf).pvalue < 1e-6


def test_substitution_rate_and_uniform_other_symbol() -> None:
    eps = 0.25
    drawn = InContextSource(states=3, order=2, alpha=1.0, substitution=eps).draw(2000, 64, _gen(13))
    flipped = drawn.tokens != drawn.clean
    n = flipped.numel()
    assert abs(flipped.float().mean().item() - eps) < 4 * math.sqrt(eps * (1 - eps) / n)
    assert flipped[:, :2].float().mean() > 0.2  # the initial tokens are corrupted too
    shift = ((drawn.tokens - drawn.clean) % 3)[flipped]
    assert stats.chisquare(torch.bincount(shift, minlength=3)[1:].numpy()).pvalue > 1e-3
    noiseless = InContextSource(states=3, order=2, alpha=1.0).draw(2000, 64, _gen(13))
    assert torch.equal(drawn.clean, noiseless.tokens)
    assert torch.equal(drawn.kernels, noiseless.kernels)
    expected = (1 - eps) * noiseless.next_law + eps * (1 - noiseless.next_law) / 2
    assert torch.allclose(drawn.next_law, expected)


def test_binary_substitution_is_a_bit_flip() -> None:
    drawn = InContextSource(states=2, order=1, alpha=1.0, substitution=1.0).draw(10, 20, _gen(14))
    assert torch.equal(drawn.tokens, 1 - drawn.clean)


def test_perturbation_marginal_is_the_mixed_kernel() -> None:
    """E Q_t = uniform, so the observed chain has kernel (1 - eps) P + eps / S
    (paper D, App. H.3.2)."""
    eps, batch = 0.4, 5000
    source = InContextSource(states=3, order=2, alpha=2.0, per_kernel=batch, perturbation=eps)
    drawn = source.draw(batch, 200, _gen(15))
    kernel = drawn.kernels[0]
    mixed = (1 - eps) * kernel + eps / 3
    counts = _transition_counts(drawn.tokens, 2, 3)
    _within_standard_errors(counts, mixed)
    freq = counts / counts.sum(-1, keepdim=True)
    assert (freq - kernel).abs().max() > 0.02  # distinguishable from the clean kernel
    noiseless = InContextSource(states=3, order=2, alpha=2.0, per_kernel=batch)
    assert torch.equal(drawn.clean, noiseless.draw(batch, 200, _gen(15)).tokens)
    last = context_indices(drawn.tokens[:, -2:], 2, 3).squeeze(-1)
    assert torch.allclose(drawn.next_law, mixed[last])


def test_perturbed_path_equals_a_per_token_loop() -> None:
    """x_{t+1} = F^{-1}((1 - eps) P[c_t] + eps Q_t)(u_{t+1}), token by token in plain Python,
    from the generator's draws in the source's order: kernels, path uniforms, then Q."""
    states, order, eps, batch, length = 3, 2, 0.3, 6, 40
    drawn = InContextSource(states, order, 1.0, perturbation=eps).draw(batch, length, _gen(18))
    gen = _gen(18)
    kernels = draw_kernels(states, order, 1.0, batch, gen).tolist()
    uniforms = torch.rand(batch, length, dtype=torch.float64, generator=gen)
    mix = torch.empty(batch, length, states, dtype=torch.float64).exponential_(generator=gen)
    mix = (mix / mix.sum(-1, keepdim=True)).tolist()
    for b in range(batch):
        path = [min(int(u * states), states - 1) for u in uniforms[b, :order].tolist()]
        for t in range(order, length):
            context = sum(tok * states ** (order - 1 - j) for j, tok in enumerate(path[-order:]))
            cumulative, token = 0.0, states - 1
            for s, (p, q) in enumerate(zip(kernels[b][context], mix[b][t], strict=True)):
                cumulative += (1.0 - eps) * p + eps * q
                if uniforms[b, t].item() < cumulative:
                    token = s
                    break
            path.append(token)
        assert drawn.tokens[b].tolist() == path


def test_same_generator_state_gives_the_same_batch() -> None:
    for source in (
        InContextSource(states=5, order=2, alpha=0.5),
        InContextSource(states=2, order=3, alpha=1.0, initial="stationary", per_kernel=2),
        InContextSource(states=2, order=2, alpha=1.0, perturbation=0.1),
        InContextSource(states=3, order=1, alpha=1.0, substitution=0.1),
    ):
        a = source.sample(8, 33, _gen(16))
        b = source.sample(8, 33, _gen(16))
        c = source.sample(8, 33, _gen(17))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize(
    "source",
    [
        InContextSource(3, 2, 0.5),
        InContextSource(2, 3, 1.0, initial="stationary", per_kernel=4),
        InContextSource(3, 2, 1.0, substitution=0.2),
        InContextSource(3, 1, 1.0, perturbation=0.3),
    ],
    ids=["plain", "stationary-per-kernel", "substitution", "perturbation"],
)
def test_draws_of_many_generators_equal_separate_draws(source: InContextSource) -> None:
    """The joint scan of `draw_many` gives every generator its own draw, bit for bit, and
    leaves each generator where a single draw leaves it."""
    joint_gens, single_gens = [_gen(s) for s in (3, 4, 5)], [_gen(s) for s in (3, 4, 5)]
    joint = source.draw_many(8, 20, joint_gens)
    for drawn, gen, joint_gen in zip(joint, single_gens, joint_gens, strict=True):
        alone = source.draw(8, 20, gen)
        for name, value in alone._asdict().items():
            assert torch.equal(getattr(drawn, name), value), name
        assert torch.equal(gen.get_state(), joint_gen.get_state())
    tokens, law = source.sample_many(8, 20, [_gen(s) for s in (3, 4, 5)])
    assert torch.equal(tokens, torch.stack([d.tokens for d in joint]))
    assert torch.equal(law, torch.stack([d.next_law for d in joint]))


@pytest.mark.parametrize("tables_per_scan", [1, 2, 5])
def test_scans_split_by_table_size_give_the_same_draws(
    tables_per_scan: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Draws whose kernel tables exceed `JOINT_SCAN_BYTES` are scanned in groups: the same
    draws, whatever the grouping (here 5 generators in groups of 1, 2 and 5)."""
    import replicate.markov.incontext as incontext

    source = InContextSource(3, 2, 0.5)
    table = 8 * 9 * 3 * 8  # batch 8, 9 contexts, 3 states, float64
    monkeypatch.setattr(incontext, "JOINT_SCAN_BYTES", table * tables_per_scan)
    grouped = source.draw_many(8, 20, [_gen(s) for s in range(5)])
    for seed, drawn in enumerate(grouped):
        alone = source.draw(8, 20, _gen(seed))
        assert all(torch.equal(a, b) for a, b in zip(drawn, alone, strict=True))


def test_members_of_one_source_are_drawn_together_as_if_alone() -> None:
    """`sample_members` joins members of equal sources (any order) and keeps each draw."""
    from lightning_modules.sources import ChainMember, Member, sample_members

    a, b = InContextSource(3, 2, 0.5), InContextSource(2, 1, 1.0)
    kernel = torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64).numpy()
    members = [Member(a, 0), Member(b, 1), Member(a, 2), ChainMember(kernel, kernel[0], 3)]
    batch = sample_members(members, 6, 10, [_gen(s) for s in range(4)])
    for i, m in enumerate(members):
        tokens, _ = m.source.sample(6, 10, _gen(i))
        assert torch.equal(batch.tokens[i], tokens)
    assert batch.next_law is None  # the fixed chain has no law: none is returned


def test_key_identifies_the_distribution() -> None:
    base = InContextSource(states=3, order=2, alpha=0.5)
    assert base.key() == InContextSource(states=3, order=2, alpha=0.5).key()
    others = [
        InContextSource(states=3, order=2, alpha=1.0),
        InContextSource(states=3, order=2, alpha=0.5, initial="stationary"),
        InContextSource(states=3, order=2, alpha=0.5, per_kernel=2),
        InContextSource(states=3, order=2, alpha=0.5, substitution=0.1),
        InContextSource(states=3, order=2, alpha=0.5, perturbation=0.1),
        InContextSource(states=3, order=1, alpha=0.5),
    ]
    assert len({base.key(), *(o.key() for o in others)}) == 1 + len(others)


def test_invalid_sources_are_refused() -> None:
    with pytest.raises(ChainParameterError):
        InContextSource(states=1, order=2, alpha=0.5)
    with pytest.raises(ChainParameterError):
        InContextSource(states=2, order=0, alpha=0.5)
    with pytest.raises(ChainParameterError):
        InContextSource(states=2, order=1, alpha=0.0)
    with pytest.raises(ChainParameterError):
        InContextSource(states=2, order=1, alpha=1.0, substitution=0.1, perturbation=0.1)
    with pytest.raises(ChainParameterError):
        InContextSource(states=2, order=3, alpha=1.0).sample(4, 2, _gen(0))


def test_true_next_token_nll_against_a_loop() -> None:
    """Paper D's L_true terms (the authors' ``optimal_est``): log S for initial targets."""
    drawn = InContextSource(states=3, order=2, alpha=0.5).draw(6, 12, _gen(18))
    nll = true_next_token_nll(drawn.kernels, drawn.tokens)
    assert nll.shape == (6, 11)
    for b in range(6):
        x = drawn.tokens[b].tolist()
        for t in range(1, 12):
            if t < 2:
                expected = math.log(3)
            else:
                expected = -math.log(drawn.kernels[b, x[t - 2] * 3 + x[t - 1], x[t]].item())
            assert abs(nll[b, t - 1].item() - expected) < 1e-12
