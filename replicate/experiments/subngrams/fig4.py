"""Paper C, Fig. 4: the general attention-only transformer, one-hot and learned embeddings
(App. I.1).

S = 3, n = 3, T = 32, alpha = 1, d = S + T, heads [2, 1], AdamW (b1 = 0, weight decay
1e-4), constant lr 0.005. One ensemble per embedding type (their parameter shapes differ),
one member per seed. Layer 1's attention is input-dependent: its maps are averaged over a
fixed set of test sequences at every evaluation, and its offset masses are those of the
averaged maps (ours). attention.csv keeps each run's maps at the start, where F4b
reads the heads and at the end; the figure draws one seed's per embedding (paper C, App.
I.1, Fig. 4 (b, d)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Annotated

import numpy as np
import pandas as pd
import torch
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from pydantic import Field, model_validator

from lightning_modules import LastTokenLawCE
from replicate.analysis import Plateau
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import (
    ChainSettings,
    OptimSettings,
    TrainingSettings,
    fixed_set,
    history_losses,
    kgram_levels,
    level_noise,
    member_test_set,
    train,
)
from replicate.experiments.subngrams.drawing import PlateauMark, plateau_marks
from replicate.experiments.subngrams.general import (
    Embedding,
    MlpKind,
    ReadoutInit,
    attention_map_probe,
    attention_mass_probe,
    general_config,
)
from replicate.experiments.subngrams.stages import (
    OFFSETS,
    Stages,
    StageSettings,
    heads_on,
    index_at,
    masses_of,
    midpoint_index,
    stages,
    with_call_bounds,
)
from replicate.settings import PositiveInt, Strict
from replicate.training import TrainedEnsemble, gpt_ensemble

CLAIMED = {
    "F4a": "a_bigram_then_trigram",
    "F4b": "b_bigram_heads",
    "F4c": "c_final_heads_1_2",
    "F4d": "all_of_a_c",
}
"""Claim -> per-seed indicator (paper C, App. I.1, Fig. 4)."""


class Fig4Settings(Strict):
    chain: ChainSettings
    embeddings: list[Embedding] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    training: TrainingSettings
    optim: OptimSettings
    eps: Annotated[float, Field(gt=0.0)]
    probe_sequences: PositiveInt  # test sequences the attention masses average over
    stage: StageSettings
    # the paper's highlighted step on the bigram plateau, per embedding (the markers of the
    # authors' notebook `figures/fig2.ipynb`, t = 30, 300, 800 one-hot and 50, 200, 800
    # learned): F4b reads
    # the heads there when the detector finds no bigram plateau
    marked_steps: dict[Embedding, PositiveInt]

    @model_validator(mode="after")
    def _a_marked_step_per_embedding(self) -> Fig4Settings:
        missing = [e for e in self.embeddings if e not in self.marked_steps]
        if missing:
            raise ValueError(f"marked_steps has no step for embeddings {missing}")
        return self


def train_general(
    chain: ChainSettings,
    embedding: Embedding,
    mlp: MlpKind,
    seeds: list[int],
    training: TrainingSettings,
    optim: OptimSettings,
    eps: float,
    probe_sequences: int,
    ctx: RunContext,
    readout: ReadoutInit = "zero",
    maps: bool = False,
) -> TrainedEnsemble:
    """One ensemble of the general transformer (one member per seed); ``readout``: its
    readout's initialisation (`general.general_config`; Fig. 4 keeps the zero one). At every
    evaluation it records layer 1's heads on ``probe_sequences`` fixed test sequences: their
    offset masses (probe ``masses``, (E, n, H, 4)) or, with ``maps``, their averaged maps
    (probe ``maps``, (E, n, H, T, T), whose masses `stages.masses_of` gives)."""
    cfg = general_config(chain.states, chain.order, training.seq_len, embedding, mlp, readout)
    model = gpt_ensemble(cfg, seeds)
    probe_set = fixed_set(chain.at(training.seq_len), probe_sequences, training.test_seed, "test")
    probe = (
        {"maps": attention_map_probe(probe_set.tokens)}
        if maps
        else {"masses": attention_mass_probe(probe_set.tokens)}
    )
    return train(
        model,
        chain,
        seeds,
        training,
        optim,
        LastTokenLawCE(eps=eps, output="logits"),
        probe,
        ctx.label(f"{embedding} embedding, {len(seeds)} seeds"),
        ctx.training,
    )


def order_plateau(stage: Stages, order: int) -> Plateau | None:
    """The longest intermediate plateau assigned to ``order``, or None."""
    found = [p for p, o in zip(stage.intermediate, stage.orders, strict=False) if o == order]
    return max(found, key=lambda p: p.t1 - p.t0, default=None)


CALLED = (CLAIMED["F4a"], CLAIMED["F4b"], CLAIMED["F4d"], "b_read_at_marked_step")
"""The per-seed values that rest on the plateaus' k-gram order calls (`with_call_bounds`)."""


