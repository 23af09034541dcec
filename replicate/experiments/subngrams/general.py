"""Paper C's general transformer (App. I.1 and I.3) as an `EnsembleGPT` configuration, and
the maps and offset masses (ours) of its input-dependent first-layer attention."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from torch import nn

from lightning_modules.gpt_config import GPTConfig, LayerConfig
from lightning_modules.measures import Probe
from replicate.experiments.subngrams.stages import masses_of

Embedding = Literal["onehot", "learned"]
MlpKind = Literal["none", "mup"]
ReadoutInit = Literal["zero", "normal"]


def general_config(
    states: int,
    order: int,
    seq_len: int,
    embedding: Embedding,
    mlp: MlpKind,
    readout: ReadoutInit = "zero",
) -> GPTConfig:
    """d = S + T; heads [n-1, 1]; per head Q, Kt, V in R^{d x d} (head_dim = d, value width
    d), heads summed into the residual stream, no 1/sqrt(d) scale, no LayerNorm; all weights
    N(0, 1/d); readout z = X[T-1] W without bias, W zero-initialised (the authors' code of
    Feb. 2025; App. I.1). ``mlp = "mup"``: X <- X + MLP(delta) with the authors' muLinear
    MLP of widths [d, d, d], ReLU, last layer zero-initialised (Fig. 7, App. I.3).
    ``readout = "normal"``: W ~ N(0, 1/d) instead, the authors' models.py from commit 767e22c
    (4 Apr 2025), the ``code`` reading of Fig. 7 (paper C, App. I.3, leaves it unstated)."""
    d = states + seq_len
    std = 1.0 / math.sqrt(d)
    extra = (
        {"mlp": "none"}
        if mlp == "none"
        else {
            "mlp": "gpt",
            "mlp_hidden": d,
            "activation": "relu",
            "mlp_bias": True,
            "mlp_param": "mup",
            "mlp_input": "attention",
        }
    )
    layers = tuple(
        LayerConfig(n_head=h, head_dim=d, attn_scale=1.0, head_merge="sum", norm="none", **extra)
        for h in (order - 1, 1)
    )
    return GPTConfig(
        vocab_size=states,
        n_embd=d,
        block_size=seq_len,
        n_layer=2,
        variant="theory",
        tied=False,
        layers=layers,
        embedding=embedding,
        final_norm="none",
        readout_bias=False,
        std_embedding=std,
        std_linear=std,
        std_residual=std,
        std_readout=0.0 if readout == "zero" else std,
    )


def attention_map_probe(tokens: torch.Tensor) -> Probe:
    """Probe: layer 1's attention maps softmax(X Q1^(h) Kt1^(h) X^T) (E, H, T, T), float32,
    averaged over ``tokens`` (1, B, T) (ours: the general transformer's attention
    depends on its input); the maps paper C's Fig. 4 (b, d) draws (App. I.1)."""

    def probe(model: nn.Module) -> np.ndarray:
        device = next(model.parameters()).device
        traces: list[dict[str, torch.Tensor]] = []
        batch = tokens.to(device).expand(model.ensemble, -1, -1)
        model(batch, traces)
        return traces[0]["attention"].mean(1).float().cpu().numpy()

    return probe


def attention_mass_probe(tokens: torch.Tensor) -> Probe:
    """Probe: m_h(delta) (E, H, 4) of `attention_map_probe`'s averaged maps."""
    maps = attention_map_probe(tokens)

    def probe(model: nn.Module) -> np.ndarray:
        return masses_of(torch.from_numpy(maps(model)))

    return probe
