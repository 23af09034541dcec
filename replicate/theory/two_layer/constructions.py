"""Explicit-weight constructions of paper D as weights of `EnsembleGPT` (Sec. 3-4, App. A-B).

Four constructions whose output at position n is the conditional k-gram estimate
p_hat_k(. | x_{1:n}) (Sec. 2.1) as the temperature c grows:

* ``2l2h`` — Sec. 3 / App. A.2.1: two heads in layer 1 (u- and v-head), a two-sublayer
  copy MLP with the modified LN, the induction head in layer 2 (App. A.2);
* ``2l1h`` — Sec. 4 / App. B.1 (main theorem): the v-head alone in layer 1 and a
  three-sublayer MLP that isolates e_{x_{n-k}}, forms u_n and normalises (App. B.1);
* ``3l1h`` — Rajaraman et al. 2024, Thm 4: u-head, v-head and induction head in three
  layers, each attention followed by an FFN + LN (recalled in Sec. 3);
* ``ungated`` — App. A.2.2 / B.2: the 2L1H layer 1 with a two-sublayer MLP and the layer
  norm after the query and key maps of layer 2, no gate: a *biased* k-gram (App. B.2).

Layout (ours, after App. A.2 / B): d = 6S + 4 (ungated: 5S + 4, no u-hat / v-hat blocks):
scalar slots ``one``, ``pos``, ``r``, ``gate``, then the S-blocks ``tok``, ``v``, ``mask``
(2L1H) or ``u`` (2L2H, 3L1H), ``uhat``, ``vhat``, ``out``. The stream starts as the
embedding E[one, s] = 1, E[tok + s, s] = 1 (no absolute positions); the readout maps the
``out`` block to the logits, which *are* the probabilities (f = identity, Sec. 2.2).

Layer 1 ("triadic" heads, App. A.2 / B): one relative-position table R_m per head, added to
the key and value inputs (`LayerConfig.rel_pe = "key_value"`, one table shared by keys and
values as in the authors' code). R_m[pos] = m ln 3 inside the window and -C outside, so
att_{n, n-m} = 3^m / sum_{m' in window} 3^{m'}; the v-head also carries R_m[r] = 1[m = k],
so r_n = att_{n, n-k} = 3^k / Z for n >= k + 1 and 0 before (the "n > k" signal).

Layer 2 (induction head): score c <v-hat_i, u-hat_n> + c_g (r_i Z / 3^k - 1), value e_{x_i}
into ``out``. The ungated variant scores c <l2(W_K x_i), l2(W_Q x_n)> with c as the
attention scale (a normalised query cannot carry the temperature).

Members of one ensemble share (S, T) and the construction; each member has its own
(k, c) (the temperature of the ungated variant is per ensemble: `LayerConfig.attn_scale`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from lightning_modules.ensemble_gpt import EnsembleGPT
from lightning_modules.gpt_config import GPTConfig, LayerConfig, SublayerConfig

Construction = Literal["2l2h", "2l1h", "3l1h", "ungated"]
CONSTRUCTIONS: tuple[Construction, ...] = ("2l2h", "2l1h", "3l1h", "ungated")


@dataclass(frozen=True)
class Layout:
    """Coordinates of the residual stream (our layout, after App. B)."""

    states: int
    ungated: bool = False

    one: int = 0
    pos: int = 1
    r: int = 2
    gate: int = 3

    def block(self, name: str) -> slice:
        """The S coordinates of block ``name``."""
        names = ["tok", "v", "mask", "u", "out"] if self.ungated else [
            "tok", "v", "mask", "uhat", "vhat", "out"
        ]  # fmt: skip
        if name == "u" and not self.ungated:
            name = "mask"  # 2L2H and 3L1H keep u where 2L1H keeps the mask
        start = 4 + self.states * names.index(name)
        return slice(start, start + self.states)

    @property
    def width(self) -> int:
        return (5 if self.ungated else 6) * self.states + 4


def triadic_normaliser(order: int) -> float:
    """Z = sum_{m=1}^{k} 3^m = (3^{k+1} - 3) / 2 (App. A.2 / B, layer 1)."""
    return (3 ** (order + 1) - 3) / 2


def matching_margin(order: int) -> float:
    """delta_k = 1 - max_{a != b} cos(t(a), t(b)), t(a) = sum_{m<k} 3^m e_{a_m} over contexts a, b.

    The gap of the induction head's score c <v-hat_i, u-hat_n> between a matching key
    (cosine 1) and the closest non-matching one (paper D, Sec. 3-4 proof sketches: the score
    "equals 1 when [the contexts match], and is strictly less than 1 otherwise"). Our
    derivation: the closest pair is a constant context and the same context with its
    lowest-weight token changed, t = W e_s vs (W - 1) e_s + e_s', W = (3^k - 1) / 2, so
    cos = (W - 1) / sqrt((W - 1)^2 + 1) for every S >= 2 (tests: brute force over all
    pairs for S <= 3, k <= 4). delta_1 = 1 and delta_k ~ 2 / 9^k: about 10x smaller per order.
    """
    w = (3**order - 1) / 2
    return 1.0 - (w - 1) / math.hypot(w - 1, 1.0)


def sufficient_temperature(order: int, length: int, error: float) -> float:
    """c = ln((T - 1) / eps) / delta_k: the gated heads (2L2H, 2L1H, 3L1H) are within eps.

    Our derivation from the layer-2 scores (our gate; paper D, Sec. 3 "as the temperature
    ... tends to infinity"): at n >= k + 1 a matching key scores c, a non-matching key i >= k + 1
    at most c (1 - delta_k) (`matching_margin`) and a key i <= k at most 0 (the gate,
    c_g = c), so the non-matching attention mass is w <= (T - 1) e^{-c delta_k} and
    Pr = (1 - w) p_hat_k + w q gives max_s |Pr - p_hat_k| <= w <= eps (layer-1 leakage
    e^{-C} neglected).
    """
    return math.log((length - 1) / error) / matching_margin(order)


def config(kind: Construction, states: int, length: int, scale: float = 1.0) -> GPTConfig:
    """The `GPTConfig` of construction ``kind`` for S states and sequences of ``length``.

    ``scale`` is the layer-2 attention scale: 1 (no scaling, Sec. 2.2) except for the
    ungated variant, where it is the temperature c.
    """
    layout = Layout(states, ungated=kind == "ungated")
    triadic = {"attn_scale": 1.0, "head_merge": "sum", "rel_pe": "key_value"}
    induction = LayerConfig(n_head=1, attn_scale=1.0, head_merge="sum", mlp="none")
    copy = SublayerConfig(activation="identity", norm="l2")
    ffn = (  # Rajaraman et al.: FFN (two matrices with biases) + LN + residual (their Arch. 2)
        SublayerConfig(bias=True, activation="relu", skip="none"),
        SublayerConfig(bias=True, activation="identity", norm="l2", skip="input"),
    )
    mask = SublayerConfig(bias=True, activation="relu", norm="l2")
    layers: tuple[LayerConfig, ...]
    if kind == "2l1h":
        layers = (
            LayerConfig(n_head=1, **triadic, mlp="sublayers", sublayers=(mask, copy, copy)),
            induction,
        )
    elif kind == "ungated":
        layers = (
            LayerConfig(n_head=1, **triadic, mlp="sublayers", sublayers=(mask, copy)),
            LayerConfig(n_head=1, attn_scale=scale, head_merge="sum", mlp="none", qk_norm="l2"),
        )
    elif kind == "2l2h":
        layers = (
            LayerConfig(
                n_head=2,
                head_dim=layout.width,
                attn_scale=1.0,
                rel_pe="key_value",
                rel_pe_per_head=True,
                mlp="sublayers",
                sublayers=(copy, copy),
            ),
            induction,
        )
    elif kind == "3l1h":
        layers = (
            LayerConfig(n_head=1, **triadic, mlp="sublayers", sublayers=ffn),
            LayerConfig(n_head=1, **triadic, mlp="sublayers", sublayers=ffn),
            replace(induction, mlp="sublayers", sublayers=ffn),  # W_2 = 0: the FFN adds 0
        )
    else:
        raise ValueError(f"unknown construction {kind!r}; known: {CONSTRUCTIONS}")
    return GPTConfig(
        vocab_size=states,
        n_embd=layout.width,
        block_size=length,
        n_layer=len(layers),
        tied=False,
        layers=layers,
        position=False,
        final_norm="none",
        readout_bias=True,
    )


@dataclass(frozen=True)
class Member:
    """One (order k, temperature c) point of an ensemble; ``gate`` None means c_g = c."""

    order: int
    temperature: float
    big: float = 1e4  # C, the "-infinity" outside the layer-1 windows
    gate: float | None = None


def _window_table(
    layout: Layout, order: int, window: range, big: float, length: int, signal: bool
) -> torch.Tensor:
    """R (T, d) of a triadic head: R_m[pos] = m ln 3 on ``window``, -C elsewhere; with
    ``signal`` R_m[r] = 1[m = k] (App. B: the n > k signal)."""
    table = torch.zeros(length, layout.width, dtype=torch.float64)
    m = torch.arange(length, dtype=torch.float64)
    inside = torch.tensor([int(j) in window for j in range(length)])
    table[:, layout.pos] = torch.where(inside, m * math.log(3.0), torch.full_like(m, -big))
    if signal and order < length:
        table[order, layout.r] = 1.0
    return table


def _triadic_qkv(layout: Layout, dst: slice, signal: bool) -> torch.Tensor:
    """[W_Q; W_K; W_V] (3d, d) of a triadic head writing the window's tokens into ``dst``."""
    d, s = layout.width, layout.states
    w = torch.zeros(3, d, d, dtype=torch.float64)
    w[0, layout.pos, layout.one] = 1.0
    w[1, layout.pos, layout.pos] = 1.0
    w[2, dst, layout.block("tok")] = torch.eye(s, dtype=torch.float64)
    if signal:
        w[2, layout.r, layout.r] = 1.0
    return w


def _induction_qkv(layout: Layout, member: Member) -> torch.Tensor:
    """[W_Q; W_K; W_V] (3d, d) of the gated layer-2 induction head (App. B.1; the gate is ours)."""
    d, s, k = layout.width, layout.states, member.order
    eye = torch.eye(s, dtype=torch.float64)
    vhat, uhat = layout.block("vhat"), layout.block("uhat")
    w = torch.zeros(3, d, d, dtype=torch.float64)
    w[0, vhat, uhat] = member.temperature * eye
    w[1, vhat, vhat] = eye
    w[0, layout.gate, layout.one] = member.temperature if member.gate is None else member.gate
    w[1, layout.gate, layout.r] = triadic_normaliser(k) / 3**k
    w[1, layout.gate, layout.one] = -1.0
    w[2, layout.block("out"), layout.block("tok")] = eye
    return w


def _ungated_qkv(layout: Layout) -> torch.Tensor:
    """[W_Q; W_K; W_V] (3d, d) of the ungated head: q = u_n, k = v_i, both l2-normalised by
    the attention (App. A.2.2 / B.2)."""
    d, s = layout.width, layout.states
    eye = torch.eye(s, dtype=torch.float64)
    w = torch.zeros(3, d, d, dtype=torch.float64)
    w[0, :s, layout.block("u")] = eye
    w[1, :s, layout.block("v")] = eye
    w[2, layout.block("out"), layout.block("tok")] = eye
    return w


def _copy(layout: Layout, src: str, dst: str) -> torch.Tensor:
    w = torch.zeros(layout.width, layout.width, dtype=torch.float64)
    w[layout.block(dst), layout.block(src)] = torch.eye(layout.states, dtype=torch.float64)
    return w


def _mask_sublayer(layout: Layout, order: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W_1, b_1 isolating e_{x_{n-k}}: mask = ReLU(v - 3^k / (2Z)) (App. B.1)."""
    w = _copy(layout, "v", "mask")
    b = torch.zeros(layout.width, dtype=torch.float64)
    b[layout.block("mask")] = -(3**order) / (2 * triadic_normaliser(order))
    return w, b


def _u_sublayer(layout: Layout, order: int, dst: str) -> torch.Tensor:
    """W_2: U_n = Z v_n + e_{x_n} - 3^k e_{x_{n-k}} = sum_{m<k} 3^m e_{x_{n-m}} (App. B.1)."""
    eye = torch.eye(layout.states, dtype=torch.float64)
    w = torch.zeros(layout.width, layout.width, dtype=torch.float64)
    w[layout.block(dst), layout.block("v")] = triadic_normaliser(order) * eye
    w[layout.block(dst), layout.block("tok")] = eye
    w[layout.block(dst), layout.block("mask")] = -(3**order) * eye
    return w


def _set(model: EnsembleGPT, name: str, index: int, value: torch.Tensor) -> None:
    param = model.get_parameter(name)
    param[index].copy_(value.to(param.dtype))


def _set_qkv(model: EnsembleGPT, layer: int, index: int, qkv: torch.Tensor) -> None:
    """c_attn of ``layer`` from [W_Q; W_K; W_V] stacked as (3, rows, d)."""
    _set(model, f"transformer.h.{layer}.attn.c_attn.weight", index, qkv.reshape(-1, qkv.shape[-1]))


def _set_common(model: EnsembleGPT, layout: Layout, i: int) -> None:
    """Embedding E[one, s] = 1, E[tok + s, s] = 1; readout of the ``out`` block, bias 0."""
    s = layout.states
    embedding = torch.zeros(s, layout.width, dtype=torch.float64)
    embedding[:, layout.one] = 1.0
    embedding[:, layout.block("tok")] = torch.eye(s, dtype=torch.float64)
    _set(model, "transformer.wte.weight", i, embedding)
    readout = torch.zeros(s, layout.width, dtype=torch.float64)
    readout[:, layout.block("out")] = torch.eye(s, dtype=torch.float64)
    _set(model, "lm_head.weight", i, readout)


def _set_single_head(
    model: EnsembleGPT, layout: Layout, i: int, member: Member, ungated: bool
) -> None:
    """2L1H (App. B.1) or its ungated variant (App. B.2): v-head, mask / u sublayers
    (+ v-hat copy), layer-2 head (App. B.1, B.2)."""
    k, length = member.order, model.cfg.block_size
    mlp = "transformer.h.0.mlp.layers"
    _set_qkv(model, 0, i, _triadic_qkv(layout, layout.block("v"), True))
    v_table = _window_table(layout, k, range(1, k + 1), member.big, length, True)
    _set(model, "transformer.h.0.attn.rel_pe.weight", i, v_table[None])
    w1, b1 = _mask_sublayer(layout, k)
    _set(model, f"{mlp}.0.fc.weight", i, w1)
    _set(model, f"{mlp}.0.fc.bias", i, b1)
    _set(model, f"{mlp}.1.fc.weight", i, _u_sublayer(layout, k, "u" if ungated else "uhat"))
    if ungated:
        _set_qkv(model, 1, i, _ungated_qkv(layout))
    else:
        _set(model, f"{mlp}.2.fc.weight", i, _copy(layout, "v", "vhat"))
        _set_qkv(model, 1, i, _induction_qkv(layout, member))


def _set_two_heads(model: EnsembleGPT, layout: Layout, i: int, member: Member) -> None:
    """2L2H (App. A.2.1): u- and v-head summed by c_proj = [I I], copy MLP, induction head."""
    k, length = member.order, model.cfg.block_size
    heads = [_triadic_qkv(layout, layout.block("u"), False)]
    heads.append(_triadic_qkv(layout, layout.block("v"), True))
    _set_qkv(model, 0, i, torch.cat(heads, dim=1))  # rows [Q_u; Q_v; K_u; K_v; V_u; V_v]
    tables = [_window_table(layout, k, range(k), member.big, length, False)]
    tables.append(_window_table(layout, k, range(1, k + 1), member.big, length, True))
    _set(model, "transformer.h.0.attn.rel_pe.weight", i, torch.stack(tables))
    eye = torch.eye(layout.width, dtype=torch.float64)
    _set(model, "transformer.h.0.attn.c_proj.weight", i, torch.cat([eye, eye], dim=1))
    _set(model, "transformer.h.0.mlp.layers.0.fc.weight", i, _copy(layout, "u", "uhat"))
    _set(model, "transformer.h.0.mlp.layers.1.fc.weight", i, _copy(layout, "v", "vhat"))
    _set_qkv(model, 1, i, _induction_qkv(layout, member))


def _set_three_layers(model: EnsembleGPT, layout: Layout, i: int, member: Member) -> None:
    """3L1H (Rajaraman et al. Thm 4): u-head + FFN, v-head + FFN, induction head + FFN
    whose second matrix is 0 (App. I counts it); FFN: W_1 = I (ReLU of a non-negative stream),
    W_2 copies u -> u-hat (v -> v-hat) before the LN."""
    k, length = member.order, model.cfg.block_size
    eye = torch.eye(layout.width, dtype=torch.float64)
    heads = (("u", range(k), False), ("v", range(1, k + 1), True))
    for layer, (dst, window, signal) in enumerate(heads):
        _set_qkv(model, layer, i, _triadic_qkv(layout, layout.block(dst), signal))
        table = _window_table(layout, k, window, member.big, length, signal)
        _set(model, f"transformer.h.{layer}.attn.rel_pe.weight", i, table[None])
        _set(model, f"transformer.h.{layer}.mlp.layers.0.fc.weight", i, eye)
        _set(
            model,
            f"transformer.h.{layer}.mlp.layers.1.fc.weight",
            i,
            _copy(layout, dst, f"{dst}hat"),
        )
    _set_qkv(model, 2, i, _induction_qkv(layout, member))
    _set(model, "transformer.h.2.mlp.layers.0.fc.weight", i, eye)


def _set_member(model: EnsembleGPT, kind: Construction, i: int, member: Member) -> None:
    layout = Layout(model.cfg.vocab_size, ungated=kind == "ungated")
    _set_common(model, layout, i)
    if kind in ("2l1h", "ungated"):
        _set_single_head(model, layout, i, member, ungated=kind == "ungated")
    elif kind == "2l2h":
        _set_two_heads(model, layout, i, member)
    else:
        _set_three_layers(model, layout, i, member)


def build(
    kind: Construction,
    states: int,
    length: int,
    members: Sequence[Member],
    dtype: torch.dtype = torch.float64,
) -> EnsembleGPT:
    """An `EnsembleGPT` whose member i is construction ``kind`` at ``members[i]``.

    Every parameter the construction does not set is zero. The ungated variant takes its
    temperature from the (shared) attention scale: all members must have the same c.
    """
    scale = 1.0
    if kind == "ungated":
        temperatures = {m.temperature for m in members}
        if len(temperatures) != 1:
            raise ValueError(f"ungated members share one temperature, got {sorted(temperatures)}")
        scale = temperatures.pop()
    model = EnsembleGPT(config(kind, states, length, scale), len(members)).to(torch.float64)
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        for i, member in enumerate(members):
            _set_member(model, kind, i, member)
    return model.to(dtype)
