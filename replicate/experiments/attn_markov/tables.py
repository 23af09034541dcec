"""Paper A, Tables 1 and 2 (App. C.1): the instantiated model and the resolved settings.

Table 1 lists the parameters of the GPT-2 model with their shapes; `table1` instantiates the
`gpt2` variant of `EnsembleGPT` and matches every parameter against it. The lm_head bias
(and, untied, the lm_head weight) are not in Table 1 but are in the authors' code (its
`lm_head` has a bias); they are listed as explained extras. Table 2 lists the hyper-parameters;
`table2` reads the settings that Fig. 3's models were actually trained with (the upstream
experiment's provenance.json) and compares each with the published value or grid.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from pydantic import Field

from lightning_modules import EnsembleGPT, GPTConfig
from replicate.experiments import hyperparameter_tables as hp
from replicate.experiments.attn_markov.fig3 import Fig3Settings
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.hyperparameter_tables import Table2Row, frame_to_markdown
from replicate.settings import PositiveInt, Strict


# ============================================================================= Table 1
@dataclass(frozen=True)
class Table1Row:
    """One line of paper A's Table 1: name, shape as printed, and that shape at (d, N)."""

    name: str
    printed: str
    shape: Callable[[int, int], tuple[int, ...]]
    per_layer: bool

    def numel(self, d: int, n: int) -> int:
        return math.prod(self.shape(d, n))


TABLE1: tuple[Table1Row, ...] = (
    Table1Row("transformer.wte", "2 × d", lambda d, n: (2, d), False),
    Table1Row("transformer.wpe", "N × d", lambda d, n: (n, d), False),
    Table1Row("transformer.h.ln_1", "d × 1", lambda d, n: (d, 1), True),
    Table1Row("transformer.h.attn.c_attn", "3d × d", lambda d, n: (3 * d, d), True),
    Table1Row("transformer.h.attn.c_proj", "d × d", lambda d, n: (d, d), True),
    Table1Row("transformer.h.ln_2", "d × 1", lambda d, n: (d, 1), True),
    Table1Row("transformer.h.mlp.c_fc", "4d × d", lambda d, n: (4 * d, d), True),
    Table1Row("transformer.h.mlp.c_proj", "d × 4d", lambda d, n: (d, 4 * d), True),
    Table1Row("transformer.ln_f", "d × 1", lambda d, n: (d, 1), False),
)

EXPLAINED_EXTRAS = {
    "lm_head.bias": "not in Table 1: the authors' lm_head is Linear(d, 2, bias=True)",
    "lm_head.weight": "not in Table 1: the untied readout (2 × d); tied, it is wte itself",
}


class Table1Settings(Strict):
    n_embd: PositiveInt  # d
    seq_len: PositiveInt  # N (the wpe rows)
    n_layers: list[PositiveInt] = Field(min_length=1)  # the "(× ℓ)" rows at each depth


def table1_name(parameter: str) -> str:
    """``transformer.h.0.attn.c_attn.weight`` -> ``transformer.h.attn.c_attn`` (Table 1 form)."""
    parts = parameter.split(".")[:-1]
    return ".".join(p for i, p in enumerate(parts) if not (i > 0 and parts[i - 1] == "h"))


