"""Paper B's canonical low-rank model, theta = (e, w) plus an output bias b, as E copies.

On the rank-one manifold of paper B (App. A.1, D) the single-layer transformer's logit is

    logit_n = e^2 (1 + 2 w|w|) x_n + b - e^2/2                      (paper B Eq. (6))

and P(x_{n+1} = 1 | x_1^n) = sigma(logit_n). `EnsembleCanonical` holds E independent copies
(one per initialisation or chain) as parameter vectors of length E. `train_ensemble` trains
them with plain SGD (`OptimConfig(algorithm="sgd")`) and the `BinaryLogitCE` objective on
fresh Markov sequences, as the authors' `Markov-Fixed` code trains the same three scalars
(an extra: paper B has no figure of it), with the same Trainer, data stream and
ensemble equivalence as every other model.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


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
