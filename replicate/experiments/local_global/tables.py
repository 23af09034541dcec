"""Paper B, Tables 1 and 2 (App. O): the instantiated model and the resolved settings.

Table 1 lists the GPT-2 parameters with their shapes, LayerNorms included; paper B's own
model (§2) and the authors' `Markov-Simple2` code have no LayerNorm (docs/choices.md).
`table1` instantiates both the harness's paper-B model (the `theory` variant with the
uni-embedding pinned, `transformer.pin_uni_embedding`) and the `gpt2` variant (the
LayerNorm ablation) and matches each parameter against Table 1. `table2` reads the
settings Fig. 4 was trained with (the upstream's provenance.json; Table 2 is the setting
of Fig. 4, while Figs. 3 and 6 override N, the init and the iterations in the text) and
compares each with the published value or grid.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from lightning_modules import EnsembleGPT, GPTConfig
from replicate.experiments import hyperparameter_tables as hp
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.hyperparameter_tables import Table2Row, frame_to_markdown
from replicate.experiments.local_global.fig4 import Fig4Settings
from replicate.experiments.local_global.transformer import pin_uni_embedding
from replicate.settings import PositiveInt, Strict

# ============================================================================= Table 1
TABLE1: dict[str, tuple[str, Callable[[int, int], tuple[int, ...]]]] = {
    "transformer.wte": ("2 × d", lambda d, n: (2, d)),
    "transformer.wpe": ("N × d", lambda d, n: (n, d)),
    "transformer.h.ln_1": ("d × 1", lambda d, n: (d,)),
    "transformer.h.attn.c_attn": ("3d × d", lambda d, n: (3 * d, d)),
    "transformer.h.attn.c_proj": ("d × d", lambda d, n: (d, d)),
    "transformer.h.ln_2": ("d × 1", lambda d, n: (d,)),
    "transformer.h.mlp.c_fc": ("4d × d", lambda d, n: (4 * d, d)),
    "transformer.h.mlp.c_proj": ("d × 4d", lambda d, n: (d, 4 * d)),
    "transformer.ln_f": ("d × 1", lambda d, n: (d,)),
}
"""Paper B, App. O, Table 1: parameter -> (shape as printed, shape at (d, N)); d x 1 is a vector."""

EXTRAS = {"lm_head.bias": "not in Table 1: the output bias (b = b_1, with b_0 pinned at 0)"}
PINNED = {
    "transformer.wte.weight": "row 0 pinned at 0: e = wte[1] (paper B §2's x_n e)",
    "lm_head.bias": "entry 0 pinned at 0",
}


class Table1Settings(Strict):
    n_embd: PositiveInt
    seq_len: PositiveInt


def table1_name(parameter: str) -> str:
    """``transformer.h.0.attn.c_attn.weight`` -> ``transformer.h.attn.c_attn`` (Table 1 form)."""
    parts = parameter.split(".")[:-1]
    return ".".join(p for p in parts if not p.isdigit())


def instantiate(s: Table1Settings, variant: str) -> EnsembleGPT:
    """One tied, single-layer model of ``variant`` at (d, N), pinned to the uni-embedding."""
    cfg = GPTConfig(vocab_size=2, n_embd=s.n_embd, block_size=s.seq_len, tied=True, variant=variant)  # type: ignore[arg-type]
    model = EnsembleGPT(cfg, 1)
    pin_uni_embedding(model)
    return model


def parameter_rows(s: Table1Settings, variant: str) -> pd.DataFrame:
    """Every parameter of the instantiated model against its Table 1 line."""
    rows = []
    for name, param in instantiate(s, variant).named_parameters():
        shape = tuple(param.shape[1:])
        line = TABLE1.get(table1_name(name))
        expected = line[1](s.n_embd, s.seq_len) if line else None
        status = (
            ("matches" if expected == shape else "wrong shape")
            if line
            else ("extra (explained)" if name in EXTRAS else "unexplained")
        )
        rows.append(
            {
                "variant": variant,
                "parameter": name,
                "table1": f"{table1_name(name)}: {line[0]}" if line else "—",
                "shape": " × ".join(map(str, shape)),
                "status": status,
                "note": PINNED.get(name, "") or EXTRAS.get(name, ""),
                "count": param[0].numel(),
            }
        )
    return pd.DataFrame(rows)


def table1(s: Table1Settings, ctx: RunContext) -> Metrics:
    """Table 1 against the paper-B model (theory, no LayerNorm) and the gpt2 ablation."""
    frames = {variant: parameter_rows(s, variant) for variant in ("theory", "gpt2")}
    metrics: Metrics = {}
    for variant, frame in frames.items():
        matched = frame.loc[frame.status == "matches", "table1"].str.split(":").str[0]
        missing = sorted(set(TABLE1) - set(matched))
        metrics |= {
            f"{variant}/lines_matched": float(len(set(matched))),
            f"{variant}/shape_mismatches": float((frame.status == "wrong shape").sum()),
            f"{variant}/unexplained": float((frame.status == "unexplained").sum()),
            f"{variant}/layer_norms_missing": float(sum(".ln_" in m for m in missing)),
            f"{variant}/other_lines_missing": float(sum(".ln_" not in m for m in missing)),
            f"{variant}/parameters": float(frame["count"].sum()),
        }
    metrics["theory/trained_parameters"] = metrics["theory/parameters"] - s.n_embd - 1
    every = pd.concat(frames.values(), ignore_index=True)
    ctx.save_csv(every, "table1.csv")
    title = (
        f"# Paper B, Table 1 vs the instantiated models (d = {s.n_embd}, N = {s.seq_len})\n\n"
        "`theory` is the model of paper B §2 trained by this harness (no LayerNorm, as the "
        "authors' Markov-Simple2 code); `gpt2` is the LayerNorm ablation.\n\n"
    )
    ctx.save_text(title + frame_to_markdown(every, digits=None), "table1.md")
    return metrics


# ============================================================================= Table 2
class Table2Settings(Strict):
    """Nothing to set: Table 2 is compared with the settings Fig. 4 was trained with."""


TABLE2: tuple[Table2Row[Fig4Settings], ...] = (
    Table2Row(
        "Dataset",
        "k-th order binary Markov source",
        "grid",
        lambda s: (
            f"first order, P({s.chain.p:g}, {s.chain.q:g}), x_1 ~ π "
            "(the settings express no other)",
            None,
        ),
    ),
    Table2Row(
        "Architecture",
        "GPT-2 as in llm-baselines (Pagliardini, 2023)",
        "architecture",
        lambda s: (
            f"`{s.model.variant}` (paper B §2: no LayerNorm), {s.model.activation}",
            s.model.variant == "gpt2",
        ),
    ),
    *hp.common_rows(
        accumulation="1: one batch per optimizer step (the harness has no accumulation setting)",
        warmup_start=False,
    ),
    Table2Row(
        "Transformer layers", "1", "grid", lambda s: (str(s.model.n_layer), s.model.n_layer == 1)
    ),
    Table2Row("Attention heads", "1", "grid", lambda s: (str(s.model.n_head), s.model.n_head == 1)),
    hp.REPETITIONS,
)
"""Paper B, App. O, Table 2 in printed order; the shared lines are `hyperparameter_tables`'."""


def table2(_: Table2Settings, ctx: RunContext) -> Metrics:
    """Table 2: the published hyper-parameters against those Fig. 4 was trained with."""
    s = hp.upstream_settings(ctx, Fig4Settings)
    return hp.table2(TABLE2, s, ctx, paper="B", figure="Fig. 4")
