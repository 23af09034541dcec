"""Paper C, Thm. 4.2: the population-gradient norm at theta_*^k (Sec. 4.2, proof in App. B.2).

For each context length T, every point (k, c) of the grid, the random initialisation
theta_rand, theta_mid = (theta_*^2 + theta_*^3)/2 and App. F's all-heads bigram point
(Eq. (30)) is one member of a single float64 `EnsembleDisentangled` ensemble (d_h = D),
evaluated on one common set of N sequences (common random numbers); the unbiased estimator
of ||E grad L|| and its noise floor come from M chunks (ours), for each loss epsilon
(1e-8 as the authors' code, 1e-300 as the exact cross-entropy).

Also: Lemma 3.1's form of the gradient against autograd's at every point (smallest T), and
Thm. 4.2's first term E||p_tau(. | x_{T-k+2..T}) - p_hat_k||^2 along T (Lemma H.6, the
"e^{-Theta(T)}" of the text), with the stationary conditional of Lemma H.5 on sequences
that start stationary (App. H.1) and p_hat_k = theta_*^k's c -> infinity output.

App. F.1's general architecture (`GeneralConstruction`: block embeddings, summed heads, a
value matrix V2 in layer 2, the log MLP): at every length of the diagonal, the population
gradient w.r.t. V2 at its theta_*^k (k >= 2, c = T/2, exact cross-entropy), which App. F.1
argues vanishes like Thm. 4.2's; and its c = `reference_scale` output against theta_*^k's
limit through the log MLP.

Along the diagonal c = T/2 (Thm. 4.2's c = Theta(T) -> infinity) the grid's lengths are
joined by ``diagonal_seq_lens``, where only theta_*^k (k >= 2) at c = T/2 is evaluated; c is
bounded by `MAX_SCALE`, beyond which float64 cannot represent the e^{-c} attention weights of
the construction and the gradient vanishes by underflow instead of by the theorem.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Mapping
from typing import Annotated

import numpy as np
import pandas as pd
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator
from pydantic import Field

from lightning_modules import SequenceBatch
from lightning_modules.disentangled import DisentangledConfig, EnsembleDisentangled
from lightning_modules.measures import member_gradients, member_norms, population_grad_norm
from lightning_modules.objectives import LastTokenLawCE
from lightning_modules.seeding import member_generator
from replicate.analysis.kgram import paper_c_kgram_lags
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.subngrams import drawing
from replicate.experiments.subngrams.common import ChainSettings, expand, fixed_set
from replicate.settings import PositiveInt, Strict
from replicate.theory.subngrams import (
    GeneralConstruction,
    construction_limit,
    lagset_conditional,
    lemma31_surrogate,
    set_all_heads_bigram,
    set_construction,
)

MAX_SCALE = math.floor(-math.log(sys.float_info.min))
"""Largest construction scale c (708): e^{-c} is then still a normal float64. At c = 1024
(T = 2048 on the diagonal) the weights underflow to 0 and the measured gradient at theta_*^3
drops to the noise floor (0.020, floor 0.056, ci settings) while its exact-CE loss is 4.4
nats: saturation, not Thm. 4.2."""

Scale = Annotated[float, Field(gt=0.0, le=MAX_SCALE)]


class Thm42Settings(Strict):
    chain: ChainSettings
    seq_lens: list[Annotated[int, Field(gt=0, le=2 * MAX_SCALE)]] = Field(min_length=2)
    scales: list[Scale] = Field(min_length=1)
    diagonal: bool  # also c = T/2 (our grid)
    # further T on the diagonal alone (theta_*^k, k >= 2, at c = T/2; Thm. 4.2's c = Theta(T))
    diagonal_seq_lens: list[Annotated[int, Field(gt=0, le=2 * MAX_SCALE)]]
    reference_scale: Scale  # c of G2-G4 and of theta_mid
    eps: list[Annotated[float, Field(gt=0.0)]] = Field(min_length=2)  # [primary, ~exact CE]
    sequences: PositiveInt
    chunks: Annotated[int, Field(ge=16)]  # M (ours: M >= 16)
    seed: int  # gradient set (common to every point) and theta_rand
    g2_min_seq_len: PositiveInt  # G2/G3 use T >= this
    g5_max_seq_len: PositiveInt  # G5 uses T <= this
    g5_low_scale: Scale  # G5 compares c = reference_scale with this
    first_term_seq_lens: list[PositiveInt] = Field(min_length=3)  # doubling, for the H6 trend
    first_term_sequences: PositiveInt
    general_log_eps: Annotated[float, Field(gt=0.0)]  # App. F.1's MLP log(|x| + eps)


def _points(s: Thm42Settings, seq_len: int) -> list[tuple[str, int, float]]:
    """(label, k, c) of every member: theta_*^k for k = 1..n and each c, then rand, mid and
    App. F's Eq. (30) bigram point."""
    scales = sorted({*s.scales, *([seq_len / 2] if s.diagonal else [])})
    points = [("star", k, c) for k in range(1, s.chain.order + 1) for c in scales]
    return [*points, ("rand", 0, 0.0), ("mid", 0, s.reference_scale), ("f30", 2, s.reference_scale)]


