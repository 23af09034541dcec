"""What the papers' hyper-parameter tables share: the markdown writer and Table 2's machinery.

Paper A (App. C.1) and paper B (App. O) both print a Table 2 of hyper-parameters with the
same optimisation lines (batch size grid, accumulation, AdamW betas, learning rate, cosine
scheduler, iterations, weight decay, dropout, sequence-length grid, embedding-dimension
grid) and the same repetitions line. Each paper's `tables` module keeps the lines that
differ (dataset, architecture, layers, heads, ...) and composes them with `common_rows`
(whose two arguments are the only wording that differs: the accumulation text, and whether
the scheduler line names the lr the warm-up starts from) and `REPETITIONS`.
`upstream_settings` reads the settings the upstream experiment recorded in its
provenance.json, as any settings model with `.training`, `.optim`, `.model` and `.seeds`
(paper A's Fig. 3, paper B's Fig. 4); `table2` compares every line with them and writes
table2.csv and table2.md.

A line is compared with something the runs used or the instantiated model does: the
dropout line by running the instantiated model twice in training mode (`dropout_free`), the
mask-window line by reading its attention map (`mask_window`). A line that no setting or
instantiated object can contradict (the harness has no accumulation setting; the settings
can only express first-order binary chains) says so and is not counted (`NOT_CHECKED`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import pandas as pd
import torch
from pydantic import BaseModel

from lightning_modules import EnsembleGPT, GPTConfig
from replicate.experiments.base import Metrics, RunContext
from replicate.params import PROVENANCE_FILE, results_dir
from replicate.settings import ModelSettings, OptimSettings, TrainingSettings
from replicate.training import gpt_ensemble


def frame_to_markdown(frame: pd.DataFrame, digits: int | None = 4) -> str:
    """A pipe table of ``frame``, '|' in cells escaped.

    Floats are written with ``digits`` significant digits, or with `str` when ``digits`` is
    None; every other cell with `str`.
    """

    def cell(value: object) -> str:
        rounded = digits is not None and isinstance(value, float)
        text = f"{value:.{digits}g}" if rounded else str(value)
        return text.replace("|", "\\|")

    lines = [
        "| " + " | ".join(map(cell, frame.columns)) + " |",
        "|" + "---|" * len(frame.columns),
        *("| " + " | ".join(map(cell, row)) + " |" for row in frame.itertuples(index=False)),
    ]
    return "\n".join(lines) + "\n"


# ============================================================================= Table 2
class TrainedSettings(Protocol):
    """What the shared Table 2 rows read off an upstream experiment's resolved settings."""

    @property
    def training(self) -> TrainingSettings: ...

    @property
    def optim(self) -> OptimSettings: ...

    @property
    def model(self) -> ModelSettings: ...

    @property
    def seeds(self) -> list[int]: ...


S = TypeVar("S", bound=TrainedSettings)
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Table2Row(Generic[S]):
    """One line of a Table 2: the published value, and how to read it off the settings ``S``.

    ``resolve`` returns the value the runs used, as text, and whether it agrees with
    ``published`` (None: nothing the harness sets or instantiates could disagree, so the
    line is shown but not counted); ``group`` is the mismatch count (`GROUPS`) it adds to.
    """

    item: str
    published: str
    group: str
    resolve: Callable[[S], tuple[str, bool | None]]


NOT_CHECKED = "not checked"
"""The ``agrees`` cell of a line whose resolve returns None."""


def instantiated(s: TrainedSettings) -> EnsembleGPT:
    """One model as the upstream runs built it (binary vocabulary, tied as both papers'),
    initialised from seed 0."""
    cfg = GPTConfig(vocab_size=2, block_size=s.training.seq_len, tied=True, **s.model.model_dump())
    return gpt_ensemble(cfg, [0])


def _probe_tokens(length: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, 2, (1, 2, length), generator=generator)


def dropout_free(s: TrainedSettings) -> tuple[str, bool | None]:
    """Table 2's "Dropout 0": two training-mode forward passes of the instantiated model agree
    (any dropout, module or functional, would make them differ)."""
    model = instantiated(s).train()
    tokens = _probe_tokens(min(16, s.training.seq_len))
    with torch.no_grad():
        same = bool(torch.equal(model(tokens), model(tokens)))
    text = "0 (train-mode forward is deterministic)" if same else "> 0 (train-mode outputs differ)"
    return text, same


def mask_window(s: TrainedSettings) -> tuple[str, bool | None]:
    """The instantiated model's attention window, read off its attention map: full causal
    when every position attends to itself and every earlier position and to no later one."""
    model = instantiated(s).eval()
    length = min(16, s.training.seq_len)
    traces: list[dict[str, torch.Tensor]] = []
    with torch.no_grad():
        model(_probe_tokens(length), traces)
    attention = torch.stack([t["attention"] for t in traces])  # (layers, E, B, H, N, N)
    causal = torch.ones(length, length).tril().bool()
    future_zero = bool((attention[..., ~causal] == 0).all())
    seen = (attention > 0).sum(-1)  # keys each query attends to
    full = future_zero and bool((seen == torch.arange(1, length + 1)).all())
    text = "full causal" if full else "not full causal"
    return f"{text} (attention map of the instantiated model, N = {length})", full


GROUPS = ("optimization", "grid", "iterations", "seq_len", "architecture")
"""The groups whose mismatches `table2` counts (metrics ``mismatches/<group>``)."""