def seed_values(
    stage: Stages, steps: np.ndarray, masses: np.ndarray, marked_step: int, s: StageSettings
) -> dict[str, float]:
    """F4a-F4d of one member from one reading of its plateaus' orders; masses (n, H, .).

    F4b reads the heads at the middle of the bigram plateau (App. I.1, Fig. 4) or, when the
    detector finds none, at the paper's highlighted step on it (``marked_step``): the heads'
    claim is then tested on its own, the plateau's is F4a's."""
    bigram = order_plateau(stage, 2)
    read = midpoint_index(steps, bigram) if bigram else index_at(steps, marked_step)
    on_read = heads_on(masses[read], s)
    values = {
        CLAIMED["F4a"]: float(bigram is not None and stage.final_order == 3),
        CLAIMED["F4b"]: float(1 in on_read and not any(d >= 2 for d in on_read)),
        CLAIMED["F4c"]: float({1, 2} <= heads_on(masses[-1], s)),
        "b_read_step": float(steps[read]),
        "b_read_at_marked_step": float(bigram is None),
        "bigram_level": bigram.level if bigram else math.nan,
        # the largest m_h(1) where F4b reads the heads, beside the head threshold
        "bigram_max_mass_minus1": float(masses[read][:, OFFSETS.index(1)].max()),
    }
    parts = (CLAIMED["F4a"], CLAIMED["F4b"], CLAIMED["F4c"])
    values[CLAIMED["F4d"]] = float(all(values[k] == 1.0 for k in parts))
    return values


def map_columns(steps: np.ndarray, values: Mapping[str, float]) -> list[tuple[int, str]]:
    """(evaluation index, what it is) of one run's attention maps in Fig. 4 (b, d), the
    paper's three stages (paper C, App. I.1, Fig. 4: the heads uniform, then on the
    (-1)-token on the bigram plateau, then one on the (-2)-token): the start of training;
    the step where F4b reads the heads (from ``values``, the run's `seed_values`: the middle
    of the bigram plateau, or the paper's highlighted step on it without one); the end of
    training, where F4c reads them."""
    at_mark = values["b_read_at_marked_step"] == 1.0
    read = "the paper's highlighted step" if at_mark else "middle of the bigram plateau"
    return [
        (0, "start of training"),
        (index_at(steps, values["b_read_step"]), read),
        (len(steps) - 1, "end of training"),
    ]


def attention_rows(
    embedding: str,
    seed: int,
    steps: np.ndarray,
    maps: np.ndarray,
    columns: Sequence[tuple[int, str]],
) -> pd.DataFrame:
    """attention.csv's rows of one run from its probed maps (n, H, T, T): per map column of
    `map_columns` (``column``, ``what``, ``step``), head, query position l and key position
    j <= l, the weight softmax(A1^(h))[l, j] averaged over the probe sequences (each
    (column, head, query)'s weights sum to 1)."""
    query, key = np.tril_indices(maps.shape[-1])
    return pd.DataFrame(
        [
            {
                "embedding": embedding, "seed": seed, "column": col, "what": what,
                "step": int(steps[j]), "head": h + 1, "query": int(q), "key": int(k),
                "weight": float(maps[j, h, q, k]),
            }
            for col, (j, what) in enumerate(columns)
            for h in range(maps.shape[1])
            for q, k in zip(query, key, strict=True)
        ]
    )  # fmt: skip


def saved_maps(rows: pd.DataFrame, seq_len: int) -> torch.Tensor:
    """The maps (H, T, T) of one column of one run from its attention.csv rows."""
    maps = torch.zeros(int(rows["head"].max()), seq_len, seq_len, dtype=torch.float64)
    heads, query, key = (torch.tensor(rows[c].to_numpy()) for c in ("head", "query", "key"))
    maps[heads - 1, query, key] = torch.tensor(rows["weight"].to_numpy(), dtype=torch.float64)
    return maps


