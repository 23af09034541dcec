"""The reduced two-layer model of paper D's gradient analysis and its two-stage GD.

Paper D, Sec. 5 and App. C (C.1 model simplification, C.2 stage 1, C.3 stage 2).
Only the positional scalars of layer 1 and one attention scalar of layer 2 are trained;
every other weight sits at its first-order optimum (App. C.1):

* layer 1: att_{n, n-m} = softmax_{m in {0..n-1}}(p_m) with a Toeplitz p in R^T (one scalar
  per relative distance, distance 0 included), v_n = sum_m att_{n, n-m} e_{x_{n-m}};
* layer 2, at the last position T only: beta_i = softmax_{i in [T]}(a <k_i, e_{x_T}>), with
  k_i = v_i in stage 1 and k_i = v_i / ||v_i|| in stage 2 (the layer norm "after the key
  linear layer" reintroduced, App. C.1);
* output f(X) = sum_i beta_i e_{x_i} in the simplex;
* loss (App. C, Eq. (2), the true next-token law in place of the sampled token):
  L = -E sum_s pi(s | x_T) log(f_s + eps).

Data (App. C's assumptions; the prior is ours): rows pi(.|s) = (1 - gamma) Dir(1_S) + gamma / S,
independent over s and over sequences, x_1 from the stationary law of the kernel.

`loss_gradients` is the closed-form gradient (the chain rule of App. C.2 written out:
softmax backward through layer 2, then through each row of layer 1); tests compare it with
autograd on `reduced_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from replicate.markov.incontext import draw_kernels, sample_from_kernels


@dataclass(frozen=True)
class ReducedData:
    """N sequences of length T with the exact law of the token after the last one."""

    tokens: torch.Tensor  # (N, T) int64
    next_law: torch.Tensor  # (N, S) float64: pi(. | x_T)
    one_hot: torch.Tensor  # (N, T, S) float64: e_{x_i}


def mixed_dirichlet_kernels(
    states: int, gamma: float, count: int, generator: torch.Generator
) -> torch.Tensor:
    """``count`` kernels (count, S, S), rows (1 - gamma) Dir(1_S) + gamma / S (our prior)."""
    return (1.0 - gamma) * draw_kernels(states, 1, 1.0, count, generator) + gamma / states


def sample_reduced_data(
    states: int, gamma: float, sequences: int, length: int, generator: torch.Generator
) -> ReducedData:
    """Sequences from our prior (App. C), x_1 stationary (the lemmas use stationary chains)."""
    kernels = mixed_dirichlet_kernels(states, gamma, sequences, generator)
    tokens = sample_from_kernels(kernels, length, "stationary", generator)
    next_law = kernels[torch.arange(sequences), tokens[:, -1]]
    one_hot = torch.nn.functional.one_hot(tokens, states).to(torch.float64)
    return ReducedData(tokens=tokens, next_law=next_law, one_hot=one_hot)


def layer1_attention(p: torch.Tensor) -> torch.Tensor:
    """(T, T) causal attention att[n, i] = softmax_{i <= n}(p_{n-i}) (App. C.1)."""
    length = p.shape[0]
    n = torch.arange(length)
    distance = n[:, None] - n[None, :]
    scores = p[distance.clamp(min=0)].masked_fill(distance < 0, float("-inf"))
    return scores.softmax(-1)


def _keys_at_query(v: torch.Tensor, tokens: torch.Tensor, normalize: bool) -> torch.Tensor:
    """c_i = <k_i, e_{x_T}> (N, T), with k_i = v_i or v_i / ||v_i||."""
    keys = v / v.norm(dim=-1, keepdim=True) if normalize else v
    query = tokens[:, -1:, None].expand(-1, v.shape[1], 1)
    return keys.gather(-1, query).squeeze(-1)


def reduced_prediction(
    p: torch.Tensor, a: torch.Tensor, data: ReducedData, normalize: bool
) -> torch.Tensor:
    """f_theta(X) = sum_i beta_i e_{x_i} (N, S) (paper D, App. C.1)."""
    one_hot = data.one_hot
    v = layer1_attention(p) @ one_hot
    beta = (a * _keys_at_query(v, data.tokens, normalize)).softmax(-1)
    return torch.einsum("nt,nts->ns", beta, one_hot)


def cross_entropy(f: torch.Tensor, law: torch.Tensor, eps: float) -> torch.Tensor:
    """-mean_N sum_s pi(s | x_T) log(f_s + eps) (paper D, App. C, Eq. (2))."""
    return -(law * torch.log(f + eps)).sum(-1).mean()


def reduced_loss(
    p: torch.Tensor, a: torch.Tensor, data: ReducedData, eps: float, normalize: bool
) -> torch.Tensor:
    """The empirical loss of the reduced model on ``data``."""
    return cross_entropy(reduced_prediction(p, a, data, normalize), data.next_law, eps)


def optimal_loss(data: ReducedData, eps: float) -> float:
    """L* = -E sum_s pi(s | x_T) log(pi(s | x_T) + eps) (the Thm 5 target, Sec. 5)."""
    return float(cross_entropy(data.next_law, data.next_law, eps))


def _head_backward(
    a: torch.Tensor, c: torch.Tensor, data: ReducedData, eps: float
) -> tuple[float, torch.Tensor]:
    """Loss and dL/dz (N, T) of layer 2 at scores z = a c (paper D, App. C.2 chain rule).

    With g_s = -pi(s|x_T) / (N (f_s + eps)) and h_i = g_{x_i}: dz_i = beta_i (h_i - <beta, h>).
    """
    beta = (a * c).softmax(-1)
    f = torch.einsum("nt,nts->ns", beta, data.one_hot)
    loss = float(cross_entropy(f, data.next_law, eps))
    g = -data.next_law / (f + eps) / data.tokens.shape[0]
    h = torch.einsum("nts,ns->nt", data.one_hot, g)
    return loss, beta * (h - (beta * h).sum(-1, keepdim=True))


def loss_gradients(
    p: torch.Tensor, a: torch.Tensor, data: ReducedData, eps: float, normalize: bool
) -> tuple[float, torch.Tensor, torch.Tensor]:
    """Loss and closed-form (dL/dp, dL/da) of `reduced_loss` (paper D, App. C.2 chain rule).

    dL/da = sum dz_i c_i. dL/dp is given for unnormalised keys (stage 1, where p is trained;
    zeros when ``normalize``): dL/d att[n, i] = a sum_N dz_n 1[x_i = x_T], then the softmax
    backward of each row n and a sum along the diagonal n - i = m.
    """
    att = layer1_attention(p)
    c = _keys_at_query(att @ data.one_hot, data.tokens, normalize)
    loss, dz = _head_backward(a, c, data, eps)
    grad_a = (dz * c).sum()
    if normalize:
        return loss, torch.zeros_like(p), grad_a
    match = (data.tokens == data.tokens[:, -1:]).to(torch.float64)
    d_att = a * dz.transpose(0, 1) @ match
    d_logit = att * (d_att - (att * d_att).sum(-1, keepdim=True))
    n = torch.arange(p.shape[0])
    distance = n[:, None] - n[None, :]
    causal = distance >= 0
    grad_p = torch.zeros_like(p).index_add_(0, distance[causal], d_logit[causal])
    return loss, grad_p, grad_a


@dataclass(frozen=True)
class GDSchedule:
    """Two-stage GD of App. C: stage 1 trains p (a fixed), stage 2 trains a (p frozen)."""

    a0: float
    lr_p: float
    steps_p: int
    lr_a: float
    steps_a: int
    eps: float


@dataclass(frozen=True)
class GDResult:
    """Iterates of both stages (Sec. 5's two-stage algorithm)."""

    initial_grad_p: np.ndarray  # dL/dp at p = 0, a = a0 (Lemma 7)
    p_history: np.ndarray  # (steps_p + 1, T)
    a_history: np.ndarray  # (steps_a + 1,)
    loss_stage1: np.ndarray  # (steps_p + 1,) unnormalised keys
    loss_stage2: np.ndarray  # (steps_a + 1,) normalised keys

    @property
    def p(self) -> np.ndarray:
        return self.p_history[-1]

    @property
    def a(self) -> float:
        return float(self.a_history[-1])


def train_two_stage(data: ReducedData, schedule: GDSchedule) -> GDResult:
    """Full-batch GD on ``data``: p from 0 with a = a0 and no LN, then a with LN (App. C).

    Losses are recorded before each step (and after the last one).
    """
    length = data.tokens.shape[1]
    p = torch.zeros(length, dtype=torch.float64)
    a = torch.tensor(schedule.a0, dtype=torch.float64)
    _, initial_grad, _ = loss_gradients(p, a, data, schedule.eps, normalize=False)
    p_hist, loss1 = [p.clone()], []
    for _ in range(schedule.steps_p):
        loss, grad_p, _ = loss_gradients(p, a, data, schedule.eps, normalize=False)
        p = p - schedule.lr_p * grad_p
        p_hist.append(p.clone())
        loss1.append(loss)
    loss1.append(float(reduced_loss(p, a, data, schedule.eps, False)))
    c = _keys_at_query(layer1_attention(p) @ data.one_hot, data.tokens, normalize=True)
    a_hist, loss2 = [float(a)], []
    for _ in range(schedule.steps_a):  # p frozen: the normalised keys c are fixed
        loss, dz = _head_backward(a, c, data, schedule.eps)
        a = a - schedule.lr_a * (dz * c).sum()
        a_hist.append(float(a))
        loss2.append(loss)
    loss2.append(_head_backward(a, c, data, schedule.eps)[0])
    return GDResult(
        initial_grad_p=initial_grad.numpy(),
        p_history=torch.stack(p_hist).numpy(),
        a_history=np.asarray(a_hist),
        loss_stage1=np.asarray(loss1),
        loss_stage2=np.asarray(loss2),
    )
