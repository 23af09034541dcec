"""Run-level measurements shared by the training experiments.

Oracles are evaluated on the run's own test batch so that test-sample noise cancels in
every comparison (ours); kappa and the run classes are ours (docs/choices.md).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from lightning_modules import EnsembleModule
    from replicate.params import Classification


class RunClass(IntEnum):
    """What a run converged to; stored in metrics.json as the integer value. ``UNLEARNED``:
    its loss lies above the unigram band (`classify`), as a model at its initialisation
    predicting uniformly does where the stationary law is not uniform: it has not reached
    the unigram solution the paper's stuck runs sit at (paper A, Sec. 4)."""

    UNLEARNED = -2
    UNIGRAM = -1
    INTERMEDIATE = 0
    BIGRAM = 1


def oracle_losses(tokens: torch.Tensor, kernel: np.ndarray) -> tuple[float, float]:
    """(bigram, unigram) cross-entropy of the true kernel and of pi on (T, N+1) ``tokens``.

    The bigram oracle predicts x_{n+1} with P(. | x_n); the unigram oracle with pi (the
    stationary law), at all N positions, as the model's loss does (paper A, Eq. 1).
    """
    from replicate.markov import stationary_distribution

    log_p = torch.from_numpy(np.log(kernel))
    log_pi = torch.from_numpy(np.log(stationary_distribution(kernel)))
    prev, nxt = tokens[:, :-1], tokens[:, 1:]
    return float(-log_p[prev, nxt].mean()), float(-log_pi[nxt].mean())


def gap_closed(loss: float, oracle_bigram: float, oracle_unigram: float) -> float:
    """kappa = (L_uni - L) / (L_uni - L_bi): 1 at the bigram, 0 at the unigram (ours)."""
    return (oracle_unigram - loss) / (oracle_unigram - oracle_bigram)


def classify(kappa: float, thresholds: Classification) -> RunClass:
    """The run's class from kappa (ours, docs/choices.md): BIGRAM at kappa >= ``bigram_kappa_min``,
    UNIGRAM in [``unigram_kappa_min``, ``unigram_kappa_max``] (the loss within that many
    gaps of the unigram loss, on either side), UNLEARNED below it, else INTERMEDIATE."""
    if kappa >= thresholds.bigram_kappa_min:
        return RunClass.BIGRAM
    if kappa < thresholds.unigram_kappa_min:
        return RunClass.UNLEARNED
    if kappa <= thresholds.unigram_kappa_max:
        return RunClass.UNIGRAM
    return RunClass.INTERMEDIATE


def first_step_reaching(steps: np.ndarray, kappas: np.ndarray, level: float) -> float:
    """First evaluation step at which kappa >= level (nan if never)."""
    hits = np.flatnonzero(kappas >= level)
    return float(steps[hits[0]]) if hits.size else float("nan")


@torch.no_grad()
def next_token_probs(module: EnsembleModule, tokens: torch.Tensor) -> np.ndarray:
    """(E, T, N, V) predicted next-token laws for (E, T, N+1) ``tokens``."""
    module.eval()
    return module.model(tokens[..., :-1]).softmax(-1).double().numpy()


def first_positions(sequence: np.ndarray, state: int, count: int) -> np.ndarray:
    """Indices n of the first ``count`` positions with x_n = state (Fig. 3c,d's n_k)."""
    return np.flatnonzero(sequence == state)[:count]


def binary_output_layer(module: EnsembleModule) -> tuple[np.ndarray, np.ndarray]:
    """(|a|, b) per member for a binary vocabulary: a = w_1 - w_0, b = b_1 - b_0
    (derived; paper A, App. A)."""
    w = module.model.lm_head.weight.detach().double()
    bias = module.model.lm_head.bias.detach().double()
    return (w[:, 1] - w[:, 0]).norm(dim=-1).numpy(), (bias[:, 1] - bias[:, 0]).numpy()


def stay_probability(transition_means: np.ndarray) -> float:
    """Mean over states i of the mean predicted P(x_{n+1}=i | x_n=i) (paper A, Fig. 5).

    ``transition_means`` is one member's (S, S) matrix from `TrainedEnsemble.evaluate`; the
    symmetric chain's targets are 1 - p (bigram) and 1/S (unigram).
    """
    return float(np.mean(np.diag(transition_means)))
