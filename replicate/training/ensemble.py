"""The plan of a training (`TrainingPlan`) and what it returns (`TrainedEnsemble`), and the
ensemble GPT an experiment trains (`gpt_ensemble`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from lightning_modules import EnsembleGPT, GPTConfig

if TYPE_CHECKING:
    from lightning_modules import EnsembleModule, Member, SequenceBatch, TestEvaluation


@dataclass(frozen=True)
class TrainingPlan:
    """Length and data shape of one training run (shared by every member).

    ``seq_len`` is the model's input length; ``gradset_sequences`` > 0 adds a fixed
    gradient set for population-gradient norms (ours, paper C), split into
    ``gradset_chunks`` chunks.
    """

    steps: int
    batch_size: int
    seq_len: int
    eval_every: int
    test_sequences: int
    test_seed: int
    snapshot_steps: tuple[int, ...] = ()
    gradset_sequences: int = 0
    gradset_chunks: int = 8


@dataclass
class TrainedEnsemble:
    """A trained ensemble: the module (with its evaluation history) and its fixed test set."""

    module: EnsembleModule
    members: list[Member]
    test_batch: SequenceBatch
    eval_batch: int

    @property
    def model(self) -> nn.Module:
        return self.module.model

    @property
    def test_tokens(self) -> torch.Tensor:
        return self.test_batch.tokens

    @property
    def eval_steps(self) -> np.ndarray:
        return np.asarray(self.module.eval_steps)

    def history(self, name: str) -> np.ndarray:
        """(E, n_evals, ...) values of ``name`` at the evaluation steps."""
        return np.stack(self.module.history[name], axis=1)

    @property
    def test_loss(self) -> np.ndarray:
        """(E, n_evals) test-loss history."""
        return self.history("test_loss")

    @property
    def grad_norm(self) -> np.ndarray:
        """(E, n_evals) minibatch gradient norm averaged since the previous evaluation."""
        return self.history("grad_norm")

    @property
    def population_grad_norm(self) -> np.ndarray:
        """(E, n_evals) population gradient norm (needs ``plan.gradset_sequences``)."""
        return self.history("population_grad_norm")

    @property
    def population_grad_floor(self) -> np.ndarray:
        """(E, n_evals) noise floor of `population_grad_norm`."""
        return self.history("population_grad_floor")

    @property
    def probes(self) -> dict[str, np.ndarray]:
        """Every probe's (E, n_evals, ...) history."""
        return {name: self.history(name) for name in self.module.probes}

    def evaluate(self) -> TestEvaluation:
        """Next-token loss and transition means of the current weights on the test set."""
        from lightning_modules import evaluate_next_token

        return evaluate_next_token(self.model, self.test_tokens, self.eval_batch)


def gpt_ensemble(
    cfg: GPTConfig, seeds: Sequence[int], initialize: Callable[[EnsembleGPT], None] | None = None
) -> EnsembleGPT:
    """An `EnsembleGPT` with member i initialised from ``seeds[i]``, then ``initialize``
    (under no_grad) for experiments that start from a special point (paper B)."""
    model = EnsembleGPT(cfg, len(seeds))
    model.init_members(list(seeds))
    if initialize is not None:
        with torch.no_grad():
            initialize(model)
    return model
