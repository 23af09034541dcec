"""Paper D's explicit constructions (Sec. 3-4, App. A-B) against the shared k-gram estimator."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from replicate.analysis import kgram_estimate, order_lags
from replicate.experiments.two_layer.bits import quantised
from replicate.experiments.two_layer.constructions import kgram_errors, smallest_passing
from replicate.markov import InContextSource
from replicate.theory.two_layer.constructions import (
    Layout,
    Member,
    build,
    matching_margin,
    sufficient_temperature,
    triadic_normaliser,
)


def _tokens(states: int, order: int, length: int, count: int = 6) -> torch.Tensor:
    gen = torch.Generator().manual_seed(10 * states + order)
    return InContextSource(states, order, 1.0).sample(count, length, gen)[0]


@pytest.mark.parametrize("kind", ["2l2h", "2l1h", "3l1h"])
@pytest.mark.parametrize(("states", "order"), [(2, 2), (3, 1)])
def test_gated_constructions_output_the_kgram_estimate(kind: str, states: int, order: int) -> None:
    tokens = _tokens(states, order, 24)
    model = build(kind, states, 24, [Member(order, 1e4)])
    with torch.no_grad():
        out = model(tokens[None])[0]
    estimate = kgram_estimate(tokens, order_lags(order), states)
    defined = ~estimate.isnan().any(-1)
    assert int(defined.sum()) > 20
    torch.testing.assert_close(out[defined], estimate[defined], atol=1e-9, rtol=0)


def test_members_are_independent_k_c_points() -> None:
    """One ensemble, members (k, c): each member equals its own one-member build."""
    tokens = _tokens(2, 2, 16)
    points = [Member(1, 1e2), Member(2, 10.0), Member(2, 1e4)]
    together = build("2l1h", 2, 16, points)
    with torch.no_grad():
        joint = together(tokens[None].expand(3, -1, -1))
        for i, point in enumerate(points):
            alone = build("2l1h", 2, 16, [point])(tokens[None])[0]
            torch.testing.assert_close(joint[i], alone, atol=0, rtol=0)


def test_low_temperature_is_not_the_estimator() -> None:
    """D-CON-2: at c = 10 the k = 2 head is far from p_hat_2."""
    tokens = _tokens(2, 2, 32)
    with torch.no_grad():
        out = build("2l1h", 2, 32, [Member(2, 10.0)])(tokens[None])[0]
    estimate = kgram_estimate(tokens, order_lags(2), 2)
    defined = ~estimate.isnan().any(-1)
    assert float((out - estimate).abs()[defined].max()) > 0.3


def test_2l1h_intermediate_blocks() -> None:
    """D-CON-3: the mask block is e_{x_{n-k}}, r = 3^k / Z after position k, 0 before."""
    states, order, length = 3, 2, 12
    tokens = _tokens(states, order, length, count=2)
    traces: list[dict[str, torch.Tensor]] = []
    with torch.no_grad():
        build("2l1h", states, length, [Member(order, 1e4)])(tokens[None], traces)
    stream, layout = traces[-1]["input"][0], Layout(states)
    mask = torch.nn.functional.one_hot(tokens[:, : length - order], states).double()
    torch.testing.assert_close(stream[:, order:, layout.block("mask")], mask, atol=1e-12, rtol=0)
    r = stream[..., layout.r]
    assert float(r[:, :order].abs().max()) == 0.0
    torch.testing.assert_close(
        r[:, order:], torch.full_like(r[:, order:], 3.0**order / triadic_normaliser(order))
    )


def test_ungated_variant_is_a_convex_combination_of_tokens() -> None:
    tokens = _tokens(2, 2, 32)
    with torch.no_grad():
        out = build("ungated", 2, 32, [Member(2, 1e5)])(tokens[None])[0]
    torch.testing.assert_close(out.sum(-1), torch.ones(6, 32, dtype=torch.float64))
    assert float(out.min()) >= -1e-12


def test_ungated_members_share_one_temperature() -> None:
    with pytest.raises(ValueError, match="temperature"):
        build("ungated", 2, 8, [Member(2, 1e3), Member(2, 1e4)])


@pytest.mark.parametrize("states", [2, 3])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_matching_margin_is_the_closest_pair_of_contexts(states: int, order: int) -> None:
    """delta_k's closed form against 1 - max cosine over every pair of distinct contexts."""
    eye = np.eye(states)
    vectors = [
        sum(3.0**m * eye[s] for m, s in enumerate(context))
        for context in itertools.product(range(states), repeat=order)
    ]
    unit = [v / np.linalg.norm(v) for v in vectors]
    closest = max(float(a @ b) for a, b in itertools.combinations(unit, 2))
    assert matching_margin(order) == pytest.approx(1.0 - closest, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("order", [2, 3])
def test_sufficient_temperature_bounds_the_error(order: int) -> None:
    """At c = ln((T - 1) / eps) / delta_k the 2L1H error is <= eps; a tenth of it is not."""
    length, eps = 32, 1e-3
    tokens = _tokens(2, order, length, count=20)
    c = sufficient_temperature(order, length, eps)
    model = build("2l1h", 2, length, [Member(order, c), Member(order, c / 10)])
    with torch.no_grad():
        out = model(tokens[None].expand(2, -1, -1))
    errors = kgram_errors(out, tokens, order).amax(-1)
    assert float(errors[0]) <= eps < float(errors[1])
    for i in range(2):  # the ensemble axis of kgram_errors: each member as alone
        assert float(kgram_errors(out[i], tokens, order).max()) == float(errors[i])


def test_smallest_passing_needs_every_larger_value_to_pass() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0])
    assert smallest_passing(values, np.array([0.5, 0.01, 0.2, 0.01]), 0.1) == 4.0
    assert smallest_passing(values, np.array([0.5, 0.01, 0.02, 0.01]), 0.1) == 2.0
    assert smallest_passing(values, np.full(4, 0.01), 0.1) == 1.0
    assert math.isnan(smallest_passing(values, np.array([0.01, 0.01, 0.01, 0.5]), 0.1))


def test_per_member_bit_widths_quantise_each_member_alone() -> None:
    """quantised(model, widths) with one width per member equals one-width copies; 32 bits
    is the float model, and few bits move the construction off the estimator."""
    tokens = _tokens(2, 2, 16)
    widths = [6, 12, 32]
    model = build("2l1h", 2, 16, [Member(2, 200.0, 100.0)] * len(widths))
    with torch.no_grad():
        together = quantised(model, torch.tensor(widths))(tokens[None].expand(3, -1, -1))
        plain = model(tokens[None].expand(3, -1, -1))
        for i, b in enumerate(widths):
            alone = quantised(model, b)(tokens[None].expand(3, -1, -1))
            torch.testing.assert_close(together[i], alone[i], atol=0, rtol=0)
    torch.testing.assert_close(together[2], plain[2], atol=0, rtol=0)
    errors = kgram_errors(together, tokens, 2).amax(-1)
    assert float(errors[0]) > 0.1 > 1e-3 > float(errors[2])
