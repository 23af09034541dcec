"""The reduced model of paper D, App. C: closed-form gradients against autograd, GD stages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replicate.theory.two_layer.gd import (
    GDSchedule,
    layer1_attention,
    loss_gradients,
    mixed_dirichlet_kernels,
    reduced_loss,
    sample_reduced_data,
    train_two_stage,
)


@pytest.fixture(scope="module")
def data():
    return sample_reduced_data(3, 0.2, 64, 12, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("normalize", [False, True])
def test_gradients_match_autograd(data, normalize: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    p = torch.randn(12, dtype=torch.float64, generator=gen).requires_grad_()
    a = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    loss = reduced_loss(p, a, data, 0.01, normalize)
    auto_p, auto_a = torch.autograd.grad(loss, (p, a))
    value, grad_p, grad_a = loss_gradients(p.detach(), a.detach(), data, 0.01, normalize)
    assert value == pytest.approx(float(loss.detach()), abs=1e-14)
    assert float(grad_a) == pytest.approx(float(auto_a), abs=1e-14)
    if not normalize:  # p is trained in stage 1 only, with unnormalised keys
        torch.testing.assert_close(grad_p, auto_p, atol=1e-14, rtol=0)


def test_one_gd_step_is_a_step_along_minus_the_gradient(data) -> None:
    schedule = GDSchedule(a0=0.1, lr_p=50.0, steps_p=1, lr_a=1.0, steps_a=1, eps=0.01)
    result = train_two_stage(data, schedule)
    p0 = torch.zeros(12, dtype=torch.float64, requires_grad=True)
    a0 = torch.tensor(0.1, dtype=torch.float64)
    (auto_p,) = torch.autograd.grad(reduced_loss(p0, a0, data, 0.01, False), (p0,))
    np.testing.assert_allclose(result.p_history[1], (-50.0 * auto_p).numpy(), atol=1e-12)
    p1 = torch.from_numpy(result.p_history[1])
    a = a0.clone().requires_grad_()
    (auto_a,) = torch.autograd.grad(reduced_loss(p1, a, data, 0.01, True), (a,))
    assert result.a_history[1] == pytest.approx(0.1 - float(auto_a), abs=1e-14)


def test_layer1_attention_is_a_causal_toeplitz_softmax() -> None:
    p = torch.tensor([0.0, np.log(3.0), -np.inf, -np.inf], dtype=torch.float64)
    att = layer1_attention(p)
    assert torch.all(att.triu(1) == 0)
    torch.testing.assert_close(att.sum(-1), torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(att[3], torch.tensor([0.0, 0.0, 0.75, 0.25], dtype=torch.float64))


def test_mixed_prior_rows() -> None:
    kernels = mixed_dirichlet_kernels(3, 0.2, 500, torch.Generator().manual_seed(2))
    torch.testing.assert_close(kernels.sum(-1), torch.ones(500, 3, dtype=torch.float64))
    assert float(kernels.min()) >= 0.2 / 3 - 1e-15
    assert abs(float(kernels.mean()) - 1 / 3) < 0.01  # E pi(s'|s) = 1/S (App. C, constant mean)


def test_previous_token_gradient_is_largest_at_init() -> None:
    data = sample_reduced_data(3, 0.2, 512, 16, torch.Generator().manual_seed(3))
    _, grad_p, _ = loss_gradients(
        torch.zeros(16, dtype=torch.float64), torch.tensor(0.1), data, 0.01, normalize=False
    )
    assert int(torch.argmax(-grad_p)) == 1  # Lemma 7
    assert float(-grad_p[0]) < 0 < float(-grad_p[1])