def fig4(s: Fig4Settings, ctx: RunContext) -> Metrics:
    """Fig. 4: uniform heads, a bigram plateau, then one head on the (-2)-token (F4a-F4d)."""
    metrics: Metrics = {}
    curves, marks, attention = [], {}, []
    for embedding in s.embeddings:
        trained = train_general(
            s.chain, embedding, "none", s.seeds, s.training, s.optim, s.eps,
            s.probe_sequences, ctx, maps=True,
        )  # fmt: skip
        steps, losses, maps = trained.eval_steps, trained.test_loss, trained.probes["maps"]
        masses = masses_of(torch.from_numpy(maps))  # (E, n, H, len(OFFSETS))
        refs = history_losses(member_test_set(trained), s.chain, s.eps)
        levels, noise = kgram_levels(refs), level_noise(refs)
        metrics |= {f"{embedding}/kgram/b{k + 1}": float(b) for k, b in enumerate(levels)}
        for i, seed in enumerate(s.seeds):
            stage = stages(steps, losses[i], levels, s.stage, noise)
            marks[embedding, seed] = plateau_marks(stage)
            marked = s.marked_steps[embedding]
            measure = partial(
                seed_values, steps=steps, masses=masses[i], marked_step=marked, s=s.stage
            )
            values = with_call_bounds(stage, measure, CALLED)
            values["final_loss"] = float(losses[i, -1])
            metrics |= {f"{embedding}/seed{seed}/{k}": v for k, v in values.items()}
            columns = map_columns(steps, values)
            attention.append(attention_rows(embedding, seed, steps, maps[i], columns))
            curves += [
                {"embedding": embedding, "seed": seed, "step": int(t), "test_loss": float(loss)}
                for t, loss in zip(steps, losses[i], strict=True)
            ]
        for claim, key in CLAIMED.items():
            fraction = np.mean([metrics[f"{embedding}/seed{seed}/{key}"] for seed in s.seeds])
            metrics[f"{claim}/{embedding}/frac_seeds"] = float(fraction)
    metrics["F4d/min_over_embeddings_frac_seeds"] = min(
        metrics[f"F4d/{embedding}/frac_seeds"] for embedding in s.embeddings
    )
    frame, maps_frame = pd.DataFrame(curves), pd.concat(attention, ignore_index=True)
    ctx.save_csv(frame, "curves.csv")
    ctx.save_csv(maps_frame, "attention.csv")
    ctx.save_figure(draw(frame, maps_frame, metrics, marks, s, ctx.scale))
    return metrics


EMBEDDING_NAMES = {"onehot": "one-hot"}


def shown_seed(embedding: str, metrics: Mapping[str, float], s: Fig4Settings) -> int:
    """The seed whose maps Fig. 4 shows for ``embedding``: the first whose heads end on the
    (-1)- and the (-2)-token (F4c), the last of the paper's stages; else the first seed."""
    key = CLAIMED["F4c"]
    return drawing.first_seed_with(s.seeds, metrics, lambda seed: f"{embedding}/seed{seed}/{key}")


def _loss_panel(
    ax: Axes,
    curves: pd.DataFrame,
    metrics: Mapping[str, float],
    plateaus: Mapping[tuple[str, int], Sequence[PlateauMark]],
    embedding: str,
    s: Fig4Settings,
) -> list[Artist]:
    """Each seed's test loss on the k-gram levels, labelled with the orders of its plateaus
    (F4a), a dot where F4b reads its heads; returns the shared legend's entries."""
    part = curves[curves.embedding == embedding]
    levels = [metrics[f"{embedding}/kgram/b{k}"] for k in range(1, s.chain.order + 1)]
    runs = []
    for index, seed in enumerate(s.seeds):
        color = drawing.seed_color(index)
        run = part[part.seed == seed].sort_values("step")
        orders = " → ".join(m.label.removeprefix("k=") for m in plateaus[embedding, seed])
        (line,) = ax.plot(
            run.step, run.test_loss, color=color, linewidth=1.1,
            label=f"seed {seed}: plateaus at k = {orders or 'none'}",
        )  # fmt: skip
        runs.append(line)
        read = metrics[f"{embedding}/seed{seed}/b_read_step"]
        loss = float(np.interp(read, run.step, run.test_loss))
        ax.plot(read, loss, marker="o", color=color, markeredgecolor="black", zorder=3)
    marked = ax.axvline(
        s.marked_steps[embedding], color="0.3", linewidth=0.9, linestyle=":",
        label="the paper's highlighted step on the bigram plateau",
    )  # fmt: skip
    ax.set(xlabel="training iteration", ylabel="test loss (nats)")
    ax.legend(handles=runs, fontsize=7, loc="upper right")
    return [*drawing.kgram_lines(ax, levels), marked]


