"""EnsembleGPT options (papers C and D) against an independent per-member loop.

`_reference` recomputes one member's logits position by position and head by head from
the parameters, read by name, following the formulas the options document (paper C App.
I.1 / Fig. 7 and the authors' code; paper D Sec. 2.2, App. A.1, B.1 and the authors' code);
the batched module must agree with it for every option, fused and explicit attention alike.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import pytest
import torch

from lightning_modules.ensemble_gpt import EnsembleGPT
from lightning_modules.gpt_config import GPTConfig, LayerConfig, SublayerConfig
from lightning_modules.layers import L2Norm, OneHotEmbedding
from lightning_modules.positions import by_distance, by_position

Sub = SublayerConfig
T = 6  # block size of every model here

# paper D's MLP skeletons (App. B.1, the authors' `MLP_three_layers`, `MLP_new_construct`,
# `MLP_two_layers`) and Rajaraman et al.'s FFN + LN (their Architecture 2)
THREE = (
    Sub(bias=True, norm="affine"),
    Sub(activation="identity", norm="weight", skip="input"),
    Sub(activation="identity", norm="weight"),
)
NEW_CONSTRUCT = (
    Sub(bias=True, norm="affine"),
    Sub(skip="none"),
    Sub(norm="weight"),
    Sub(norm="weight"),
)
TWO = (Sub(bias=True, norm="affine"), Sub(activation="identity", skip="none"))
RAJARAMAN = (Sub(width=7, skip="none"), Sub(activation="identity", norm="l2", skip="input"))


def _layers(*layers: LayerConfig, **kw: object) -> GPTConfig:
    return GPTConfig(block_size=T, n_layer=len(layers), layers=layers, **kw)  # type: ignore[arg-type]


CONFIGS: dict[str, GPTConfig] = {
    "theory": GPTConfig(vocab_size=3, n_embd=4, n_head=2, block_size=T, n_layer=2),
    "gpt2_gelu_untied": GPTConfig(
        vocab_size=3, n_embd=4, block_size=T, variant="gpt2", activation="gelu", tied=False
    ),
    "paperC_onehot": _layers(  # paper C App. I.1: d = S + T, summed heads, no scale, no bias
        LayerConfig(n_head=2, head_merge="sum", attn_scale=1.0, mlp="none", norm="none"),
        LayerConfig(n_head=1, head_merge="sum", attn_scale=1.0, mlp="none", norm="none"),
        vocab_size=3,
        n_embd=3 + T,
        embedding="onehot",
        tied=False,
        readout_bias=False,
    ),
    "paperC_learned_fig7": _layers(  # paper C Fig. 7: X <- X + MLP(delta), muLinear MLP
        *(
            LayerConfig(
                n_head=h,
                head_merge="sum",
                attn_scale=1.0,
                norm="none",
                mlp_hidden=5,
                mlp_bias=True,
                mlp_param="mup",
                mlp_input="attention",
            )
            for h in (2, 1)
        ),
        vocab_size=3,
        n_embd=4,
        tied=False,
        readout_bias=False,
    ),
    "paperD_arch": _layers(  # ours (docs/choices.md): rel. PE keys+values, 3-sublayer MLP
        LayerConfig(rel_pe="key_value", norm="none", mlp="sublayers", sublayers=THREE),
        LayerConfig(norm="none", mlp="none"),
        vocab_size=2,
        n_embd=4,
        position=False,
        tied=False,
    ),
    "paperD_code": _layers(  # the authors' code: keys only, 4-sublayer MLP, two heads
        LayerConfig(n_head=2, rel_pe="key", norm="none", mlp="sublayers", sublayers=NEW_CONSTRUCT),
        LayerConfig(norm="none", mlp="none"),
        vocab_size=2,
        n_embd=4,
        position=False,
    ),
    "paperD_construction": _layers(  # per-head tables, no scale, summed heads, l2 norms
        LayerConfig(
            n_head=2,
            head_merge="sum",
            attn_scale=1.0,
            rel_pe="key_value",
            rel_pe_per_head=True,
            norm="none",
            mlp="sublayers",
            sublayers=TWO,
        ),
        LayerConfig(
            head_dim=3, head_merge="sum", attn_scale=1.0, qk_norm="l2", norm="none", mlp="none"
        ),
        vocab_size=3,
        n_embd=5,
        position=False,
        tied=False,
        readout_bias=False,
    ),
    "rajaraman_norms": _layers(  # FFN + LN; affine pre-norms, l2 final norm, affine q/k norm
        LayerConfig(n_head=2, head_dim=3, norm="affine", mlp="sublayers", sublayers=RAJARAMAN),
        LayerConfig(n_head=2, qk_norm="affine", norm="l2", mlp_hidden=3, mlp_bias=True),
        vocab_size=3,
        n_embd=4,
        final_norm="affine",
    ),
}


def _norm(kind: str, v: torch.Tensor, p: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """Paper D App. A.1 (l2: v/||v||, ours 0 -> 0) and LayerNorm with eps 1e-5 (weight / affine)."""
    if kind == "none":
        return v
    if kind == "l2":
        norm = math.sqrt(float((v * v).sum()))
        return v / norm if norm > 0 else v
    centred = v - v.mean()
    out = centred / torch.sqrt((centred * centred).mean() + 1e-5) * p[f"{prefix}.weight"]
    return out + p[f"{prefix}.bias"] if kind == "affine" else out


def _attention(cfg: GPTConfig, i: int, u: list[torch.Tensor], p: dict) -> list[torch.Tensor]:
    """Layer i's merged attention output at every position (paper D Sec. 2.2, paper C I.1)."""
    layer, pre = cfg.layer(i), f"transformer.h.{i}.attn"
    h_count, dh, d = layer.n_head, layer.head_dim, cfg.n_embd
    assert h_count is not None and dh is not None
    dv = dh if layer.head_merge == "proj" else d
    w = p[f"{pre}.c_attn.weight"]
    w_q, w_k, w_v = w[: h_count * dh], w[h_count * dh : 2 * h_count * dh], w[2 * h_count * dh :]
    scale = 1 / math.sqrt(dh) if layer.attn_scale is None else layer.attn_scale
    outs = []
    for n in range(len(u)):
        heads = []
        for h in range(h_count):
            q_h, k_h = w_q[h * dh : (h + 1) * dh], w_k[h * dh : (h + 1) * dh]
            v_h = w_v[h * dv : (h + 1) * dv]
            table = None
            if layer.rel_pe != "none":
                table = p[f"{pre}.rel_pe.weight"][h if layer.rel_pe_per_head else 0]
            q = _norm(layer.qk_norm, q_h @ u[n], p, f"{pre}.q_norm")
            scores, values = [], []
            for j in range(n + 1):
                key_in, value_in = u[j], u[j]
                if table is not None:
                    key_in = key_in + table[n - j]
                    if layer.rel_pe == "key_value":
                        value_in = value_in + table[n - j]
                k = _norm(layer.qk_norm, k_h @ key_in, p, f"{pre}.k_norm")
                scores.append(scale * float(q @ k))
                values.append(v_h @ value_in)
            att = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
            heads.append(sum(a * val for a, val in zip(att, values, strict=True)))
        if layer.head_merge == "proj":
            outs.append(p[f"{pre}.c_proj.weight"] @ torch.cat(heads))
        else:
            outs.append(sum(heads))
    return outs


