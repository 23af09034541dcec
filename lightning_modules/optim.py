"""The optimiser and schedule every ensemble trains with (no Lightning import: settings that
name an optimiser are read without loading it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class OptimConfig:
    """AdamW (or plain SGD) with a schedule; Adam's beta1 = 0 is allowed (paper C's code,
    its default `momentum`). ``algorithm = "sgd"`` is plain SGD without momentum (paper
    B's canonical 3-scalar model, the authors' ``Markov-Fixed`` code, paper B Sec. 3).

    Schedules: ``constant``; ``onecycle_cosine``, the authors' OneCycleLR of papers A and D
    (warm-up over ``pct_start`` from lr/div_factor, cosine down to
    lr/(div_factor*final_div_factor)); ``warmup_cosine``, linear warm-up over
    ``pct_start`` from 0 then cosine to 0. ``clip_norm`` clips each member's gradient norm
    (paper D: 1.0, ours, from the authors' sweeps); None disables clipping.
    """

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 1e-3
    schedule: Literal["constant", "onecycle_cosine", "warmup_cosine"] = "onecycle_cosine"
    pct_start: float = 0.02
    div_factor: float = 100.0
    final_div_factor: float = 0.05
    clip_norm: float | None = None
    algorithm: Literal["adamw", "sgd"] = "adamw"
