"""Feed-forward parts of a layer: the GPT `MLP` (papers A, C) and paper D's `SublayerMLP`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.gpt_config import GPTConfig, LayerConfig, SublayerConfig
from lightning_modules.layers import EnsembleLinear, make_norm


class MLP(nn.Module):
    """z = W_2 act(W_1 y + b_1) + b_2 (paper A, Sec. 2.1, FF layer without its residual).

    Biases optional (off in paper A). ``mup``: paper C's muLinear pair (the authors' code):
    W ~ N(0, 1/out) used as W sqrt(out/in), bias b sqrt(out), the last layer zero.
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        assert layer.mlp_hidden is not None
        d, hidden = cfg.n_embd, layer.mlp_hidden
        if layer.mlp_param == "mup":
            self.c_fc = EnsembleLinear(
                ensemble,
                d,
                hidden,
                std=1 / math.sqrt(hidden),
                bias=layer.mlp_bias,
                weight_mult=math.sqrt(hidden / d),
                bias_mult=math.sqrt(hidden),
            )
            self.c_proj = EnsembleLinear(
                ensemble,
                hidden,
                d,
                std=0.0,
                bias=layer.mlp_bias,
                weight_mult=math.sqrt(d / hidden),
                bias_mult=math.sqrt(d),
            )
        else:
            self.c_fc = EnsembleLinear(ensemble, d, hidden, cfg.std("linear"), layer.mlp_bias)
            self.c_proj = EnsembleLinear(ensemble, hidden, d, cfg.std("residual"), layer.mlp_bias)
        self.act = nn.ReLU() if layer.activation == "relu" else nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Sublayer(nn.Module):
    """norm(act(W h + b)) of one `SublayerConfig` (its skip is added by `SublayerMLP`)."""

    def __init__(self, cfg: GPTConfig, sub: SublayerConfig, width_in: int, ensemble: int) -> None:
        super().__init__()
        width = sub.width or cfg.n_embd
        self.fc = EnsembleLinear(ensemble, width_in, width, cfg.std("linear"), sub.bias)
        self.norm = make_norm(sub.norm, ensemble, width)
        self.relu = sub.activation == "relu"
        self.skip = sub.skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.fc(x)
        return self.norm(F.relu(u) if self.relu else u)


class SublayerMLP(nn.Module):
    """h_j = skip_j + norm_j(act_j(W_j h_{j-1} + b_j)), j = 1..J; returns h_J (paper D, Sec. 2.2).

    The skips replace the block's MLP residual: the layer's output is h_J, as in the
    authors' `Block` (`x = self.mlp(x_tilde)`).
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        widths = [cfg.n_embd] + [sub.width or cfg.n_embd for sub in layer.sublayers]
        self.layers = nn.ModuleList(
            Sublayer(cfg, sub, widths[j], ensemble) for j, sub in enumerate(layer.sublayers)
        )

    def forward(
        self, h0: torch.Tensor, trace: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        h = h0
        for j, sub in enumerate(self.layers, start=1):
            u = sub(h)
            h = h + u if sub.skip == "prev" else h0 + u if sub.skip == "input" else u
            if trace is not None:
                trace[f"mlp.{j}"] = h
        return h
