"""The lag-set k-gram estimator against brute-force loops and the papers' hand examples."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from replicate.analysis import (
    add_alpha,
    kgram_counts,
    kgram_estimate,
    match_matrix,
    next_token_nll,
    order_lags,
    paper_c_kgram_lags,
    pseudo_attention_map,
    soft_cross_entropy,
)


def _brute_match(x: list[int], q: int, i: int, lags, min_key: int, pad: bool) -> bool:
    if i > q or i < min_key:
        return False
    for h in lags:
        ki, qi = i - h, q + 1 - h
        if pad:
            ki, qi = max(ki, 0), max(qi, 0)
        elif ki < 0 or qi < 0:
            return False
        if x[ki] != x[qi]:
            return False
    return True


def _brute_estimate(x, q, lags, states, min_key, pad, alpha):
    counts = [0] * states
    for i in range(len(x)):
        if _brute_match(x, q, i, lags, min_key, pad):
            counts[x[i]] += 1
    total = sum(counts)
    if alpha == 0 and total == 0:
        return [math.nan] * states
    return [(c + alpha) / (total + states * alpha) for c in counts]


CASES = [
    ((), False, None),
    ((1,), False, None),
    ((1, 2), False, None),
    ((1, 3), False, None),
    ((2,), False, 0),
    ((1, 2), True, None),
    ((1, 2, 3), True, None),
    ((1,), False, 4),
]


@pytest.mark.parametrize(("lags", "pad", "min_key"), CASES)
@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_estimates_equal_brute_force(lags, pad, min_key, alpha) -> None:
    states = 3
    tokens = torch.randint(0, states, (5, 14), generator=torch.Generator().manual_seed(0))
    default_key = min_key if min_key is not None else (0 if pad else max(lags, default=0))
    every = kgram_estimate(tokens, lags, states, alpha=alpha, min_key=min_key, pad=pad)
    last = kgram_estimate(
        tokens, lags, states, alpha=alpha, min_key=min_key, pad=pad, last_position=True
    )
    match = match_matrix(tokens, lags, min_key=min_key, pad=pad)
    assert every.shape == (5, 14, 3) and last.shape == (5, 3) and match.shape == (5, 14, 14)
    for b in range(5):
        x = tokens[b].tolist()
        for q in range(14):
            expected = torch.tensor(
                _brute_estimate(x, q, lags, states, default_key, pad, alpha), dtype=torch.float64
            )
            assert torch.allclose(every[b, q], expected, equal_nan=True)
            for i in range(14):
                assert bool(match[b, q, i]) == _brute_match(x, q, i, lags, default_key, pad)
        assert torch.allclose(last[b], every[b, -1], equal_nan=True)


def test_chunking_does_not_change_counts(monkeypatch) -> None:
    from replicate.analysis import kgram

    tokens = torch.randint(0, 2, (9, 20), generator=torch.Generator().manual_seed(1))
    whole = kgram_counts(tokens, (1, 2), 2)
    monkeypatch.setattr(kgram, "_CHUNK_ELEMENTS", 20 * 20 * 2)
    assert torch.equal(kgram_counts(tokens, (1, 2), 2), whole)


def test_lag_helpers_keep_the_papers_apart() -> None:
    assert paper_c_kgram_lags(1) == ()
    assert paper_c_kgram_lags(3) == (1, 2)
    assert order_lags(2) == (1, 2)
    assert order_lags(0) == ()
    with pytest.raises(ValueError):
        paper_c_kgram_lags(0)
    with pytest.raises(ValueError):
        kgram_estimate(torch.zeros(1, 4, dtype=torch.int64), (0, 1), 2)


def test_spec_d_hand_example() -> None:
    """Paper D's k-gram (Sec. 2.1): k = 2, x = 0,1,1,0,1,1 at n = 6: after (1,1) only x_4 = 0
    follows -> e_0."""
    tokens = torch.tensor([[0, 1, 1, 0, 1, 1]])
    estimate = kgram_estimate(tokens, order_lags(2), 2, last_position=True)
    assert torch.equal(estimate, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    laplace = kgram_estimate(tokens, order_lags(2), 2, alpha=1.0, last_position=True)
    assert torch.allclose(laplace, torch.tensor([[2 / 3, 1 / 3]], dtype=torch.float64))
    pseudo = pseudo_attention_map(tokens, order_lags(2))
    assert torch.equal(pseudo[0, 5], torch.tensor([0, 0, 0, 1.0, 0, 0], dtype=torch.float64))
    assert (pseudo[0, :2] == 0).all()  # rows n <= k are empty


def test_spec_d_laplace_before_the_context_exists() -> None:
    """The authors' ``empirical_est``: the beta = 1 estimate is 1/S for n < k and with no counts."""
    tokens = torch.tensor([[0, 1, 0, 0, 1]])
    estimate = kgram_estimate(tokens, order_lags(3), 2, alpha=1.0)
    assert torch.allclose(estimate[0, :3], torch.full((3, 2), 0.5, dtype=torch.float64))


