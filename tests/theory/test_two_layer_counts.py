"""Parameter counts of Table 1 / App. I against our closed forms and the tensors."""

from __future__ import annotations

import pytest

from replicate.experiments.two_layer.table1 import MATERIALISED, materialised_breakdown
from replicate.theory.two_layer import counts


@pytest.mark.parametrize(("states", "order", "length"), [(2, 2, 32), (3, 3, 64), (5, 1, 128)])
def test_spec_formulas(states: int, order: int, length: int) -> None:
    """Our App. I polynomials (Table 1), with a bias only where a construction has one."""
    d, s, t = 6 * states + 4, states, length
    b2 = 5 * states + 4
    kd = (order + 2) * states + order + 1
    heads = 3 * order + 3 + (order if order > 1 else 0)
    spec = {
        "ours_2l1h": 9 * d * d + 2 * t * d + 2 * s * d + 7 * d + s,
        "ours_b2": 8 * b2 * b2 + 2 * t * b2 + 2 * s * b2 + 9 * b2 + s,
        "ours_2l2h": 13 * d * d + 4 * t * d + 2 * s * d + 4 * d + s,
        "rajaraman_3l1h": 15 * d * d + 4 * t * d + 2 * s * d + 12 * d + s,
        "khead_2l": heads * kd * kd + order * t * kd + 2 * s * kd + s,
    }
    for name, value in spec.items():
        assert counts.parameter_count(name, states, order, length, True) == value, name
    shared = counts.parameter_count("ours_2l1h", states, order, length)
    assert shared == spec["ours_2l1h"] - t * d  # one PE table shared by keys and values


def test_spec_spot_value_rajaraman() -> None:
    """Our App. I accounting: Rajaraman 3L1H at S = 2, k = 2, T = 32 has 6146 parameters."""
    assert counts.parameter_count("rajaraman_3l1h", 2, 2, 32, True) == 6146


@pytest.mark.parametrize("name", sorted(MATERIALISED))
def test_counts_equal_materialised_tensors(name: str) -> None:
    assert materialised_breakdown(name, 2, 16) == counts.breakdown(name, 2, 2, 16)


def test_ours_is_smaller_than_the_khead_model_from_order_three() -> None:
    assert counts.crossover_order(2, 32, 8) == 3
