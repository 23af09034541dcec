"""Paper C, Thm. 4.2 along c = T/2: the diagonal-only lengths and the C-G7 statistics; App.
F.1's general architecture on the same diagonal."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from replicate.config import load_params
from replicate.experiments.subngrams.thm42 import (
    MAX_SCALE,
    Thm42Settings,
    _diagonal,
    _evaluations,
    _vanishing_along_diagonal,
    general_limit_error,
    general_table,
    gradient_sets,
)


def _settings(**update) -> Thm42Settings:
    ci = load_params(scale="ci").experiment("subngrams_thm42").settings["ci"]
    return Thm42Settings(**{**ci, **update})


def test_diagonal_only_lengths_evaluate_theta_star_at_half_t() -> None:
    s = _settings(seq_lens=[32, 64], diagonal_seq_lens=[64, 256])
    evaluations = dict(_evaluations(s))
    assert list(evaluations) == [32, 64, 256]  # 64 is a grid length already: not twice
    assert evaluations[256] == [("star", 2, 128.0), ("star", 3, 128.0)]
    assert ("star", 3, 32.0) in evaluations[64]  # the grid's own diagonal point
    assert MAX_SCALE == 708  # e^{-708} is the last normal float64 power of e


def _rows(grad_norms: list[float], floors: list[float]) -> pd.DataFrame:
    seq_lens = [2**i * 64 for i in range(len(grad_norms))]
    star = pd.DataFrame(
        {"T": seq_lens, "k": 2, "c": [t / 2 for t in seq_lens], "grad_norm": grad_norms,
         "noise_floor": floors}
    )  # fmt: skip
    off_diagonal = star.assign(c=40.0, grad_norm=99.0)
    return _diagonal(pd.concat([off_diagonal, star]), 2)


@pytest.mark.parametrize(
    ("grad_norms", "floors", "levelled"),
    [
        ([1.0, 0.5, 0.05], [0.1, 0.1, 0.1], False),  # vanished: 0.05 <= 2 x 0.1
        ([6.0, 5.0, 3.8], [0.3, 0.3, 0.3], False),  # still falling by more than 2 floors
        ([1.0, 0.06, 0.07], [0.02, 0.02, 0.02], True),  # levelled off at 3.5 floors
        ([6.0, 6.1, 5.9], [0.3, 0.3, 0.3], True),  # falls by less than 2 floors
    ],
)
def test_levelled_excess_tells_a_levelled_gradient_from_a_vanishing_one(
    grad_norms: list[float], floors: list[float], levelled: bool
) -> None:
    metrics = _vanishing_along_diagonal(_rows(grad_norms, floors), 2)
    assert (metrics["G7/k2/levelled_excess"] > 0) is levelled
    assert metrics["G7/k2/last_T"] == 256
    assert metrics["G7/k2/peak_T"] == 64 + 64 * (grad_norms[1] > grad_norms[0])
    slope = math.log(grad_norms[2] / grad_norms[1]) / math.log(2)
    assert metrics["G7/k2/last_step_loglog_slope"] == pytest.approx(slope)


def test_general_architecture_rows_follow_the_diagonal() -> None:
    """App. F.1 (claims C-F1G): one row per length of the grid and the diagonal and per
    k >= 2, at c = T/2, with a positive V2 gradient and a floor; and the c = 40 output is
    theta_*^k's limit through the log MLP."""
    s = _settings(seq_lens=[8, 16], diagonal_seq_lens=[32], sequences=256, chunks=16)
    table = general_table(s, gradient_sets(s))
    assert list(zip(table["T"], table.k, table.c, strict=True)) == [
        (8, 2, 4.0), (8, 3, 4.0), (16, 2, 8.0), (16, 3, 8.0), (32, 2, 16.0), (32, 3, 16.0)
    ]  # fmt: skip
    assert (table.grad_norm > table.noise_floor).all() and (table.noise_floor > 0).all()
    assert (table.loss > 0).all()
    assert general_limit_error(s) < 1e-12
