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

Attention heads: `lightning_modules.attention`; positional schemes (absolute, and paper
D's relative positions): `lightning_modules.positions`; options: `lightning_modules.gpt_config`.

Forward traces (``forward(idx, traces)``, one dict per layer): ``input`` (E, B, N, d),
``scores`` (E, B, H, N, N; scaled logits, -inf above the diagonal), ``attention``
(E, B, H, N, N), ``heads`` (E, B, H, N, dv; per-head outputs before the merge),
``attn_out`` (the merged attention output added to the stream, or fed to the MLP),
``y`` (x + attn_out, absent with mlp_input "attention"), ``mlp_out`` (the "gpt" MLP's
output), ``mlp.j`` (h_j of sublayer j = 1..J) and ``z`` (the layer's output).
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.attention import CausalSelfAttention, RelativeSelfAttention, Trace
from lightning_modules.gpt_config import GPTConfig, LayerConfig
from lightning_modules.layers import EnsembleLinear, Readout, make_norm
from lightning_modules.mlp import MLP, SublayerMLP
from lightning_modules.positions import embed, embeddings
from lightning_modules.seeding import member_generator


class Block(nn.Module):
    """One (Attention, FF) layer with residuals; pre-LN in the gpt2 variant."""

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        assert layer.norm is not None
        self.ln_1 = make_norm(layer.norm, ensemble, cfg.n_embd)
        attention = CausalSelfAttention if layer.rel_pe == "none" else RelativeSelfAttention
        self.attn = attention(cfg, layer, ensemble)
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
        trace: Trace | None = None,
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
        modules = embeddings(cfg, ensemble)
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
        traces: list[Trace] | None = None,
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
        x = embed(self.transformer, idx)
        blocks = self.transformer["h"]
        for i, block in enumerate(blocks):
            trace: Trace | None = None
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