def _linear(p: dict, prefix: str, x: torch.Tensor, mult: tuple[float, float] = (1, 1)):
    out = (p[f"{prefix}.weight"] @ x) * mult[0]
    return out + p[f"{prefix}.bias"] * mult[1] if f"{prefix}.bias" in p else out


def _gpt_mlp(cfg: GPTConfig, i: int, x: torch.Tensor, p: dict) -> torch.Tensor:
    """W_2 act(W_1 x + b_1) + b_2; mup: the authors' muLinear, W sqrt(out/in), b sqrt(out)."""
    layer, pre = cfg.layer(i), f"transformer.h.{i}.mlp"
    d, hidden = cfg.n_embd, layer.mlp_hidden
    assert hidden is not None
    mup = layer.mlp_param == "mup"
    first = (math.sqrt(hidden / d), math.sqrt(hidden)) if mup else (1.0, 1.0)
    second = (math.sqrt(d / hidden), math.sqrt(d)) if mup else (1.0, 1.0)
    pre_act = _linear(p, f"{pre}.c_fc", x, first)
    act = torch.relu(pre_act) if layer.activation == "relu" else torch.nn.functional.gelu(pre_act)
    return _linear(p, f"{pre}.c_proj", act, second)


def _sublayers(cfg: GPTConfig, i: int, h0: torch.Tensor, p: dict) -> list[torch.Tensor]:
    """Paper D Sec. 2.2: h_j = skip_j + LN(sigma_j(W_j h_{j-1} + b_j)); returns h_1..h_J."""
    states = [h0]
    for j, sub in enumerate(cfg.layer(i).sublayers):
        pre = f"transformer.h.{i}.mlp.layers.{j}"
        u = _linear(p, f"{pre}.fc", states[-1])
        u = _norm(sub.norm, torch.relu(u) if sub.activation == "relu" else u, p, f"{pre}.norm")
        skip = {"prev": states[-1], "input": h0, "none": None}[sub.skip]
        states.append(u if skip is None else skip + u)
    return states[1:]


