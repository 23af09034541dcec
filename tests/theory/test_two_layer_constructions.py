"""Paper D's explicit constructions (spec D §3) against the shared k-gram estimator."""

from __future__ import annotations

import pytest
import torch

from replicate.analysis import kgram_estimate, order_lags
from replicate.markov import InContextSource
from replicate.theory.two_layer.constructions import Layout, Member, build, triadic_normaliser


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
