"""Where an ensemble member's sequences come from: its source and seed, and fixed sets.

A *source* is a fixed chain or an in-context prior that draws a new kernel per sequence
(the contract in replicate/markov/incontext.py); a `Member` pairs one with a seed. Test and
gradient sets (`shared_set`) are drawn from a fixed seed and the member's source only, so
members that share a source share them. Nothing here imports Lightning: a job that only
validates settings or builds a model starts without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
import torch

from lightning_modules.seeding import member_generator
from replicate.markov import sample_chain, validate_kernel


class SequenceBatch(NamedTuple):
    """Tokens (E, B, L) and, where the source knows it, the next token's law (E, B, S)."""

    tokens: torch.Tensor
    next_law: torch.Tensor | None = None


class Source(Protocol):
    """Draws sequences (the contract in replicate/markov/incontext.py)."""

    def sample(
        self, batch: int, length: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def sample_many(
        self, batch: int, length: int, generators: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`sample` once per generator, stacked on a new leading axis; the same draws as
        separate calls (a source may share work between them)."""
        ...

    def key(self) -> bytes: ...


@dataclass(frozen=True)
class FixedChain:
    """A first-order chain with a fixed kernel and law of x_1 (papers A and B)."""

    kernel: np.ndarray
    initial: np.ndarray

    def __post_init__(self) -> None:
        validate_kernel(self.kernel)
        if self.initial.shape != (self.kernel.shape[0],):
            raise ValueError(
                f"initial law has shape {self.initial.shape}, kernel {self.kernel.shape}"
            )

    def sample(
        self, batch: int, length: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, None]:
        kernel, initial = torch.from_numpy(self.kernel), torch.from_numpy(self.initial)
        return sample_chain(kernel, initial, batch, length, generator), None

    def sample_many(
        self, batch: int, length: int, generators: Sequence[torch.Generator]
    ) -> tuple[torch.Tensor, None]:
        return torch.stack([self.sample(batch, length, g)[0] for g in generators]), None

    def key(self) -> bytes:
        return self.kernel.tobytes() + self.initial.tobytes()


@dataclass(frozen=True)
class Member:
    """One ensemble member's data: its source and its seed."""

    source: Source
    seed: int


class ChainMember(Member):
    """A member on a fixed first-order chain: ``ChainMember(kernel, initial, seed)``."""

    def __init__(self, kernel: np.ndarray, initial: np.ndarray, seed: int) -> None:
        super().__init__(FixedChain(kernel, initial), seed)

    @property
    def kernel(self) -> np.ndarray:
        return self.source.kernel  # type: ignore[attr-defined]

    @property
    def initial(self) -> np.ndarray:
        return self.source.initial  # type: ignore[attr-defined]


def sample_members(
    members: Sequence[Member], batch: int, length: int, generators: Sequence[torch.Generator]
) -> SequenceBatch:
    """One batch of (E, batch, length) tokens, member i drawn with ``generators[i]``.

    Members with equal sources are drawn together (`Source.sample_many`), which gives each
    the draws of its own generator alone.
    """
    groups: dict[bytes, list[int]] = {}
    for i, m in enumerate(members):
        groups.setdefault(m.source.key(), []).append(i)
    tokens: list[torch.Tensor | None] = [None] * len(members)
    laws: list[torch.Tensor | None] = [None] * len(members)
    for rows in groups.values():
        drawn, law = members[rows[0]].source.sample_many(
            batch, length, [generators[i] for i in rows]
        )
        for j, i in enumerate(rows):
            tokens[i], laws[i] = drawn[j], None if law is None else law[j]
    stacked = torch.stack(tokens)  # type: ignore[arg-type]
    if any(law is None for law in laws):
        return SequenceBatch(stacked)
    return SequenceBatch(stacked, torch.stack(laws))  # type: ignore[arg-type]


def shared_set(members: Sequence[Member], sequences: int, length: int, seed: int, stream: str):
    """A fixed (E, sequences, length) set drawn from ``seed``'s ``stream`` per distinct source.

    Members with equal ``source.key()`` get the identical set (drawn once).
    """
    cache: dict[bytes, SequenceBatch] = {}
    rows = []
    for m in members:
        key = m.source.key()
        if key not in cache:
            cache[key] = sample_members([m], sequences, length, [member_generator(seed, stream)])
        rows.append(cache[key])
    tokens = torch.cat([r.tokens for r in rows])
    if any(r.next_law is None for r in rows):
        return SequenceBatch(tokens)
    return SequenceBatch(tokens, torch.cat([r.next_law for r in rows]))  # type: ignore[misc]