def _diagonal_points(s: Thm42Settings, seq_len: int) -> list[tuple[str, int, float]]:
    """(label, k, c) of the members at a ``diagonal_seq_lens`` length: theta_*^k, k >= 2, at
    c = T/2 (theta_*^1 is exactly stationary, C-G1)."""
    return [("star", k, seq_len / 2) for k in range(2, s.chain.order + 1)]


def _evaluations(s: Thm42Settings) -> list[tuple[int, list[tuple[str, int, float]]]]:
    """(T, members) of every evaluation: the grid's lengths, then the diagonal-only ones."""
    grid = [(seq_len, _points(s, seq_len)) for seq_len in s.seq_lens]
    extra = [t for t in s.diagonal_seq_lens if t not in s.seq_lens]
    return grid + [(seq_len, _diagonal_points(s, seq_len)) for seq_len in extra]


def _build(s: Thm42Settings, seq_len: int, points: list[tuple[str, int, float]]):
    cfg = DisentangledConfig(s.chain.states, s.chain.order - 1, seq_len, hidden="D")
    model = EnsembleDisentangled(cfg, len(points), dtype=torch.float64)
    model.init_members([s.seed] * len(points))
    mid = EnsembleDisentangled(cfg, 2, dtype=torch.float64)
    set_construction(mid, 0, 2, s.reference_scale)
    set_construction(mid, 1, 3, s.reference_scale)
    with torch.no_grad():
        for i, (label, k, c) in enumerate(points):
            if label == "star":
                set_construction(model, i, k, c)
            elif label == "f30":
                set_all_heads_bigram(model, i, c)
            elif label == "mid":
                for mine, theirs in zip(model.parameters(), mid.parameters(), strict=True):
                    mine[i] = theirs.mean(0)
    return model


def gradient_sets(s: Thm42Settings) -> dict[int, SequenceBatch]:
    """The gradient set at every length the tables evaluate: ``s.sequences`` sequences of
    ``s.seed``'s "gradset" stream, drawn once and shared by `gradient_table` and
    `general_table`."""
    lengths = sorted({*s.seq_lens, *s.diagonal_seq_lens})
    return {t: fixed_set(s.chain.at(t), s.sequences, s.seed, "gradset") for t in lengths}


