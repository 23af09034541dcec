"""Seeded, vectorised samplers for finite first-order Markov chains.

A path is driven by i.i.d. uniforms u_1..u_N: x_1 = F_init^{-1}(u_1) and
x_{n+1} = F_{x_n}^{-1}(u_{n+1}), with F_s the CDF of row s of the kernel. For a fixed
uniform u_{n+1} the step is a map g_n: [S] -> [S], so x_{n+1} = (g_n o ... o g_1)(x_1).
`sample_chain` computes all prefix compositions with a Hillis-Steele scan (log2 N
vectorised gather steps instead of N sequential ones); `sample_chain_loop` is the plain
per-step loop. Given the same generator state both return the *same* path.
"""

from __future__ import annotations

import torch

from replicate.markov.chains import ChainParameterError


def _as_batched_kernel(kernel: torch.Tensor, batch: int) -> torch.Tensor:
    kernel = torch.as_tensor(kernel, dtype=torch.float64)
    if kernel.ndim == 2:
        kernel = kernel.expand(batch, *kernel.shape)
    if kernel.ndim != 3 or kernel.shape[0] != batch or kernel.shape[1] != kernel.shape[2]:
        raise ChainParameterError(
            f"kernel must be (S, S) or (batch, S, S), got {tuple(kernel.shape)}"
        )
    return kernel


def _as_batched_initial(initial: torch.Tensor, batch: int, n_states: int) -> torch.Tensor:
    initial = torch.as_tensor(initial, dtype=torch.float64)
    if initial.shape == (n_states,):
        initial = initial.expand(batch, n_states)
    if initial.shape != (batch, n_states):
        raise ChainParameterError(
            f"initial law must be ({n_states},) or ({batch}, {n_states}), "
            f"got {tuple(initial.shape)}"
        )
    return initial


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index s with F(s-1) <= u < F(s) along the last axis of ``probs``."""
    cdf = probs.cumsum(-1)
    return (u.unsqueeze(-1) >= cdf).sum(-1).clamp_(max=probs.shape[-1] - 1)


def _draw(batch: int, length: int, generator: torch.Generator | None) -> torch.Tensor:
    if length < 1 or batch < 1:
        raise ChainParameterError(
            f"batch and length must be >= 1, got batch={batch}, length={length}"
        )
    return torch.rand(batch, length, dtype=torch.float64, generator=generator)


def sample_chain(
    kernel: torch.Tensor,
    initial: torch.Tensor,
    batch: int,
    length: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample ``batch`` paths of ``length`` states; returns a (batch, length) int64 tensor.

    ``kernel`` is (S, S) shared by every path, or (batch, S, S) for per-sequence kernels
    (in-context chains). ``initial`` is the law of x_1, (S,) or (batch, S).
    """
    kernel = _as_batched_kernel(kernel, batch)
    n_states = kernel.shape[-1]
    initial = _as_batched_initial(initial, batch, n_states)
    u = _draw(batch, length, generator)
    x1 = _inverse_cdf(initial, u[:, 0])
    if length == 1:
        return x1.unsqueeze(1)
    # maps[b, n, s] = state after step n from state s (steps n = 1..length-1).
    maps = _inverse_cdf(kernel.unsqueeze(1), u[:, 1:, None])
    offset = 1
    steps = length - 1
    while offset < steps:
        # prefix[n] <- prefix[n] o prefix[n - offset]
        composed = torch.gather(maps[:, offset:], 2, maps[:, :-offset])
        maps = torch.cat([maps[:, :offset], composed], dim=1)
        offset *= 2
    index = x1.view(batch, 1, 1).expand(batch, steps, 1)
    rest = torch.gather(maps, 2, index).squeeze(2)
    return torch.cat([x1.unsqueeze(1), rest], dim=1)


def sample_chain_loop(
    kernel: torch.Tensor,
    initial: torch.Tensor,
    batch: int,
    length: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Reference sampler: one vectorised-over-batch step per position (the authors' style)."""
    kernel = _as_batched_kernel(kernel, batch)
    n_states = kernel.shape[-1]
    initial = _as_batched_initial(initial, batch, n_states)
    u = _draw(batch, length, generator)
    out = torch.empty(batch, length, dtype=torch.int64)
    out[:, 0] = _inverse_cdf(initial, u[:, 0])
    rows = torch.arange(batch)
    for n in range(1, length):
        out[:, n] = _inverse_cdf(kernel[rows, out[:, n - 1]], u[:, n])
    return out
