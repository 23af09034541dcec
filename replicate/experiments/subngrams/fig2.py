"""Paper C, Fig. 2: the constructions theta_*^k compute the k-gram estimator (Sec. 4.1, Lemma B.1).

(a) The worked example of Fig. 2 (Sec. 4.1, our sequence): S = 3, H = 2, one sequence, every k; the
second-layer attention support and the output against the padded k-gram estimator.
(b) Check (a) (Lemma B.1, our test): on random in-context sequences, float64, the output of
theta_*^k approaches the padded k-gram estimator as c grows (O(T e^{-c}), Lemma B.1), and
the Def. 2.1 estimator up to the padding boundary effect.
(c) On the sequences of (b) whose padded match set is empty, theta_*^k's output against
its back-off limit (`construction_limit`: the keys matching the most lags).
(d) The paper's other constructions on the same sequences: App. F Eq. (30) (every head on
the (-1)-token) against the padded bigram estimator, and App. F.2 Eq. (36) (a
non-contiguous lag set N) against the padded N-MLE estimator and against its actual limit
(`lagset_construction_limit`: the last key always matches).
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from pydantic import Field

from lightning_modules.disentangled import DisentangledConfig, EnsembleDisentangled
from replicate.analysis.kgram import kgram_estimate, match_matrix, paper_c_kgram_lags
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import DataSettings, fixed_set
from replicate.settings import PositiveInt, Strict
from replicate.theory.subngrams import (
    construction_limit,
    lagset_construction_limit,
    set_all_heads_bigram,
    set_construction,
    set_lagset_construction,
)

SUPPORT_THRESHOLD = 1e-6  # second-layer weight above which a key counts as attended


class ExampleSettings(Strict):
    states: Annotated[int, Field(ge=2)]
    order: Annotated[int, Field(ge=2)]
    scale: Annotated[float, Field(gt=0.0)]
    tokens: list[Annotated[int, Field(ge=0)]] = Field(min_length=2)


class Fig2Settings(Strict):
    example: ExampleSettings
    data: DataSettings
    sequences: PositiveInt
    scales: list[Annotated[float, Field(gt=0.0)]] = Field(min_length=2)
    seed: int
    bound_min_scale: Annotated[float, Field(gt=0.0)]  # c from which |p - p_pad| <= 20 T e^{-c}
    def21_min_scale: Annotated[float, Field(gt=0.0)]  # c from which the Def. 2.1 gap is checked
    lagset: list[PositiveInt] = Field(min_length=1)  # N of App. F.2 Eq. (36)


def constructions(
    states: int, order: int, seq_len: int, points: list[tuple[int, float]]
) -> EnsembleDisentangled:
    """One float64 member per (k, c): theta_*^k at scale c (d_h = D)."""
    cfg = DisentangledConfig(states, order - 1, seq_len, hidden="D")
    model = EnsembleDisentangled(cfg, len(points), dtype=torch.float64)
    for i, (k, c) in enumerate(points):
        set_construction(model, i, k, c)
    return model


def worked_example(s: ExampleSettings) -> tuple[pd.DataFrame, Metrics]:
    """Support and output of theta_*^k, k = 1..n, on the example sequence (Fig. 2, Sec. 4.1)."""
    tokens = torch.tensor(s.tokens)[None]
    points = [(k, s.scale) for k in range(1, s.order + 1)]
    model = constructions(s.states, s.order, tokens.shape[-1], points)
    batch = tokens[None].expand(len(points), 1, -1)
    with torch.no_grad():
        probs = model(batch)[:, 0]
        attention = model.second_layer_attention(batch)[:, 0]
    rows, errors, mismatches = [], [], 0
    for i, (k, _) in enumerate(points):
        lags = paper_c_kgram_lags(k)
        target = kgram_estimate(tokens, lags, s.states, pad=True, last_position=True)[0]
        support = attention[i] > SUPPORT_THRESHOLD
        matches = match_matrix(tokens, lags, pad=True)[0, -1]
        mismatches += int((support != matches).sum())
        errors.append(float((probs[i] - target).abs().max()))
        def21 = kgram_estimate(tokens, lags, s.states, last_position=True)[0]
        rows.append(
            {
                "k": k,
                "support": " ".join(str(j) for j in support.nonzero().flatten().tolist()),
                "output": " ".join(f"{p:.6f}" for p in probs[i].tolist()),
                "padded_kgram": " ".join(f"{p:.6f}" for p in target.tolist()),
                "def21_kgram": " ".join(f"{p:.6f}" for p in def21.tolist()),
            }
        )
    metrics = {
        "F2a/max_output_error": max(errors),
        "F2a/support_mismatches": float(mismatches),
    }
    return pd.DataFrame(rows), metrics


def error_bound(seq_len: int, scale: float) -> float:
    """20 T e^{-c} (our bound on Lemma B.1's O(T e^{-c})) plus T float64 roundings: at
    c = 40 that bound alone (5e-15 at T = 64) lies below the rounding error of a T-term
    softmax average."""
    return 20 * seq_len * math.exp(-scale) + seq_len * float(np.finfo(np.float64).eps)


def check_a(s: Fig2Settings) -> pd.DataFrame:
    """Errors of theta_*^k against the padded and Def. 2.1 k-gram estimators (Lemma B.1)."""
    data = s.data
    batch = fixed_set(data, s.sequences, s.seed, "test")
    tokens = batch.tokens[0]
    points = [(k, c) for k in range(1, data.order + 1) for c in s.scales]
    model = constructions(data.states, data.order, data.seq_len, points)
    with torch.no_grad():
        probs = model(tokens[None].expand(len(points), -1, -1))
    rows = []
    for i, (k, c) in enumerate(points):
        lags = paper_c_kgram_lags(k)
        padded = kgram_estimate(tokens, lags, data.states, pad=True, last_position=True)
        def21 = kgram_estimate(tokens, lags, data.states, last_position=True)
        both = ~(padded.isnan().any(-1) | def21.isnan().any(-1))
        pad_ok = ~padded.isnan().any(-1)
        empty_error = (probs[i] - construction_limit(tokens, k, data.states))[~pad_ok].abs()
        rows.append(
            {
                "k": k,
                "c": c,
                "max_error_padded": float((probs[i] - padded)[pad_ok].abs().max()),
                "bound": error_bound(data.seq_len, c),
                "mean_error_def21": float((probs[i] - def21)[both].abs().mean()),
                "empty_fraction": float(1 - pad_ok.double().mean()),
                "max_error_empty": float(empty_error.max()) if empty_error.numel() else math.nan,
            }
        )
    return pd.DataFrame(rows)


def check_variants(s: Fig2Settings) -> pd.DataFrame:
    """Errors of App. F's Eq. (30) and App. F.2's Eq. (36) against their estimators, on the
    sequences of `check_a`, float64, for every c.

    Their bound is `error_bound` times the factor by which their score scale exceeds
    theta_*^k's (c per matching lag): the first layer's O(T e^{-c}) error enters the
    scores multiplied by H sqrt(c) (Eq. (30): score H c^{3/2}) or by c (Eq. (36): c^2).
    """
    data, lags = s.data, tuple(s.lagset)
    tokens = fixed_set(data, s.sequences, s.seed, "test").tokens[0]
    cfg = DisentangledConfig(data.states, data.order - 1, data.seq_len, hidden="D")
    model = EnsembleDisentangled(cfg, 2 * len(s.scales), dtype=torch.float64)
    for i, c in enumerate(s.scales):
        set_all_heads_bigram(model, 2 * i, c)
        set_lagset_construction(model, 2 * i + 1, lags, c)
    with torch.no_grad():
        probs = model(tokens[None].expand(model.ensemble, -1, -1))
    bigram = kgram_estimate(tokens, (1,), data.states, pad=True, last_position=True)
    nmle = kgram_estimate(tokens, lags, data.states, pad=True, last_position=True)
    actual = lagset_construction_limit(tokens, lags, data.states)
    rows = []
    for i, c in enumerate(s.scales):
        bound = error_bound(data.seq_len, c)
        ok, ok_n = ~bigram.isnan().any(-1), ~nmle.isnan().any(-1)
        rows.append(
            {
                "construction": "eq30",
                "c": c,
                "max_error": float((probs[2 * i] - bigram)[ok].abs().max()),
                "bound": bound * (data.order - 1) * math.sqrt(c),
                "max_error_actual_limit": math.nan,
            }
        )
        rows.append(
            {
                "construction": "eq36_" + "_".join(str(h) for h in lags),
                "c": c,
                "max_error": float((probs[2 * i + 1] - nmle)[ok_n].abs().max()),
                "bound": bound * c,
                "max_error_actual_limit": float((probs[2 * i + 1] - actual).abs().max()),
            }
        )
    return pd.DataFrame(rows)


def fig2(s: Fig2Settings, ctx: RunContext) -> Metrics:
    """Fig. 2 worked example (F2a) and check (a) (F2b), exact float64 constructions."""
    example, metrics = worked_example(s.example)
    ctx.save_csv(example, "example.csv")
    table = check_a(s)
    ctx.save_csv(table, "check_a.csv")
    k1 = table[table.k == 1]
    high = table[(table.k >= 2) & (table.c >= s.bound_min_scale)]
    def21 = table[(table.k >= 2) & (table.c >= s.def21_min_scale)]
    variants = check_variants(s)
    ctx.save_csv(variants, "variants.csv")
    eq30 = variants[(variants.construction == "eq30") & (variants.c >= s.bound_min_scale)]
    eq36 = variants[(variants.construction != "eq30") & (variants.c >= s.bound_min_scale)]
    metrics |= {
        "F2b/k1_max_error": float(k1.max_error_padded.max()),
        "F2b/max_error_over_bound": float((high.max_error_padded / high.bound).max()),
        "F2b/max_mean_error_def21": float(def21.mean_error_def21.max()),
        "F2c/max_error_empty_over_bound": float((high.max_error_empty / high.bound).max()),
        "F2c/empty_fraction": float(table.empty_fraction.max()),
        "F30/max_error_over_bound": float((eq30.max_error / eq30.bound).max()),
        "F36/max_error": float(eq36.max_error.max()),
        "F36/max_error_over_bound": float((eq36.max_error / eq36.bound).max()),
        "F36/max_error_actual_limit_over_bound": float(
            (eq36.max_error_actual_limit / eq36.bound).max()
        ),
    }
    for row in table.itertuples():
        metrics[f"k{row.k}/c{row.c:g}/max_error_padded"] = row.max_error_padded
        metrics[f"k{row.k}/c{row.c:g}/mean_error_def21"] = row.mean_error_def21
        metrics[f"k{row.k}/c{row.c:g}/max_error_empty"] = row.max_error_empty
    for row in variants.itertuples():
        metrics[f"{row.construction}/c{row.c:g}/max_error"] = row.max_error
    ctx.save_figure(draw(example, table, variants, s))
    return metrics


def draw(
    example: pd.DataFrame, check: pd.DataFrame, variants: pd.DataFrame, s: Fig2Settings
) -> Figure:
    """Fig. 2's checks from example.csv, check_a.csv and variants.csv, one panel each:
    theta_*^k (k >= 2) against (a) the padded k-gram estimator with Lemma B.1's bound (F2b),
    (b) Def. 2.1's estimator (F2b), (c) the back-off limit where the padded match set is
    empty (F2c); App. F's (d) Eq. (30) and (e) Eq. (36) against theirs (F30, F36); (f) the
    worked example of paper C's Fig. 2, the keys the second layer attends to and the output
    (F2a). Scales c below the one a claim starts at are shaded."""
    fig, axes = drawing.figure(2, 3, width=4.6, height=3.4)
    higher = check[check.k >= 2]
    for k, group in higher.groupby("k"):
        group = group.sort_values("c")
        color = drawing.level_color(int(k))
        label = rf"$\theta_*^{{{k}}}$"
        axes[0].plot(group.c, group.max_error_padded, "o-", color=color, label=label)
        axes[1].plot(group.c, group.mean_error_def21, "o-", color=color, label=label)
        axes[2].plot(
            group.c, group.max_error_empty, "o-", color=color,
            label=f"{label} ({group.empty_fraction.iloc[0]:.1%} of the sequences)",
        )  # fmt: skip
    bound = check[check.k == check.k.max()].sort_values("c")
    for ax in (axes[0], axes[2]):
        ax.plot(bound.c, bound.bound, "k--", label=r"$20\,T e^{-c} + T\varepsilon_{64}$")
    eq30 = variants[variants.construction == "eq30"].sort_values("c")
    eq36 = variants[variants.construction != "eq30"].sort_values("c")
    lags = ", ".join(map(str, s.lagset))
    axes[3].plot(eq30.c, eq30.max_error, "o-", color=drawing.level_color(2),
                 label="against the padded bigram estimator")  # fmt: skip
    axes[3].plot(eq30.c, eq30.bound, "k--", label="its bound × (n−1) √c")
    axes[4].plot(eq36.c, eq36.max_error, "o-", color="tab:red",
                 label=f"against the padded N-MLE, N = {{{lags}}}")  # fmt: skip
    axes[4].plot(eq36.c, eq36.max_error_actual_limit, "s-", color="tab:blue",
                 label="against its actual limit (the last key always matches)")  # fmt: skip
    axes[4].plot(eq36.c, eq36.bound, "k--", label="its bound × c")
    titles = (
        (r"(a) $\theta_*^k$ against the padded k-gram estimator",
         r"max $|p_\theta - \hat p_k^{pad}|$", s.bound_min_scale),
        ("(b) against Def. 2.1 (padding boundary effect)",
         r"mean $|p_\theta - \hat p_k|$ per entry", s.def21_min_scale),
        ("(c) on an empty padded match set: the back-off",
         r"max $|p_\theta -$ back-off limit$|$",
         s.bound_min_scale),
        ("(d) App. F, Eq. (30): every head on the (−1)-token", "max error", s.bound_min_scale),
        ("(e) App. F.2, Eq. (36): a non-contiguous history", "max error", s.bound_min_scale),
    )  # fmt: skip
    for ax, (title, ylabel, start) in zip(axes, titles, strict=False):
        ax.axvspan(
            0, start, color="0.85", alpha=0.5, linewidth=0, label="c below where the claims start"
        )
        ax.set(yscale="log", xlabel="construction scale c", ylabel=ylabel, title=title)
        ax.set_xlim(0, max(s.scales) * 1.05)
        drawing.legend_below(ax)
    _worked_example(axes[5], example, s.example)
    d = s.data
    return drawing.finish(
        fig,
        f"Paper C, Fig. 2 — $\\theta_*^k$ computes the k-gram estimator (S={d.states}, "
        f"n={d.order}, T={d.seq_len}, α={d.alpha:g}, {s.sequences} sequences, float64)",
    )


def _worked_example(ax: Axes, example: pd.DataFrame, s: ExampleSettings) -> None:
    """The keys theta_*^k's second layer attends to on Fig. 2's sequence (one row per k,
    filled where the weight exceeds `SUPPORT_THRESHOLD`), each row labelled with the output
    and the padded k-gram estimator."""
    support = np.zeros((len(example), len(s.tokens)))
    labels = []
    for i, row in enumerate(example.sort_values("k").itertuples()):
        support[i, [int(j) for j in str(row.support).split()]] = 1.0
        output = ", ".join(f"{float(p):.2f}" for p in str(row.output).split())
        padded = ", ".join(f"{float(p):.2f}" for p in str(row.padded_kgram).split())
        labels.append(f"k={row.k}: p = ({output})\npadded = ({padded})")
    ax.imshow(support, cmap="Greens", vmin=0, vmax=1.4, aspect="auto")
    ax.grid(False)
    for y in range(1, len(example)):
        ax.axhline(y - 0.5, color="white", linewidth=2)
    for x in range(1, len(s.tokens)):
        ax.axvline(x - 0.5, color="white", linewidth=1)
    ax.set_xticks(range(len(s.tokens)), labels=[f"{j}\n{x}" for j, x in enumerate(s.tokens)])
    ax.set_yticks(range(len(example)), labels=labels, fontsize=7)
    ax.set(
        xlabel="key position j (above) and its token x_j (below)",
        title=f"(f) Fig. 2's example (S={s.states}, c={s.scale:g}): keys attended",
    )
