"""In-context k-gram estimators indexed by a set of lags (papers C and D).

Definition (0-indexed tokens x_0..x_{L-1}). A query position q predicts x_{q+1}. A key
position i <= q *matches* q for the lag set H (positive ints) when x[i-h] == x[q+1-h] for
every h in H; the estimator counts the tokens x[i] over the matching keys i:

    N_q(s) = #{ i : min_key <= i <= q, i matches q, x[i] = s }

* ``min_key`` defaults to max(H), so every lagged token exists. This is paper C's Def. 2.1
  (positions l = k-1..T-1, 0-indexed) and paper D's match set I_n (1-indexed
  i >= k+1, Sec. 2.1 and App. H.1's pseudo attention map). A lagged index below 0 (key or
  query side) never matches.
* ``pad=True``: paper C's padding convention of theta_*^k (Eq. (8a), pad(m) = max(m, 0)):
  a lagged index below 0 reads x[0], and every key i >= 0 is allowed (min_key default 0).

Which lags? The two papers count the history differently; never pass k itself:

* paper C's *k-gram* conditions on the k - 1 previous tokens: `paper_c_kgram_lags(k)` =
  (1, ..., k-1); the 1-gram (unigram) has no lags and matches every key;
* paper D's *order-k* estimator conditions on k tokens: `order_lags(k)` = (1, ..., k).

Smoothing: add-alpha, (N + alpha) / (sum N + S alpha) (alpha = 1 is paper D's Laplace
beta = 1, the Bayes predictive under Dirichlet(1); paper C's dashed lines use alpha = the
Dirichlet alpha, the authors' `train.py`). alpha = 0 is the raw MLE, NaN on an empty match
set unless ``backoff=True`` (our convention ``mle``, Def. 2.1 being 0/0: drop the largest lag
until the match set is non-empty).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Lags = Sequence[int]

_CHUNK_ELEMENTS = 1 << 24  # bound on chunk * L * L booleans of one match block


def paper_c_kgram_lags(k: int) -> tuple[int, ...]:
    """Lags of paper C's k-gram (Def. 2.1): it conditions on the k - 1 previous tokens."""
    if k < 1:
        raise ValueError(f"paper C's k-gram needs k >= 1, got {k}")
    return tuple(range(1, k))


def order_lags(k: int) -> tuple[int, ...]:
    """Lags of paper D's order-k estimator (Sec. 2.1): it conditions on k tokens."""
    if k < 0:
        raise ValueError(f"order must be >= 0, got {k}")
    return tuple(range(1, k + 1))


def _check_lags(lags: Lags) -> tuple[int, ...]:
    lags = tuple(int(h) for h in lags)
    if any(h < 1 for h in lags) or len(set(lags)) != len(lags):
        raise ValueError(f"lags must be distinct positive ints, got {lags}")
    return lags


def _min_key(lags: tuple[int, ...], min_key: int | None, pad: bool) -> int:
    if min_key is not None:
        return min_key
    return 0 if pad else max(lags, default=0)


