"""Paper B's single-layer transformer in `EnsembleGPT`: its embedding, initialisations, weights.

Paper B §2 embeds x_n as x_n e + p_n and reads out logit_n = <e, z_n> + b (weight tying,
e = a), with no LayerNorm (the authors' `Markov-Simple2` code). `EnsembleGPT`'s
tied `theory` variant has a 2-row token table wte and a 2-class head with bias; the
softmax over its two logits is the sigmoid of their difference, so with
e = wte[1] - wte[0], p_n = wte[0] + wpe[n] and b = b_1 - b_0 it is the same function
class (as for paper A's model). `pin_uni_embedding` makes it the same *parameterisation* too:
wte[0] = 0 and b_0 = 0, held there by zeroing their gradients, so that e = wte[1],
p_n = wpe[n] and b = b_1 are trained exactly as paper B's e, p_n and b. Table 1 of paper B
lists wte as 2 x d, which this keeps.

The initialisations of paper B (App. A.3; the authors' code) run through `train_ensemble`'s
``initialize`` hook, after the default N(0, init_std^2) draw, one recipe per member.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from lightning_modules import EnsembleGPT
from replicate.theory.local_global import canonical_weights

InitName = Literal["standard", "rank_one", "paper_literal", "canonical", "repo_good"]
"""Initialisations of paper B's experiments:

* standard: every weight N(0, init_std^2), c_proj N(0, init_std^2 / 2) (nanoGPT; Figs. 3, 4);
* rank_one: random rank-one W_1, W_2, W_V and e, p_n on the hypercube (Fig. 6; the authors'
  ``--init lowrank`` recipe);
* paper_literal: Fig. 4's text, "e coordinates 0.5, W_1 = 1, W_2 = -1" (App. A.3.2);
* canonical: the rank-one weights of the canonical point (e, w) = (0.5, -1) in I_common
  (paper B App. D map; "canonical_0.5_-1");
* repo_good: the authors' ``--init good``: wte = -1, wpe = 0.5, c_fc = 2, c_proj = -2.
"""

WTE = "transformer.wte.weight"
WPE = "transformer.wpe.weight"
C_ATTN = "transformer.h.0.attn.c_attn.weight"
ATTN_PROJ = "transformer.h.0.attn.c_proj.weight"
C_FC = "transformer.h.0.mlp.c_fc.weight"
MLP_PROJ = "transformer.h.0.mlp.c_proj.weight"
BIAS = "lm_head.bias"


# ----------------------------------------------------------------------------- embedding
def _zero_first_row(grad: torch.Tensor) -> torch.Tensor:
    """The gradient with index 0 of axis 1 (token 0's row / class 0's bias) set to zero."""
    grad = grad.clone()
    grad[:, 0] = 0.0
    return grad


def pin_uni_embedding(model: EnsembleGPT) -> None:
    """Make the tied 2-token model paper B's x_n e + p_n / <e, z_n> + b model exactly.

    Sets wte[0] = 0 and b_0 = 0 for every member and zeroes their gradients from now on;
    AdamW then never moves them (zero moments, and neither tensor is weight-decayed).
    """
    if not model.cfg.tied:
        raise ValueError("paper B ties the embedding and the readout (e = a)")
    params = dict(model.named_parameters())
    for name in (WTE, BIAS):
        with torch.no_grad():
            params[name][:, 0] = 0.0
        params[name].register_hook(_zero_first_row)


# ----------------------------------------------------------------------------- initialisations
@dataclass(frozen=True)
class InitOptions:
    """Knobs of the recipes: W_V's std in rank_one (the authors' v_std, default 0) and the
    canonical point (e, w) of `canonical`."""

    value_std: float = 0.0
    canonical_point: tuple[float, float] = (0.5, -1.0)


def _rank_one(
    params: Mapping[str, torch.Tensor], i: int, rng: np.random.Generator, options: InitOptions
) -> None:
    """The authors' ``--init lowrank``: alpha ~ U{+-1}^d, e = e0 alpha, p_n = -e0/2 alpha,
    W_1 = w alpha^T, W_2 = alpha w^T with w = |0.1 N(0,1)| s, s ~ U{+-1}^{4d},
    W_V = alpha v^T with v ~ N(0, value_std^2), b ~ N(0, 1); W_Q, W_K, W_O stay standard."""
    d = params[WTE].shape[-1]
    alpha = rng.choice([-1.0, 1.0], d)
    e0 = abs(0.1 * rng.normal())
    ff = abs(0.1 * rng.normal()) * rng.choice([-1.0, 1.0], 4 * d)
    value = rng.normal(0.0, options.value_std, d) if options.value_std > 0 else np.zeros(d)
    _set(params[WTE][i, 1], e0 * alpha)
    _set(params[WPE][i], -0.5 * e0 * alpha)
    _set(params[C_FC][i], np.outer(ff, alpha))
    _set(params[MLP_PROJ][i], np.outer(alpha, ff))
    _set(params[C_ATTN][i, 2 * d :], np.outer(alpha, value))
    _set(params[BIAS][i, 1], np.array(rng.normal()))


def _paper_literal(params: Mapping[str, torch.Tensor], i: int, *_: object) -> None:
    """App. A.3.2 as printed: every coordinate of e is 0.5, W_1 = 1, W_2 = -1."""
    params[WTE][i, 1].fill_(0.5)
    params[C_FC][i].fill_(1.0)
    params[MLP_PROJ][i].fill_(-1.0)


def _canonical(
    params: Mapping[str, torch.Tensor], i: int, _: np.random.Generator, options: InitOptions
) -> None:
    """The App. D rank-one weights of (e, w) (alpha = 1/sqrt d): e, p_n = -e/2, W_1, W_2."""
    d = params[WTE].shape[-1]
    weights = canonical_weights(*options.canonical_point, d)
    _set(params[WTE][i, 1], weights.token_embedding)
    _set(params[WPE][i], weights.positional_embedding)
    _set(params[C_FC][i], weights.w1)
    _set(params[MLP_PROJ][i], weights.w2)


def _repo_good(params: Mapping[str, torch.Tensor], i: int, *_: object) -> None:
    """The authors' ``--init good`` (not App. A.3.2's values): wte = -1, wpe = 0.5, c_fc = 2,
    c_proj = -2."""
    params[WTE][i, 1].fill_(-1.0)
    params[WPE][i].fill_(0.5)
    params[C_FC][i].fill_(2.0)
    params[MLP_PROJ][i].fill_(-2.0)


def _set(target: torch.Tensor, value: np.ndarray) -> None:
    """Copy ``value`` into ``target``, broadcasting a row over every position of wpe."""
    target.copy_(torch.as_tensor(np.asarray(value), dtype=target.dtype))


RECIPES: dict[str, Callable[..., None]] = {
    "rank_one": _rank_one,
    "paper_literal": _paper_literal,
    "canonical": _canonical,
    "repo_good": _repo_good,
}


def initializer(
    recipes: Sequence[InitName], seeds: Sequence[int], options: InitOptions = InitOptions()
) -> Callable[[EnsembleGPT], None]:
    """The ``initialize`` hook: member i gets ``recipes[i]`` (drawn from ``seeds[i]`` alone),
    then every member is pinned to the uni-embedding (`pin_uni_embedding`)."""
    if len(recipes) != len(seeds):
        raise ValueError(f"{len(recipes)} recipes for {len(seeds)} members")

    def initialize(model: EnsembleGPT) -> None:
        params = dict(model.named_parameters())
        with torch.no_grad():
            for i, (recipe, seed) in enumerate(zip(recipes, seeds, strict=True)):
                if recipe != "standard":
                    RECIPES[recipe](params, i, np.random.default_rng([seed, 0xB]), options)
        pin_uni_embedding(model)

    return initialize


# ----------------------------------------------------------------------------- weights
@dataclass(frozen=True)
class MemberWeights:
    """Paper B's matrices of one member (paper B §2; c_attn rows are W_Q, W_K, W_V)."""

    e: np.ndarray
    positional: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    out: np.ndarray


