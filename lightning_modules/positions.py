"""Positional schemes: absolute positions added to the token embedding, relative positions
added inside attention.

Absolute (`embeddings`, `embed`): learned ``wte`` + ``wpe`` (paper A, Table 1), or the
fixed one-hot concat(e_token, e_position) (paper C App. I.1), or the tokens alone
(``position`` off, paper D).

Relative (paper D, Sec. 2.2), used by `RelativeSelfAttention`: R_m (m = n - i) is added to
the key input, and with "key_value" to the value input, before projection, so the score is
q_n . (k_i + W_K R_{n-i}) times the scale and the head output adds sum_i att W_V R_{n-i}.
One table serves keys and values (the authors' code); paper D's separate p^K, p^V are
expressed by writing them into coordinates that W_K and W_V respectively ignore. The terms
are computed per distance (`relative_projection`) and moved to key positions and back by
`by_position` and `by_distance`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.gpt_config import GPTConfig
from lightning_modules.layers import EnsembleEmbedding, OneHotEmbedding


def embeddings(cfg: GPTConfig, ensemble: int) -> dict[str, nn.Module]:
    """``wte`` and, with learned absolute positions, ``wpe`` (the one-hot embedding holds
    its positions itself)."""
    modules: dict[str, nn.Module] = {}
    if cfg.embedding == "onehot":
        modules["wte"] = OneHotEmbedding(cfg.vocab_size, cfg.block_size if cfg.position else 0)
    else:
        std = cfg.std("embedding")
        modules["wte"] = EnsembleEmbedding(ensemble, cfg.vocab_size, cfg.n_embd, std)
        if cfg.position:
            modules["wpe"] = EnsembleEmbedding(ensemble, cfg.block_size, cfg.n_embd, std)
    return modules


def embed(transformer: nn.ModuleDict, idx: torch.Tensor) -> torch.Tensor:
    """The residual stream's input (E, B, N, d) of tokens ``idx`` (E, B, N): wte[x_n] + wpe[n]."""
    x = transformer["wte"](idx)
    if "wpe" in transformer:
        x = x + transformer["wpe"].weight[:, None, : idx.shape[-1]]
    return x


def relative_projection(table: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    """W R_m per head for m < n, (E, H, n, width), of the table (E, 1 or H, T, d) and the
    per-head projection w (E, H, width, d) (W_K or W_V)."""
    table = table[:, :, :n]
    table = table.expand(-1, w.shape[1], -1, -1)
    return torch.einsum("ehmd,ehkd->ehmk", table, w)


def by_position(per_distance: torch.Tensor) -> torch.Tensor:
    """(..., N, N) indexed [n, m] by distance m = n - i -> indexed [n, i] by key position:
    out[n, i] = per_distance[n, n - i] for i <= n; entries above the diagonal are other
    entries' values, for the causal mask to overwrite.

    The relative-logit "skewing" of Huang et al., Music Transformer (ICLR 2019), Sec. 3.4.1:
    with the distance axis reversed, a row n holds its keys' values shifted by N - 1 - n, and
    one zero column padded on the left turns that shift into a reshape. Copies and views
    only, forward and backward (a gather would scatter-add its gradient).
    """
    *batch, n, _ = per_distance.shape
    padded = F.pad(per_distance.flip(-1), (1, 0))
    return padded.reshape(*batch, n + 1, n)[..., 1:, :]


def by_distance(attention: torch.Tensor) -> torch.Tensor:
    """(..., N, N) causal weights indexed [n, i] by key position -> indexed [n, m] by distance
    m = n - i, zero where m > n: the inverse of `by_position` (same reference). Row n of the
    reversed key axis, padded with N zeros on the right, starts its distances at column
    N - 1 - n; reading the padded rows with a row stride of 2N - 1 aligns every row's m = 0
    at column N - 1."""
    *batch, n, _ = attention.shape
    padded = F.pad(attention.flip(-1), (0, n)).flatten(-2)[..., : n * (2 * n - 1)]
    return padded.reshape(*batch, n, 2 * n - 1)[..., n - 1 :]