def _lagged(tokens: torch.Tensor, shift: int, pad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """x[j - shift] for j = 0..L-1 and whether it exists (with pad: x[max(j - shift, 0)])."""
    length = tokens.shape[-1]
    index = torch.arange(length, device=tokens.device) - shift
    valid = index >= 0
    if pad:
        valid = torch.ones_like(valid)
    return tokens[..., index.clamp(min=0, max=length - 1)], valid


def _query_mask(
    tokens: torch.Tensor, queries: torch.Tensor, lags: tuple[int, ...], min_key: int, pad: bool
) -> torch.Tensor:
    """match[..., a, i] for query positions ``queries`` (Q,) and every key i: (B, Q, L)."""
    length = tokens.shape[-1]
    keys = torch.arange(length, device=tokens.device)
    mask = (keys <= queries.unsqueeze(1)) & (keys >= min_key)
    mask = mask.expand(tokens.shape[0], -1, -1)
    for h in lags:
        key_tok, key_ok = _lagged(tokens, h, pad)
        q_index = queries + 1 - h
        q_ok = (q_index >= 0) | pad
        q_tok = tokens[:, q_index.clamp(min=0, max=length - 1)]
        same = q_tok.unsqueeze(-1) == key_tok.unsqueeze(-2)
        mask = mask & same & key_ok & q_ok.unsqueeze(-1)
    return mask


def match_matrix(
    tokens: torch.Tensor, lags: Lags, *, min_key: int | None = None, pad: bool = False
) -> torch.Tensor:
    """match[b, q, i] = key i matches query q (module doc): (B, L, L) bool, causal."""
    lags = _check_lags(lags)
    queries = torch.arange(tokens.shape[-1], device=tokens.device)
    return _query_mask(tokens, queries, lags, _min_key(lags, min_key, pad), pad)


def _counts(
    tokens: torch.Tensor, lags: tuple[int, ...], states: int, min_key: int, pad: bool, last: bool
) -> torch.Tensor:
    batch, length = tokens.shape
    queries = torch.arange(length - 1 if last else 0, length, device=tokens.device)
    onehot = torch.nn.functional.one_hot(tokens, states).to(torch.float64)
    chunk = max(1, _CHUNK_ELEMENTS // (queries.numel() * length))
    out = []
    for start in range(0, batch, chunk):
        part = slice(start, start + chunk)
        mask = _query_mask(tokens[part], queries, lags, min_key, pad)
        out.append(mask.to(torch.float64) @ onehot[part])
    counts = torch.cat(out)
    return counts[:, 0] if last else counts


def kgram_counts(
    tokens: torch.Tensor,
    lags: Lags,
    states: int,
    *,
    min_key: int | None = None,
    pad: bool = False,
    last_position: bool = False,
) -> torch.Tensor:
    """N_q(s) of the module doc: (B, L, S) float64 for every query, or (B, S) for the last
    query q = L - 1 only (``last_position=True``, paper C's prediction of x_T)."""
    lags = _check_lags(lags)
    return _counts(tokens, lags, states, _min_key(lags, min_key, pad), pad, last_position)


def add_alpha(counts: torch.Tensor, alpha: float) -> torch.Tensor:
    """(N + alpha) / (sum N + S alpha) along the last axis (paper C's `train.py`;
    paper D, Sec. 3)."""
    states = counts.shape[-1]
    return (counts + alpha) / (counts.sum(-1, keepdim=True) + states * alpha)


def kgram_estimate(
    tokens: torch.Tensor,
    lags: Lags,
    states: int,
    *,
    alpha: float = 0.0,
    min_key: int | None = None,
    pad: bool = False,
    backoff: bool = False,
    last_position: bool = False,
) -> torch.Tensor:
    """The lag-set estimator of the next token: (B, L, S) for every query q (predicting
    x_{q+1}), or (B, S) for q = L - 1 (``last_position=True``).

    alpha > 0: add-alpha smoothing. alpha = 0: the MLE, NaN where the match set is empty,
    or with ``backoff=True`` the MLE of the lag set without its largest lag, recursively
    (our ``mle`` convention; ``min_key`` left None follows each lag set's own default).
    """
    lags = _check_lags(lags)
    if backoff and alpha != 0:
        raise ValueError("backoff applies to the raw MLE (alpha = 0) only")
    counts = _counts(tokens, lags, states, _min_key(lags, min_key, pad), pad, last_position)
    if alpha > 0:
        return add_alpha(counts, alpha)
    total = counts.sum(-1, keepdim=True)
    estimate = counts / total
    if backoff and lags:
        shorter = tuple(sorted(lags))[:-1]
        fallback = kgram_estimate(
            tokens,
            shorter,
            states,
            min_key=min_key,
            pad=pad,
            backoff=True,
            last_position=last_position,
        )
        estimate = torch.where(total > 0, estimate, fallback)
    return estimate


def pseudo_attention_map(
    tokens: torch.Tensor, lags: Lags, *, min_key: int | None = None, pad: bool = False
) -> torch.Tensor:
    """A^ps[b, q, i] = 1[i matches q] / |I_q| (B, L, L) float64; rows with an empty match
    set are all zero. With ``order_lags(k)`` this is paper D's pseudo attention map (App.
    H.1; row q is 1-indexed n = q + 1, key column i is 1-indexed i + 1)."""
    match = match_matrix(tokens, lags, min_key=min_key, pad=pad).to(torch.float64)
    sizes = match.sum(-1, keepdim=True)
    return match / sizes.clamp(min=1.0)


def next_token_nll(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """-log probs[b, q, x_{q+1}] for q = 0..L-2: (B, L - 1), the per-position loss of an
    all-positions estimator (paper D's L_kgram terms, the authors' `empirical_est`)."""
    target = tokens[:, 1:].unsqueeze(-1)
    return -torch.log(probs[:, :-1].gather(-1, target).squeeze(-1))


def soft_cross_entropy(probs: torch.Tensor, target: torch.Tensor, eps: float = 1e-8) -> float:
    """mean over the batch of -sum_s y_s log(f_s + eps) (paper C, Eq. (1); the authors' `train.py`).

    For paper C's dashed lines use ``kgram_estimate(..., last_position=True, alpha=alpha,
    min_key=n - 1)`` for every k < n: the authors' code counts only positions i >= n - 1
    whose full (n-1)-history exists, and the unigram (no lags) keeps min_key = 0
    (the authors' `train.py`).
    """
    return float(-(target * torch.log(probs + eps)).sum(-1).mean())
