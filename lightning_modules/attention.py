"""Causal self-attention with a leading ensemble axis: `CausalSelfAttention` (papers A, C and
D's layer 2) and `RelativeSelfAttention` (relative positions, paper D, Sec. 2.2).

Head h of layer l uses rows [h dh, (h+1) dh) of the Q block (query q = W_Q x), the same
rows of the K block, and rows [h dv, (h+1) dv) of the V block; the heads are merged by
c_proj (concatenation then projection, GPT) or summed (paper C App. I.1, paper D with
W_O = I folded into W_V). Paper C's Q (d x dh), Kt (dh x d), V (d x d) are W_Q^T, W_K and
W_V^T.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.gpt_config import GPTConfig, LayerConfig
from lightning_modules.layers import EnsembleLinear, RelativePositions, make_norm
from lightning_modules.positions import by_distance, by_position, relative_projection

Trace = dict[str, torch.Tensor]


class CausalSelfAttention(nn.Module):
    """Causal multi-head attention, softmax(<q, k> / sqrt(head_dim)) (paper A, App. A, typo fixed).

    Options (see `LayerConfig`): other scale (paper C/D: none), summed heads without c_proj
    (paper C App. I.1), per-head norm after the q/k projections (paper D App. A.2.2/B.2).
    Fused (scaled_dot_product_attention) unless a trace asks for the attention map.
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__()
        assert layer.n_head is not None and layer.head_dim is not None
        self.n_head, self.head_dim = layer.n_head, layer.head_dim
        self.value_dim = layer.head_dim if layer.head_merge == "proj" else cfg.n_embd
        self.scale = layer.attn_scale
        h, dh, dv = self.n_head, self.head_dim, self.value_dim
        self.c_attn = EnsembleLinear(ensemble, cfg.n_embd, h * (2 * dh + dv), cfg.std("linear"))
        self.c_proj = (
            EnsembleLinear(ensemble, h * dv, cfg.n_embd, cfg.std("residual"))
            if layer.head_merge == "proj"
            else None
        )
        self.qk_norm = layer.qk_norm != "none"
        if self.qk_norm:  # registered only when used: A/B checkpoints keep their module list
            self.q_norm = make_norm(layer.qk_norm, ensemble, dh)
            self.k_norm = make_norm(layer.qk_norm, ensemble, dh)

    def forward(
        self, x: torch.Tensor, trace: Trace | None = None, last_only: bool = False
    ) -> torch.Tensor:
        """Attention output (E, B, N, d); with ``last_only`` that of the last query alone,
        (E, B, 1, d): keys and values at every position, the query at the last one, which
        attends to every key (no mask)."""
        e, b, n, _ = x.shape
        q, k, v = self._heads(x, last_only)
        if last_only:
            y = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        elif trace is None:
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
        trace: Trace | None,
    ) -> torch.Tensor:
        """Attention with its map materialised (traces, relative positions; paper D Sec. 2.2):
        the heads' outputs (E B, H, N, dv)."""
        e, b, n = ebn
        h = self.n_head
        scores = self._scores(q, k, ebn)
        scores = scores / math.sqrt(self.head_dim) if self.scale is None else scores * self.scale
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        att = scores.softmax(-1)
        y = self._values(att, v, ebn)
        if trace is not None:
            trace["scores"] = scores.view(e, b, h, n, n)
            trace["attention"] = att.view(e, b, h, n, n)
            trace["heads"] = y.view(e, b, h, n, -1)
        return y

    def _scores(self, q: torch.Tensor, k: torch.Tensor, ebn: tuple[int, int, int]) -> torch.Tensor:
        """Unscaled, unmasked logits <q_n, k_i> (E B, H, N, N)."""
        return q @ k.transpose(-1, -2)

    def _values(
        self, att: torch.Tensor, v: torch.Tensor, ebn: tuple[int, int, int]
    ) -> torch.Tensor:
        """Heads' outputs sum_i att[n, i] v_i (E B, H, N, dv)."""
        return att @ v


class RelativeSelfAttention(CausalSelfAttention):
    """`CausalSelfAttention` with relative positions on keys (and values) (paper D Sec. 2.2):
    the score q_n . (k_i + W_K R_{n-i}) and, with "key_value", the head output's extra
    sum_i att W_V R_{n-i} (`lightning_modules.positions`). Always explicit: the map is
    materialised, and ``last_only`` is not supported (no model that reads only its last
    position uses relative positions).
    """

    def __init__(self, cfg: GPTConfig, layer: LayerConfig, ensemble: int) -> None:
        super().__init__(cfg, layer, ensemble)
        self.rel_values = layer.rel_pe == "key_value"
        tables = self.n_head if layer.rel_pe_per_head else 1
        # registered after c_attn and c_proj (no q/k norms: LayerConfig excludes them with
        # rel_pe), the order in which `EnsembleGPT.init_members` draws
        self.rel_pe = RelativePositions(
            ensemble, tables, cfg.block_size, cfg.n_embd, cfg.std("embedding")
        )

    def forward(
        self, x: torch.Tensor, trace: Trace | None = None, last_only: bool = False
    ) -> torch.Tensor:
        """Attention output (E, B, N, d)."""
        if last_only:
            raise ValueError("last_only attention does not support relative positions")
        e, b, n, _ = x.shape
        q, k, v = self._heads(x, last_only)
        return self._merge(self._explicit(q, k, v, (e, b, n), trace), e, b)

    def _relative(self, rows: slice, width: int, n: int) -> torch.Tensor:
        """W R_m per head for m < n, (E, H, n, width), W the c_attn block of ``rows``."""
        weight = self.c_attn.weight
        w = weight[:, rows].reshape(weight.shape[0], self.n_head, width, -1)
        return relative_projection(self.rel_pe.weight, w, n)

    def _scores(self, q: torch.Tensor, k: torch.Tensor, ebn: tuple[int, int, int]) -> torch.Tensor:
        """<q_n, k_i> + <q_n, W_K R_{n-i}> (E B, H, N, N), unscaled and unmasked."""
        e, b, n = ebn
        h, dh = self.n_head, self.head_dim
        scores = q @ k.transpose(-1, -2)
        rel_k = self._relative(slice(h * dh, 2 * h * dh), dh, n)
        per_distance = torch.einsum("ebhnk,ehmk->ebhnm", q.reshape(e, b, h, n, -1), rel_k)
        return scores + by_position(per_distance.reshape(e * b, h, n, n))

    def _values(
        self, att: torch.Tensor, v: torch.Tensor, ebn: tuple[int, int, int]
    ) -> torch.Tensor:
        """sum_i att[n, i] (v_i + W_V R_{n-i}) (E B, H, N, dv), the second term with "key_value"."""
        y = att @ v
        if not self.rel_values:
            return y
        e, b, n = ebn
        h, dh = self.n_head, self.head_dim
        rel_v = self._relative(slice(2 * h * dh, None), self.value_dim, n)
        att_by_distance = by_distance(att).reshape(e, b, h, n, n)
        y_rel = torch.einsum("ebhnm,ehmk->ebhnk", att_by_distance, rel_v)
        return y + y_rel.reshape(e * b, h, n, -1)