def draw(
    curves: pd.DataFrame,
    attention: pd.DataFrame,
    metrics: Mapping[str, float],
    plateaus: Mapping[tuple[str, int], Sequence[PlateauMark]],
    s: Fig4Settings,
    scale: str,
) -> Figure:
    """Fig. 4 (paper C, App. I.1, Fig. 4) from curves.csv, attention.csv and metrics.json;
    per embedding, a row:

    * (a, c) each seed's test loss on the k-gram levels, labelled with the orders of its
      plateaus (``plateaus`` per (embedding, seed), F4a), with a dot where F4b reads the
      heads (the middle of the bigram plateau, or the paper's highlighted step on it, the
      dotted line) and hollow diamonds at the steps of the maps;
    * (b, d) the first-layer maps of one seed (`shown_seed`), averaged over the probe
      sequences, one head a row, at the steps of `map_columns` (the start of training,
      F4b's step, the end of training: F4c's), each with its heads' m_h(1), m_h(2)."""
    heads = int(attention["head"].max())
    columns = int(attention["column"].max()) + 1
    rows = len(s.embeddings) * heads
    fig, grid = drawing.panel_grid(
        rows, 1 + columns, width=4.6 + 3.1 * columns, height=2.9 * rows + 1.4,
        width_ratios=[1.55] + [1.0] * columns,
    )  # fmt: skip
    handles: list[Artist] = []
    map_axes: list[Axes] = []
    map_letters = []
    image = None
    for e, embedding in enumerate(s.embeddings):
        loss_letter, map_letter = "abcdefghijkl"[2 * e : 2 * e + 2]
        map_letters.append(map_letter)
        loss_ax = fig.add_subplot(grid[e * heads : (e + 1) * heads, 0])
        handles = _loss_panel(loss_ax, curves, metrics, plateaus, embedding, s)
        seed = shown_seed(embedding, metrics, s)
        name = EMBEDDING_NAMES.get(embedding, embedding)
        switched = metrics.get(f"{embedding}/seed{seed}/{CLAIMED['F4c']}") == 1.0
        loss_ax.set_title(
            f"({loss_letter}) {name} embeddings: test loss\n({map_letter}) seed {seed}'s "
            + ("heads, the first to end on −1 and −2" if switched else "heads (none ends on −2)"),
            fontsize=9,
        )
        shown = attention[(attention.embedding == embedding) & (attention.seed == seed)]
        shown = shown.sort_values(["column", "head", "query", "key"])
        per_column = [shown[shown.column == c] for c in range(columns)]
        panels = [
            [fig.add_subplot(grid[e * heads + h, 1 + c]) for c in range(columns)]
            for h in range(heads)
        ]
        map_axes += [ax for row in panels for ax in row]
        image = drawing.attention_maps(
            panels,
            [saved_maps(part, s.training.seq_len) for part in per_column],
            [f"({map_letter}) {p.what.iloc[0]}, t = {p.step.iloc[0]}" for p in per_column],
        )
        run = curves[(curves.embedding == embedding) & (curves.seed == seed)]
        at = [int(p.step.iloc[0]) for p in per_column]
        color = drawing.seed_color(s.seeds.index(seed))
        loss_ax.plot(
            at, np.interp(at, run.step, run.test_loss), linestyle="none", marker="D",
            markersize=8, markerfacecolor="none", markeredgecolor=color, markeredgewidth=1.4,
            zorder=4,
        )  # fmt: skip
    assert image is not None
    fig.colorbar(image, ax=map_axes, shrink=0.5, label="attention weight (mean over sequences)")
    reads = Line2D(
        [], [], marker="o", color="0.6", markeredgecolor="black", linestyle="none",
        label="heads read here (middle of the bigram plateau, else the paper's step)",
    )  # fmt: skip
    drawn = Line2D(
        [], [], marker="D", markerfacecolor="none", markeredgecolor="0.3", linestyle="none",
        label=f"steps of the maps ({', '.join(map_letters)}), on the shown seed's curve",
    )  # fmt: skip
    title = (
        f"Paper C, Fig. 4 — {scale} scale: attention-only transformer, d=S+T, "
        f"S={s.chain.states}, n={s.chain.order}, T={s.training.seq_len}, "
        f"{drawing.count(len(s.seeds), 'seed')}; maps averaged over "
        f"{s.probe_sequences} test sequences"
    )
    note = drawing.within_noise_note(m for ms in plateaus.values() for m in ms)
    return drawing.finish(fig, title + note, [*handles, reads, drawn])