def _reference(model: EnsembleGPT, member: int, tokens: list[int]) -> torch.Tensor:
    """Member ``member``'s logits (N, V), one position, head and layer at a time."""
    cfg = model.cfg
    p = {name: t[member].detach() for name, t in model.named_parameters()}
    if cfg.tied:
        p["lm_head.weight"] = p["transformer.wte.weight"]
    if cfg.embedding == "onehot":
        eye_v, eye_t = torch.eye(cfg.vocab_size), torch.eye(cfg.block_size)
        xs = [torch.cat([eye_v[t], eye_t[n]]).double() for n, t in enumerate(tokens)]
    else:
        xs = [p["transformer.wte.weight"][t].clone() for t in tokens]
        if cfg.position:
            xs = [x + p["transformer.wpe.weight"][n] for n, x in enumerate(xs)]
    for i in range(cfg.n_layer):
        layer, pre = cfg.layer(i), f"transformer.h.{i}"
        assert layer.norm is not None
        deltas = _attention(cfg, i, [_norm(layer.norm, x, p, f"{pre}.ln_1") for x in xs], p)
        if layer.mlp_input == "attention":
            xs = [x + _gpt_mlp(cfg, i, dx, p) for x, dx in zip(xs, deltas, strict=True)]
            continue
        ys = [x + dx for x, dx in zip(xs, deltas, strict=True)]
        if layer.mlp == "gpt":
            xs = [y + _gpt_mlp(cfg, i, _norm(layer.norm, y, p, f"{pre}.ln_2"), p) for y in ys]
        elif layer.mlp == "sublayers":
            xs = [_sublayers(cfg, i, y, p)[-1] for y in ys]
        else:
            xs = ys
    final = cfg.final_norm or ("weight" if cfg.variant == "gpt2" else "none")
    logits = [p["lm_head.weight"] @ _norm(final, x, p, "transformer.ln_f") for x in xs]
    return torch.stack([z + p["lm_head.bias"] if cfg.readout_bias else z for z in logits])


def _random_model(cfg: GPTConfig, ensemble: int = 2, seed: int = 0) -> EnsembleGPT:
    """float64 model with every parameter random (so zero-initialised ones count too)."""
    model = EnsembleGPT(cfg, ensemble).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64) * 0.7)
    return model


