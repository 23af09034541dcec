"""A GPT-style decoder whose parameters carry a leading ensemble axis.

`EnsembleGPT` holds E independent models (seeds, or configurations sharing shapes) and
runs them as one batched computation: every weight is (E, ...), inputs are (E, B, N).
Member i's initialisation and gradients depend on member i alone, so an ensemble of E
equals E separate runs (tests/test_ensemble_equivalence.py).

Two variants (paper A), the default when ``GPTConfig.layers`` is None:
- ``theory``: Sec. 2.1 of paper A — no layer norm, ReLU, output bias; the model of the
  theorems and of the authors' `Markov-Simple` code.
- ``gpt2``: Table 1 of paper A — pre-LN blocks with weight-only LayerNorm, final ln_f,
  lm_head with bias; ReLU or GELU.

Parameter names follow Table 1 (``transformer.wte``, ``transformer.h.0.attn.c_attn``, ...).
With tying, ``lm_head.weight`` *is* ``transformer.wte.weight`` (one tensor).
For a binary vocabulary the softmax over two logits is the sigmoid of their difference,
so a = w_1 - w_0, b = b_1 - b_0, e = wte[1] - wte[0], p_n = wte[0] + wpe[n] recovers the
theory model's (a, b, e, p_n) (paper A, Sec. 3 and App. A); tying gives a = e exactly.

Per-layer options (``GPTConfig.layers``, one `LayerConfig` per layer) express papers C
(App. I.1 general attention-only transformer, Fig. 7 with MLP) and D (trained D-arch and
the explicit-weight constructions); the module is the same, only shapes and switches vary.

Parameters (shapes without the leading E; d = n_embd, V = vocab_size, T = block_size;
in layer l, H = n_head, dh = head_dim, dv = dh with head_merge "proj" and d with "sum"):

======================================  ==============================  =====================
name                                    shape                           exists when
======================================  ==============================  =====================
transformer.wte.weight                  (V, d)                          embedding "learned"
transformer.wpe.weight                  (T, d)                          "learned", position
transformer.h.l.ln_1.weight / .bias     (d,)                            norm weight / affine
transformer.h.l.attn.c_attn.weight      (H(2dh+dv), d): rows [Q; K; V]  always
transformer.h.l.attn.c_proj.weight      (d, H dv)                       head_merge "proj"
transformer.h.l.attn.rel_pe.weight      (1 or H, T, d)                  rel_pe != "none"
transformer.h.l.attn.q_norm.weight/bias (dh,)  (k_norm alike)           qk_norm weight/affine
transformer.h.l.ln_2.weight / .bias     (d,)                            ln_1's, mlp "gpt" resid.
transformer.h.l.mlp.c_fc.weight / .bias (hidden, d) / (hidden,)         mlp "gpt" (+mlp_bias)
transformer.h.l.mlp.c_proj.weight/.bias (d, hidden) / (d,)              mlp "gpt" (+mlp_bias)
transformer.h.l.mlp.layers.j.fc.weight  (w_j, w_{j-1}), w_0 = d         mlp "sublayers"
transformer.h.l.mlp.layers.j.fc.bias    (w_j,)                          sublayer bias
transformer.h.l.mlp.layers.j.norm.*     (w_j,)                          sublayer norm w/affine
transformer.ln_f.weight / .bias         (d,)                            final_norm w/affine
lm_head.weight                          (V, d) (= wte when tied)        always
lm_head.bias                            (V,)                            readout_bias
======================================  ==============================  =====================

Head h of layer l uses rows [h dh, (h+1) dh) of the Q block (query q = W_Q x), the same
rows of the K block, and rows [h dv, (h+1) dv) of the V block; the heads are merged by
c_proj (concatenation then projection, GPT) or summed (paper C App. I.1, paper D with
W_O = I folded into W_V). Paper C's Q (d x dh), Kt (dh x d), V (d x d) are W_Q^T, W_K and
W_V^T. Relative positions (paper D, Sec. 2.2): R_m (m = n - i) is added to the key input, and
with "key_value" to the value input, before projection, so the score is
q_n . (k_i + W_K R_{n-i}) times the scale and the head output adds sum_i att W_V R_{n-i}.
One table serves keys and values (the authors' code); paper D's separate p^K, p^V are
expressed by writing them into coordinates that W_K and W_V respectively ignore.

Forward traces (``forward(idx, traces)``, one dict per layer): ``input`` (E, B, N, d),
``scores`` (E, B, H, N, N; scaled logits, -inf above the diagonal), ``attention``
(E, B, H, N, N), ``heads`` (E, B, H, N, dv; per-head outputs before the merge),
``attn_out`` (the merged attention output added to the stream, or fed to the MLP),
``y`` (x + attn_out, absent with mlp_input "attention"), ``mlp_out`` (the "gpt" MLP's
output), ``mlp.j`` (h_j of sublayer j = 1..J) and ``z`` (the layer's output).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.layers import (
    NORM_KINDS,
    EnsembleEmbedding,
    EnsembleLinear,
    NormKind,
    OneHotEmbedding,
    Readout,
    RelativePositions,
    make_norm,
)
from lightning_modules.seeding import member_generator

Variant = Literal["theory", "gpt2"]
Activation = Literal["relu", "gelu"]


def _check(value: object, allowed: Sequence[object], name: str) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")


@dataclass(frozen=True)
class SublayerConfig:
    """One sublayer of paper D's MLP skeleton: h_j = skip_j + norm(act(W_j h_{j-1} + b_j)).

    Paper D, Sec. 2.2 / App. B.1 and the authors' `MLP_three_layers`, `MLP_new_construct`,
    `MLP_two_layers`; Rajaraman et al.'s FFN + LN (their Architecture 2) is a ReLU sublayer with
    skip "none" followed by an identity one with norm and skip "input".
    ``width``: output width w_j (None = n_embd). ``skip``: "prev" adds h_{j-1}, "input"
    adds h_0 (the layer's post-attention stream), "none" adds nothing.
    """

    width: int | None = None
    bias: bool = False
    activation: Literal["relu", "identity"] = "relu"
    norm: NormKind = "none"
    skip: Literal["prev", "input", "none"] = "prev"

    def __post_init__(self) -> None:
        _check(self.activation, ("relu", "identity"), "sublayer activation")
        _check(self.norm, NORM_KINDS, "sublayer norm")
        _check(self.skip, ("prev", "input", "none"), "sublayer skip")


@dataclass(frozen=True)
class LayerConfig:
    """Switches of one (attention, MLP) layer; None fields inherit from `GPTConfig`.

    n_head: heads (None: GPTConfig.n_head). head_dim: query/key width per head (None:
    n_embd // n_head with head_merge "proj", n_embd with "sum"). attn_scale: logit
    multiplier (None: 1/sqrt(head_dim); 1.0: none, paper C App. I.1 and paper D Sec. 2.2).
    head_merge: "proj" (concatenate + c_proj, GPT) or "sum" (paper C App. I.1:
    delta = sum_h softmax(X Q Kt X^T) X V, value width d, no c_proj). rel_pe: "none",
    "key" or "key_value" (paper D, Sec. 2.2; the authors' code: "key", layer 1 only);
    rel_pe_per_head: one table per head instead of one shared. qk_norm: norm applied per
    head after the query/key projections (paper D App. A.2.2/B.2 "ungated": "l2").
    norm: pre-norm ln_1 / ln_2 (None: "weight" for variant gpt2, else "none").
    mlp: "none" (attention-only), "gpt" (c_fc -> act -> c_proj) or "sublayers".
    mlp_hidden (None: mlp_ratio * n_embd), activation (None: GPTConfig.activation),
    mlp_bias, mlp_param ("mup": paper C's muLinear, the authors' code) and mlp_input
    ("residual": x + MLP(ln_2(x + attn)); "attention": x + MLP(attn), paper C Fig. 7)
    configure the "gpt" MLP; sublayers configure the "sublayers" one.
    """

    n_head: int | None = None
    head_dim: int | None = None
    attn_scale: float | None = None
    head_merge: Literal["proj", "sum"] = "proj"
    rel_pe: Literal["none", "key", "key_value"] = "none"
    rel_pe_per_head: bool = False
    qk_norm: NormKind = "none"
    norm: NormKind | None = None
    mlp: Literal["none", "gpt", "sublayers"] = "gpt"
    mlp_hidden: int | None = None
    activation: Activation | None = None
    mlp_bias: bool = False
    mlp_param: Literal["standard", "mup"] = "standard"
    mlp_input: Literal["residual", "attention"] = "residual"
    sublayers: tuple[SublayerConfig, ...] = ()

    def __post_init__(self) -> None:
        subs = tuple(
            s if isinstance(s, SublayerConfig) else SublayerConfig(**s) for s in self.sublayers
        )
        object.__setattr__(self, "sublayers", subs)
        _check(self.head_merge, ("proj", "sum"), "head_merge")
        _check(self.rel_pe, ("none", "key", "key_value"), "rel_pe")
        _check(self.qk_norm, NORM_KINDS, "qk_norm")
        _check(self.norm, (None, *NORM_KINDS), "norm")
        _check(self.mlp, ("none", "gpt", "sublayers"), "mlp")
        _check(self.activation, (None, "relu", "gelu"), "activation")
        _check(self.mlp_param, ("standard", "mup"), "mlp_param")
        _check(self.mlp_input, ("residual", "attention"), "mlp_input")
        if (self.mlp == "sublayers") != bool(self.sublayers):
            raise ValueError("sublayers are given exactly when mlp == 'sublayers'")
        if self.qk_norm != "none" and self.rel_pe != "none":
            raise ValueError("qk_norm and rel_pe together are not defined (paper D uses either)")
        if self.mlp_input == "attention" and self.mlp != "gpt":
            raise ValueError("mlp_input 'attention' needs mlp 'gpt' (paper C Fig. 7)")


PAPER_A_FIELDS = (
    "vocab_size",
    "n_embd",
    "block_size",
    "n_layer",
    "n_head",
    "mlp_ratio",
    "variant",
    "activation",
    "tied",
    "init_std",
)


@dataclass(frozen=True)
class GPTConfig:
    """Shapes and architecture switches of one ensemble (all members share them).

    The first ten fields are paper A's; with their defaults (layers None, learned
    embeddings with positions, tied readout with bias) the model is paper A/B's.
    layers: one `LayerConfig` per layer (None: n_layer default layers from variant,
    n_head, mlp_ratio, activation). embedding: "learned" (wte + wpe) or "onehot"
    (concat(e_token, e_position), paper C App. I.1; n_embd = V + T, or V without
    position). position: absolute positions on/off (paper D: off with relative PE).
    final_norm: ln_f kind (None: "weight" for gpt2, "none" for theory). readout_bias:
    lm_head bias (paper C: none). Initial std per role (None: init_std; residual:
    init_std / sqrt(2 n_layer); 0: zeros): std_embedding (wte, wpe, rel_pe),
    std_linear (c_attn, c_fc, sublayer weights), std_residual (c_proj), std_readout
    (untied lm_head; paper C: 1/sqrt(d) in HEAD, 0 at @02cd874).
    """

    vocab_size: int = 2
    n_embd: int = 4
    block_size: int = 1024
    n_layer: int = 1
    n_head: int = 1
    mlp_ratio: int = 4
    variant: Variant = "theory"
    activation: Activation = "relu"
    tied: bool = True
    init_std: float = 0.02
    layers: tuple[LayerConfig, ...] | None = None
    embedding: Literal["learned", "onehot"] = "learned"
    position: bool = True
    final_norm: NormKind | None = None
    readout_bias: bool = True
    std_embedding: float | None = None
    std_linear: float | None = None
    std_residual: float | None = None
    std_readout: float | None = None

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.variant not in ("theory", "gpt2"):
            raise ValueError(f"variant must be 'theory' or 'gpt2', got {self.variant!r}")
        if self.activation not in ("relu", "gelu"):
            raise ValueError(f"activation must be 'relu' or 'gelu', got {self.activation!r}")
        if self.layers is not None:
            layers = tuple(
                layer if isinstance(layer, LayerConfig) else LayerConfig(**layer)
                for layer in self.layers
            )
            object.__setattr__(self, "layers", layers)
            if len(layers) != self.n_layer:
                raise ValueError(f"{len(layers)} layer configs for n_layer={self.n_layer}")
        _check(self.embedding, ("learned", "onehot"), "embedding")
        _check(self.final_norm, (None, *NORM_KINDS), "final_norm")
        if self.embedding == "onehot":
            width = self.vocab_size + (self.block_size if self.position else 0)
            if self.n_embd != width:
                raise ValueError(f"one-hot embeddings need n_embd = {width}, got {self.n_embd}")
            if self.tied:
                raise ValueError("one-hot embeddings are fixed: the readout must be untied")
        if self.tied and self.std_readout is not None:
            raise ValueError("std_readout applies to an untied readout only")
        resolved = tuple(self._resolve(i) for i in range(self.n_layer))
        object.__setattr__(self, "_resolved", resolved)  # not a field: asdict() rebuilds

    def _resolve(self, i: int) -> LayerConfig:
        """Layer i with every inherited (None) field filled in, and its shapes checked."""
        layer = LayerConfig() if self.layers is None else self.layers[i]
        n_head = self.n_head if layer.n_head is None else layer.n_head
        head_dim = layer.head_dim
        if head_dim is None:
            if layer.head_merge == "sum":
                head_dim = self.n_embd
            elif self.n_embd % n_head:
                raise ValueError(f"layer {i}: n_embd={self.n_embd} not divisible by {n_head} heads")
            else:
                head_dim = self.n_embd // n_head
        variant_norm = "weight" if self.variant == "gpt2" else "none"
        resolved = replace(
            layer,
            n_head=n_head,
            head_dim=head_dim,
            norm=variant_norm if layer.norm is None else layer.norm,
            mlp_hidden=layer.mlp_hidden or self.mlp_ratio * self.n_embd,
            activation=layer.activation or self.activation,
        )
        width = self.n_embd
        for j, sub in enumerate(resolved.sublayers):
            out = sub.width or self.n_embd
            skip_width = {"prev": width, "input": self.n_embd, "none": out}[sub.skip]
            if out != skip_width:
                raise ValueError(f"layer {i} sublayer {j}: width {out} does not match its skip")
            width = out
        if width != self.n_embd:
            raise ValueError(f"layer {i}: the last sublayer must output n_embd={self.n_embd}")
        return resolved

    def as_dict(self) -> dict[str, Any]:
        """Constructor arguments for GPTConfig(**d): paper A's ten fields always, a later
        option only where it differs from its default, so a paper A/B checkpoint that stores
        its config keeps the bytes it had before the options existed."""
        full = asdict(self)
        return {
            f.name: full[f.name]
            for f in fields(self)
            if f.name in PAPER_A_FIELDS or full[f.name] != f.default
        }

    def layer(self, i: int) -> LayerConfig:
        """The resolved configuration of layer i (no None left in inherited fields)."""
        return self._resolved[i]

    def std(self, role: str) -> float:
        """Initial std of a role: embedding, linear, residual or readout (see the class)."""
        own = {
            "embedding": self.std_embedding,
            "linear": self.std_linear,
            "residual": self.std_residual,
            "readout": self.std_readout,
        }[role]
        if own is not None:
            return own
        if role == "residual":
            return self.init_std / math.sqrt(2 * self.n_layer)
        return self.init_std


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


class CausalSelfAttention(nn.Module):
    """Causal multi-head attention, softmax(<q, k> / sqrt(head_dim)) (paper A, App. A, typo fixed).

    Options (see `LayerConfig`): other scale (paper C/D: none), summed heads without c_proj
    (paper C App. I.1), relative positions on keys (and values) (paper D Sec. 2.2), per-head
    norm after the q/k projections (paper D App. A.2.2/B.2).
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        assert layer.n_head is not None and layer.head_dim is not None
        self.n_head, self.head_dim = layer.n_head, layer.head_dim
        self.value_dim = layer.head_dim if layer.head_merge == "proj" else cfg.n_embd
        self.scale = layer.attn_scale
        self.rel_values = layer.rel_pe == "key_value"
        h, dh, dv = self.n_head, self.head_dim, self.value_dim
        self.c_attn = EnsembleLinear(ensemble, cfg.n_embd, h * (2 * dh + dv), cfg.std("linear"))
        self.c_proj = (
            EnsembleLinear(ensemble, h * dv, cfg.n_embd, cfg.std("residual"))
            if layer.head_merge == "proj"
            else None
        )
        self.rel_pe = None
        if layer.rel_pe != "none":
            tables = h if layer.rel_pe_per_head else 1
            self.rel_pe = RelativePositions(
                ensemble, tables, cfg.block_size, cfg.n_embd, cfg.std("embedding")
            )
        self.qk_norm = layer.qk_norm != "none"
        if self.qk_norm:  # registered only when used: A/B checkpoints keep their module list
            self.q_norm = make_norm(layer.qk_norm, ensemble, dh)
            self.k_norm = make_norm(layer.qk_norm, ensemble, dh)

    def _relative(self, which: int, n: int) -> torch.Tensor:
        """W R_m per head for m < n: (E, H, n, width); which = 1 (key) or 2 (value)."""
        assert self.rel_pe is not None
        h, dh, dv = self.n_head, self.head_dim, self.value_dim
        weight = self.c_attn.weight
        if which == 1:
            w = weight[:, h * dh : 2 * h * dh].reshape(weight.shape[0], h, dh, -1)
        else:
            w = weight[:, 2 * h * dh :].reshape(weight.shape[0], h, dv, -1)
        table = self.rel_pe.weight[:, :, :n]
        table = table.expand(-1, h, -1, -1)
        return torch.einsum("ehmd,ehkd->ehmk", table, w)

    def forward(
        self,
        x: torch.Tensor,
        trace: dict[str, torch.Tensor] | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Attention output (E, B, N, d); with ``last_only`` that of the last query alone,
        (E, B, 1, d): keys and values at every position, the query at the last one, which
        attends to every key (no mask). Relative positions are not supported there (no model
        that reads only its last position uses them)."""
        if last_only and self.rel_pe is not None:
            raise ValueError("last_only attention does not support relative positions")
        e, b, n, _ = x.shape
        q, k, v = self._heads(x, last_only)
        if last_only:
            y = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        elif trace is None and self.rel_pe is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        else:
            y = self._explicit(q, k, v, (e, b, n), trace)
        return self._merge(y, e, b)

    def _heads(
        self, x: torch.Tensor, last_only: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (E B, H, Nq, dh), keys (E B, H, N, dh) and values (E B, H, N, dv) of the
        stream x (E, B, N, d), per-head norms applied; Nq = 1 with ``last_only`` (the last
        position's query, computed alone), else N (one c_attn product for all three)."""
        e, b, n, _ = x.shape
        h, dh, dv = self.n_head, self.head_dim, self.value_dim
        if last_only:
            q = self.c_attn(x[:, :, -1:], slice(0, h * dh))
            k, v = self.c_attn(x, slice(h * dh, None)).split([h * dh, h * dv], dim=-1)
        else:
            q, k, v = self.c_attn(x).split([h * dh, h * dh, h * dv], dim=-1)
        if self.qk_norm:
            q = self.q_norm(q.reshape(e, b, -1, h, dh))
            k = self.k_norm(k.reshape(e, b, n, h, dh))
        q = q.reshape(e * b, -1, h, dh).transpose(1, 2)
        k = k.reshape(e * b, n, h, dh).transpose(1, 2)
        v = v.reshape(e * b, n, h, dv).transpose(1, 2)
        return q, k, v

    def _merge(self, y: torch.Tensor, e: int, b: int) -> torch.Tensor:
        """Heads (E B, H, N, dv) -> the stream's (E, B, N, d): summed, or c_proj of the concat."""
        h, n, dv = self.n_head, y.shape[2], self.value_dim
        if self.c_proj is None:
            return y.reshape(e, b, h, n, dv).sum(2)
        return self.c_proj(y.transpose(1, 2).reshape(e, b, n, h * dv))

    def _explicit(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        ebn: tuple[int, int, int],
        trace: dict[str, torch.Tensor] | None,
    ) -> torch.Tensor:
        """Attention with its map materialised (traces, relative positions; paper D Sec. 2.2)."""
        e, b, n = ebn
        h = self.n_head
        scores = q @ k.transpose(-1, -2)
        if self.rel_pe is not None:
            rel_k = self._relative(1, n)
            per_distance = torch.einsum("ebhnk,ehmk->ebhnm", q.reshape(e, b, h, n, -1), rel_k)
            scores = scores + by_position(per_distance.reshape(e * b, h, n, n))
        scores = scores / math.sqrt(self.head_dim) if self.scale is None else scores * self.scale
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        att = scores.softmax(-1)
        y = att @ v
        if self.rel_values:
            rel_v = self._relative(2, n)
            att_by_distance = by_distance(att).reshape(e, b, h, n, n)
            y_rel = torch.einsum("ebhnm,ehmk->ebhnk", att_by_distance, rel_v)
            y = y + y_rel.reshape(e * b, h, n, -1)
        if trace is not None:
            trace["scores"] = scores.view(e, b, h, n, n)
            trace["attention"] = att.view(e, b, h, n, n)
            trace["heads"] = y.view(e, b, h, n, -1)
        return y


class MLP(nn.Module):
    """z = W_2 act(W_1 y + b_1) + b_2 (paper A, Sec. 2.1, FF layer without its residual).

    Biases optional (off in paper A). ``mup``: paper C's muLinear pair (the authors' code):
    W ~ N(0, 1/out) used as W sqrt(out/in), bias b sqrt(out), the last layer zero.
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        assert layer.mlp_hidden is not None
        d, hidden = cfg.n_embd, layer.mlp_hidden
        if layer.mlp_param == "mup":
            self.c_fc = EnsembleLinear(
                ensemble,
                d,
                hidden,
                std=1 / math.sqrt(hidden),
                bias=layer.mlp_bias,
                weight_mult=math.sqrt(hidden / d),
                bias_mult=math.sqrt(hidden),
            )
            self.c_proj = EnsembleLinear(
                ensemble,
                hidden,
                d,
                std=0.0,
                bias=layer.mlp_bias,
                weight_mult=math.sqrt(d / hidden),
                bias_mult=math.sqrt(d),
            )
        else:
            self.c_fc = EnsembleLinear(ensemble, d, hidden, cfg.std("linear"), layer.mlp_bias)
            self.c_proj = EnsembleLinear(ensemble, hidden, d, cfg.std("residual"), layer.mlp_bias)
        self.act = nn.ReLU() if layer.activation == "relu" else nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Sublayer(nn.Module):
    """norm(act(W h + b)) of one `SublayerConfig` (its skip is added by `SublayerMLP`)."""

    def __init__(self, cfg: GPTConfig, sub: SublayerConfig, width_in: int, ensemble: int):
        super().__init__()
        width = sub.width or cfg.n_embd
        self.fc = EnsembleLinear(ensemble, width_in, width, cfg.std("linear"), sub.bias)
        self.norm = make_norm(sub.norm, ensemble, width)
        self.relu = sub.activation == "relu"
        self.skip = sub.skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.fc(x)
        return self.norm(F.relu(u) if self.relu else u)


class SublayerMLP(nn.Module):
    """h_j = skip_j + norm_j(act_j(W_j h_{j-1} + b_j)), j = 1..J; returns h_J (paper D, Sec. 2.2).

    The skips replace the block's MLP residual: the layer's output is h_J, as in the
    authors' `Block` (`x = self.mlp(x_tilde)`).
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        widths = [cfg.n_embd] + [sub.width or cfg.n_embd for sub in layer.sublayers]
        self.layers = nn.ModuleList(
            Sublayer(cfg, sub, widths[j], ensemble) for j, sub in enumerate(layer.sublayers)
        )

    def forward(
        self, h0: torch.Tensor, trace: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        h = h0
        for j, sub in enumerate(self.layers, start=1):
            u = sub(h)
            h = h + u if sub.skip == "prev" else h0 + u if sub.skip == "input" else u
            if trace is not None:
                trace[f"mlp.{j}"] = h
        return h


class Block(nn.Module):
    """One (Attention, FF) layer with residuals; pre-LN in the gpt2 variant."""

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        assert layer.norm is not None
        self.ln_1 = make_norm(layer.norm, ensemble, cfg.n_embd)
        self.attn = CausalSelfAttention(cfg, layer, ensemble)
        self.mlp_kind, self.mlp_input = layer.mlp, layer.mlp_input
        if layer.mlp == "gpt":
            if layer.mlp_input == "residual":
                self.ln_2 = make_norm(layer.norm, ensemble, cfg.n_embd)
            self.mlp: nn.Module = MLP(cfg, layer, ensemble)
        elif layer.mlp == "sublayers":
            self.mlp = SublayerMLP(cfg, layer, ensemble)

    def forward(
        self,
        x: torch.Tensor,
        trace: dict[str, torch.Tensor] | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """The layer's output (E, B, N, d), or with ``last_only`` the last position's alone."""
        attn_out = self.attn(self.ln_1(x), trace, last_only)
        if last_only:
            x = x[:, :, -1:]
        record: dict[str, torch.Tensor] = {"input": x, "attn_out": attn_out}
        if self.mlp_input == "attention":  # paper C Fig. 7: X <- X + MLP(delta)
            record["mlp_out"] = self.mlp(attn_out)
            z = x + record["mlp_out"]
        else:
            y = x + attn_out
            record["y"] = y
            if self.mlp_kind == "gpt":
                record["mlp_out"] = self.mlp(self.ln_2(y))
                z = y + record["mlp_out"]
            elif self.mlp_kind == "sublayers":
                z = self.mlp(y, trace)
            else:
                z = y
        if trace is not None:
            trace.update(record, z=z)
        return z


class EnsembleGPT(nn.Module):
    """E independent GPT-style models evaluated as one batched computation."""

    def __init__(self, cfg: GPTConfig, ensemble: int) -> None:
        super().__init__()
        if ensemble < 1:
            raise ValueError(f"ensemble size must be >= 1, got {ensemble}")
        self.cfg = cfg
        self.ensemble = ensemble
        modules: dict[str, nn.Module] = {}
        if cfg.embedding == "onehot":
            modules["wte"] = OneHotEmbedding(cfg.vocab_size, cfg.block_size if cfg.position else 0)
        else:
            std = cfg.std("embedding")
            modules["wte"] = EnsembleEmbedding(ensemble, cfg.vocab_size, cfg.n_embd, std)
            if cfg.position:
                modules["wpe"] = EnsembleEmbedding(ensemble, cfg.block_size, cfg.n_embd, std)
        modules["h"] = nn.ModuleList(Block(cfg, cfg.layer(i), ensemble) for i in range(cfg.n_layer))
        final = cfg.final_norm or ("weight" if cfg.variant == "gpt2" else "none")
        modules["ln_f"] = make_norm(final, ensemble, cfg.n_embd)
        self.transformer = nn.ModuleDict(modules)
        self.lm_head = Readout(
            ensemble,
            cfg.vocab_size,
            cfg.n_embd,
            cfg.std("readout"),
            cfg.readout_bias,
            tied_to=self.transformer["wte"].weight if cfg.tied else None,
        )

    def init_members(self, seeds: list[int]) -> None:
        """Initialise member i from ``seeds[i]`` alone (llm-baselines / nanoGPT scheme).

        Each module initialises its own parameters by role, in registration order: N(0,
        0.02) for Linear and Embedding weights, N(0, 0.02 / sqrt(2 n_layer)) for the
        residual-output projections (c_proj), zero biases, unit LayerNorm weights (paper A's
        code); the stds are `GPTConfig.std` roles, overridable per role.
        """
        if len(seeds) != self.ensemble:
            raise ValueError(f"need {self.ensemble} seeds, got {len(seeds)}")
        with torch.no_grad():
            for i, seed in enumerate(seeds):
                gen = member_generator(seed, "init")
                for module in self.modules():
                    init_member = getattr(module, "init_member", None)
                    if init_member is not None:
                        init_member(i, gen)

    def forward(
        self,
        idx: torch.Tensor,
        traces: list[dict[str, torch.Tensor]] | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits (E, B, N, V) for tokens ``idx`` (E, B, N); fills one trace dict per layer.

        ``last_only``: the logits of the last position alone, (E, B, 1, V), for a loss that
        reads only them (paper C's readout z = X[T-1] W, App. I.1): the last layer's query,
        MLP and readout then run at that position only, sparing their cost at the others. No
        traces then.
        """
        n = idx.shape[-1]
        if n > self.cfg.block_size:
            raise ValueError(f"sequence length {n} exceeds block_size {self.cfg.block_size}")
        if last_only and traces is not None:
            raise ValueError("traces need every position: last_only must be False")
        x = self.transformer["wte"](idx)
        if "wpe" in self.transformer:
            x = x + self.transformer["wpe"].weight[:, None, :n]
        blocks = self.transformer["h"]
        for i, block in enumerate(blocks):
            trace: dict[str, torch.Tensor] | None = None
            if traces is not None:
                trace = {}
                traces.append(trace)
            x = block(x, trace, last_only and i == len(blocks) - 1)
        return self.lm_head(self.transformer["ln_f"](x))

    def decay_parameters(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(decayed, not decayed): weight decay only on Linear weight matrices (paper A's code).

        Decayed: every `EnsembleLinear` weight (c_attn, c_proj, c_fc, sublayer fc) and an
        untied lm_head.weight (a Linear weight). Not decayed: embeddings (hence the tied
        wte = lm_head), relative-position tables (embeddings, as the authors' code of
        paper D groups them), norm weights and biases, and every bias.
        """
        decay, no_decay = [], []
        for name, param in self.named_parameters():  # shared tensors are listed once
            owner_name, leaf = name.rsplit(".", 1)
            owner = self.get_submodule(owner_name)
            is_linear = isinstance(owner, EnsembleLinear) or (
                isinstance(owner, Readout) and not owner.tied
            )
            if is_linear and leaf == "weight":
                decay.append(param)
            else:
                no_decay.append(param)
        return decay, no_decay
