"""Attention statistics of trained paper-D models (Figs. 1-2, App. H.1), per ensemble member.

Layer 1: the diagonal masses a-bar_m = mean over sequences and query rows n in [2k+1, T]
(1-indexed) of att_{n, n-m} (`replicate.analysis.offset_masses`). Last layer: matched mass
MM on the pseudo map's support I_n, its chance level and the +-1-column controls
(`replicate.analysis.matched_mass`). Frobenius distances are reported, never ranked on
(F can rank a diffuse map above a sharp, partly misplaced one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from replicate.analysis import (
    frobenius_distance,
    matched_mass,
    matched_mass_chance,
    offset_masses,
    order_lags,
    pseudo_attention_map,
)
from replicate.experiments.two_layer.darch import EvalSet, attention_maps


@dataclass(frozen=True)
class MapStats:
    """Attention maps of E members on B sequences and their statistics."""

    first: torch.Tensor  # (E, B, T, T) layer-1 attention
    last: torch.Tensor  # (E, B, T, T) attention of the last layer
    pseudo: torch.Tensor  # (B, T, T)
    abar: np.ndarray  # (E, T) layer-1 a-bar_m, m = 0..T-1
    mm: np.ndarray  # (E,) matched mass of the last layer, mean over sequences
    chance: float  # mean |I_n| / n
    mm_shifted: np.ndarray  # (E,) max of MM on the -1 and +1 shifted sets
    frobenius: np.ndarray  # (E, B) ||A - A^ps||_F of the last layer


def map_stats(model: torch.nn.Module, data: EvalSet, count: int) -> MapStats:
    """Statistics of the first ``count`` evaluation sequences (Figs. 1-2, App. H.1)."""
    tokens = data.tokens[:count]
    maps = attention_maps(model, tokens)
    first, last = maps[0], maps[-1]
    k = data.order
    match = data.match(count)
    pseudo = pseudo_attention_map(tokens[:, :-1], order_lags(k))
    length = first.shape[-1]
    abar = offset_masses(first, range(length), first_row=2 * k).mean(1)

    def mm(shift: int) -> np.ndarray:
        return np.array([float(matched_mass(a, match, shift).nanmean()) for a in last])

    return MapStats(
        first=first,
        last=last,
        pseudo=pseudo,
        abar=abar.numpy(),
        mm=mm(0),
        chance=float(matched_mass_chance(match).nanmean()),
        mm_shifted=np.maximum(mm(-1), mm(1)),
        frobenius=frobenius_distance(last, pseudo).numpy(),
    )


def layer1_checks(abar: np.ndarray, order: int) -> dict[str, float]:
    """D-F2-1..3 on one member's a-bar (Fig. 2, Sec. 4 Note).

    topk: 1 if the k largest a-bar_m sit at m = 1..k; increase: min_j a-bar_{j+1} - a-bar_j
    over j = 1..k-1 (NaN for k = 1); ratio: a-bar_k / max_{m not in [1,k]} a-bar_m;
    beyond: max_{m > k} a-bar_m.
    """
    window = np.arange(1, order + 1)
    outside = np.setdiff1d(np.arange(abar.size), window)
    top = set(np.argsort(abar)[::-1][:order].tolist())
    steps = np.diff(abar[window])
    return {
        "topk": float(top == set(window.tolist())),
        "increase": float(steps.min()) if steps.size else float("nan"),
        "ratio": float(abar[order] / abar[outside].max()),
        "beyond": float(abar[order + 1 :].max()),
    }
