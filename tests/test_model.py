"""EnsembleGPT: Table 1 names/shapes/counts, tying, variants, init, decay groups."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_modules import EnsembleGPT, GPTConfig, per_member_cross_entropy

TABLE1 = {  # paper A, Table 1, at d = 4, N = 1024, one layer (shape without the ensemble axis)
    "transformer.wte.weight": (2, 4),
    "transformer.wpe.weight": (1024, 4),
    "transformer.h.0.ln_1.weight": (4,),
    "transformer.h.0.attn.c_attn.weight": (12, 4),
    "transformer.h.0.attn.c_proj.weight": (4, 4),
    "transformer.h.0.ln_2.weight": (4,),
    "transformer.h.0.mlp.c_fc.weight": (16, 4),
    "transformer.h.0.mlp.c_proj.weight": (4, 16),
    "transformer.ln_f.weight": (4,),
}


def _counts(model: EnsembleGPT) -> int:
    return sum(p[0].numel() for p in model.parameters())


def test_gpt2_variant_matches_table1() -> None:
    tied = EnsembleGPT(GPTConfig(variant="gpt2", block_size=1024, tied=True), ensemble=2)
    shapes = {n: tuple(p.shape[1:]) for n, p in tied.named_parameters()}
    assert {n: s for n, s in shapes.items() if n != "lm_head.bias"} == TABLE1
    # the only parameter outside Table 1 is the lm_head bias (the authors' code), with 2 entries
    assert tuple(tied.lm_head.bias.shape[1:]) == (2,)
    untied = EnsembleGPT(GPTConfig(variant="gpt2", block_size=1024, tied=False), ensemble=2)
    extra = {n: tuple(p.shape[1:]) for n, p in untied.named_parameters() if n not in TABLE1}
    assert extra == {"lm_head.weight": (2, 4), "lm_head.bias": (2,)}
    assert _counts(untied) - _counts(tied) == 2 * 4  # untying adds exactly the readout


def test_theory_variant_has_no_layer_norm_and_12d2_per_layer() -> None:
    model = EnsembleGPT(GPTConfig(variant="theory", block_size=16, n_layer=2), ensemble=1)
    names = [n for n, _ in model.named_parameters()]
    assert not any("ln_" in n for n in names)
    per_layer = sum(p[0].numel() for n, p in model.named_parameters() if ".h.0." in n)
    assert per_layer == 12 * 4 * 4


def test_tying_shares_one_tensor() -> None:
    model = EnsembleGPT(GPTConfig(tied=True, block_size=8), ensemble=3)
    assert model.lm_head.weight is model.transformer["wte"].weight
    decay, no_decay = model.decay_parameters()
    assert len({id(p) for p in decay + no_decay}) == len(decay) + len(no_decay)
    assert any(p is model.transformer["wte"].weight for p in no_decay)
    untied = EnsembleGPT(GPTConfig(tied=False, block_size=8), ensemble=3)
    assert untied.lm_head.weight is not untied.transformer["wte"].weight
    assert any(p is untied.lm_head.weight for p in untied.decay_parameters()[0])


def test_decay_only_on_linear_weights() -> None:
    model = EnsembleGPT(GPTConfig(variant="gpt2", tied=True, block_size=8), ensemble=1)
    decay, _ = model.decay_parameters()
    decayed = {n for n, p in model.named_parameters() if any(p is d for d in decay)}
    assert decayed == {
        "transformer.h.0.attn.c_attn.weight",
        "transformer.h.0.attn.c_proj.weight",
        "transformer.h.0.mlp.c_fc.weight",
        "transformer.h.0.mlp.c_proj.weight",
    }


def test_init_is_per_member_and_follows_the_scheme() -> None:
    cfg = GPTConfig(variant="gpt2", block_size=1024, n_layer=2, tied=False)
    a = EnsembleGPT(cfg, ensemble=2)
    a.init_members([0, 1])
    b = EnsembleGPT(cfg, ensemble=1)
    b.init_members([1])
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa[1], pb[0]), name
    assert not torch.equal(a.transformer["wpe"].weight[0], a.transformer["wpe"].weight[1])
    assert a.transformer["wpe"].weight.std().item() == pytest.approx(0.02, rel=0.05)
    proj = a.transformer["h"][0].mlp.c_proj.weight
    assert proj.std().item() == pytest.approx(0.02 / math.sqrt(4), rel=0.1)
    assert torch.all(a.lm_head.bias == 0)
    assert torch.all(a.transformer["h"][0].ln_1.weight == 1)


@pytest.mark.parametrize("variant", ["theory", "gpt2"])
def test_forward_shapes_causality_and_trace(variant: str) -> None:
    cfg = GPTConfig(variant=variant, vocab_size=3, n_embd=8, n_head=2, block_size=16)
    model = EnsembleGPT(cfg, ensemble=2)
    model.init_members([0, 1])
    x = torch.randint(0, 3, (2, 5, 16))
    logits = model(x)
    assert logits.shape == (2, 5, 16, 3)
    x2 = x.clone()
    x2[..., 10:] = (x2[..., 10:] + 1) % 3  # changing the future must not change the past
    assert torch.allclose(model(x2)[..., :10, :], logits[..., :10, :], atol=1e-6)
    traces: list[dict] = []
    assert torch.allclose(model(x, traces), logits, atol=1e-5)  # explicit == fused attention
    att = traces[0]["attention"]
    assert att.shape == (2, 5, 2, 16, 16)
    assert torch.allclose(att.sum(-1), torch.ones(()), atol=1e-6)
    assert torch.all(att.triu(1) == 0)


def test_per_member_loss_is_uniform_cross_entropy_at_init() -> None:
    model = EnsembleGPT(GPTConfig(block_size=32), ensemble=4)
    model.init_members(list(range(4)))
    x = torch.randint(0, 2, (4, 8, 33))
    loss = per_member_cross_entropy(model(x[..., :-1]), x[..., 1:])
    assert loss.shape == (4,)
    assert torch.allclose(loss, torch.full((4,), math.log(2)), atol=0.01)


PINNED = [  # logits of member 1 (seed 1), sequence 2, last position, and c_attn[1, 0, :3],
    # computed with the implementation that produced papers A and B's results (f5eeaaa)
    (
        GPTConfig(vocab_size=2, n_embd=4, block_size=8),
        [0.00025361625012010336, 0.004042494110763073],
        [0.001295999507419765, 0.029021035879850388, 0.0077520799823105335],
    ),
    (
        GPTConfig(
            vocab_size=5,
            n_embd=8,
            block_size=8,
            n_layer=2,
            n_head=2,
            variant="gpt2",
            activation="gelu",
            tied=False,
        ),
        [
            -0.021710459142923355,
            0.003609154373407364,
            0.0064771585166454315,
            0.03164079040288925,
            0.03176200017333031,
        ],
        [0.025894388556480408, 0.012299672700464725, -0.013756409287452698],
    ),
]


@pytest.mark.parametrize(("cfg", "logits", "c_attn"), PINNED)
def test_default_configs_reproduce_papers_a_b_implementation(
    cfg: GPTConfig, logits: list[float], c_attn: list[float]
) -> None:
    """Default configurations keep the original init draws and forward (papers A/B outputs)."""
    model = EnsembleGPT(cfg, ensemble=2)
    model.init_members([0, 1])
    tokens = torch.arange(2 * 3 * 8).reshape(2, 3, 8) * 7 % cfg.vocab_size
    out = model(tokens)[1, 2, -1]
    assert out.tolist() == pytest.approx(logits, rel=1e-5, abs=1e-9)
    weight = model.transformer["h"][0].attn.c_attn.weight[1, 0, :3]
    assert weight.tolist() == pytest.approx(c_attn, rel=1e-6)


def test_bad_shapes_raise() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        GPTConfig(n_embd=6, n_head=4)
    model = EnsembleGPT(GPTConfig(block_size=8), ensemble=1)
    with pytest.raises(ValueError, match="exceeds block_size"):
        model(torch.zeros(1, 1, 9, dtype=torch.long))