def _tokens(cfg: GPTConfig, ensemble: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (ensemble, batch, T), generator=gen)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_matches_the_per_member_reference(name: str) -> None:
    cfg = CONFIGS[name]
    model = _random_model(cfg)
    tokens = _tokens(cfg, 2)
    traces: list[dict[str, torch.Tensor]] = []
    fused, explicit = model(tokens), model(tokens, traces)
    assert fused.shape == (2, 2, T, cfg.vocab_size)
    assert len(traces) == cfg.n_layer
    for e in range(2):
        for b in range(2):
            expected = _reference(model, e, tokens[e, b].tolist())
            torch.testing.assert_close(fused[e, b], expected, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(explicit[e, b], expected, rtol=1e-10, atol=1e-10)


LAST_ONLY = sorted(
    name for name, cfg in CONFIGS.items() if cfg.layer(cfg.n_layer - 1).rel_pe == "none"
)


@pytest.mark.parametrize("name", LAST_ONLY)
def test_last_only_is_the_reference_at_the_last_position(name: str) -> None:
    """``last_only`` (the last layer's query, MLP and readout at the last position alone)
    gives the reference's last logits, and the full forward's gradients of a loss that
    reads only them."""
    cfg = CONFIGS[name]
    model = _random_model(cfg)
    tokens = _tokens(cfg, 2)
    last = model(tokens, last_only=True)
    assert last.shape == (2, 2, 1, cfg.vocab_size)
    for e in range(2):
        for b in range(2):
            expected = _reference(model, e, tokens[e, b].tolist())[-1]
            torch.testing.assert_close(last[e, b, 0], expected, rtol=1e-10, atol=1e-10)

    def gradients(last_only: bool) -> list[torch.Tensor]:
        model.zero_grad()
        model(tokens, last_only=last_only)[..., -1, :].logsumexp(-1).sum().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    fast, full = gradients(True), gradients(False)
    assert len(fast) == len(full) == len(list(model.parameters()))
    for a, b in zip(fast, full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_last_only_refuses_traces_and_relative_positions() -> None:
    tokens = _tokens(CONFIGS["theory"], 2)
    with pytest.raises(ValueError, match="traces need every position"):
        _random_model(CONFIGS["theory"])(tokens, [], last_only=True)
    last_rel = _layers(
        LayerConfig(norm="none", mlp="none"),
        LayerConfig(rel_pe="key", norm="none", mlp="none"),
        vocab_size=2,
        n_embd=4,
        position=False,
    )
    with pytest.raises(ValueError, match="does not support relative positions"):
        _random_model(last_rel)(_tokens(last_rel, 2), last_only=True)


def test_no_scale_equals_default_scale_at_one_over_sqrt_dh() -> None:
    """attn_scale is the logit multiplier; None means 1/sqrt(head_dim) (paper A App. A,
    typo fixed)."""
    base = GPTConfig(vocab_size=3, n_embd=4, block_size=T, layers=(LayerConfig(n_head=2),))
    explicit = GPTConfig(
        vocab_size=3, n_embd=4, block_size=T, layers=(LayerConfig(n_head=2, attn_scale=2**-0.5),)
    )
    unscaled = GPTConfig(
        vocab_size=3, n_embd=4, block_size=T, layers=(LayerConfig(n_head=2, attn_scale=1.0),)
    )
    models = [_random_model(c) for c in (base, explicit, unscaled)]
    tokens = _tokens(base, 2)
    torch.testing.assert_close(models[0](tokens), models[1](tokens), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(models[0](tokens), models[2](tokens))


def test_triadic_relative_position_head_by_hand() -> None:
    """Paper D's positional head (App. A.2; our layout): W_Q[pos, one] = 1, W_K[pos, pos] = 1,
    p_m[pos] = m ln 3 for m in W = {1, 2} else -C gives att_{n, n-m} = 3^m / sum; the value
    table p_m[r] = 1[m = 2] read by W_V[r, r] = 1 gives r_n = att_{n, n-2}."""
    one, pos, r = 0, 1, 2
    cfg = _layers(
        LayerConfig(head_merge="sum", attn_scale=1.0, rel_pe="key_value", norm="none", mlp="none"),
        vocab_size=2,
        n_embd=3,
        position=False,
        tied=False,
        readout_bias=False,
    )
    model = EnsembleGPT(cfg, 1).double()
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.transformer["wte"].weight[0, :, one] = 1.0
        w = model.transformer["h"][0].attn.c_attn.weight[0]  # rows [Q (3); K (3); V (3)]
        w[pos, one] = 1.0
        w[3 + pos, pos] = 1.0
        w[6 + r, r] = 1.0
        table = model.transformer["h"][0].attn.rel_pe.weight[0, 0]
        table[:, pos] = -1e4
        table[1, pos], table[2, pos] = math.log(3), 2 * math.log(3)
        table[2, r] = 1.0
    traces: list[dict[str, torch.Tensor]] = []
    model(torch.zeros(1, 1, T, dtype=torch.long), traces)
    att = traces[0]["attention"][0, 0, 0]
    for n in range(2, T):
        expected = torch.zeros(T, dtype=torch.float64)
        expected[n - 1], expected[n - 2] = 3 / 12, 9 / 12
        torch.testing.assert_close(att[n], expected, rtol=0, atol=1e-12)
    r_n = traces[0]["attn_out"][0, 0, :, r]
    torch.testing.assert_close(r_n[2:], torch.full((T - 2,), 0.75, dtype=torch.float64))
    assert r_n[0] == 0 and r_n[1] == 0  # n <= k: distance 2 not in the past


def test_sublayer_traces_are_the_skeleton_states() -> None:
    """mlp.j traces are h_j of paper D Sec. 2.2; the layer output is h_J (no extra residual)."""
    cfg = CONFIGS["paperD_code"]
    model = _random_model(cfg)
    traces: list[dict[str, torch.Tensor]] = []
    model(_tokens(cfg, 2), traces)
    first = traces[0]
    assert torch.equal(first["mlp.4"], first["z"])
    for e in range(2):
        p = {name: t[e].detach() for name, t in model.named_parameters()}
        for n in range(T):
            states = _sublayers(cfg, 0, first["y"][e, 0, n], p)
            for j, state in enumerate(states, start=1):
                torch.testing.assert_close(first[f"mlp.{j}"][e, 0, n], state)
    attn_first = _layers(CONFIGS["paperC_learned_fig7"].layer(0), vocab_size=3, n_embd=4)
    traces = []
    _random_model(attn_first)(_tokens(attn_first, 2), traces)
    assert "y" not in traces[0]
    torch.testing.assert_close(traces[0]["z"], traces[0]["input"] + traces[0]["mlp_out"])


def test_modified_layer_norm_is_v_over_its_norm() -> None:
    """Paper D App. A.1: LN([v; -v])[:d] / sqrt(d) = v / ||v||; LN(0) := 0 (ours)."""
    gen = torch.Generator().manual_seed(0)
    for d in (4, 16, 64):
        v = torch.randn(1000, d, generator=gen, dtype=torch.float64)
        doubled = torch.nn.functional.layer_norm(torch.cat([v, -v], -1), (2 * d,), eps=0.0)
        torch.testing.assert_close(L2Norm()(v), doubled[:, :d] / math.sqrt(d), atol=1e-12, rtol=0)
        torch.testing.assert_close(L2Norm()(v).norm(dim=-1), torch.ones(1000, dtype=v.dtype))
    zero = torch.zeros(3, requires_grad=True)
    out = L2Norm()(zero)
    out.sum().backward()
    assert torch.equal(out, torch.zeros(3)) and torch.isfinite(zero.grad).all()


def test_one_hot_embedding_layout_and_no_parameters() -> None:
    """Paper C App. I.1 `onehot`: x_l = concat(e_{x_l} in R^S, e_l in R^T), not trained."""
    cfg = CONFIGS["paperC_onehot"]
    model = EnsembleGPT(cfg, 2)
    assert not any(n.startswith("transformer.w") for n, _ in model.named_parameters())
    assert not any(k.startswith("transformer.wte") for k in model.state_dict())
    tokens = torch.tensor([[[2, 0, 1]]])
    x = OneHotEmbedding(3, T)(tokens)[0, 0]
    expected = torch.zeros(3, 3 + T)
    for n, t in enumerate([2, 0, 1]):
        expected[n, t] = 1.0
        expected[n, 3 + n] = 1.0
    assert torch.equal(x, expected)
    assert torch.equal(OneHotEmbedding(3, 0)(tokens)[0, 0], torch.eye(3)[[2, 0, 1]])
    assert model.double().transformer["wte"](tokens).dtype == torch.float64


def test_init_by_role_whatever_the_name() -> None:
    """Every parameter is initialised by its module's role: biases 0, norm weights 1, norm
    biases 0, std-0 roles zeros, std overrides honoured; none is left untouched."""
    cfg = GPTConfig(
        vocab_size=3,
        n_embd=64,
        block_size=64,
        n_layer=3,
        tied=False,
        std_linear=0.5,
        std_embedding=0.25,
        std_readout=0.0,
        final_norm="affine",
        layers=(
            LayerConfig(
                n_head=2, rel_pe="key", norm="affine", mlp="sublayers", sublayers=NEW_CONSTRUCT
            ),
            LayerConfig(qk_norm="affine", norm="affine", mlp_bias=True),
            LayerConfig(mlp_param="mup", mlp_bias=True, mlp_hidden=32, mlp_input="attention"),
        ),
    )
    model = EnsembleGPT(cfg, 2)
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(float("nan"))
    model.init_members([3, 4])
    params = dict(model.named_parameters())
    assert all(torch.isfinite(t).all() for t in params.values())
    for name, t in params.items():
        owner, leaf = name.rsplit(".", 1)
        if "norm" in owner or owner.endswith(("ln_1", "ln_2", "ln_f")):
            assert torch.all(t == (1.0 if leaf == "weight" else 0.0)), name
        elif leaf == "bias":
            assert torch.all(t == 0), name
    assert torch.all(params["lm_head.weight"] == 0)
    assert torch.all(params["transformer.h.2.mlp.c_proj.weight"] == 0)  # muLinear last layer
    stds = {
        "transformer.h.0.attn.c_attn.weight": 0.5,
        "transformer.h.0.mlp.layers.2.fc.weight": 0.5,
        "transformer.h.0.attn.rel_pe.weight": 0.25,
        "transformer.wte.weight": 0.25,
        "transformer.h.1.mlp.c_proj.weight": 0.02 / math.sqrt(6),
        "transformer.h.2.mlp.c_fc.weight": 1 / math.sqrt(32),
    }
    for name, std in stds.items():
        assert params[name].std().item() == pytest.approx(std, rel=0.1), name


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_members_are_independent(name: str) -> None:
    """Member i's output and gradient depend on member i's parameters alone, and its
    initialisation on its seed alone."""
    cfg = CONFIGS[name]
    model = _random_model(cfg, ensemble=3)
    tokens = _tokens(cfg, 3)
    before = model(tokens).detach()
    with torch.no_grad():
        for param in model.parameters():
            param[1].add_(0.3)
    after = model(tokens)
    assert torch.equal(after[0], before[0]) and torch.equal(after[2], before[2])
    assert not torch.allclose(after[1], before[1])
    after[0].sum().backward()
    for n, param in model.named_parameters():
        assert param.grad is not None and not param.grad[1:].any(), n
    trio, single = EnsembleGPT(cfg, 3), EnsembleGPT(cfg, 1)
    trio.init_members([5, 6, 7])
    single.init_members([6])
    for (n, a), b in zip(trio.named_parameters(), single.parameters(), strict=True):
        assert torch.equal(a[1], b[0]), n


def test_decay_groups_for_new_parameter_kinds() -> None:
    """Decayed: Linear weight matrices (incl. sublayer fc) and an untied readout; not:
    biases, norms, embeddings and relative-position tables (the authors' code, papers A and D)."""
    model = EnsembleGPT(CONFIGS["paperD_arch"], 1)
    decay, _ = model.decay_parameters()
    decayed = {n for n, p in model.named_parameters() if any(p is d for d in decay)}
    assert decayed == {
        "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.attn.c_proj.weight",
        "transformer.h.0.mlp.layers.0.fc.weight",
        "transformer.h.0.mlp.layers.1.fc.weight",
        "transformer.h.0.mlp.layers.2.fc.weight",
        "transformer.h.1.attn.c_attn.weight",
        "transformer.h.1.attn.c_proj.weight",
        "lm_head.weight",
    }


def test_parameter_shapes_follow_the_documented_table() -> None:
    shapes = {
        n: tuple(p.shape[1:])
        for n, p in EnsembleGPT(CONFIGS["paperD_construction"], 1).named_parameters()
    }
    assert shapes == {
        "transformer.wte.weight": (3, 5),
        "transformer.h.0.attn.c_attn.weight": (2 * (5 + 5 + 5), 5),
        "transformer.h.0.attn.rel_pe.weight": (2, T, 5),
        "transformer.h.0.mlp.layers.0.fc.weight": (5, 5),
        "transformer.h.0.mlp.layers.0.fc.bias": (5,),
        "transformer.h.0.mlp.layers.0.norm.weight": (5,),
        "transformer.h.0.mlp.layers.0.norm.bias": (5,),
        "transformer.h.0.mlp.layers.1.fc.weight": (5, 5),
        "transformer.h.1.attn.c_attn.weight": (3 + 3 + 5, 5),
        "lm_head.weight": (3, 5),
    }


def test_config_round_trips_through_asdict() -> None:
    for cfg in CONFIGS.values():
        assert GPTConfig(**asdict(cfg)) == cfg
        assert GPTConfig(**cfg.as_dict()) == cfg
    default = GPTConfig(variant="gpt2", tied=False)
    assert default.as_dict() == asdict(orig_fields_only(default))


def orig_fields_only(cfg: GPTConfig) -> object:
    """The config as the paper A/B code knew it: its ten fields, nothing else."""

    @dataclass(frozen=True)
    class PaperAConfig:
        vocab_size: int
        n_embd: int
        block_size: int
        n_layer: int
        n_head: int
        mlp_ratio: int
        variant: str
        activation: str
        tied: bool
        init_std: float

    return PaperAConfig(**{f.name: getattr(cfg, f.name) for f in fields(PaperAConfig)})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"embedding": "onehot", "n_embd": 4, "tied": False}, "one-hot embeddings need"),
        ({"embedding": "onehot", "n_embd": 3 + T}, "must be untied"),
        ({"layers": (LayerConfig(), LayerConfig())}, "2 layer configs"),
        ({"layers": (LayerConfig(mlp="sublayers", sublayers=(Sub(width=3),)),)}, "skip"),
        (
            {"layers": (LayerConfig(mlp="sublayers", sublayers=(Sub(width=3, skip="none"),)),)},
            "last",
        ),
        ({"layers": (LayerConfig(n_head=3),)}, "not divisible"),
        ({"std_readout": 0.0}, "untied"),
    ],
)
def test_bad_configs_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GPTConfig(vocab_size=3, block_size=T, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mlp": "sublayers"}, "exactly when"),
        ({"sublayers": (Sub(),)}, "exactly when"),
        ({"mlp": "none", "mlp_input": "attention"}, "needs mlp 'gpt'"),
        ({"rel_pe": "key", "qk_norm": "l2"}, "not defined"),
        ({"head_merge": "concat"}, "head_merge"),
    ],
)
def test_bad_layer_configs_raise(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LayerConfig(**kwargs)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_relative_skewing_against_an_index_loop(n: int) -> None:
    """`by_position` and `by_distance` move entries exactly where the index arithmetic of
    relative positions (m = n - i) puts them, forward and backward: each gradient entry is
    the one upstream entry mapped onto it, or zero."""
    per_distance = torch.randn(3, 2, n, n, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 2, n, n, dtype=torch.float64).tril().requires_grad_()
    shifted, back = by_position(per_distance), by_distance(weights)
    for q in range(n):
        for j in range(n):
            if j <= q:
                assert torch.equal(shifted[..., q, j], per_distance[..., q, q - j])
            expected = weights[..., q, q - j] if j <= q else torch.zeros(3, 2).double()
            assert torch.equal(back[..., q, j], expected)
    upstream = torch.randn(3, 2, n, n, dtype=torch.float64)
    (shifted * upstream.tril()).sum().backward()
    (back * upstream).sum().backward()
    zero = torch.zeros(3, 2, dtype=torch.float64)
    for q in range(n):
        for k in range(n):  # a distance of per_distance, a key position of weights
            mapped = upstream[..., q, q - k] if k <= q else zero
            assert torch.equal(per_distance.grad[..., q, k], mapped)
            assert torch.equal(weights.grad[..., q, k], mapped)
