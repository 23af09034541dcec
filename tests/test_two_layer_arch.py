"""Paper D's trained model: the authors' code as a setting of D-arch.

The authors' model (their released code, `src/models/base.py`) is
written out here from that file and compared with what `darch_config` builds when
``value_rpe=False, mlp="code", tied=True``: its trained parameters, one by one, and its MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lightning_modules.ensemble_gpt import EnsembleGPT
from replicate.experiments.two_layer.darch import ArchSettings, darch_config
from replicate.training import gpt_ensemble

S, T, D = 2, 16, 8
CODE = ArchSettings(n_embd=D, value_rpe=False, mlp="code", tied=True, init_std=0.02)
SPEC = ArchSettings(n_embd=D, value_rpe=True, mlp="app_b1", tied=False, init_std=0.02)


def _authors_parameter_count() -> int:
    """Trained parameters of the authors' two-layer model with one head per layer: tied
    wte = lm_head (S x d) and the lm_head bias; per layer c_attn (d x 3d) and c_proj (d x d),
    no biases; layer 1's relative-position table (T x d) and `MLP_new_construct`: W1 with
    b1, W2, W3, W4 (d x d), LN1 with a bias, LN3 and LN4 without. The modules they construct
    and never call (ln_1, ln_2, ln_f, the MLP's LN2, layer 2's table, wpe) do not train."""
    embedding = S * D + S
    attention = 2 * (3 * D * D + D * D)
    mlp = 4 * D * D + D + 2 * D + D + D
    return embedding + attention + T * D + mlp


def _fc(p: dict[str, torch.Tensor], j: int, x: torch.Tensor) -> torch.Tensor:
    """Layer 1's MLP linear j (bias where it has one)."""
    out = x @ p[f"transformer.h.0.mlp.layers.{j}.fc.weight"].T
    bias = p.get(f"transformer.h.0.mlp.layers.{j}.fc.bias")
    return out if bias is None else out + bias


def _ln(p: dict[str, torch.Tensor], j: int, x: torch.Tensor) -> torch.Tensor:
    """Layer 1's MLP LayerNorm j, eps 1e-5 (the authors' `LayerNorm`, bias optional)."""
    weight = p[f"transformer.h.0.mlp.layers.{j}.norm.weight"]
    return F.layer_norm(x, (D,), weight, p.get(f"transformer.h.0.mlp.layers.{j}.norm.bias"), 1e-5)


def test_code_setting_has_the_authors_parameters() -> None:
    model = EnsembleGPT(darch_config(CODE, S, T, layers=2), 1)
    names = dict(model.named_parameters())
    assert "lm_head.weight" not in names  # tied to wte
    assert sum(p.numel() for p in names.values()) == _authors_parameter_count()
    spec = EnsembleGPT(darch_config(SPEC, S, T, layers=2), 1)
    assert "lm_head.weight" in dict(spec.named_parameters())


def test_code_setting_runs_the_authors_mlp() -> None:
    """Layer 1's MLP output is `MLP_new_construct` of its input, written out."""
    torch.manual_seed(0)
    model = gpt_ensemble(darch_config(CODE, S, T, layers=2), [0, 1]).double()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn_like(param))  # norm weights and biases off 1 and 0
    traces: list[dict[str, torch.Tensor]] = []
    model(torch.randint(0, S, (2, 3, T)), traces)
    for e in range(2):
        p = {n: t[e].detach() for n, t in model.named_parameters()}
        x = traces[0]["y"][e]
        x = x + _ln(p, 0, torch.relu(_fc(p, 0, x)))
        x = torch.relu(_fc(p, 1, x))
        x = x + _ln(p, 2, torch.relu(_fc(p, 2, x)))
        x = x + _ln(p, 3, torch.relu(_fc(p, 3, x)))
        torch.testing.assert_close(traces[0]["z"][e], x)
        assert "transformer.h.0.mlp.layers.2.norm.bias" not in p