def _squeeze(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Table 1 writes vectors as d × 1: drop trailing unit axes before comparing."""
    while len(shape) > 1 and shape[-1] == 1:
        shape = shape[:-1]
    return shape


def gpt2_model(s: Table1Settings, n_layer: int, tied: bool, variant: str = "gpt2") -> EnsembleGPT:
    """One model (ensemble of 1) with Table 1's architecture at (d, N, ℓ)."""
    cfg = GPTConfig(
        vocab_size=2,
        n_embd=s.n_embd,
        block_size=s.seq_len,
        n_layer=n_layer,
        variant=variant,  # type: ignore[arg-type]
        tied=tied,
    )
    return EnsembleGPT(cfg, 1)


def parameter_rows(s: Table1Settings, n_layer: int, tied: bool) -> pd.DataFrame:
    """Every parameter of the instantiated model with its Table 1 line and verdict."""
    lines = {row.name: row for row in TABLE1}
    d, n = s.n_embd, s.seq_len
    rows = []
    for name, param in gpt2_model(s, n_layer, tied).named_parameters():
        shape = tuple(param.shape[1:])  # drop the ensemble axis
        line = lines.get(table1_name(name))
        if line is not None:
            status = "matches" if _squeeze(line.shape(d, n)) == _squeeze(shape) else "wrong shape"
        else:
            status = "extra (explained)" if name in EXPLAINED_EXTRAS else "unexplained"
        rows.append(
            {
                "layers": n_layer,
                "tying": "tied" if tied else "untied",
                "parameter": name,
                "table1": line.name if line else "—",
                "table1_shape": f"{line.printed} = {' × '.join(map(str, line.shape(d, n)))}"
                if line
                else "—",
                "shape": " × ".join(map(str, shape)),
                "count": param[0].numel(),
                "status": status,
                "note": EXPLAINED_EXTRAS.get(name, ""),
            }
        )
    return pd.DataFrame(rows)


def listed_total(s: Table1Settings, n_layer: int) -> int:
    """Parameters of Table 1 as listed (without lm_head) at (d, N, ℓ)."""
    return sum(r.numel(s.n_embd, s.seq_len) * (n_layer if r.per_layer else 1) for r in TABLE1)


def missing_lines(frame: pd.DataFrame, n_layer: int) -> int:
    """Table 1 lines (counting each "× ℓ" line ℓ times) with no instantiated parameter."""
    found = frame.loc[frame.status != "unexplained", "table1"].value_counts()
    return sum(max(0, (n_layer if r.per_layer else 1) - int(found.get(r.name, 0))) for r in TABLE1)


def tying_metrics(s: Table1Settings) -> Metrics:
    """Tied: lm_head.weight is the wte tensor and the optimizer sees it once (Table 1; ours)."""
    model = gpt2_model(s, 1, tied=True)
    wte = model.transformer["wte"].weight
    decay, no_decay = model.decay_parameters()
    return {
        "tied/shares_storage": float(model.lm_head.weight is wte),
        "tied/optimizer_wte_entries": float(sum(p is wte for p in decay + no_decay)),
        "tied/wte_decayed": float(any(p is wte for p in decay)),
        "tied/optimizer_numel": float(sum(p[0].numel() for p in decay + no_decay)),
    }


def depth_summary(s: Table1Settings, n_layer: int) -> tuple[list[pd.DataFrame], dict, Metrics]:
    """Parameter rows (tied, untied), the counts line and the metrics at depth ``n_layer``."""
    listed = listed_total(s, n_layer)
    theory = sum(p[0].numel() for p in gpt2_model(s, n_layer, True, "theory").parameters())
    counts: dict = {"layers ℓ": n_layer, "Table 1 as listed": listed}
    metrics: Metrics = {
        f"l{n_layer}/listed_total": float(listed),
        f"l{n_layer}/theory_tied_total": float(theory),
    }
    frames = []
    for tied in (True, False):
        frame = parameter_rows(s, n_layer, tied)
        frames.append(frame)
        tying = "tied" if tied else "untied"
        counts[f"gpt2 {tying}"] = int(frame["count"].sum())
        metrics[f"l{n_layer}/{tying}/total"] = float(frame["count"].sum())
        metrics[f"l{n_layer}/{tying}/missing_lines"] = float(missing_lines(frame, n_layer))
    counts["theory tied (no LN)"] = theory
    return frames, counts, metrics


def table1(s: Table1Settings, ctx: RunContext) -> Metrics:
    """Table 1: names, shapes and counts of the instantiated gpt2 model, tied and untied."""
    frames, totals = [], []
    metrics: Metrics = {}
    for n_layer in s.n_layers:
        depth_frames, counts, depth_metrics = depth_summary(s, n_layer)
        frames += depth_frames
        totals.append(counts)
        metrics.update(depth_metrics)
    every = pd.concat(frames, ignore_index=True)
    first_layer = every.parameter.str.startswith("transformer.h.0.")
    metrics.update(
        {
            "shape_mismatches": float((every.status == "wrong shape").sum()),
            "unexplained_parameters": float((every.status == "unexplained").sum()),
            "missing_lines": float(
                sum(v for k, v in metrics.items() if k.endswith("/missing_lines"))
            ),
            "per_layer_count": float(
                every.loc[
                    first_layer & (every.layers == s.n_layers[0]) & (every.tying == "tied"),
                    "count",
                ].sum()
            ),
            **tying_metrics(s),
        }
    )
    ctx.save_csv(every, "table1.csv")
    ctx.save_text(_table1_markdown(s, every, pd.DataFrame(totals)), "table1.md")
    return metrics


def _table1_markdown(s: Table1Settings, every: pd.DataFrame, totals: pd.DataFrame) -> str:
    ell = s.n_layers[0]
    shown = every[
        (every.layers == ell) & ((every.tying == "tied") | (every.parameter == "lm_head.weight"))
    ]
    shown = shown.assign(
        tying=shown.tying.where(shown.parameter != "lm_head.weight", "untied only")
    )
    columns = ["table1", "table1_shape", "parameter", "shape", "count", "status", "note"]
    return (
        f"# Paper A, Table 1 vs the instantiated `gpt2` EnsembleGPT (d = {s.n_embd}, "
        f"N = {s.seq_len}, ℓ = {ell})\n\n"
        + frame_to_markdown(shown[["tying", *columns]])
        + "\n## Parameter counts (lm_head bias: +2; untied lm_head weight: +2d)\n\n"
        + frame_to_markdown(totals)
    )


# ============================================================================= Table 2
class Table2Settings(Strict):
    """Nothing to set: Table 2 is compared with the settings Fig. 3 was trained with."""


TABLE2: tuple[Table2Row[Fig3Settings], ...] = (
    Table2Row(
        "Dataset",
        "k-th order binary Markov source",
        "grid",
        lambda s: (
            f"first-order binary P(p, q), x_1 ~ {s.initial_law} (the settings express no other)",
            None,
        ),
    ),
    Table2Row(
        "Architecture",
        "GPT-2 as in llm-baselines (Pagliardini, 2023)",
        "architecture",
        lambda s: (f"`{s.model.variant}` variant, {s.model.activation}", s.model.variant == "gpt2"),
    ),
    *hp.common_rows(
        accumulation="1: one batch per optimizer step (the harness has no accumulation setting)",
        warmup_start=True,
    ),
    Table2Row(
        "Transformer layers",
        "between 1 and 6",
        "grid",
        lambda s: (str(s.model.n_layer), 1 <= s.model.n_layer <= 6),
    ),
    Table2Row(
        "Attention heads",
        "grid {1, 2, 4, 8}",
        "grid",
        lambda s: (str(s.model.n_head), s.model.n_head in (1, 2, 4, 8)),
    ),
    Table2Row("Mask window", "between 2 and full causal", "grid", hp.mask_window),
    hp.REPETITIONS,
)
"""Paper A, App. C.1, Table 2 in printed order; the shared lines are `hyperparameter_tables`'."""


def table2_frame(s: Fig3Settings, scale: str) -> pd.DataFrame:
    """Table 2 against the settings ``s`` of the Fig. 3 runs at ``scale``."""
    return hp.table2_frame(TABLE2, s, f"Fig. 3 runs ({scale} scale)")


def table2(_: Table2Settings, ctx: RunContext) -> Metrics:
    """Table 2: the published hyper-parameters against those Fig. 3 was trained with."""
    s = hp.upstream_settings(ctx, Fig3Settings)
    return hp.table2(TABLE2, s, ctx, paper="A", figure="Fig. 3")