def member_weights(params: Mapping[str, torch.Tensor], i: int) -> MemberWeights:
    """Read member i's e = wte[1] - wte[0], p_n = wte[0] + wpe[n] and weight matrices."""
    get = {name: t[i].detach().double().numpy() for name, t in params.items() if name != BIAS}
    wte, attn = get[WTE], get[C_ATTN]
    d = wte.shape[-1]
    return MemberWeights(
        e=wte[1] - wte[0],
        positional=wte[0] + get[WPE],
        w1=get[C_FC],
        w2=get[MLP_PROJ],
        query=attn[:d],
        key=attn[d : 2 * d],
        value=attn[2 * d :],
        out=get[ATTN_PROJ],
    )


def top_share(matrix: np.ndarray) -> float:
    """rho_1 = sigma_1^2 / sum_i sigma_i^2, the "fraction of energy" of the top singular value
    (as in the authors' code; its inverse is the stable rank). NaN for the zero matrix."""
    singular = np.linalg.svd(matrix, compute_uv=False)
    total = float(np.sum(singular**2))
    return float(singular[0] ** 2 / total) if total > 0 else math.nan


def alignment(matrix: np.ndarray, direction: np.ndarray, side: Literal["right", "left"]) -> float:
    """|<v_1, direction/|direction|>| for the top right (input-side) or left singular vector.

    Our cos_e(W) uses the right singular vector; W_2 (d x 4d) maps into the
    embedding space, so its embedding-side factor is the left one.
    """
    u, singular, vt = np.linalg.svd(matrix)
    if singular[0] == 0.0:
        return math.nan
    top = vt[0] if side == "right" else u[:, 0]
    return float(abs(top @ direction) / np.linalg.norm(direction))


def hypercube_ratio(e: np.ndarray) -> float:
    """hc(e) = min_i |e_i| / max_i |e_i|: 1 when e is on a scaled hypercube {+-c}^d (ours)."""
    magnitudes = np.abs(e)
    return float(magnitudes.min() / magnitudes.max())


def positional_alignment(positional: np.ndarray, e: np.ndarray) -> float:
    """Median over n of |cos(p_n, e)|: p_n along e, as paper B §3 observes at the optima."""
    norms = np.linalg.norm(positional, axis=1) * np.linalg.norm(e)
    return float(np.median(np.abs(positional @ e) / norms))
