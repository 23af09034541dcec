"""DataModule over the samplers: fresh training batches every step, fixed test and gradient sets.

Every ensemble member has a *source* (a fixed chain, or an in-context prior that draws a
new kernel per sequence) and a seed. Member i draws its training stream from its own
seeded generator, so the data it sees do not depend on the other members, nor on how the
ensemble is chunked. The stream's position (generator states) is saved in Lightning
checkpoints, so a resumed run draws the same batches as an uninterrupted one. Test and
gradient sets are drawn from a fixed seed and the member's source only, so members that
share a source share them (common random numbers: their losses and on-batch oracles are
computed on identical sequences); a resumed run redraws them and checks their digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from lightning_modules.seeding import member_generator
from lightning_modules.sources import Member, SequenceBatch, sample_members, shared_set


class _TrainStream(IterableDataset):
    """Member i's training batches from its own generator, from batch ``start`` on.

    ``states`` (one per member) are the generator states before batch ``start``, saved by a
    checkpoint; without them the generators start from the members' seeds. The states
    before the last two batches drawn are kept: Lightning prefetches one batch, so when a
    checkpoint is taken the batch trained next may already have been drawn.
    """

    def __init__(
        self,
        members: Sequence[Member],
        batch: int,
        length: int,
        steps: int,
        start: int = 0,
        states: Sequence[torch.Tensor] | None = None,
    ) -> None:
        self.members, self.batch, self.length, self.steps = members, batch, length, steps
        self.start, self.states = start, states
        self._generators: list[torch.Generator] = []
        self._before: dict[int, list[torch.Tensor]] = {}
        self._drawn = start

    def _fresh_generators(self) -> list[torch.Generator]:
        gens = [member_generator(m.seed, "train") for m in self.members]
        if self.states is not None:
            for gen, state in zip(gens, self.states, strict=True):
                gen.set_state(state)
        return gens

    def state_before(self, index: int) -> list[torch.Tensor]:
        """The generator states from which batch ``index`` is (or was) drawn."""
        if index == self._drawn:
            return [g.get_state() for g in self._generators or self._fresh_generators()]
        if index not in self._before:
            raise ValueError(f"generator states before batch {index} are no longer kept")
        return self._before[index]

    def __iter__(self) -> Iterator[SequenceBatch]:
        self._generators = self._fresh_generators()
        self._before, self._drawn = {}, self.start
        for index in range(self.start, self.steps):
            self._before = {i: s for i, s in self._before.items() if i == index - 1}
            self._before[index] = [g.get_state() for g in self._generators]
            batch = sample_members(self.members, self.batch, self.length, self._generators)
            self._drawn = index + 1
            yield batch


class MarkovEnsembleData(L.LightningDataModule):
    """Training stream of (E, B, L) batches, a fixed test set and an optional gradient set.

    ``length`` is the number of tokens drawn per sequence (the model's input length plus
    the objective's extra tokens, see `Objective.extra_tokens`).
    """

    def __init__(
        self,
        members: Sequence[Member],
        batch_size: int,
        length: int,
        steps: int,
        test_sequences: int,
        test_seed: int,
        gradset_sequences: int = 0,
    ) -> None:
        super().__init__()
        self.members = list(members)
        self.batch_size, self.length, self.steps = batch_size, length, steps
        self.test_sequences, self.test_seed = test_sequences, test_seed
        self.gradset_sequences = gradset_sequences
        self._test: SequenceBatch | None = None
        self._gradset: SequenceBatch | None = None
        self._stream: _TrainStream | None = None
        self._resume: tuple[int, list[torch.Tensor] | None] = (0, None)

    def train_dataloader(self) -> DataLoader:
        self._stream = _TrainStream(
            self.members, self.batch_size, self.length, self.steps, *self._resume
        )
        return DataLoader(self._stream, batch_size=None)

    def state_dict(self) -> dict[str, object]:
        """The training stream at the trainer's current step (saved in Lightning checkpoints).

        Batch ``b`` is trained at step ``b + 1``, so at ``global_step`` the batch trained
        next is ``global_step``: its generator states are saved, whatever was prefetched.
        The test-set digest guards against resuming with other test data.
        """
        step = self.trainer.global_step if self.trainer is not None else self._resume[0]
        stream = self._stream or _TrainStream(
            self.members, self.batch_size, self.length, self.steps, *self._resume
        )
        return {
            "next_batch": step,
            "train_states": stream.state_before(step),
            "test_digest": self._test_digest(),
        }

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        """Resume the training stream where a checkpoint left it."""
        if state_dict["test_digest"] != self._test_digest():
            raise ValueError("the checkpoint was taken with another test set")
        states = state_dict["train_states"]
        assert isinstance(states, list), "train_states: one generator state per member"
        self._resume = (int(state_dict["next_batch"]), states)  # type: ignore[call-overload]

    def _test_digest(self) -> str:
        return hashlib.sha256(self.test_batch().tokens.numpy().tobytes()).hexdigest()

    def test_batch(self) -> SequenceBatch:
        """The fixed test set, identical for members that share a source."""
        if self._test is None:
            self._test = shared_set(
                self.members, self.test_sequences, self.length, self.test_seed, "test"
            )
        return self._test

    def gradient_set(self) -> SequenceBatch | None:
        """The fixed set for population-gradient estimates (ours), or None."""
        if self.gradset_sequences and self._gradset is None:
            self._gradset = shared_set(
                self.members, self.gradset_sequences, self.length, self.test_seed, "gradset"
            )
        return self._gradset
