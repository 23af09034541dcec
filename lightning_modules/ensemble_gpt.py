"""A GPT-style decoder whose parameters carry a leading ensemble axis.

`EnsembleGPT` holds E independent models (seeds, or configurations sharing shapes) and
runs them as one batched computation: every weight is (E, ...), inputs are (E, B, N).
Member i's initialisation and gradients depend on member i alone, so an ensemble of E
equals E separate runs (tests/test_ensemble_equivalence.py).

Two variants (paper A):
- ``theory``: Sec. 2.1 of paper A — no layer norm, ReLU, output bias; the model of the
  theorems and of the authors' `Markov-Simple` code.
- ``gpt2``: Table 1 of paper A — pre-LN blocks with weight-only LayerNorm, final ln_f,
  lm_head with bias; ReLU or GELU.

Parameter names follow Table 1 (``transformer.wte``, ``transformer.h.0.attn.c_attn``, ...).
With tying, ``lm_head.weight`` *is* ``transformer.wte.weight`` (one tensor).
For a binary vocabulary the softmax over two logits is the sigmoid of their difference,
so a = w_1 - w_0, b = b_1 - b_0, e = wte[1] - wte[0], p_n = wte[0] + wpe[n] recovers the
theory model's (a, b, e, p_n) (spec A, Sec. 1.2); tying gives a = e exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

Variant = Literal["theory", "gpt2"]
Activation = Literal["relu", "gelu"]


@dataclass(frozen=True)
class GPTConfig:
    """Shapes and architecture switches of one ensemble (all members share them)."""

    vocab_size: int = 2
    n_embd: int = 4
    block_size: int = 1024
    n_layer: int = 1
    n_head: int = 1
    mlp_ratio: int = 4
    variant: Variant = "theory"
    activation: Activation = "relu"
    tied: bool = True
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.variant not in ("theory", "gpt2"):
            raise ValueError(f"variant must be 'theory' or 'gpt2', got {self.variant!r}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {self.activation!r}")


class EnsembleLinear(nn.Module):
    """y = x W^T per member; weight (E, out, in); no bias (llm-baselines `bias=False`)."""

    def __init__(self, ensemble: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, out_features, in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e, *mid, d = x.shape
        out = torch.bmm(x.reshape(e, -1, d), self.weight.transpose(1, 2))
        return out.view(e, *mid, self.weight.shape[1])


class EnsembleLayerNorm(nn.Module):
    """Weight-only LayerNorm (Table 1 lists LN as d x 1), one weight vector per member."""

    def __init__(self, ensemble: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ensemble, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (x.shape[-1],)
        return F.layer_norm(x, x.shape[-1:], eps=1e-5) * self.weight.view(shape)


class EnsembleEmbedding(nn.Module):
    """Lookup table (E, num, dim)."""

    def __init__(self, ensemble: int, num: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ensemble, num, dim))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        members = torch.arange(idx.shape[0], device=idx.device).view(-1, *([1] * (idx.ndim - 1)))
        return self.weight[members, idx]


class CausalSelfAttention(nn.Module):
    """Causal multi-head attention, softmax(<q, k> / sqrt(head_dim)) (spec A, Sec. 1.1)."""

    def __init__(self, cfg: GPTConfig, ensemble: int) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = EnsembleLinear(ensemble, cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = EnsembleLinear(ensemble, cfg.n_embd, cfg.n_embd)

    def forward(
        self, x: torch.Tensor, trace: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        e, b, n, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=-1)
        heads = (e * b, n, self.n_head, d // self.n_head)
        q, k, v = (t.reshape(heads).transpose(1, 2) for t in (q, k, v))
        if trace is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.n_head)
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            att = scores.masked_fill(~mask, float("-inf")).softmax(-1)
            y = att @ v
            trace["attention"] = att.view(e, b, self.n_head, n, n)
        return self.c_proj(y.transpose(1, 2).reshape(e, b, n, d))


class MLP(nn.Module):
    """z = W_2 act(W_1 y) (paper A, Sec. 2.1, FF layer without its residual)."""

    def __init__(self, cfg: GPTConfig, ensemble: int) -> None:
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.n_embd
        self.c_fc = EnsembleLinear(ensemble, cfg.n_embd, hidden)
        self.c_proj = EnsembleLinear(ensemble, hidden, cfg.n_embd)
        self.act = nn.ReLU() if cfg.activation == "relu" else nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """One (Attention, FF) layer with residuals; pre-LN in the gpt2 variant."""

    def __init__(self, cfg: GPTConfig, ensemble: int) -> None:
        super().__init__()
        use_ln = cfg.variant == "gpt2"
        self.ln_1 = EnsembleLayerNorm(ensemble, cfg.n_embd) if use_ln else nn.Identity()
        self.attn = CausalSelfAttention(cfg, ensemble)
        self.ln_2 = EnsembleLayerNorm(ensemble, cfg.n_embd) if use_ln else nn.Identity()
        self.mlp = MLP(cfg, ensemble)

    def forward(
        self, x: torch.Tensor, trace: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        attn_out = self.attn(self.ln_1(x), trace)
        y = x + attn_out
        z = y + self.mlp(self.ln_2(y))
        if trace is not None:
            trace.update(input=x, attn_out=attn_out, y=y, z=z)
        return z


class EnsembleGPT(nn.Module):
    """E independent GPT-style models evaluated as one batched computation."""

    def __init__(self, cfg: GPTConfig, ensemble: int) -> None:
        super().__init__()
        if ensemble < 1:
            raise ValueError(f"ensemble size must be >= 1, got {ensemble}")
        self.cfg = cfg
        self.ensemble = ensemble
        use_ln = cfg.variant == "gpt2"
        self.transformer = nn.ModuleDict(
            {
                "wte": EnsembleEmbedding(ensemble, cfg.vocab_size, cfg.n_embd),
                "wpe": EnsembleEmbedding(ensemble, cfg.block_size, cfg.n_embd),
                "h": nn.ModuleList(Block(cfg, ensemble) for _ in range(cfg.n_layer)),
                "ln_f": EnsembleLayerNorm(ensemble, cfg.n_embd) if use_ln else nn.Identity(),
            }
        )
        self.lm_head = nn.Module()
        if cfg.tied:
            self.lm_head.weight = self.transformer["wte"].weight
        else:
            self.lm_head.weight = nn.Parameter(torch.empty(ensemble, cfg.vocab_size, cfg.n_embd))
        self.lm_head.bias = nn.Parameter(torch.zeros(ensemble, cfg.vocab_size))

    def init_members(self, seeds: list[int]) -> None:
        """Initialise member i from ``seeds[i]`` alone (llm-baselines / nanoGPT scheme).

        N(0, 0.02) for every Linear and Embedding weight, N(0, 0.02 / sqrt(2 n_layer)) for
        every ``c_proj`` weight, zero biases, unit LayerNorm weights (spec A, Sec. 1.2).
        """
        if len(seeds) != self.ensemble:
            raise ValueError(f"need {self.ensemble} seeds, got {len(seeds)}")
        proj_std = self.cfg.init_std / math.sqrt(2 * self.cfg.n_layer)
        with torch.no_grad():
            for i, seed in enumerate(seeds):
                gen = torch.Generator().manual_seed(member_seed(seed, "init"))
                for name, param in self.named_parameters():
                    if name.endswith("lm_head.bias"):
                        param[i].zero_()
                    elif ".ln_" in name or name.startswith("transformer.ln_f"):
                        param[i].fill_(1.0)
                    else:
                        std = proj_std if name.endswith("c_proj.weight") else self.cfg.init_std
                        sample = torch.randn(param.shape[1:], generator=gen, dtype=torch.float64)
                        param[i].copy_(sample * std)

    def forward(
        self, idx: torch.Tensor, traces: list[dict[str, torch.Tensor]] | None = None
    ) -> torch.Tensor:
        """Logits (E, B, N, V) for tokens ``idx`` (E, B, N); fills one trace dict per layer."""
        n = idx.shape[-1]
        if n > self.cfg.block_size:
            raise ValueError(f"sequence length {n} exceeds block_size {self.cfg.block_size}")
        x = self.transformer["wte"](idx) + self.transformer["wpe"].weight[:, None, :n]
        for block in self.transformer["h"]:
            trace: dict[str, torch.Tensor] | None = None
            if traces is not None:
                trace = {}
                traces.append(trace)
            x = block(x, trace)
        h = self.transformer["ln_f"](x)
        return (
            torch.einsum("ebnd,evd->ebnv", h, self.lm_head.weight)
            + self.lm_head.bias[:, None, None, :]
        )

    def decay_parameters(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(decayed, not decayed): weight decay only on Linear weight matrices (spec A, 1.3).

        Embeddings (hence the tied wte = lm_head), LayerNorm weights and biases get none;
        an untied lm_head.weight is a Linear weight and is decayed.
        """
        decay, no_decay = [], []
        for name, param in self.named_parameters():  # shared tensors are listed once
            is_linear = isinstance(self.get_submodule(name.rsplit(".", 1)[0]), EnsembleLinear)
            if is_linear or name == "lm_head.weight":
                decay.append(param)
            else:
                no_decay.append(param)
        return decay, no_decay


def member_seed(seed: int, stream: str) -> int:
    """A 63-bit seed for one named random stream ("init", "train", "test") of a member."""
    stream_id = {"init": 0, "train": 1, "test": 2}[stream]
    return int(np.random.SeedSequence([seed, stream_id]).generate_state(2, np.uint64)[0] >> 1)


def per_member_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all positions, one value per member (paper A, Eq. 1)."""
    e, *_, v = logits.shape
    ce = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1), reduction="none")
    return ce.view(e, -1).mean(1)
