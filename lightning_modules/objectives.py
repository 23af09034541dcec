"""Training objectives: what a model's output is compared with, one loss per member.

An objective maps ``(model, batch)`` to the (E,) per-member mean losses; the training loss
is their sum, so each member's gradient is its own. Three objectives cover the four papers:

* `NextTokenCE`: cross-entropy of the next token at every position (paper A, Eq. (1);
  paper B, Sec. 2; paper D, Sec. 2 and the authors' llm-baselines code), and
  `BinaryLogitCE`, the same loss for models with one logit per position (paper B's
  canonical model).
* `LastTokenLawCE`: cross-entropy at the last position only, against the exact law of the
  next token, -sum_s y_s log(f_s + eps) (paper C, Eq. (1); the authors' `train.py`, with the
  authors' eps = 1e-8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.sources import SequenceBatch


class Objective(Protocol):
    """Per-member loss of an ensemble model on a batch, and its float64 test-set version."""

    def extra_tokens(self) -> int:
        """Tokens drawn per sequence beyond the ``seq_len`` the model reads."""
        ...

    def loss(self, model: nn.Module, batch: SequenceBatch) -> torch.Tensor:
        """(E,) mean loss of each member on ``batch`` (differentiable)."""
        ...

    def test_loss(self, model: nn.Module, batch: SequenceBatch, chunk: int) -> np.ndarray:
        """(E,) float64 mean loss over a whole test set, evaluated ``chunk`` sequences at a time."""
        ...


def per_member_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all positions, one value per member (paper A, Eq. 1)."""
    e, *_, v = logits.shape
    ce = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="none")
    return ce.view(e, -1).mean(1)


@dataclass
class TestEvaluation:
    """Per-member test metrics: mean loss (E,) and conditional mean predictions (E, S, S).

    ``transition_means[e, i, j]`` is the model's mean predicted P(x_{n+1}=j) over test
    positions with x_n = i, e.g. f-bar_0 = [e, 0, 1] and q-hat = [e, 1, 0] (paper A, Figs. 3-4).
    """

    loss: np.ndarray
    transition_means: np.ndarray


@torch.no_grad()
def evaluate_next_token(model: nn.Module, tokens: torch.Tensor, chunk: int) -> TestEvaluation:
    """Loss and conditional mean predictions of every member on (E, T, N+1) ``tokens``.

    The loss is accumulated in float64 over chunks of ``chunk`` sequences; ``model`` must
    return logits (E, B, N, V) with V the vocabulary of ``tokens``.
    """
    device = next(model.parameters()).device
    e = tokens.shape[0]
    loss_sum = torch.zeros(e, dtype=torch.float64, device=device)
    pred_sum: torch.Tensor | None = None
    counts: torch.Tensor | None = None
    for part in tokens.split(chunk, dim=1):
        part = part.to(device)
        inputs, targets = part[..., :-1], part[..., 1:]
        logits = model(inputs).double()
        vocab = logits.shape[-1]
        if pred_sum is None or counts is None:
            pred_sum = torch.zeros(e, vocab, vocab, dtype=torch.float64, device=device)
            counts = torch.zeros(e, vocab, dtype=torch.float64, device=device)
        loss_sum += per_member_cross_entropy(logits, targets) * inputs[0].numel()
        onehot = F.one_hot(inputs, vocab).double()
        pred_sum += torch.einsum("ebni,ebnj->eij", onehot, logits.softmax(-1))
        counts += onehot.sum((1, 2))
    assert pred_sum is not None and counts is not None, "empty test set"
    n_tokens = tokens[0, :, :-1].numel()
    means = pred_sum / counts.clamp(min=1).unsqueeze(-1)
    return TestEvaluation(
        loss=(loss_sum / n_tokens).cpu().numpy(), transition_means=means.cpu().numpy()
    )


