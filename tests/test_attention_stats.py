"""Attention statistics on hand-made maps (ours, for paper C Figs. 3-5; paper D Figs. 1-2,
App. H)."""

from __future__ import annotations

import math

import pytest
import torch

from replicate.analysis import (
    ModelState,
    frobenius_distance,
    head_on_offset,
    match_matrix,
    matched_mass,
    matched_mass_chance,
    model_state,
    offset_masses,
    order_lags,
    pseudo_attention_map,
    shift_match,
)


def _uniform_causal(length: int) -> torch.Tensor:
    tril = torch.ones(length, length, dtype=torch.float64).tril()
    return tril / tril.sum(-1, keepdim=True)


def _diagonal(length: int, delta: int) -> torch.Tensor:
    """Row l attends to l - delta (to 0 when l < delta)."""
    att = torch.zeros(length, length, dtype=torch.float64)
    rows = torch.arange(length)
    att[rows, (rows - delta).clamp(min=0)] = 1.0
    return att


def test_offset_masses_of_uniform_and_diagonal_maps() -> None:
    """A uniform head gives mean_{l>=3} 1/(l+1) at every offset (about 0.08 at T=32)."""
    masses = offset_masses(_uniform_causal(32), [0, 1, 2, 3], first_row=3)
    expected = sum(1 / (row + 1) for row in range(3, 32)) / 29
    assert torch.allclose(masses, torch.full((4,), expected, dtype=torch.float64))
    assert 0.07 < expected < 0.09
    assert torch.equal(
        offset_masses(_diagonal(16, 2), [0, 1, 2, 3], first_row=3),
        torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64),
    )


def test_offset_masses_batch_and_rows_without_a_key() -> None:
    """Leading axes are kept; an offset beyond first_row averages rows l >= delta only."""
    att = torch.stack([_diagonal(10, 1), _diagonal(10, 4)])
    masses = offset_masses(att, [1, 4], first_row=2)  # paper D's a-bar, k = 1: rows n >= 3
    assert masses.shape == (2, 2)
    assert torch.equal(masses, torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
    # row-level check: att[row, row - 1] = 1/2 on rows 4..7 only, zero elsewhere
    half = torch.zeros(8, 8, dtype=torch.float64)
    for row in range(4, 8):
        half[row, row - 1] = 0.5
    assert math.isclose(offset_masses(half, [1], first_row=2).item(), 0.5 * 4 / 6)
    with pytest.raises(ValueError):
        offset_masses(_diagonal(4, 1), [5], first_row=2)


@pytest.mark.parametrize(
    ("masses", "expected"),
    [
        ([0.1, 0.6, 0.2, 0.1], 1),  # 0.6 >= 0.4 and >= 2 * 0.2
        ([0.1, 0.6, 0.31, 0.1], None),  # not dominant: 0.6 < 2 * 0.31
        ([0.1, 0.39, 0.1, 0.1], None),  # below the threshold
        ([0.1, 0.2, 0.1, 0.4], 3),  # exactly at both edges
        ([0.5, 0.2, 0.1, 0.1], 0),
    ],
)
def test_head_on_offset(masses, expected) -> None:
    assert head_on_offset(masses, [0, 1, 2, 3]) == expected


def test_model_state_from_heads() -> None:
    offsets = [0, 1, 2, 3]
    uniform = [0.08, 0.08, 0.08, 0.08]
    on1, on2, on3 = [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.1, 0.1, 0.1, 0.7]
    assert model_state(torch.tensor([uniform, uniform]), offsets).name == "unigram"
    assert model_state(torch.tensor([on1, uniform]), offsets) == ModelState((1,))
    assert model_state(torch.tensor([on1, on1]), offsets).name == "bigram"
    state = model_state(torch.tensor([on1, on2]), offsets)
    assert (state.name, state.lags) == ("trigram", (1, 2))
    state = model_state(torch.tensor([on3, on1, uniform]), offsets)
    assert (state.name, state.lags, state.order) == ("trigram", (1, 3), 3)
    assert model_state(torch.tensor([on1, on2, on3]), offsets).name == "4-gram"
    own = [0.9, 0.05, 0.0, 0.0]
    assert model_state(torch.tensor([own, uniform]), offsets).name == "unigram"


def test_matched_mass_on_the_pseudo_map_is_one() -> None:
    tokens = torch.randint(0, 2, (6, 20), generator=torch.Generator().manual_seed(0))
    match = match_matrix(tokens, order_lags(2))
    pseudo = pseudo_attention_map(tokens, order_lags(2))
    assert torch.allclose(matched_mass(pseudo, match), torch.ones(6, dtype=torch.float64))
    assert (frobenius_distance(pseudo, pseudo) == 0).all()
    uniform = _uniform_causal(20).expand(6, 20, 20)
    assert torch.allclose(matched_mass(uniform, match), matched_mass_chance(match))


def test_matched_mass_hand_example() -> None:
    """The example of claim `D-EST-1-example`, x = 0,1,1,0,1,1, k = 2: I_6 = {4} (1-indexed),
    I_5 = {3} (x_1..x_2 = (0,1) = (x_4, x_5)), I_4 = {} ... chance = mean(|I_n| / n) over
    non-empty rows."""
    tokens = torch.tensor([[0, 1, 1, 0, 1, 1]])
    match = match_matrix(tokens, order_lags(2))
    non_empty = match[0].any(-1).nonzero().flatten().tolist()
    sets = {row + 1: (match[0, row].nonzero().flatten() + 1).tolist() for row in non_empty}
    assert sets == {5: [3], 6: [4]}
    assert math.isclose(matched_mass_chance(match).item(), (1 / 5 + 1 / 6) / 2)
    att = torch.zeros(1, 6, 6, dtype=torch.float64)
    att[0, 4, 2] = 0.5  # row n=5 puts 0.5 on i=3
    att[0, 4, 3] = 0.5  # ... and 0.5 on i=4 (the +1 shift)
    att[0, 5, 2] = 1.0  # row n=6 puts all on i=3 (the -1 shift of I_6 = {4})
    assert math.isclose(matched_mass(att, match).item(), (0.5 + 0.0) / 2)
    assert math.isclose(matched_mass(att, match, shift=1).item(), (0.5 + 0.0) / 2)
    assert math.isclose(matched_mass(att, match, shift=-1).item(), (0.0 + 1.0) / 2)
    empty = torch.zeros(1, 4, 4, dtype=torch.bool)
    assert torch.isnan(matched_mass(att[:, :4, :4], empty)).all()


def test_shift_match_stays_causal() -> None:
    match = torch.zeros(1, 4, 4, dtype=torch.bool)
    match[0, 3, 3] = True
    match[0, 2, 0] = True
    plus = shift_match(match, 1)
    assert plus[0].nonzero().tolist() == [[2, 1]]  # (3, 4) would be acausal: dropped
    minus = shift_match(match, -1)
    assert minus[0].nonzero().tolist() == [[3, 2]]  # (2, -1) does not exist


def test_frobenius_distance_by_hand() -> None:
    a = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert math.isclose(frobenius_distance(a, b).item(), math.sqrt(0.5))
    assert frobenius_distance(torch.stack([a, b]), b).shape == (2,)
