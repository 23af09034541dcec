"""Building blocks with a leading ensemble axis E, each able to initialise one member.

Every module here holds (E, ...) parameters and acts on inputs whose first axis is E, so
member i's output depends on member i's parameters alone. Each module that owns
parameters has ``init_member(i, gen)``: it draws member i's values from ``gen`` for its
own parameters, in registration order, and touches no other member. `EnsembleGPT`
walks its modules in registration order and calls it (roles in `init_member` docstrings).

Normal draws are float64 ``randn`` of the member's full shape times the role's std (the
draw order of the original nanoGPT-style scheme of paper A's code); a std of 0 means zeros
and draws nothing. Biases start at 0, norm weights at 1, norm biases at 0.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

NormKind = Literal["none", "weight", "affine", "l2"]
NORM_KINDS: tuple[str, ...] = ("none", "weight", "affine", "l2")


def normal_member_(param: torch.Tensor, i: int, gen: torch.Generator, std: float) -> None:
    """Member i of ``param`` <- N(0, std^2) from ``gen`` (float64 draw); zeros if std == 0."""
    if std == 0.0:
        param[i].zero_()
        return
    sample = torch.randn(param.shape[1:], generator=gen, dtype=torch.float64)
    param[i].copy_(sample * std)


class EnsembleLinear(nn.Module):
    """y = (x W^T) * weight_mult + b * bias_mult per member; weight (E, out, in), bias (E, out).

    Without bias and multipliers this is the llm-baselines `Linear(bias=False)` (paper A).
    The multipliers express paper C's `muLinear` (the authors' code: weight used as
    W * sqrt(out/in), bias as b * sqrt(out)). ``std`` is the member initialisation of the
    weight (role: linear, residual-output projection or zero-initialised last layer).
    """

    def __init__(
        self,
        ensemble: int,
        in_features: int,
        out_features: int,
        std: float,
        bias: bool = False,
        weight_mult: float = 1.0,
        bias_mult: float = 1.0,
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(ensemble, out_features)) if bias else None
        self.std = std
        self.weight_mult = weight_mult
        self.bias_mult = bias_mult

    def forward(self, x: torch.Tensor, rows: slice = slice(None)) -> torch.Tensor:
        """y (E, ..., out); ``rows``: only those output features (rows of the weight)."""
        e, *mid, d = x.shape
        weight = self.weight[:, rows]
        out = torch.bmm(x.reshape(e, -1, d), weight.transpose(1, 2))
        if self.weight_mult != 1.0:
            out = out * self.weight_mult
        if self.bias is not None:
            bias = self.bias[:, rows]
            bias = bias if self.bias_mult == 1.0 else bias * self.bias_mult
            out = out + bias[:, None, :]
        return out.view(e, *mid, weight.shape[1])

    def init_member(self, i: int, gen: torch.Generator) -> None:
        """Weight N(0, std^2) (zeros if std = 0), bias zeros."""
        normal_member_(self.weight, i, gen, self.std)
        if self.bias is not None:
            self.bias[i].zero_()


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last axis, eps 1e-5, with a per-member weight and optional bias.

    Weight-only is paper A's Table 1 LN (d x 1, the `gpt2` variant); with bias it is the
    standard affine LayerNorm (paper D's trained model, the authors' code).
    """

    def __init__(self, ensemble: int, dim: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        out = F.layer_norm(x, x.shape[-1:], eps=1e-5) * self.weight.view(shape)
        if self.bias is not None:
            out = out + self.bias.view(shape)
        return out

    def init_member(self, i: int, gen: torch.Generator) -> None:
        """Weight ones, bias zeros (no draws)."""
        self.weight[i].fill_(1.0)
        if self.bias is not None:
            self.bias[i].zero_()


class L2Norm(nn.Module):
    """Paper D's modified layer norm LN(v) = v / ||v||_2 over the last axis, LN(0) = 0.

    Paper D App. A.1 (after Rajaraman et al.): standard LN of [v; -v] without affine or eps, divided
    by sqrt(d), first d coordinates. LN(0) := 0 is our convention (needed where a
    ReLU sublayer outputs all zeros); the division is guarded so gradients stay finite.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = x.norm(dim=-1, keepdim=True)
        return x / torch.where(norm > 0, norm, torch.ones_like(norm))


def make_norm(kind: str, ensemble: int, dim: int) -> nn.Module:
    """The norm of ``kind``: none (identity), weight, affine (LayerNorm) or l2 (paper D)."""
    if kind == "none":
        return nn.Identity()
    if kind == "l2":
        return L2Norm()
    if kind in ("weight", "affine"):
        return EnsembleLayerNorm(ensemble, dim, bias=kind == "affine")
    raise ValueError(f"norm kind must be one of {NORM_KINDS}, got {kind!r}")


class EnsembleEmbedding(nn.Module):
    """Learned lookup table (E, num, dim), initialised N(0, std^2) (role: embedding)."""

    def __init__(self, ensemble: int, num: int, dim: int, std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, num, dim))
        self.std = std

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        members = torch.arange(idx.shape[0], device=idx.device).view(-1, *([1] * (idx.ndim - 1)))
        return self.weight[members, idx]

    def init_member(self, i: int, gen: torch.Generator) -> None:
        """Table N(0, std^2)."""
        normal_member_(self.weight, i, gen, self.std)


class OneHotEmbedding(nn.Module):
    """Fixed embedding concat(e_token in R^S, e_position in R^T) (paper C App. I.1 `onehot`).

    Not trained: the identity tables are non-persistent buffers (they follow ``.to``).
    ``positions = 0`` gives the token one-hot alone (d = S).
    """

    def __init__(self, vocab_size: int, positions: int) -> None:
        super().__init__()
        self.register_buffer("tokens", torch.eye(vocab_size), persistent=False)
        self.register_buffer("positions", torch.eye(positions), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tokens[idx]
        if self.positions.shape[0] == 0:
            return x
        pos = self.positions[: idx.shape[-1]].expand(*idx.shape, -1)
        return torch.cat([x, pos], dim=-1)


class RelativePositions(nn.Module):
    """Relative-position table R, weight (E, tables, T, d), row m = distance n - i.

    ``tables`` is 1 (one table shared by the heads, as the authors' code of paper D) or
    the number of heads (p^{(l,h)} per head, paper D, Sec. 2.2). Initialised as
    an embedding (N(0, std^2), the code's `nn.Embedding`).
    """

    def __init__(self, ensemble: int, tables: int, positions: int, dim: int, std: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, tables, positions, dim))
        self.std = std

    def init_member(self, i: int, gen: torch.Generator) -> None:
        """Table N(0, std^2)."""
        normal_member_(self.weight, i, gen, self.std)


class Readout(nn.Module):
    """logits = h W^T + b with W (E, V, d) and optional bias (E, V) (`lm_head`).

    Tied: W *is* the token-embedding tensor (one parameter, initialised by the embedding).
    Untied: W ~ N(0, std^2), zeros when std = 0 (paper C @02cd874 zero-inits W).
    """

    def __init__(
        self,
        ensemble: int,
        vocab_size: int,
        dim: int,
        std: float,
        bias: bool,
        tied_to: nn.Parameter | None = None,
    ) -> None:
        super().__init__()
        self.tied = tied_to is not None
        if tied_to is not None:
            self.weight = tied_to
        else:
            self.weight = nn.Parameter(torch.empty(ensemble, vocab_size, dim))
        self.bias = nn.Parameter(torch.zeros(ensemble, vocab_size)) if bias else None
        self.std = std

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = torch.einsum("ebnd,evd->ebnv", h, self.weight)
        if self.bias is not None:
            logits = logits + self.bias[:, None, None, :]
        return logits

    def init_member(self, i: int, gen: torch.Generator) -> None:
        """Untied weight N(0, std^2) (tied: left to the embedding), bias zeros."""
        if not self.tied:
            normal_member_(self.weight, i, gen, self.std)
        if self.bias is not None:
            self.bias[i].zero_()
