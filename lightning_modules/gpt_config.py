"""Options of `EnsembleGPT` and their validation: `GPTConfig`, `LayerConfig`, `SublayerConfig`.

Each dataclass checks its own fields in ``__post_init__``; `GPTConfig` also resolves every
layer (inherited fields filled in, head and sublayer widths checked) once, at construction,
so a model is never built from options that do not fit together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from lightning_modules.layers import NORM_KINDS, NormKind

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
        resolved = tuple(_resolve(self, i) for i in range(self.n_layer))
        object.__setattr__(self, "_resolved", resolved)  # not a field: asdict() rebuilds

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


def _resolve(cfg: GPTConfig, i: int) -> LayerConfig:
    """Layer i of ``cfg`` with every inherited (None) field filled in, and its shapes checked."""
    layer = LayerConfig() if cfg.layers is None else cfg.layers[i]
    n_head = cfg.n_head if layer.n_head is None else layer.n_head
    head_dim = layer.head_dim
    if head_dim is None:
        if layer.head_merge == "sum":
            head_dim = cfg.n_embd
        elif cfg.n_embd % n_head:
            raise ValueError(f"layer {i}: n_embd={cfg.n_embd} not divisible by {n_head} heads")
        else:
            head_dim = cfg.n_embd // n_head
    variant_norm = "weight" if cfg.variant == "gpt2" else "none"
    resolved = replace(
        layer,
        n_head=n_head,
        head_dim=head_dim,
        norm=variant_norm if layer.norm is None else layer.norm,
        mlp_hidden=layer.mlp_hidden or cfg.mlp_ratio * cfg.n_embd,
        activation=layer.activation or cfg.activation,
    )
    _check_sublayer_widths(resolved, cfg.n_embd, i)
    return resolved


def _check_sublayer_widths(layer: LayerConfig, d: int, i: int) -> None:
    """Each sublayer's output width matches what its skip adds, and the last one outputs d."""
    width = d
    for j, sub in enumerate(layer.sublayers):
        out = sub.width or d
        skip_width = {"prev": width, "input": d, "none": out}[sub.skip]
        if out != skip_width:
            raise ValueError(f"layer {i} sublayer {j}: width {out} does not match its skip")
        width = out
    if width != d:
        raise ValueError(f"layer {i}: the last sublayer must output n_embd={d}")
