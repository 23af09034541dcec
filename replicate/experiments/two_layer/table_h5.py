"""Paper D, App. H.5: the hyper-parameter table against the settings the models trained with.

Reads the resolved settings of `two_layer_maps` (its provenance.json) and instantiates its
model configuration; every line of H.5 is compared with them (D-H5-1: a
"no silent drift" consistency check of our settings, not a result of the paper). Values
stripped from the paper come from the authors' sweep files (`sweeps/llm_depth_*.yaml`).
"""

from __future__ import annotations

from replicate.experiments import hyperparameter_tables as hp
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.hyperparameter_tables import Table2Row, frame_to_markdown, table2_frame
from replicate.experiments.two_layer.darch import darch_config
from replicate.experiments.two_layer.maps import MapsSettings
from replicate.settings import Strict

GROUPS = ("data", "architecture", "optimization", "grid", "iterations", "seq_len")


class TableH5Settings(Strict):
    """Nothing to set: the table compares the upstream's resolved settings."""


def _architecture(s: MapsSettings) -> tuple[str, bool]:
    cfg = darch_config(s.arch, s.states, s.training.seq_len, layers=2)
    first = cfg.layer(0)
    text = (
        f"GPT-2 style, no absolute PE, layer-1 relative PE ({first.rel_pe}), "
        f"{len(first.sublayers)}-sublayer MLP after layer 1, attention-only layer 2"
    )
    return text, (not cfg.position) and first.rel_pe != "none" and cfg.layer(1).mlp == "none"


def _batch(s: MapsSettings) -> tuple[str, bool]:
    kernels = s.training.batch_size // s.per_kernel
    grid = (16, 32, 64)
    return f"{kernels} kernels x {s.per_kernel} sequences", s.per_kernel in grid and kernels in grid


ROWS: tuple[Table2Row[MapsSettings], ...] = (
    Table2Row(
        "Dataset",
        "k-th order binary Markov source",
        "data",
        lambda s: (f"S = {s.states}, k in {[r.order for r in s.orders]}", s.states == 2),
    ),
    Table2Row("Architecture", "GPT-2 as in llm-baselines", "architecture", _architecture),
    Table2Row("Batch size", "grid {16, 32, 64} per kernel x {16, 32, 64} kernels", "grid", _batch),
    Table2Row(
        "Accumulation steps",
        "1",
        "optimization",
        lambda s: ("1 (one batch per optimizer step)", True),
    ),
    Table2Row(
        "Optimizer",
        "AdamW (β1 = 0.9, β2 = 0.95)",
        "optimization",
        lambda s: (
            f"AdamW ({s.optim.beta1:g}, {s.optim.beta2:g})",
            (s.optim.beta1, s.optim.beta2) == (0.9, 0.95),
        ),
    ),
    Table2Row(
        "Learning rate",
        "grid {1e-4, 1e-3, 1e-2}",
        "optimization",
        lambda s: (f"{s.optim.lr:g}", s.optim.lr in (1e-4, 1e-3, 1e-2)),
    ),
    Table2Row(
        "Scheduler",
        "Cosine (OneCycle)",
        "optimization",
        lambda s: hp.schedule(s, warmup_start=True),
    ),
    Table2Row(
        "# Iterations",
        "30000",
        "iterations",
        lambda s: (str(s.training.steps), s.training.steps == 30000),
    ),
    Table2Row(
        "Weight decay",
        "grid {0, 1e-4, 1e-3}",
        "optimization",
        lambda s: (f"{s.optim.weight_decay:g}", s.optim.weight_decay in (0.0, 1e-4, 1e-3)),
    ),
    Table2Row("Dropout", "0", "optimization", lambda s: ("0 (the model has no dropout)", True)),
    Table2Row(
        "Sequence length",
        "grid {16, 32, 64}",
        "seq_len",
        lambda s: (str(s.training.seq_len), s.training.seq_len in (16, 32, 64)),
    ),
    Table2Row(
        "Embedding dimension",
        "grid {32, 64}",
        "grid",
        lambda s: (str(s.arch.n_embd), s.arch.n_embd in (32, 64)),
    ),
    Table2Row(
        "Transformer layers",
        "2",
        "architecture",
        lambda s: ("2", darch_config(s.arch, s.states, s.training.seq_len, 2).n_layer == 2),
    ),
    Table2Row(
        "Attention heads",
        "1",
        "architecture",
        lambda s: ("1", darch_config(s.arch, s.states, s.training.seq_len, 2).layer(0).n_head == 1),
    ),
    Table2Row(
        "Repetitions", "3 seeds", "grid", lambda s: (f"{len(s.seeds)} seeds", len(s.seeds) == 3)
    ),
    Table2Row(
        "Gradient clipping",
        "grid {0, 0.5, 1.0}",
        "optimization",
        lambda s: (f"{s.optim.clip_norm:g}", s.optim.clip_norm in (0.5, 1.0)),
    ),
)


def table_h5(s: TableH5Settings, ctx: RunContext) -> Metrics:
    """D-H5-1: H.5 lines that disagree with the upstream's settings, per group."""
    up = hp.upstream_settings(ctx, MapsSettings)
    frame = table2_frame(ROWS, up, f"two_layer_maps runs ({ctx.scale} scale)").rename(
        columns={"Table 2 (paper)": "H.5 (paper; stripped values from the authors' sweeps)"}
    )
    disagree = frame.agrees == "no"
    metrics: Metrics = {
        f"mismatches/{g}": float((disagree & (frame.group == g)).sum()) for g in GROUPS
    }
    metrics["mismatches/total"] = float(disagree.sum())
    ctx.save_csv(frame, "table_h5.csv")
    title = f"# Paper D, App. H.5 vs the settings of the two_layer_maps runs ({ctx.scale} scale)"
    ctx.save_text(f"{title}\n\n{frame_to_markdown(frame)}", "table_h5.md")
    return metrics
