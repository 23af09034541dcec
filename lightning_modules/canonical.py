"""Paper B's canonical low-rank model, theta = (e, w) plus an output bias b, as E copies.

On the rank-one manifold of paper B (App. A.1, D) the single-layer transformer's logit is

    logit_n = e^2 (1 + 2 w|w|) x_n + b - e^2/2                      (paper B Eq. (6))

and P(x_{n+1} = 1 | x_1^n) = sigma(logit_n). `EnsembleCanonical` holds E independent copies
(one per initialisation or chain) as parameter vectors of length E; `CanonicalLM` trains
them with plain SGD on fresh Markov sequences, as the authors' `Markov-Fixed` code trains
the same three scalars (spec B §3.4, "canonical 3-scalar model").

Lightning runs the loop, as for `EnsembleModule`: one Trainer, the shared `MarkovEnsembleData`
stream (member i's data depends on its seed alone) and the same device handling. Its
overhead does not dominate: for 10 runs at B = 16, N = 256 a step took about 7 ms on the
shared 2-core CPU, of which about 4 ms sample the (10, 16, 257) batch, about 1 ms is the
model and SGD, and about 2 ms Lightning's per-step bookkeeping (2 000 steps in about 14 s).
A plain loop would save at most the last part.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.markov_data import SequenceBatch


class EnsembleCanonical(nn.Module):
    """E copies of the canonical model: parameters e, w, b, each a vector of length E."""

    def __init__(self, e0: np.ndarray, w0: np.ndarray, b0: np.ndarray) -> None:
        super().__init__()
        values = [torch.as_tensor(np.asarray(v, dtype=np.float64)) for v in (e0, w0, b0)]
        if values[0].ndim != 1 or any(v.shape != values[0].shape for v in values):
            raise ValueError("e0, w0 and b0 must be vectors of one length (the ensemble size)")
        self.e, self.w, self.b = (nn.Parameter(v.clone()) for v in values)

    def logit_gap(self) -> torch.Tensor:
        """Delta = e^2 (1 + 2w|w|), the logit difference between x_n = 1 and x_n = 0 (Eq. 6)."""
        return self.e**2 * (1.0 + 2.0 * self.w * self.w.abs())

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (E, B, N) of P(x_{n+1} = 1 | x_n) for binary tokens ``idx`` (E, B, N)."""
        shape = (-1,) + (1,) * (idx.ndim - 1)
        offset = self.b - self.e**2 / 2.0
        return self.logit_gap().view(shape) * idx.to(self.e.dtype) + offset.view(shape)


class CanonicalLM(L.LightningModule):
    """SGD on the mean next-token cross-entropy of every copy, with the (e, w, b) path recorded.

    The training loss is the sum of the copies' mean losses, so each copy's gradient is its
    own. ``record_every`` sets how often (in steps) the parameters are appended to ``path``.
    """

    def __init__(
        self, e0: np.ndarray, w0: np.ndarray, b0: np.ndarray, lr: float, record_every: int
    ) -> None:
        super().__init__()
        self.model = EnsembleCanonical(e0, w0, b0)
        self.lr, self.record_every = lr, record_every
        self.path_steps: list[int] = []
        self.path: list[np.ndarray] = []

    def training_step(self, batch: SequenceBatch, batch_idx: int) -> torch.Tensor:
        logits = self.model(batch.tokens[..., :-1])
        targets = batch.tokens[..., 1:].to(logits.dtype)
        losses = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        return losses.flatten(1).mean(1).sum()

    def on_train_start(self) -> None:
        self._record()

    def on_train_batch_end(self, outputs: object, batch: SequenceBatch, batch_idx: int) -> None:
        if self.global_step % self.record_every == 0:
            self._record()

    def _record(self) -> None:
        """Append (E, 3) parameters (e, w, b) at the current step."""
        self.path_steps.append(int(self.global_step))
        params = (self.model.e, self.model.w, self.model.b)
        self.path.append(torch.stack([p.detach() for p in params], 1).cpu().numpy().copy())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)
