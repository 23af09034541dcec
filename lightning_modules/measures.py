"""Per-member measurements of an ensemble model: gradient norms, the population gradient.

Every tensor's axis 0 is the ensemble axis E, so a member's gradient is its own slice of the
gradient of the summed member losses. No Lightning import: code that only measures a model
starts without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from lightning_modules.objectives import Objective
from lightning_modules.sources import SequenceBatch

Probe = Callable[[nn.Module], np.ndarray]
"""A measurement of the model at an evaluation step: an array with leading axis E."""


def member_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """(E,) Euclidean norm of each member's slice (axis 0) over all ``tensors``."""
    squares = sum(t.detach().double().pow(2).reshape(t.shape[0], -1).sum(1) for t in tensors)
    return torch.as_tensor(squares).sqrt()


def member_gradients(
    model: nn.Module, objective: Objective, batch: SequenceBatch
) -> list[torch.Tensor]:
    """Gradients of the summed member losses on ``batch``: slice i is member i's own
    gradient. Parameters the loss does not reach get zeros; ``.grad`` is left untouched."""
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    moved = SequenceBatch(*(t if t is None else t.to(device) for t in batch))
    with torch.enable_grad():
        loss = objective.loss(model, moved).sum()
        return list(torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True))


def population_grad_norm(
    model: nn.Module, objective: Objective, batch: SequenceBatch, chunks: int
) -> tuple[np.ndarray, np.ndarray]:
    """(E,) unbiased estimate of ||E g|| and its noise floor over ``chunks`` chunks of ``batch``.

    With g_m the mean gradient of chunk m (M chunks), ||E g||^2 is estimated without bias
    by (||sum_m g_m||^2 - sum_m ||g_m||^2) / (M (M - 1)); the estimate is its square root
    clipped at 0, the floor ||std_m(g_m)|| / sqrt(M) (ours, not in paper C). Gradients are
    accumulated in float64.
    """
    if chunks < 2:
        raise ValueError(f"the population-gradient estimator needs >= 2 chunks, got {chunks}")
    total: list[torch.Tensor] | None = None
    sum_sq = torch.zeros((), dtype=torch.float64)
    parts = [t.chunk(chunks, dim=1) for t in batch if t is not None]
    for part in zip(*parts, strict=True):
        grads = [g.double() for g in member_gradients(model, objective, SequenceBatch(*part))]
        sum_sq = sum_sq + member_norms(grads).pow(2).cpu()
        total = grads if total is None else [a + b for a, b in zip(total, grads, strict=True)]
    assert total is not None, "empty gradient set"
    m = float(chunks)
    sum_norm_sq = member_norms(total).pow(2).cpu()
    estimate = ((sum_norm_sq - sum_sq) / (m * (m - 1))).clamp(min=0.0).sqrt()
    floor = ((sum_sq - sum_norm_sq / m) / (m - 1)).clamp(min=0.0).sqrt() / math.sqrt(m)
    return estimate.numpy(), floor.numpy()