class NextTokenCE:
    """Cross-entropy of x_{n+1} given x_1..x_n at every position n (papers A, B, D).

    The model reads ``tokens[..., :-1]`` and returns logits (E, B, N, V).
    """

    def extra_tokens(self) -> int:
        return 1

    def loss(self, model: nn.Module, batch: SequenceBatch) -> torch.Tensor:
        tokens = batch.tokens
        return per_member_cross_entropy(model(tokens[..., :-1]), tokens[..., 1:])

    def test_loss(self, model: nn.Module, batch: SequenceBatch, chunk: int) -> np.ndarray:
        return evaluate_next_token(model, batch.tokens, chunk).loss


class BinaryLogitCE:
    """Binary cross-entropy of x_{n+1} at every position from one logit per position.

    For models that output logit_n of P(x_{n+1} = 1 | x_1..x_n), (E, B, N), as paper B's
    canonical model does (paper B, Eq. (6)); equal to `NextTokenCE` on the logits (0, logit_n).
    """

    def extra_tokens(self) -> int:
        return 1

    def per_token(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        logits = model(tokens[..., :-1])
        targets = tokens[..., 1:].to(logits.dtype)
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="none")

    def loss(self, model: nn.Module, batch: SequenceBatch) -> torch.Tensor:
        return self.per_token(model, batch.tokens).flatten(1).mean(1)

    @torch.no_grad()
    def test_loss(self, model: nn.Module, batch: SequenceBatch, chunk: int) -> np.ndarray:
        device = next(model.parameters()).device
        total = torch.zeros(batch.tokens.shape[0], dtype=torch.float64, device=device)
        for tokens in batch.tokens.split(chunk, dim=1):
            total += self.per_token(model, tokens.to(device)).double().flatten(1).sum(1)
        return (total / batch.tokens[0, :, 1:].numel()).cpu().numpy()


@dataclass(frozen=True)
class LastTokenLawCE:
    """-sum_s y_s log(f_s + eps) at the last position, y the exact next-token law (paper C).

    Paper C, Eq. (1) and the authors' ``criterion`` (`train.py`): the model predicts only
    x_{T+1} from x_1..x_T; ``eps`` = 1e-8 in the authors' code sets the penalty of tokens
    the model gives exactly zero mass (paper C, Sec. 2.3). ``output = "probs"``: the model
    returns (E, B, S) probabilities (paper C's simplified model); ``"logits"``: it returns
    the last position's logits (``model(tokens, last_only=True)``, (E, B, 1, S)), which
    are soft-maxed (paper C, App. I.1).
    ``0 log 0`` counts as 0 (``xlogy``), so eps = 0 gives the exact cross-entropy.
    """

    eps: float = 1e-8
    output: Literal["probs", "logits"] = "probs"

    def extra_tokens(self) -> int:
        return 0

    def predict(self, model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        """(E, B, S) predicted law of the token after ``tokens`` (E, B, T)."""
        if self.output == "probs":
            return model(tokens)
        return model(tokens, last_only=True)[..., -1, :].softmax(-1)

    def per_sequence(self, probs: torch.Tensor, law: torch.Tensor) -> torch.Tensor:
        """(E, B) losses -sum_s y_s log(f_s + eps)."""
        return -torch.special.xlogy(law.to(probs.dtype), probs + self.eps).sum(-1)

    def loss(self, model: nn.Module, batch: SequenceBatch) -> torch.Tensor:
        if batch.next_law is None:
            raise ValueError("LastTokenLawCE needs batches with the next-token law (next_law)")
        return self.per_sequence(self.predict(model, batch.tokens), batch.next_law).mean(-1)

    @torch.no_grad()
    def test_loss(self, model: nn.Module, batch: SequenceBatch, chunk: int) -> np.ndarray:
        if batch.next_law is None:
            raise ValueError("LastTokenLawCE needs a test set with the next-token law")
        device = next(model.parameters()).device
        total = torch.zeros(batch.tokens.shape[0], dtype=torch.float64, device=device)
        for tokens, law in zip(
            batch.tokens.split(chunk, dim=1), batch.next_law.split(chunk, dim=1), strict=True
        ):
            probs = self.predict(model, tokens.to(device)).double()
            total += self.per_sequence(probs, law.to(device)).sum(-1)
        return (total / batch.tokens.shape[1]).cpu().numpy()
