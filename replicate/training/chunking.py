"""Split an ensemble into chunks of members and put the trained chunks back together
(an ensemble larger than the device's memory then trains one chunk at a time).

Members of an ensemble are independent: every parameter carries a leading ensemble axis,
member i's data come from its own seed, and its gradient is its own (the ensemble
equivalence of `lightning_modules.ensemble_module`). A chunk of members therefore trains
exactly as it would inside the whole ensemble, and the chunks' results, concatenated in
member order, are the whole ensemble's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from lightning_modules import Objective, SequenceBatch

OPTIMIZER_STATE_FACTOR = 2
"""AdamW keeps two tensors per parameter (exp_avg, exp_avg_sq): the optimiser state of a
member is at most twice its parameters (plain SGD keeps none)."""


def select_members(model: nn.Module, indices: Sequence[int]) -> nn.Module:
    """A copy of ``model`` holding only members ``indices`` (in that order).

    Every parameter is sliced along its leading ensemble axis; a parameter shared by two
    modules (a tied readout) stays shared; buffers carry no ensemble axis and are copied.
    A model that records its size in an int attribute ``ensemble`` gets the new size.
    """
    index = torch.as_tensor(list(indices), dtype=torch.long)
    chunk = copy.deepcopy(model)
    sliced: dict[int, nn.Parameter] = {}
    for module in chunk.modules():
        for name, param in module._parameters.items():
            if param is None:
                continue
            if id(param) not in sliced:
                data = param.detach().index_select(0, index.to(param.device)).clone()
                sliced[id(param)] = nn.Parameter(data, requires_grad=param.requires_grad)
            module._parameters[name] = sliced[id(param)]
        if isinstance(getattr(module, "ensemble", None), int):
            module.ensemble = len(index)
    return chunk


def write_members(model: nn.Module, chunk: nn.Module, indices: Sequence[int]) -> None:
    """Copy the parameters of ``chunk`` (made by `select_members` with ``indices``) into
    members ``indices`` of ``model``."""
    index = torch.as_tensor(list(indices), dtype=torch.long)
    trained = dict(chunk.named_parameters())
    with torch.no_grad():
        for name, param in model.named_parameters():
            source = trained[name].detach().to(param.device, param.dtype)
            param.index_copy_(0, index.to(param.device), source)


def concat_histories(histories: Sequence[dict[str, list[np.ndarray]]]) -> dict[str, list]:
    """Per-evaluation values of the chunks joined along the member axis (axis 0)."""
    names = histories[0].keys()
    return {
        name: [
            np.concatenate(values, axis=0)
            for values in zip(*(h[name] for h in histories), strict=True)
        ]
        for name in names
    }


def concat_snapshots(
    snapshots: Sequence[dict[int, dict[str, torch.Tensor]]],
) -> dict[int, dict[str, torch.Tensor]]:
    """Parameter snapshots of the chunks joined along the member axis, step by step."""
    return {
        step: {name: torch.cat([s[step][name] for s in snapshots]) for name in snapshots[0][step]}
        for step in snapshots[0]
    }


def chunk_bounds(members: int, per_chunk: int) -> list[range]:
    """Consecutive member ranges of at most ``per_chunk`` members, covering all."""
    if per_chunk < 1:
        raise ValueError(f"a chunk holds at least one member, got {per_chunk}")
    return [range(i, min(i + per_chunk, members)) for i in range(0, members, per_chunk)]


def members_that_fit(member_bytes: float, free_bytes: float, fraction: float) -> int:
    """How many members fit in ``fraction`` of ``free_bytes`` at ``member_bytes`` each (at
    least one: a single member that does not fit fails on the device as it would alone)."""
    if member_bytes <= 0:
        raise ValueError(f"a member needs a positive number of bytes, got {member_bytes}")
    return max(1, math.floor(fraction * free_bytes / member_bytes))


def _forward_backward(
    model: nn.Module, objective: Objective, batch: SequenceBatch, dtype: torch.dtype | None
) -> None:
    """One training step's forward and backward pass on ``batch``, autocast to ``dtype``."""
    with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
        loss = objective.loss(model, batch).sum()
    loss.backward()


def cuda_member_bytes(
    model: nn.Module, objective: Objective, batch: SequenceBatch, dtype: torch.dtype | None
) -> float:
    """Peak CUDA bytes of one member's training step, measured (torch.cuda.max_memory_allocated)
    on a one-member copy: parameters, gradients and activations of a forward and backward on
    ``batch`` (one member's sequences) under autocast to ``dtype`` (None: full precision), plus the
    optimiser state (`OPTIMIZER_STATE_FACTOR` times the parameters). An unmeasured step runs
    first: a process's first step makes one-time allocations (cuBLAS's workspace among them),
    which on an H100 made the first measurement 65.7 MiB per member against 1.2 MiB for the
    same shape measured next (`benchmarks/gpu_readiness.py`)."""
    device = torch.device("cuda")
    one = select_members(model, [0]).to(device)
    moved = type(batch)(*(t if t is None else t.to(device) for t in batch))
    _forward_backward(one, objective, moved, dtype)
    one.zero_grad(set_to_none=True)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    _forward_backward(one, objective, moved, dtype)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    param_bytes = sum(p.numel() * p.element_size() for p in one.parameters())
    del one, moved
    torch.cuda.empty_cache()
    return float(peak + (1 + OPTIMIZER_STATE_FACTOR) * param_bytes)