FIG2 = torch.tensor([[2, 0, 1, 2, 0, 2, 1, 1, 0, 2]])


def test_spec_c_fig2_example() -> None:
    """Paper C Fig. 2-like example: Def. 2.1 bigram (2/3, 1/3, 0); padded bigram support
    {0, 1, 4, 6} with (0.5, 0.25, 0.25); padded trigram support {6} with (0, 1, 0); unigram
    (0.3, 0.3, 0.4)."""
    bigram = kgram_estimate(FIG2, paper_c_kgram_lags(2), 3, last_position=True)
    assert torch.allclose(bigram, torch.tensor([[2 / 3, 1 / 3, 0.0]], dtype=torch.float64))
    padded = kgram_estimate(FIG2, paper_c_kgram_lags(2), 3, pad=True, last_position=True)
    assert torch.allclose(padded, torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64))
    support = match_matrix(FIG2, paper_c_kgram_lags(2), pad=True)[0, -1].nonzero().flatten()
    assert support.tolist() == [0, 1, 4, 6]
    trigram = kgram_estimate(FIG2, paper_c_kgram_lags(3), 3, pad=True, last_position=True)
    assert torch.allclose(trigram, torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64))
    support = match_matrix(FIG2, paper_c_kgram_lags(3), pad=True)[0, -1].nonzero().flatten()
    assert support.tolist() == [6]
    unigram = kgram_estimate(FIG2, paper_c_kgram_lags(1), 3, last_position=True)
    assert torch.allclose(unigram, torch.tensor([[0.3, 0.3, 0.4]], dtype=torch.float64))


def test_backoff_drops_the_largest_lag_until_a_match_exists() -> None:
    """Our ``mle`` convention: the empty trigram match set backs off to the bigram."""
    tokens = torch.tensor([[0, 1, 2, 0, 2, 1]])
    raw = kgram_estimate(tokens, (1, 2), 3, last_position=True)
    assert torch.isnan(raw).all()
    backed = kgram_estimate(tokens, (1, 2), 3, backoff=True, last_position=True)
    bigram = kgram_estimate(tokens, (1,), 3, last_position=True)
    assert torch.equal(backed, bigram)
    assert torch.equal(bigram, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64))
    every = kgram_estimate(tokens, (1, 2), 3, backoff=True)
    assert not torch.isnan(every).any()
    with pytest.raises(ValueError):
        kgram_estimate(tokens, (1,), 3, alpha=1.0, backoff=True)


def test_pseudo_map_rows_sum_to_one_or_zero() -> None:
    tokens = torch.randint(0, 2, (4, 24), generator=torch.Generator().manual_seed(2))
    pseudo = pseudo_attention_map(tokens, order_lags(2))
    match = match_matrix(tokens, order_lags(2))
    sums = pseudo.sum(-1)
    assert torch.allclose(sums, match.any(-1).double())
    assert (pseudo.triu(1) == 0).all()
    assert torch.equal(pseudo > 0, match)


def test_next_token_nll_and_soft_cross_entropy() -> None:
    tokens = torch.tensor([[0, 1, 1, 0]])
    probs = add_alpha(kgram_counts(tokens, (), 2), 1.0)
    nll = next_token_nll(probs, tokens)
    # unigram Laplace at q=0,1,2 with counts (1,0), (1,1), (1,2): P(x_1=1)=1/3, 1/2, 2/5
    expected = -torch.log(torch.tensor([[1 / 3, 1 / 2, 2 / 5]], dtype=torch.float64))
    assert torch.allclose(nll, expected)
    target = torch.tensor([[0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    probs = torch.tensor([[0.25, 0.75], [0.0, 1.0]], dtype=torch.float64)
    expected_ce = (-(0.5 * math.log(0.25 + 1e-8) + 0.5 * math.log(0.75 + 1e-8))) / 2 - (
        math.log(1e-8) / 2
    )
    assert math.isclose(soft_cross_entropy(probs, target), expected_ce, rel_tol=1e-12)


def test_counts_match_itertools_reference_for_binary_orders() -> None:
    """Paper D's transition counts N_n(c, s) (Sec. 2.1) for every n and order 1..3."""
    tokens = torch.randint(0, 2, (3, 16), generator=torch.Generator().manual_seed(3))
    for k in (1, 2, 3):
        counts = kgram_counts(tokens, order_lags(k), 2)
        for b, q in itertools.product(range(3), range(16)):
            x = tokens[b].tolist()
            n = q + 1  # 1-indexed query
            if n < k:
                assert counts[b, q].sum() == 0
                continue
            context = x[n - k : n]
            expected = [0, 0]
            for i in range(k + 1, n + 1):  # 1-indexed i in I_n
                if x[i - 1 - k : i - 1] == context:
                    expected[x[i - 1]] += 1
            assert counts[b, q].tolist() == expected