def schedule(s: TrainedSettings, *, warmup_start: bool) -> tuple[str, bool]:
    """The learning-rate schedule as text; it agrees with Table 2's "Cosine" if one-cycle cosine.

    ``warmup_start`` also names the learning rate the warm-up starts from (lr/div_factor).
    """
    o = s.optim
    start = f" from lr/{o.div_factor:g}" if warmup_start else ""
    text = (
        f"{o.schedule}: warm-up over {o.pct_start:.0%} of the steps{start}, "
        f"cosine decay to lr/{o.div_factor * o.final_div_factor:g}"
    )
    return text, o.schedule == "onecycle_cosine"


def common_rows(*, accumulation: str, warmup_start: bool) -> tuple[Table2Row[Any], ...]:
    """The lines "Batch size" to "Embedding dimension", printed alike by papers A and B.

    ``accumulation`` is the text given for the runs' accumulation steps (always 1: one batch
    per optimizer step); ``warmup_start`` is passed to `schedule`.
    """
    return (
        Table2Row(
            "Batch size",
            "grid {16, 50}",
            "grid",
            lambda s: (str(s.training.batch_size), s.training.batch_size in (16, 50)),
        ),
        Table2Row("Accumulation steps", "1", "optimization", lambda s: (accumulation, None)),
        Table2Row(
            "Optimizer",
            "AdamW (β1 = 0.9, β2 = 0.95)",
            "optimization",
            lambda s: (
                f"AdamW (β1 = {s.optim.beta1:g}, β2 = {s.optim.beta2:g})",
                (s.optim.beta1, s.optim.beta2) == (0.9, 0.95),
            ),
        ),
        Table2Row(
            "Learning rate",
            "0.001",
            "optimization",
            lambda s: (f"{s.optim.lr:g}", s.optim.lr == 1e-3),
        ),
        Table2Row(
            "Scheduler",
            "Cosine",
            "optimization",
            lambda s: schedule(s, warmup_start=warmup_start),
        ),
        Table2Row(
            "# Iterations",
            "8000",
            "iterations",
            lambda s: (str(s.training.steps), s.training.steps == 8000),
        ),
        Table2Row(
            "Weight decay",
            "1e-3",
            "optimization",
            lambda s: (
                f"{s.optim.weight_decay:g} (Linear weights only)",
                s.optim.weight_decay == 1e-3,
            ),
        ),
        Table2Row("Dropout", "0", "optimization", dropout_free),
        Table2Row(
            "Sequence length",
            "grid {512, 1024, 2048}",
            "seq_len",
            lambda s: (str(s.training.seq_len), s.training.seq_len in (512, 1024, 2048)),
        ),
        Table2Row(
            "Embedding dimension",
            "grid {4, 8, 16, 32, 64}",
            "grid",
            lambda s: (str(s.model.n_embd), s.model.n_embd in (4, 8, 16, 32, 64)),
        ),
    )


REPETITIONS: Table2Row[Any] = Table2Row(
    "Repetitions", "3 or 5", "grid", lambda s: (f"{len(s.seeds)} seeds", len(s.seeds) in (3, 5))
)
"""The last line of both papers' Table 2: the number of seeds."""


def upstream_settings(ctx: RunContext, model: type[M]) -> M:
    """The resolved settings the upstream experiment recorded in provenance.json, as ``model``."""
    path = ctx.upstream_dir / PROVENANCE_FILE
    return model.model_validate(json.loads(path.read_text())["settings"])


def table2_frame(rows: Sequence[Table2Row[S]], s: S, column: str) -> pd.DataFrame:
    """One line per row: item, published value, ``column`` (its value in ``s``), agrees, group."""
    lines = []
    for row in rows:
        resolved, agrees = row.resolve(s)
        lines.append(
            {
                "item": row.item,
                "Table 2 (paper)": row.published,
                column: resolved,
                "agrees": NOT_CHECKED if agrees is None else "yes" if agrees else "no",
                "group": row.group,
            }
        )
    return pd.DataFrame(lines)


def table2(
    rows: Sequence[Table2Row[S]], s: S, ctx: RunContext, *, paper: str, figure: str
) -> Metrics:
    """Write table2.csv and table2.md: ``rows`` against the settings ``s`` of ``figure``'s runs.

    ``s`` is what the upstream experiment was trained with (`upstream_settings`); ``paper``
    ("A", "B") and ``figure`` ("Fig. 3") name them in the frame's column and the markdown
    title. Metrics: ``mismatches/<group>`` for every group of `GROUPS`, and the runs'
    ``iterations`` and ``seq_len``.
    """
    frame = table2_frame(rows, s, f"{figure} runs ({ctx.scale} scale)")
    disagree = frame.agrees == "no"
    metrics: Metrics = {
        f"mismatches/{g}": float((disagree & (frame.group == g)).sum()) for g in GROUPS
    }
    metrics["iterations"] = float(s.training.steps)
    metrics["seq_len"] = float(s.training.seq_len)
    metrics["lines_checked"] = float((frame.agrees != NOT_CHECKED).sum())
    ctx.save_csv(frame, "table2.csv")
    title = (
        f"# Paper {paper}, Table 2 vs the settings of the {figure} runs "
        f"({ctx.scale} scale, from {results_dir(ctx.scale) / ctx.entry.paper}/"
        f"{ctx.entry.upstream}/provenance.json)"
    )
    ctx.save_text(f"{title}\n\n{frame_to_markdown(frame)}", "table2.md")
    return metrics
