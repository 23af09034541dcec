"""Paper C: the constructions theta_*^k of Sec. 3 and Thm. 4.2.

* `set_construction` writes theta_*^k (paper C, Eqs. (6), (8a)-(8c), App. A.2 Eq. (10),
  0-indexed) into one member of an `EnsembleDisentangled`, so theory checks and
  training share one forward pass.
  Its c -> infinity output is the k-gram estimator over the *padded* match set
  (`replicate.analysis.kgram` with ``pad=True``; Lemma B.1, Eqs. (12)-(13)), and on an empty
  match set the back-off of `construction_limit`.
* `set_all_heads_bigram` (App. F Eq. (30)) and `set_lagset_construction` (App. F.2
  Eq. (36)) write the paper's other stationary points into the same model.
* `lagset_conditional` is the stationary conditional of the next token given any lag set
  (Lemma H.5, App. H.2), the limit of the k-gram estimator (Lemma H.6).
* `lemma31_surrogate` has Lemma 3.1's form of the cross-entropy gradient as its gradient.
* `enumerate_chain` and `table_gradient`: every sequence of a small chain with its
  probability, and the exact population gradient of a model that reads a subset of the
  tokens (Prop. 3.2, Remark C.2).
* `GeneralConstruction` is theta_*^k on App. F.1's general architecture (Eqs. (32)-(35):
  block embeddings, summed heads with a skip connection, a value matrix V2 in layer 2 and
  the MLP m(x) = log(|x| + eps) before the softmax), with V2 as its parameter.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from lightning_modules.disentangled import EnsembleDisentangled
from replicate.analysis.kgram import kgram_counts, paper_c_kgram_lags
from replicate.markov.incontext import context_indices, lifted_stationary


@torch.no_grad()
def set_construction(model: EnsembleDisentangled, member: int, k: int, c: float) -> None:
    """Write theta_*^k at scale ``c`` into member ``member`` (Eqs. (8a)-(8c), 0-indexed).

    Heads h <= k-1 are activated: A1^(h)[l, l-h] = c (l >= h), A1^(h)[l, 0] = c (l < h,
    the padding convention), V1^(h) = I_S; heads h >= k are deactivated (A1 = 0, V1 = 0).
    Q = sqrt(c) sum_{h<k} sum_j E[(h-1)S+j, hS+j], Kt = sqrt(c) sum_{h<k} sum_j E[hS+j, hS+j]
    (App. A.2, Eqs. (10a)-(10b)), so A2 = Q Kt = c sum_h sum_j E[(h-1)S+j, hS+j] (Eq. (6)).
    Needs d_h = D (rank S(k-1), Eq. (10a)).
    """
    heads, s, t = model.heads, model.states, model.seq_len
    if not 1 <= k <= heads + 1:
        raise ValueError(f"k must be in 1..{heads + 1}, got {k}")
    _check_full_rank(model)
    for param in (model.A1, model.V1, model.Q, model.Kt):
        param[member].zero_()
    rows = torch.arange(t)
    eye = torch.eye(s, dtype=model.Q.dtype)
    root = math.sqrt(c)
    for h in range(1, k):
        cols = torch.where(rows >= h, rows - h, torch.zeros_like(rows))
        model.A1[member, h - 1, rows, cols] = c
        model.V1[member, h - 1] = eye
        model.Q[member, (h - 1) * s : h * s, h * s : (h + 1) * s] = root * eye
        model.Kt[member, h * s : (h + 1) * s, h * s : (h + 1) * s] = root * eye


@torch.no_grad()
def set_all_heads_bigram(model: EnsembleDisentangled, member: int, c: float) -> None:
    """Write paper C's alternative bigram point, App. F Eq. (30), into member ``member``.

    Every head h = 1..H attends to the (-1)-token (Eq. (30c), read causally as
    A1^(h)[l, l-1] = c for l >= 1; row 0 has the single key 0), V1^(h) = sqrt(c) I_S
    (Eq. (30d)), Q = Q2^T = sqrt(c) sum_h sum_j E[j, hS+j] (Eq. (30a): the query's block 0,
    i.e. x_{T-1} itself) and Kt = K2 = sqrt(c) sum_h sum_j E[hS+j, hS+j] (Eq. (30b)).
    The score of key i is H c^{3/2} 1{x_{pad(i-1)} = x_{T-1}}, so the c -> infinity output
    is the padded bigram estimator (`construction_limit` with k = 2). Needs d_h = D.
    """
    _check_full_rank(model)
    heads, s, t = model.heads, model.states, model.seq_len
    for param in (model.A1, model.V1, model.Q, model.Kt):
        param[member].zero_()
    rows = torch.arange(1, t)
    eye = torch.eye(s, dtype=model.Q.dtype)
    root = math.sqrt(c)
    for h in range(1, heads + 1):
        model.A1[member, h - 1, rows, rows - 1] = c
        model.V1[member, h - 1] = root * eye
        model.Q[member, 0:s, h * s : (h + 1) * s] = root * eye
        model.Kt[member, h * s : (h + 1) * s, h * s : (h + 1) * s] = root * eye


@torch.no_grad()
def set_lagset_construction(
    model: EnsembleDisentangled, member: int, lags: tuple[int, ...], c: float
) -> None:
    """Write paper C's N-history point, App. F.2 Eq. (36), for the lag set N = ``lags``.

    Head h in N attends to the (-h)-token from every query l < T-1 and to the (-(h-1))-token
    from the last query T-1 (Eq. (36c): the last token is special, so the construction
    holds for this fixed length only); rows l < h read x_0, the padding convention of
    Eq. (10c) (Eq. (36c) leaves them out; the factor c of its last term is restored).
    V1^(h) = sqrt(c) I_S for h in N, 0 otherwise (Eq. (36d)); Q = Kt = sqrt(c) sum_{h in N}
    sum_j E[hS+j, hS+j] (Eqs. (36a)-(36b): block h of the query against block h of the
    key). The score of key i is c^2 #{h in N: x_{pad(i-h)} = x_{T-h}}, so the c -> infinity
    output is the padded N-MLE estimator of App. F.2 (`kgram_estimate(lags, pad=True)`
    where it is defined). Needs d_h = D.
    """
    _check_full_rank(model)
    heads, s, t = model.heads, model.states, model.seq_len
    if not lags or any(not 1 <= h <= heads for h in lags) or len(set(lags)) != len(lags):
        raise ValueError(f"lags must be distinct heads in 1..{heads}, got {lags}")
    for param in (model.A1, model.V1, model.Q, model.Kt):
        param[member].zero_()
    rows = torch.arange(t)
    eye = torch.eye(s, dtype=model.Q.dtype)
    root = math.sqrt(c)
    for h in lags:
        cols = (rows - h).clamp(min=0)
        cols[-1] = t - h
        model.A1[member, h - 1, rows, cols] = c
        model.V1[member, h - 1] = root * eye
        model.Q[member, h * s : (h + 1) * s, h * s : (h + 1) * s] = root * eye
        model.Kt[member, h * s : (h + 1) * s, h * s : (h + 1) * s] = root * eye


def _check_full_rank(model: EnsembleDisentangled) -> None:
    if model.hidden != model.width:
        raise ValueError("the constructions need d_h = D (paper C, Eq. (10a): rank S(k - 1))")


def construction_limit(tokens: torch.Tensor, k: int, states: int) -> torch.Tensor:
    """The c -> infinity output of theta_*^k at the last query, (B, S) float64, on *every*
    sequence, its match set empty or not.

    The score of key i is c m_i + O(T e^{-c}) with m_i = #{h <= k-1 : x_{pad(i-h)} = x_{T-h}}
    (paper C, Lemma B.1 and App. E, Eq. (16)), so the attention becomes uniform
    on the keys with the largest m_i: the padded match set M^pad (m_i = k-1) where it is
    not empty, else the keys matching the most lags, a back-off that drops no lag in
    particular (our derivation). The token counts of the keys with exactly m matching lags are
    E_m = sum_{A : |A| >= m} (-1)^{|A|-m} C(|A|, m) N_A (inclusion-exclusion), N_A the
    padded counts of the lag subset A (`kgram_counts`, ``pad=True``).
    """
    lags = paper_c_kgram_lags(k)
    counts = {
        subset: kgram_counts(tokens, subset, states, pad=True, last_position=True)
        for size in range(len(lags) + 1)
        for subset in itertools.combinations(lags, size)
    }
    out = torch.full((tokens.shape[0], states), math.nan, dtype=torch.float64)
    for m in range(len(lags), -1, -1):
        exact = torch.stack(
            [
                (-1) ** (len(a) - m) * math.comb(len(a), m) * n
                for a, n in counts.items()
                if len(a) >= m
            ]
        ).sum(0)
        total = exact.sum(-1, keepdim=True)
        pick = out.isnan().any(-1, keepdim=True) & (total > 0)
        out = torch.where(pick, exact / total.clamp(min=1.0), out)
    return out


def lagset_conditional(
    kernels: torch.Tensor, tokens: torch.Tensor, lags: tuple[int, ...]
) -> torch.Tensor:
    """p_tau(x_{T+1} = . | x_{T+1-h}, h in ``lags``) of a stationary chain: (B, S) float64.

    Paper C, Lemma H.5 (contiguous lags 1..l: the lower-order conditional, time-homogeneous
    under the stationary start of App. H.1) and App. H.2 "Conditional Probability for Any
    Subset of Sequence" (any lag set, Remark C.2 / App. F.2): the law of the last stationary
    window and the next token, pi(w) P(s | w) with pi = `lifted_stationary`, summed over the
    window positions outside ``lags`` and normalised. ``kernels`` (B, S**m, S) (order
    m = n-1), ``tokens`` (B, T) with T >= m; lags in 1..m; () gives the stationary marginal.
    """
    kernels = kernels.to(torch.float64)
    batch, rows, states = kernels.shape
    order = round(math.log(rows) / math.log(states))
    if any(not 1 <= h <= order for h in lags) or len(set(lags)) != len(lags):
        raise ValueError(f"lags must be distinct ints in 1..{order}, got {lags}")
    joint = (lifted_stationary(kernels).unsqueeze(-1) * kernels).view(
        batch, *[states] * order, states
    )
    # window axis j (oldest first) holds x[T-order+j], the lag order - j
    drop = [1 + order - h for h in range(1, order + 1) if h not in lags]
    if drop:
        joint = joint.sum(dim=drop)
    kept = sorted(lags, reverse=True)  # the remaining axes, oldest first
    index = [torch.arange(batch), *(tokens[:, tokens.shape[-1] - h] for h in kept)]
    law = joint[tuple(index)]
    return law / law.sum(-1, keepdim=True)


def lemma31_surrogate(probs: torch.Tensor, law: torch.Tensor, eps: float) -> torch.Tensor:
    """(E,) mean over sequences of <sg(p_theta - y), log(p_theta + eps)>, sg = stop-gradient:
    its gradient is paper C's Lemma 3.1 form E <p_theta - y, d log p_theta> of the gradient
    of the cross-entropy -sum_s y_s log(p_s + eps) (exact as eps -> 0, for any model whose
    output lies on the simplex). ``probs`` (E, B, S), ``law`` (E, B, S)."""
    residual = (probs.detach() - law.to(probs.dtype)).detach()
    return (residual * torch.log(probs + eps)).sum(-1).mean(-1)


def lagset_construction_limit(
    tokens: torch.Tensor, lags: tuple[int, ...], states: int
) -> torch.Tensor:
    """The c -> infinity output of App. F.2 Eq. (36) at the last query, (B, S) float64.

    Eq. (36c) makes the last position T-1 read the (-(h-1))-token, and it does so as a key
    too: block h of key T-1 then holds x_{T-h}, the query's own block, so key T-1 matches
    every h in N whatever the sequence. The limit is therefore the padded N-MLE counts over
    keys i < T-1 plus x_{T-1} once (paper C, App. F.2; padding as in `set_lagset_construction`).
    """
    counts = kgram_counts(tokens, lags, states, pad=True, last_position=True)
    t = tokens.shape[-1]
    last_matches = torch.ones(tokens.shape[0], 1, dtype=torch.bool)
    for h in lags:
        last_matches &= (tokens[:, t - 1 - h] == tokens[:, t - h]).unsqueeze(-1)
    last = torch.nn.functional.one_hot(tokens[:, -1], states).to(torch.float64)
    counts = counts + torch.where(last_matches, 0.0, 1.0) * last
    return counts / counts.sum(-1, keepdim=True)


class GeneralConstruction(nn.Module):
    """theta_*^k on paper C's general architecture (App. F.1, Eqs. (32)-(35)); its one
    parameter is the second layer's value matrix V2, whose gradient App. F.1 shows vanishes.

    Embeddings: s_j = e_j and p_i = e_{S+i} in R^d, d = S + T (mutually orthogonal),
    lifted into block h of R^{n d}; r0[i] = s^0_{x_i} + p^0_i. Layer 1, k - 1 active heads
    summed into the stream (skip connection): head h's query at l attends to the key l - h
    with logit c (Eq. (32); printed as sum_l p_{l-h} p_l^T, which with the row-vector
    convention would attend forward, so it is read with query and key exchanged), rows
    l < h to key 0 (the simplified model's padding, `set_construction`); V1^(h) copies
    block 0's token into block h (Eq. (33)). Layer 2 at the last query T - 1: logit c for
    each h in 1..k-1 whose block h - 1 of the query matches block h of the key (Eq. (34)),
    value V2 = sum_j e_j (s^0_j)^T (Eq. (35)); output softmax(log(|V2 r2| + eps)), App.
    F.1's MLP m computing the logits (the authors' ``--log_out``: eps = 1e-8). So
    p = (|V2 r2| + eps) / sum(...), and as c -> infinity V2 r2 is `construction_limit`.

    V2 multiplies r2 = sum_i a(i, T-1) r1[i], which lies in the span of block 0's tokens
    and positions and blocks 1..k-1's tokens: the parameter holds V2's columns on that span,
    (1, S, S + T + (k-1) S) in that order (one ensemble member, as the population-gradient
    estimator expects); V2's other columns meet zeros and get zero gradient, so the gradient
    norm is the full V2's. ``tokens`` (1, B, T) -> (1, B, S).
    """

    def __init__(self, states: int, seq_len: int, k: int, c: float, log_eps: float) -> None:
        super().__init__()
        if k < 1 or seq_len <= k:
            raise ValueError(f"need 1 <= k < T, got k = {k}, T = {seq_len}")
        self.states, self.seq_len, self.k, self.c, self.log_eps = states, seq_len, k, c, log_eps
        width = states + seq_len + (k - 1) * states
        v2 = torch.zeros(1, states, width, dtype=torch.float64)
        v2[:, :, :states] = torch.eye(states, dtype=torch.float64)
        self.V2 = nn.Parameter(v2)

    def stream(self, tokens: torch.Tensor) -> torch.Tensor:
        """r2 = sum_i a(i, T-1) r1[i] in V2's coordinates, (E, B, S + T + (k-1) S)."""
        onehot = torch.nn.functional.one_hot(tokens, self.states).to(torch.float64)
        seen = onehot.cumsum(-2)  # sum_{j <= i} e_{x_j}
        i = torch.arange(self.seq_len, dtype=torch.float64)
        small = math.exp(-self.c)  # softmax of logit c among i + 1 keys: 1 / (1 + i e^{-c})
        blocks = [onehot]  # block h of r1[i]: head h's average of the keys' tokens
        for h in range(1, self.k):
            target = onehot[..., (torch.arange(self.seq_len) - h).clamp(min=0), :]
            weight = (1.0 / (1.0 + i * small)).unsqueeze(-1)
            blocks.append(weight * (target + small * (seen - target)))
        matches = torch.zeros(tokens.shape, dtype=torch.float64)  # k = 1: uniform
        for h in range(1, self.k):
            matches = matches + (blocks[h] * blocks[h - 1][..., -1:, :]).sum(-1)
        attention = (self.c * matches).softmax(-1)
        pooled = [(attention.unsqueeze(-1) * block).sum(-2) for block in blocks]
        return torch.cat([pooled[0], attention, *pooled[1:]], -1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits_in = torch.einsum("esw,ebw->ebs", self.V2, self.stream(tokens))
        unnormalised = logits_in.abs() + self.log_eps  # exp(m(x)), m(x) = log(|x| + eps)
        return unnormalised / unnormalised.sum(-1, keepdim=True)


def enumerate_chain(kernels: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sequence of ``length`` tokens of each stationary-start chain, by brute force.

    Returns tokens (N, L), N = S**L, and their probabilities (K, N) under each of the K
    kernels (K, S**m, S) of order m <= L: p_tau(x^L) = pi(x_1..x_m) prod_t P(x_t | window),
    with pi the stationary law of a window (paper C, App. H.1). The law of the next token
    given the whole sequence is then ``kernels[:, context_indices(tokens)[:, -1]]``.
    """
    kernels = kernels.to(torch.float64)
    rows, states = kernels.shape[1:]
    order = round(math.log(rows) / math.log(states))
    if not 1 <= order <= length:
        raise ValueError(f"need 1 <= order <= length, got order {order}, length {length}")
    tokens = torch.tensor(list(itertools.product(range(states), repeat=length)))
    windows = context_indices(tokens, order, states)  # (N, L - m + 1)
    start = lifted_stationary(kernels)[:, windows[:, 0]]  # (K, N)
    steps = kernels[:, windows[:, :-1], tokens[:, order:]].prod(-1)  # (K, N)
    return tokens, start * steps


def table_gradient(
    table: torch.Tensor,
    keys: torch.Tensor,
    probs: torch.Tensor,
    target: torch.Tensor,
) -> tuple[torch.Tensor, float]:
    """The population cross-entropy of a softmax table model and its gradient.

    The model p_theta(x^L) = softmax(table[k, keys[n]]) for task k reads the tokens that
    ``keys`` (N,) index and nothing else: its score is a function of the task and those
    tokens, the hypothesis of paper C's Prop. 3.2 (a suffix) and Remark C.2 (any subset).
    Loss -E_k sum_n probs[k, n] <target[k, n], log p_theta>, ``table`` (K, rows, S),
    ``probs`` (K, N), ``target`` (K, N, S) the next-token law the loss is taken against.
    Returns (gradient with respect to ``table``, loss).
    """
    table = table.detach().clone().requires_grad_(True)
    log_p = table[:, keys].log_softmax(-1)  # (K, N, S)
    loss = -(probs.unsqueeze(-1) * target * log_p).sum((-1, -2)).mean()
    (gradient,) = torch.autograd.grad(loss, table)
    return gradient, float(loss.detach())