def gradient_table(s: Thm42Settings, sets: Mapping[int, SequenceBatch]) -> pd.DataFrame:
    """One row per (T, point, eps): population-gradient norm, noise floor and loss on the
    gradient sets ``sets`` (`gradient_sets`)."""
    rows = []
    for seq_len, points in _evaluations(s):
        model = _build(s, seq_len, points)
        batch = expand(sets[seq_len], len(points), torch.float64)
        for eps in s.eps:
            objective = LastTokenLawCE(eps=eps)
            norm, floor = population_grad_norm(model, objective, batch, s.chunks)
            loss = objective.test_loss(model, batch, s.sequences // s.chunks)
            for i, (label, k, c) in enumerate(points):
                rows.append(
                    {
                        "T": seq_len,
                        "point": label,
                        "k": k,
                        "c": c,
                        "eps": eps,
                        "grad_norm": float(norm[i]),
                        "noise_floor": float(floor[i]),
                        "loss": float(loss[i]),
                    }
                )
    return pd.DataFrame(rows)


def general_table(s: Thm42Settings, sets: Mapping[int, SequenceBatch]) -> pd.DataFrame:
    """App. F.1: one row per (T, k), k >= 2, at every length of the diagonal c = T/2: the
    population gradient w.r.t. V2 at the general-architecture theta_*^k, its noise floor
    and loss, exact cross-entropy, on the gradient sets of `gradient_table`."""
    objective = LastTokenLawCE(eps=s.eps[-1])
    rows = []
    for seq_len in sorted(sets):
        batch = expand(sets[seq_len], 1, torch.float64)
        for k in range(2, s.chain.order + 1):
            model = GeneralConstruction(s.chain.states, seq_len, k, seq_len / 2, s.general_log_eps)
            norm, floor = population_grad_norm(model, objective, batch, s.chunks)
            loss = objective.test_loss(model, batch, s.sequences // s.chunks)
            rows.append(
                {
                    "T": seq_len,
                    "k": k,
                    "c": seq_len / 2,
                    "grad_norm": float(norm[0]),
                    "noise_floor": float(floor[0]),
                    "loss": float(loss[0]),
                }
            )
    return pd.DataFrame(rows)


def general_limit_error(s: Thm42Settings) -> float:
    """Max over k = 1..n and one chunk of the gradient set (smallest T) of |p - (p_hat_k + eps)
    / (1 + S eps)|: the general-architecture theta_*^k at c = `reference_scale` against
    theta_*^k's c -> infinity output (`construction_limit`) through App. F.1's log MLP."""
    seq_len, states = min(s.seq_lens), s.chain.states
    tokens = fixed_set(s.chain.at(seq_len), s.sequences // s.chunks, s.seed, "gradset").tokens
    errors = []
    for k in range(1, s.chain.order + 1):
        model = GeneralConstruction(states, seq_len, k, s.reference_scale, s.general_log_eps)
        with torch.no_grad():
            probs = model(tokens)[0]
        limit = (construction_limit(tokens[0], k, states) + s.general_log_eps) / (
            1 + states * s.general_log_eps
        )
        errors.append(float((probs - limit).abs().max()))
    return max(errors)


def lemma31_error(s: Thm42Settings) -> float:
    """Max over the points at the smallest T of ||g_CE - g_L3.1|| / ||g_CE||: autograd's
    gradient of the exact cross-entropy (eps = s.eps[-1]) against paper C's Lemma 3.1 form
    E <p_theta - y, d log p_theta> (`lemma31_surrogate`), on one chunk of the gradient set
    (the identity holds sequence by sequence)."""
    seq_len = min(s.seq_lens)
    points = _points(s, seq_len)
    model = _build(s, seq_len, points)
    chunk = fixed_set(s.chain.at(seq_len), s.sequences // s.chunks, s.seed, "gradset")
    batch = expand(chunk, len(points), torch.float64)
    assert batch.next_law is not None
    objective = LastTokenLawCE(eps=s.eps[-1])
    autograd = member_gradients(model, objective, batch)
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.enable_grad():
        surrogate = lemma31_surrogate(model(batch.tokens), batch.next_law, s.eps[-1]).sum()
        lemma = torch.autograd.grad(surrogate, params)
    diff = member_norms([a - b for a, b in zip(autograd, lemma, strict=True)])
    norm = member_norms(autograd)
    return float((diff / norm.clamp(min=torch.finfo(torch.float64).tiny)).max())


def first_term_table(s: Thm42Settings) -> pd.DataFrame:
    """E||p_tau(. | x_{T-k+2..T}) - p_hat_k||^2 for k = 1..n and each T of
    ``first_term_seq_lens`` (Thm. 4.2's first term; Lemma H.6), with its standard error.

    Sequences start from a stationary window (App. H.1), so the suffix conditional is the
    time-homogeneous one of Lemma H.5 (`lagset_conditional`); p_hat_k is theta_*^k's
    c -> infinity output (`construction_limit`, defined on empty match sets too).
    """
    chain = s.chain.model_copy(update={"initial": "stationary"})
    rows = []
    for seq_len in s.first_term_seq_lens:
        drawn = chain.source.draw(s.first_term_sequences, seq_len, member_generator(s.seed, "test"))
        for k in range(1, s.chain.order + 1):
            law = lagset_conditional(drawn.kernels, drawn.tokens, paper_c_kgram_lags(k))
            estimate = construction_limit(drawn.tokens, k, s.chain.states)
            sq = (law - estimate).pow(2).sum(-1)
            rows.append(
                {
                    "T": seq_len,
                    "k": k,
                    "sq_error": float(sq.mean()),
                    "sem": float(sq.std() / math.sqrt(sq.numel())),
                }
            )
    return pd.DataFrame(rows)


def _first_term_metrics(table: pd.DataFrame) -> Metrics:
    """Trend of Thm. 4.2's first term along T (claims C-G6, C-H6).

    Per k, s_j = d log(term) / dT between consecutive T. e^{-Theta(T)} makes log(term)
    linear in T, so the slope ratio s_last / s_first is 1; a power law T^{-p} on a doubling
    grid gives T_first / T_last-but-one. The decision reference is their geometric mean.
    Also the least-squares slope of log(term) against log T (Lemma H.6: negative).
    """
    seq_lens = sorted(set(table["T"]))
    metrics: Metrics = {
        "H6/slope_ratio_midpoint": math.sqrt(seq_lens[0] / seq_lens[-2]),
    }
    ratios, loglog = [], []
    for k, group in table.groupby("k"):
        group = group.sort_values("T")
        t, log_term = group["T"].to_numpy(float), np.log(group.sq_error.to_numpy())
        slopes = np.diff(log_term) / np.diff(t)
        loglog.append(float(np.polyfit(np.log(t), log_term, 1)[0]))
        metrics[f"H6/k{k}/loglog_slope"] = loglog[-1]
        metrics[f"H6/k{k}/slope_ratio"] = float(slopes[-1] / slopes[0])
        if k >= 2:
            ratios.append(metrics[f"H6/k{k}/slope_ratio"])
    metrics["H6/min_slope_ratio_k2plus"] = min(ratios)
    metrics["H6/max_loglog_slope"] = max(loglog)
    for row in table.itertuples():
        metrics[f"H6/k{row.k}/T{row.T}/sq_error"] = row.sq_error
        metrics[f"H6/k{row.k}/T{row.T}/sem"] = row.sem
    return metrics


def _max(values) -> float:
    """Largest value, NaN when the grid has no cell the assertion applies to."""
    return float(np.max(values)) if len(values) else math.nan


def _exponent(ratio: float, base: float) -> float:
    """log(ratio) / log(base): the power of ``base`` that ``ratio`` is; NaN when the ratio is
    not positive (the unbiased gradient-norm estimate is clipped at 0)."""
    return math.log(ratio) / math.log(base) if ratio > 0 else math.nan


def _diagonal(star: pd.DataFrame, k: int) -> pd.DataFrame:
    """theta_*^k's rows at c = T/2, by increasing T (one loss epsilon)."""
    rows = star[(star.k == k) & (star.c == star["T"] / 2)]
    return rows.sort_values("T")


def _vanishing_along_diagonal(diag: pd.DataFrame, k: int, name: str = "G7") -> Metrics:
    """Thm. 4.2 along c = T/2 with the exact cross-entropy (paper C, Thm. 4.2: the gradient
    vanishes as c = Theta(T) -> infinity), from theta_*^k's diagonal rows (claims C-G7; with
    ``name`` "F1", App. F.1's V2 gradient, claims C-F1G).

    At the largest T: the gradient beyond twice its noise floor (vanished when <= 0), its
    change over the last step of T plus twice the larger floor (falling by more than two
    floors when <= 0), and the smaller of the two, which is <= 0 unless the gradient has
    levelled off above the noise; the log-log slope of the last step, the T of the largest
    gradient and the last gradient as a fraction of it (the turn).
    """
    if len(diag) < 2:
        return {}
    prev, last = diag.iloc[-2], diag.iloc[-1]
    peak = diag.loc[diag.grad_norm.idxmax()]
    vanished = last.grad_norm - 2 * last.noise_floor
    falling = last.grad_norm - prev.grad_norm + 2 * max(prev.noise_floor, last.noise_floor)
    return {
        f"{name}/k{k}/last_T": float(last["T"]),
        f"{name}/k{k}/last_excess_over_2floor": float(vanished),
        f"{name}/k{k}/last_step_excess": float(falling),
        f"{name}/k{k}/levelled_excess": float(min(vanished, falling)),
        f"{name}/k{k}/last_step_loglog_slope": _exponent(
            last.grad_norm / prev.grad_norm, last["T"] / prev["T"]
        ),
        f"{name}/k{k}/peak_T": float(peak["T"]),
        f"{name}/k{k}/last_over_peak": float(last.grad_norm / peak.grad_norm),
    }


def _assertions(s: Thm42Settings, table: pd.DataFrame) -> Metrics:
    """G1-G5 (ours, for Thm. 4.2) and G7 (Thm. 4.2 along c = T/2) as numbers (thresholds live in
    the claims)."""
    primary, exact = s.eps[0], s.eps[-1]
    star = table[table.point == "star"]
    main = star[star.eps == primary]
    c_ref = s.reference_scale
    big_t = main[(main["T"] >= s.g2_min_seq_len) & (main.k >= 2)]
    g2 = big_t[big_t.c >= c_ref]
    above = np.where(g2.grad_norm > 2 * g2.noise_floor, g2.grad_norm, 0.0)

    def norm_at(point: str, seq_len: int) -> float:
        row = table[(table.point == point) & (table["T"] == seq_len) & (table.eps == primary)]
        return float(row.grad_norm.iloc[0])

    ratios_rand, ratios_mid = [], []
    for _, row in big_t[big_t.c == c_ref].iterrows():
        ratios_rand.append(row.grad_norm / norm_at("rand", row["T"]))
        ratios_mid.append(row.grad_norm / norm_at("mid", row["T"]))

    def cell(frame: pd.DataFrame, seq_len: int, k: int, c: float) -> pd.Series:
        return frame[(frame["T"] == seq_len) & (frame.k == k) & (frame.c == c)].iloc[0]

    t_min, t_max = min(s.seq_lens), max(s.seq_lens)
    trend = []
    for k in range(2, s.chain.order + 1):
        lo, hi = cell(main, t_min, k, c_ref), cell(main, t_max, k, c_ref)
        trend.append(hi.grad_norm - lo.grad_norm - 2 * max(hi.noise_floor, lo.noise_floor))
    steps = []
    for k in range(2, s.chain.order + 1):
        diag = _diagonal(main, k)
        diag = diag[diag["T"] >= 64]
        for (_, lo), (_, hi) in itertools.pairwise(diag.iterrows()):
            steps.append(hi.grad_norm - lo.grad_norm - 2 * max(hi.noise_floor, lo.noise_floor))
    metrics: Metrics = {
        "G1/max_grad_norm_k1": float(star[star.k == 1].grad_norm.max()),
        "G2/max_grad_norm_above_2floor": _max(above),
        "G3/max_ratio_to_rand": _max(ratios_rand),
        "G3/max_ratio_to_mid": _max(ratios_mid),
        "G4/max_excess_Tmax_over_Tmin": _max(trend),
        "G4/max_increase_along_diagonal": _max(steps),
    }
    grid = star["T"].isin(s.seq_lens)  # the diagonal-only lengths have no c grid
    ex = star[
        grid & (star.eps == exact) & (star.k == s.chain.order) & (star["T"] <= s.g5_max_seq_len)
    ]
    g5 = [
        cell(ex, t, s.chain.order, c_ref).grad_norm
        / cell(ex, t, s.chain.order, s.g5_low_scale).grad_norm
        for t in sorted(set(ex["T"]))
    ]
    metrics["G5/min_ratio_high_to_low_c_exact_ce"] = float(min(g5))
    metrics["G5/sqrt_c_ratio"] = math.sqrt(c_ref / s.g5_low_scale)
    metrics["G5/min_exponent_in_c"] = _exponent(min(g5), c_ref / s.g5_low_scale)
    for k in range(2, s.chain.order + 1):
        metrics |= _vanishing_along_diagonal(_diagonal(star[star.eps == exact], k), k)
    f30 = table[(table.point == "f30") & (table.eps == primary) & (table["T"] >= s.g2_min_seq_len)]
    metrics["F30/max_grad_norm_above_2floor"] = _max(
        np.where(f30.grad_norm > 2 * f30.noise_floor, f30.grad_norm, 0.0)
    )
    return metrics


def thm42(s: Thm42Settings, ctx: RunContext) -> Metrics:
    """Gradient-norm table at theta_*^k, claims G1-G7 (Sec. 4.2)."""
    sets = gradient_sets(s)
    table = gradient_table(s, sets)
    ctx.save_csv(table, "gradients.csv")
    general = general_table(s, sets)
    ctx.save_csv(general, "general.csv")
    first_term = first_term_table(s)
    ctx.save_csv(first_term, "first_term.csv")
    metrics = _assertions(s, table) | _first_term_metrics(first_term)
    metrics["L31/max_relative_error"] = lemma31_error(s)
    metrics["F1/max_limit_error"] = general_limit_error(s)
    for k, rows in general.groupby("k"):
        metrics |= _vanishing_along_diagonal(rows.sort_values("T"), int(k), "F1")
    for row in general.itertuples():
        for column in ("grad_norm", "noise_floor", "loss"):
            metrics[f"F1/T{row.T}/k{row.k}/{column}"] = getattr(row, column)
    for row in table.itertuples():
        key = f"T{row.T}/{row.point}" + (f"_k{row.k}" if row.point == "star" else "")
        key += f"/c{row.c:g}/eps{row.eps:g}"
        metrics[f"{key}/grad_norm"] = row.grad_norm
        metrics[f"{key}/noise_floor"] = row.noise_floor
        metrics[f"{key}/loss"] = row.loss
    ctx.save_figure(draw(table, general, first_term, s, ctx.scale))
    return metrics


SEQ_LEN_STYLES = ("o:", "s--", "^-", "D-.", "v:", "P--")
"""Marker and line of the i-th context length T of the grid in Thm. 4.2's panels against c."""


def draw(
    table: pd.DataFrame,
    general: pd.DataFrame,
    first_term: pd.DataFrame,
    s: Thm42Settings,
    scale: str,
) -> Figure:
    """Thm. 4.2's checks from gradients.csv, general.csv and first_term.csv, one panel per
    question, every norm on a log axis (norms are positive): (a) the gradient at theta_*^k
    against c with the authors' loss (G2), (b) with the exact cross-entropy (G5: the sqrt(c)
    factor), (c) at c = `reference_scale` against theta_rand, theta_mid and App. F's Eq. (30)
    point (G3, F30), (d) along c = T/2 (G4, G7), (e) App. F.1's V2 gradient along c = T/2
    (F1G), (f) Thm. 4.2's first term along T (Lemma H.6: e^{-Theta(T)}, G6, H6).

    Bars span the norm +- its noise floor, the lower end clipped at the panel's floor; an
    estimate clipped at 0 (the unbiased estimator of ||E grad L||^2 was negative) is a
    hollow triangle at its noise floor, an upper bound (`_gradient_panel`); (f)'s band is
    +- one standard error, its lower edge no lower than half the term."""
    primary, exact = s.eps[0], s.eps[-1]
    star = table[(table.point == "star") & (table.k >= 2)]
    grid = star[star["T"].isin(s.seq_lens)]
    fig, axes = drawing.figure(2, 3, width=4.7, height=3.5)
    lengths = sorted(s.seq_lens)
    for panel, (eps, name) in enumerate(((primary, "the authors' loss"), (exact, "exact CE"))):
        series = [
            (group.sort_values("c"), "c", f"{_star(k)}, T={seq_len}", drawing.level_color(k),
             SEQ_LEN_STYLES[lengths.index(seq_len) % len(SEQ_LEN_STYLES)])
            for (k, seq_len), group in grid[grid.eps == eps].groupby(["k", "T"])
        ]  # fmt: skip
        _gradient_panel(axes[panel], series)
        axes[panel].set(
            xlabel="construction scale c",
            title=f"({'ab'[panel]}) {name}: −Σ y log(f + {eps:g})",
        )
    c_ref = s.reference_scale
    at_ref = table[(table.eps == primary) & (table.c == c_ref) & table["T"].isin(s.seq_lens)]
    others = {
        "rand": (r"$\theta_{rand}$ (random init.)", "black"),
        "mid": (r"$\theta_{mid}$", "0.5"),
        "f30": ("App. F, Eq. (30)", "tab:green"),
    }
    series = [
        (at_ref[(at_ref.point == "star") & (at_ref.k == k)].sort_values("T"), "T", _star(k),
         drawing.level_color(k), "o-")
        for k in range(2, s.chain.order + 1)
    ]  # fmt: skip
    rand = table[(table.point == "rand") & (table.eps == primary)].sort_values("T")
    series += [(rand, "T", *others["rand"], "o:")]
    series += [
        (at_ref[at_ref.point == point].sort_values("T"), "T", *others[point], "s--")
        for point in ("mid", "f30")
    ]
    _gradient_panel(axes[2], series)
    axes[2].set(
        xlabel="context length T",
        title=rf"(c) the authors' loss at c = {c_ref:g}: $\theta_*^k$ against others",
    )
    series = [
        (_diagonal(star[star.eps == eps], k), "T", f"{_star(k)}, ε = {eps:g}",
         drawing.level_color(k), "o-" if eps == exact else "s--")
        for eps in s.eps
        for k in range(2, s.chain.order + 1)
    ]  # fmt: skip
    _gradient_panel(axes[3], series)
    axes[3].set(
        xlabel="context length T (c = T/2)", title="(d) along c = T/2: vanishes as c = Θ(T) → ∞"
    )
    series = [
        (rows.sort_values("T"), "T", f"{_star(k)}, ε = {exact:g}", drawing.level_color(k), "o-")
        for k, rows in general.groupby("k")
    ]
    _gradient_panel(axes[4], series)
    axes[4].set(
        xlabel="context length T (c = T/2)",
        ylabel=r"population gradient norm w.r.t. $V_2$",
        title="(e) App. F.1's general architecture: ∇ w.r.t. V2",
    )
    ax = axes[5]
    for k, rows in first_term.groupby("k"):
        rows = rows.sort_values("T")
        color = drawing.level_color(int(k))
        low = np.maximum(rows.sq_error - rows["sem"], rows.sq_error * 0.5)
        ax.fill_between(rows["T"], low, rows.sq_error + rows["sem"], color=color, alpha=0.2)
        ax.plot(rows["T"], rows.sq_error, "o-", color=color, label=f"k = {k}")
    ax.set(
        yscale="log",
        xlabel=r"context length T (linear: $e^{-\Theta(T)}$ is a straight line)",
        ylabel=r"$E\,\|p_\tau(\cdot|$suffix$) - \hat p_k\|^2$",
        title="(f) Thm. 4.2's first term (Lemma H.6), ± s.e.",
    )
    ax.legend(fontsize=7, loc="upper right")
    for ax in axes[:5]:
        _value_ticks(ax)
        drawing.legend_below(ax, ncol=2)
    title = (
        f"Paper C, Thm. 4.2 — {scale} scale: population-gradient norm at $\\theta_*^k$ "
        f"(S={s.chain.states}, n={s.chain.order}, N={s.sequences} sequences in M={s.chunks} "
        "chunks; $\\theta_*^1$'s is 0); "
        "bars: ± the noise floor; ▽: an estimate ≤ 0, drawn at its noise floor"
    )
    return drawing.finish(fig, title)


def _star(k: int) -> str:
    return rf"$\theta_*^{{{k}}}$"


def _value_ticks(ax: Axes) -> None:
    """A log-2 x axis ticked at the values its lines are drawn at (c or T)."""
    values = sorted({float(x) for line in ax.get_lines() for x in line.get_xdata()})
    ax.set_xscale("log", base=2)
    ax.set_xticks(values, labels=[f"{x:g}" for x in values])
    ax.xaxis.set_minor_locator(NullLocator())


def _gradient_panel(ax: Axes, series: list[tuple[pd.DataFrame, str, str, str, str]]) -> None:
    """Population-gradient norms on a log axis, one line per (rows, x column, label, colour,
    format) of ``series``; bars span the norm +- its noise floor, clipped below at a floor
    under every positive value drawn (1e-6 without one); an estimate <= 0 is a hollow
    triangle at its noise floor (the norm is below the noise)."""
    columns = ["grad_norm", "noise_floor"]
    values = np.concatenate([rows[columns].to_numpy().ravel() for rows, *_ in series])
    positive = values[values > 0]
    floor = 0.3 * positive.min() if positive.size else 1e-6
    for rows, x, label, color, style in series:
        at = rows[x].to_numpy(float)
        norm, noise = rows.grad_norm.to_numpy(), rows.noise_floor.to_numpy()
        up = norm > 0
        ax.plot(at, np.where(up, norm, np.nan), style, color=color, markersize=4, label=label)
        low = norm[up] - np.maximum(norm[up] - noise[up], floor)
        ax.errorbar(at[up], norm[up], yerr=[low, noise[up]], fmt="none", ecolor=color,
                    elinewidth=0.8, capsize=2, alpha=0.8)  # fmt: skip
        ax.plot(
            at[~up],
            np.maximum(noise[~up], floor),
            "v",
            color=color,
            markerfacecolor="none",
            markersize=6,
        )
    ax.set(yscale="log", ylabel="population gradient norm ‖E ∇L‖")
    ax.set_ylim(bottom=floor)
