"""Paper C: the constructions theta_*^k of Sec. 3 and Thm. 4.2.

* `set_construction` writes theta_*^k (paper C, Eqs. (6), (8a)-(8c), App. A.2 Eq. (10);
  spec C §3.1) into one member of an `EnsembleDisentangled`, so theory checks and
  training share one forward pass.
  Its c -> infinity output is the k-gram estimator over the *padded* match set
  (`replicate.analysis.kgram` with ``pad=True``; spec C §3.1, Lemma B.1).
"""

from __future__ import annotations

import math

import torch

from lightning_modules.disentangled import EnsembleDisentangled


@torch.no_grad()
def set_construction(model: EnsembleDisentangled, member: int, k: int, c: float) -> None:
    """Write theta_*^k at scale ``c`` into member ``member`` (spec C §3.1, 0-indexed).

    Heads h <= k-1 are activated: A1^(h)[l, l-h] = c (l >= h), A1^(h)[l, 0] = c (l < h,
    the padding convention), V1^(h) = I_S; heads h >= k are deactivated (A1 = 0, V1 = 0).
    Q = sqrt(c) sum_{h<k} sum_j E[(h-1)S+j, hS+j], Kt = sqrt(c) sum_{h<k} sum_j E[hS+j, hS+j]
    (App. A.2, Eqs. (10a)-(10b)), so A2 = Q Kt = c sum_h sum_j E[(h-1)S+j, hS+j] (Eq. (6)).
    Needs d_h = D (rank S(k-1), spec C §0.4).
    """
    heads, s, t = model.heads, model.states, model.seq_len
    if not 1 <= k <= heads + 1:
        raise ValueError(f"k must be in 1..{heads + 1}, got {k}")
    if model.hidden != model.width:
        raise ValueError("theta_*^k needs d_h = D (spec C §0.4)")
    for param in (model.A1, model.V1, model.Q, model.Kt):
        param[member].zero_()
    rows = torch.arange(t)
    eye = torch.eye(s, dtype=model.Q.dtype)
    root = math.sqrt(c)
    for h in range(1, k):
        cols = torch.where(rows >= h, rows - h, torch.zeros_like(rows))
        model.A1[member, h - 1, rows, cols] = c
        model.V1[member, h - 1] = eye
        model.Q[member, (h - 1) * s : h * s, h * s : (h + 1) * s] = root * eye
        model.Kt[member, h * s : (h + 1) * s, h * s : (h + 1) * s] = root * eye
