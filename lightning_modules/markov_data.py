"""DataModule over the Markov samplers: fresh training batches every step, fixed test set.

Member i of an ensemble draws its training stream from its own seeded generator, so the
data it sees does not depend on the other members. Test sequences are drawn from a fixed
test seed and the member's chain only, so members that share a chain share a test set and
their losses (and the on-batch oracles) are computed on identical sequences.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from lightning_modules.ensemble_gpt import member_seed
from replicate.markov import sample_chain, validate_kernel


@dataclass(frozen=True)
class ChainMember:
    """One ensemble member's data source: kernel, law of x_1, and seed."""

    kernel: np.ndarray
    initial: np.ndarray
    seed: int

    def __post_init__(self) -> None:
        validate_kernel(self.kernel)
        if self.initial.shape != (self.kernel.shape[0],):
            raise ValueError(
                f"initial law has shape {self.initial.shape}, kernel {self.kernel.shape}"
            )


def sample_members(
    members: Sequence[ChainMember], batch: int, length: int, generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """One (E, batch, length) token tensor, member i drawn with ``generators[i]``."""
    return torch.stack(
        [
            sample_chain(torch.from_numpy(m.kernel), torch.from_numpy(m.initial), batch, length, g)
            for m, g in zip(members, generators, strict=True)
        ]
    )


class _TrainStream(IterableDataset):
    def __init__(self, members: Sequence[ChainMember], batch: int, length: int, steps: int) -> None:
        self.members, self.batch, self.length, self.steps = members, batch, length, steps

    def __iter__(self) -> Iterator[torch.Tensor]:
        gens = [torch.Generator().manual_seed(member_seed(m.seed, "train")) for m in self.members]
        for _ in range(self.steps):
            yield sample_members(self.members, self.batch, self.length, gens)


class MarkovEnsembleData(L.LightningDataModule):
    """Training stream of (E, B, N+1) tokens and a fixed (E, T, N+1) test set."""

    def __init__(
        self,
        members: Sequence[ChainMember],
        batch_size: int,
        seq_len: int,
        steps: int,
        test_sequences: int,
        test_seed: int,
    ) -> None:
        super().__init__()
        self.members = list(members)
        self.batch_size, self.seq_len, self.steps = batch_size, seq_len, steps
        self.test_sequences, self.test_seed = test_sequences, test_seed
        self._test: torch.Tensor | None = None

    def train_dataloader(self) -> DataLoader:
        stream = _TrainStream(self.members, self.batch_size, self.seq_len + 1, self.steps)
        return DataLoader(stream, batch_size=None)

    def test_tokens(self) -> torch.Tensor:
        """The fixed test set, identical for members that share a chain."""
        if self._test is None:
            cache: dict[bytes, torch.Tensor] = {}
            rows = []
            for m in self.members:
                key = m.kernel.tobytes() + m.initial.tobytes()
                if key not in cache:
                    gen = torch.Generator().manual_seed(member_seed(self.test_seed, "test"))
                    cache[key] = sample_members([m], self.test_sequences, self.seq_len + 1, [gen])[
                        0
                    ]
                rows.append(cache[key])
            self._test = torch.stack(rows)
        return self._test
