"""The simplified two-layer disentangled transformer of paper C, as an ensemble of E models.

Paper C, Def. 2.2 and Sec. 2.3, as the authors' ``Simpleformer`` (their code). Every parameter
carries a leading ensemble axis E; member i depends on ``seeds[i]`` alone.

For one sequence x in [S]^T (0-indexed), with one-hot embeddings r0[l] = e_{x_l}:

* layer 1, H = n-1 heads with input-independent logits A1^(h) (T x T):
  alpha^(h) = softmax_causal(A1^(h)), head_h[l] = (sum_{j<=l} alpha^(h)[l, j] r0[j]) @ V1^(h)
  (the code's convention ``r0 @ V``, i.e. V1 = V1_paper^T);
* r1[l] = concat(r0[l], head_1[l], ..., head_H[l]) in R^D, D = (H+1) S (block 0 = skip);
* layer 2, one head read at the last query: score[i] = r1[T-1]^T (Q Kt) r1[i] (no 1/sqrt(d)),
  a2 = softmax_i(score), value V2 = [I_S; 0; ...] (block 0), unembedding U = I_S, no residual;
* output p_theta(x) = sum_i a2[i] e_{x_i}: a probability vector (no softmax).

Initialisation (the authors' code): A1 = 0, V1 ~ N(0, 1/S), Q, Kt ~ N(0, 1/D). The hidden
size of Q Kt is ``d_h = S`` (the authors' code of Feb. 2025, main-text figures) or
``d_h = D`` (their later code; required by the constructions theta_*^k, paper C Eq. (8c)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from lightning_modules.seeding import member_generator

HiddenSize = Literal["S", "D"]


@dataclass(frozen=True)
class DisentangledConfig:
    """Shapes of one ensemble: S tokens, H = n-1 first-layer heads, context length T, and
    the hidden size d_h of Q Kt: ``"S"`` (authors' code @02cd874) or ``"D"`` = (H+1) S."""

    states: int
    heads: int
    seq_len: int
    hidden: HiddenSize = "S"

    def __post_init__(self) -> None:
        if self.states < 2 or self.heads < 1 or self.seq_len < 1:
            raise ValueError(f"need states >= 2, heads >= 1, seq_len >= 1: {self}")
        if self.hidden not in ("S", "D"):
            raise ValueError(f"hidden must be 'S' or 'D', got {self.hidden!r}")

    @property
    def width(self) -> int:
        """D = (H+1) S, the width of the concatenated residual r1."""
        return (self.heads + 1) * self.states

    @property
    def hidden_size(self) -> int:
        return self.states if self.hidden == "S" else self.width


class EnsembleDisentangled(nn.Module):
    """E simplified disentangled transformers (Sec. 2.3); forward -> (E, B, S) probabilities."""

    def __init__(
        self, cfg: DisentangledConfig, ensemble: int, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.cfg, self.ensemble = cfg, ensemble
        self.states, self.heads, self.seq_len = cfg.states, cfg.heads, cfg.seq_len
        self.width, self.hidden = cfg.width, cfg.hidden_size
        h, s, t, d = self.heads, self.states, self.seq_len, self.width
        self.A1 = nn.Parameter(torch.zeros(ensemble, h, t, t, dtype=dtype))
        self.V1 = nn.Parameter(torch.zeros(ensemble, h, s, s, dtype=dtype))
        self.Q = nn.Parameter(torch.zeros(ensemble, d, self.hidden, dtype=dtype))
        self.Kt = nn.Parameter(torch.zeros(ensemble, self.hidden, d, dtype=dtype))

    def init_members(self, seeds: list[int]) -> None:
        """Member i from ``seeds[i]`` alone: A1 = 0, V1 ~ N(0, 1/S), Q, Kt ~ N(0, 1/D) (the
        authors' code)."""
        if len(seeds) != self.ensemble:
            raise ValueError(f"need {self.ensemble} seeds, got {len(seeds)}")
        with torch.no_grad():
            for i, seed in enumerate(seeds):
                gen = member_generator(seed, "init")
                self.A1[i].zero_()
                for param, var in (
                    (self.V1, self.states),
                    (self.Q, self.width),
                    (self.Kt, self.width),
                ):
                    draw = torch.randn(param.shape[1:], generator=gen, dtype=torch.float64)
                    param[i].copy_(draw / math.sqrt(var))

    def first_layer_attention(self, length: int | None = None) -> torch.Tensor:
        """alpha^(h) = softmax_causal(A1^(h)): (E, H, N, N), N = ``length`` (default T)."""
        n = self.seq_len if length is None else length
        logits = self.A1[..., :n, :n]
        mask = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)
        return torch.softmax(logits.masked_fill(mask, float("-inf")), dim=-1)

    def second_layer_attention(self, tokens: torch.Tensor) -> torch.Tensor:
        """a2 (E, B, N): softmax over keys i of r1[N-1]^T Q Kt r1[i] (no 1/sqrt(d) scaling).

        Only the last query is read, so r1 is never formed at every position. With
        w = r1[N-1]^T Q Kt split into S-blocks (w_0, w_1, ..., w_H) like r1, and
        head_h[i] = sum_{j<=i} alpha^(h)[i, j] V1^(h)[x_j] (paper C, Def. 2.2):

            w^T r1[i] = w_0[x_i] + sum_h sum_{j<=i} alpha^(h)[i, j] u_h[x_j],  u_h = V1^(h) w_h,

        B H N^2 multiply-adds instead of the B H N^2 S of mixing every one-hot, and no
        (E, B, H, N, S) intermediate. Equal to the explicit forward pass up to rounding
        (tests/test_subngrams_model.py checks it against a loop over positions).
        """
        e, b, n = tokens.shape
        if n > self.seq_len:
            raise ValueError(f"sequence length {n} exceeds the model's T = {self.seq_len}")
        s, h = self.states, self.heads
        r0, alpha = self._one_hot(tokens), self.first_layer_attention(n)
        mixed_last = torch.einsum("ehj,ebjs->ebhs", alpha[:, :, -1], r0)
        heads_last = torch.einsum("ebhs,ehst->ebht", mixed_last, self.V1)
        r1_last = torch.cat([r0[:, :, -1], heads_last.reshape(e, b, h * s)], dim=-1)
        w = torch.einsum("ebd,edk,ekf->ebf", r1_last, self.Q, self.Kt)
        u = torch.einsum("ehst,ebht->ebhs", self.V1, w[..., s:].reshape(e, b, h, s))
        per_key = torch.gather(u, 3, tokens[:, :, None, :].expand(e, b, h, n))
        scores = torch.gather(w[..., :s], 2, tokens) + torch.einsum(
            "ehij,ebhj->ebi", alpha, per_key
        )
        return torch.softmax(scores, dim=-1)

    def _one_hot(self, tokens: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(tokens, self.states).to(self.A1.dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """p_theta (E, B, S): the last query's attention-weighted average of one-hot tokens."""
        return torch.einsum(
            "ebn,ebns->ebs", self.second_layer_attention(tokens), self._one_hot(tokens)
        )
