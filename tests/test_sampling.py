"""The scan sampler equals the per-step loop and has the right statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replicate.markov import (
    ChainParameterError,
    binary_kernel,
    binary_stationary,
    sample_chain,
    sample_chain_loop,
    symmetric_kernel,
)


def _both(kernel, initial, batch, length, seed):
    a = sample_chain(kernel, initial, batch, length, torch.Generator().manual_seed(seed))
    b = sample_chain_loop(kernel, initial, batch, length, torch.Generator().manual_seed(seed))
    return a, b


@pytest.mark.parametrize("length", [1, 2, 3, 17, 256, 1025])
def test_scan_equals_loop_binary(length: int) -> None:
    kernel = torch.from_numpy(binary_kernel(0.5, 0.8))
    a, b = _both(kernel, torch.from_numpy(binary_stationary(0.5, 0.8)), 5, length, 11)
    assert a.shape == (5, length)
    assert torch.equal(a, b)


def test_scan_equals_loop_per_sequence_kernels() -> None:
    raw = torch.rand(6, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    kernels = raw / raw.sum(-1, keepdim=True)
    a, b = _both(kernels, torch.full((4,), 0.25, dtype=torch.float64), 6, 300, 5)
    assert torch.equal(a, b)
    assert len(torch.unique(a)) == 4  # every state is visited: the comparison is not trivial


def test_transition_and_marginal_frequencies() -> None:
    """Spec A, Fig. 2b check: |P-hat_01 - p|, |P-hat_10 - q| <= 0.01; P(x_n=1) ~ pi_1."""
    p, q = 0.2, 0.3
    x = sample_chain(
        torch.from_numpy(binary_kernel(p, q)),
        torch.from_numpy(binary_stationary(p, q)),
        256,
        1024,
        torch.Generator().manual_seed(0),
    ).numpy()
    prev, nxt = x[:, :-1], x[:, 1:]
    assert abs(nxt[prev == 0].mean() - p) <= 0.01
    assert abs(1 - nxt[prev == 1].mean() - q) <= 0.01
    for n in (0, 511, 1023):
        assert abs(x[:, n].mean() - 0.4) <= 0.06  # 256 draws: 3.5 standard errors


def test_symmetric_chain_frequencies() -> None:
    s, p = 5, 0.9
    x = sample_chain(
        torch.from_numpy(symmetric_kernel(s, p)),
        torch.full((s,), 1 / s, dtype=torch.float64),
        64,
        2048,
        torch.Generator().manual_seed(1),
    ).numpy()
    counts = np.zeros((s, s))
    np.add.at(counts, (x[:, :-1], x[:, 1:]), 1)
    freq = counts / counts.sum(1, keepdims=True)
    np.testing.assert_allclose(np.diag(freq), 1 - p, atol=0.01)
    off = freq[~np.eye(s, dtype=bool)]
    np.testing.assert_allclose(off, p / (s - 1), atol=0.01)


def test_same_seed_same_path_and_different_seed_differs() -> None:
    kernel = torch.from_numpy(binary_kernel(0.3, 0.3))
    init = torch.tensor([0.5, 0.5], dtype=torch.float64)
    a = sample_chain(kernel, init, 4, 64, torch.Generator().manual_seed(7))
    b = sample_chain(kernel, init, 4, 64, torch.Generator().manual_seed(7))
    c = sample_chain(kernel, init, 4, 64, torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_bad_shapes_are_rejected() -> None:
    kernel = torch.from_numpy(binary_kernel(0.3, 0.3))
    with pytest.raises(ChainParameterError, match="initial law"):
        sample_chain(kernel, torch.ones(3) / 3, 2, 8)
    with pytest.raises(ChainParameterError, match="length must be >= 1"):
        sample_chain(kernel, torch.ones(2) / 2, 2, 0)


def test_members_sampled_together_equal_members_sampled_alone() -> None:
    """The DataModule's one-scan sampling of an ensemble equals per-member sampling."""
    from lightning_modules import ChainMember
    from lightning_modules.sources import sample_members

    members = [
        ChainMember(binary_kernel(0.5, 0.8), binary_stationary(0.5, 0.8), 0),
        ChainMember(symmetric_kernel(2, 0.3), np.array([0.5, 0.5]), 1),
    ]
    together = sample_members(members, 3, 40, [torch.Generator().manual_seed(s) for s in (10, 11)])
    for i, (m, seed) in enumerate(zip(members, (10, 11), strict=True)):
        alone = sample_chain(
            torch.from_numpy(m.kernel),
            torch.from_numpy(m.initial),
            3,
            40,
            torch.Generator().manual_seed(seed),
        )
        assert torch.equal(together.tokens[i], alone)
