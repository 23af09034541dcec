"""Attention-map statistics shared by papers C and D.

Maps are (..., T, T) row-stochastic causal matrices, row = query position l (0-indexed),
column = key position. Paper D's 1-indexed query n is row n - 1; its key i is column i - 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def offset_masses(att: torch.Tensor, offsets: Sequence[int], first_row: int) -> torch.Tensor:
    """mean over rows l >= max(first_row, delta) of att[..., l, l - delta]: (..., len(offsets)).

    * paper C's m_h(delta) (ours, for Figs. 3-5): ``first_row=3``, offsets 0..3;
    * paper D's a-bar_m (Fig. 2; ours: rows n in [2k+1, T] 1-indexed): ``first_row=2 * k``.
      Rows whose key l - delta would be negative are left out of that offset's mean.
    Average the result over sequences (leading axes) as the figure needs.
    """
    length = att.shape[-1]
    out = []
    for delta in offsets:
        start = max(first_row, delta)
        if start >= length:
            raise ValueError(f"no row l >= {first_row} has a key at offset {delta} (T={length})")
        rows = torch.arange(start, length, device=att.device)
        out.append(att[..., rows, rows - delta].mean(-1))
    return torch.stack(out, dim=-1)


def head_on_offset(
    masses: Sequence[float] | torch.Tensor,
    offsets: Sequence[int],
    threshold: float = 0.4,
    dominance: float = 2.0,
) -> int | None:
    """The offset delta a head is *on*, or None (ours, paper C): m(delta) >= threshold and
    m(delta) >= dominance * max_{delta' != delta} m(delta'). ``masses`` is one head's
    `offset_masses` over ``offsets``."""
    values = [float(m) for m in masses]
    if len(values) != len(offsets):
        raise ValueError(f"{len(values)} masses for {len(offsets)} offsets")
    best = max(range(len(values)), key=values.__getitem__)
    rest = max((v for j, v in enumerate(values) if j != best), default=0.0)
    if values[best] >= threshold and values[best] >= dominance * rest:
        return int(offsets[best])
    return None


@dataclass(frozen=True)
class ModelState:
    """State of a model from its first-layer heads (ours, paper C Figs. 3-5).

    ``lags``: the sorted distinct offsets >= 1 some head is on. unigram: none; bigram:
    lags == (1,); trigram: lags == (1, 2), or another pair (its lags are recorded, e.g. the
    non-contiguous (1, 3) of paper C App. F.2). ``order`` = len(lags) + 1 counts the conditioned
    tokens + 1, so a single head on delta = 2 is order 2 with lags (2,).
    """

    lags: tuple[int, ...]

    @property
    def order(self) -> int:
        return len(self.lags) + 1

    @property
    def name(self) -> str:
        return {1: "unigram", 2: "bigram", 3: "trigram"}.get(self.order, f"{self.order}-gram")


def model_state(
    masses: torch.Tensor,
    offsets: Sequence[int],
    threshold: float = 0.4,
    dominance: float = 2.0,
) -> ModelState:
    """`ModelState` of per-head masses (H, len(offsets)) via `head_on_offset`; offset 0
    (attending to oneself) is not a lag."""
    on = {head_on_offset(row, offsets, threshold, dominance) for row in masses}
    return ModelState(tuple(sorted(d for d in on if d is not None and d >= 1)))


def shift_match(match: torch.Tensor, shift: int) -> torch.Tensor:
    """The match set moved by ``shift`` key columns (i -> i + shift), kept causal: the
    -1 / +1 controls of claim `D-F1-1-shift` (ours)."""
    length = match.shape[-1]
    moved = torch.zeros_like(match)
    if shift >= 0:
        moved[..., shift:] = match[..., : length - shift]
    else:
        moved[..., :shift] = match[..., -shift:]
    return moved & torch.ones(length, length, dtype=torch.bool, device=match.device).tril()


def matched_mass(att: torch.Tensor, match: torch.Tensor, shift: int = 0) -> torch.Tensor:
    """MM per sequence (ours, paper D Fig. 1): mean over rows n with I_n != {} of
    sum_{i in I_n} A[n, i].

    ``match`` (B, T, T) bool is I_n by row (`replicate.analysis.match_matrix` with
    `order_lags(k)`). With ``shift`` the mass is read on the shifted set (`shift_match`)
    over the same rows (those with a non-empty unshifted I_n). NaN for a sequence whose
    match sets are all empty. Returns (B,).
    """
    rows = match.any(-1)
    target = shift_match(match, shift) if shift else match
    per_row = (att * target).sum(-1)
    return (per_row * rows).sum(-1) / rows.sum(-1)


def matched_mass_chance(match: torch.Tensor) -> torch.Tensor:
    """Chance level of `matched_mass` (ours): mean over rows with I_n != {} of |I_n| / n,
    n = row + 1 (1-indexed), the mass a uniform causal map puts on I_n. Returns (B,)."""
    rows = match.any(-1)
    visible = torch.arange(1, match.shape[-1] + 1, device=match.device, dtype=torch.float64)
    fraction = match.sum(-1) / visible
    return (fraction * rows).sum(-1) / rows.sum(-1)


def frobenius_distance(att: torch.Tensor, pseudo: torch.Tensor) -> torch.Tensor:
    """F = ||A - A^ps||_F per map (paper D App. H.4): (...,) over the last two
    axes, with A^ps from `replicate.analysis.pseudo_attention_map`."""
    return torch.linalg.matrix_norm(att.to(torch.float64) - pseudo.to(torch.float64))
