"""Paper B, Figs. 3 and 6: the full single-layer transformer trained on P(p, q) becomes (Fig. 3)
or stays (Fig. 6) rank one, along the embedding direction e (App. A.3.1).

Both figures train an ensemble of seeds with `train_ensemble`, keep parameter snapshots
every ``log_every`` iterations, and measure at each snapshot (our measures of App. A.3.1's claims):
* rho_1(W) = sigma_1^2 / sum sigma_i^2 for W_1, W_2, W_V, W_Q, W_K (`top_share`);
* cos_e(W): alignment of the embedding-side singular vector of W with e (`alignment`);
* hc(e) = min|e_i| / max|e_i| (e on the hypercube) and the alignment of p_n with e.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from pydantic import Field

from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate import analysis, plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global import transformer as tf
from replicate.markov import binary_kernel, binary_stationary
from replicate.settings import (
    BinaryChainSettings,
    ModelSettings,
    OptimSettings,
    PositiveInt,
    Strict,
    TrainingSettings,
)
from replicate.theory.local_global import chain_constants
from replicate.training import TrainedEnsemble, TrainingPlan, gpt_ensemble, train_ensemble

RANKED = {"W1": "w1", "W2": "w2", "WV": "value", "WQ": "query", "WK": "key"}
"""Matrices whose rho_1 is tracked: paper name -> `MemberWeights` field."""
ALIGNED = {"W1": ("w1", "right"), "WV": ("value", "right"), "W2": ("w2", "left")}
"""Matrices whose embedding-side singular vector is compared with e."""


class LowRankSettings(Strict):
    chain: BinaryChainSettings
    seeds: list[int] = Field(min_length=1)
    model: ModelSettings
    training: TrainingSettings
    optim: OptimSettings
    log_every: PositiveInt
    """Snapshot interval (iterations) of the rank curves."""
    shown_steps: list[int] = Field(min_length=1)
    """Iterations whose W_V and W_1 are drawn (the first seed); those past the run are dropped."""


@dataclass
class LowRankRun:
    trained: TrainedEnsemble
    structure: pd.DataFrame
    """One row per (seed, snapshot step): the measures of the module docstring."""
    oracle_bigram: list[float]
    oracle_unigram: list[float]


def snapshot_steps(s: LowRankSettings) -> tuple[int, ...]:
    """0, every ``log_every`` iterations, the shown iterations and the last one."""
    steps = s.training.steps
    logged = set(range(0, steps + 1, s.log_every)) | {steps}
    return tuple(sorted(logged | {k for k in s.shown_steps if 0 <= k <= steps}))


def measure(weights: tf.MemberWeights) -> dict[str, float]:
    """rho_1, cos_e, hc(e) and the p_n alignment of one member's weights."""
    row = {f"rho1_{name}": tf.top_share(getattr(weights, field)) for name, field in RANKED.items()}
    for name, (field, side) in ALIGNED.items():
        row[f"cos_e_{name}"] = tf.alignment(getattr(weights, field), weights.e, side)
    row["hypercube"] = tf.hypercube_ratio(weights.e)
    row["positional_alignment"] = tf.positional_alignment(weights.positional, weights.e)
    row["norm_e"] = float(np.linalg.norm(weights.e))
    return row


def structure_frame(trained: TrainedEnsemble, seeds: list[int]) -> pd.DataFrame:
    rows = []
    for step, params in sorted(trained.module.snapshots.items()):
        for i, seed in enumerate(seeds):
            rows.append({"seed": seed, "step": step, **measure(tf.member_weights(params, i))})
    return pd.DataFrame(rows)


def train_low_rank(
    s: LowRankSettings, recipe: tf.InitName, options: tf.InitOptions, ctx: RunContext
) -> LowRankRun:
    """Train one model per seed on P(p, q) from ``recipe``, keeping snapshots."""
    chain = s.chain
    kernel = binary_kernel(chain.p, chain.q)
    members = [ChainMember(kernel, binary_stationary(chain.p, chain.q), seed) for seed in s.seeds]
    cfg = GPTConfig(vocab_size=2, block_size=s.training.seq_len, tied=True, **s.model.model_dump())
    plan = TrainingPlan(**s.training.model_dump(), snapshot_steps=snapshot_steps(s))
    trained = train_ensemble(
        gpt_ensemble(cfg, s.seeds, tf.initializer([recipe] * len(members), s.seeds, options)),
        members,
        plan,
        OptimConfig(**s.optim.model_dump()),
        label=ctx.label(f"{recipe} init ({len(members)} models)"),
        context=ctx.training,
    )
    oracles = [analysis.oracle_losses(trained.test_tokens[i], kernel) for i in range(len(members))]
    return LowRankRun(
        trained=trained,
        structure=structure_frame(trained, s.seeds),
        oracle_bigram=[b for b, _ in oracles],
        oracle_unigram=[u for _, u in oracles],
    )


def low_rank_metrics(s: LowRankSettings, run: LowRankRun, ctx: RunContext) -> Metrics:
    """Per seed and worst case over seeds, at the last iteration ("final/") and over every
    logged iteration ("all_steps/", NaN entries - a zero matrix at step 0 - skipped).

    Per seed: ``<chain>/seed<s>/final/<measure>``, ``.../all_steps/min_<measure>``,
    ``.../delta_bigram``, the final loss, kappa and the run class.
    """
    table = run.structure
    final = table[table.step == table.step.max()]
    measures = [c for c in table.columns if c not in ("seed", "step", "norm_e")]
    metrics: Metrics = {}
    for column in measures:
        metrics[f"final/min_{column}"] = float(final[column].min())
        metrics[f"all_steps/min_{column}"] = float(np.nanmin(table[column]))
    cls = ctx.classification
    deltas = []
    for i, seed in enumerate(s.seeds):
        loss = float(run.trained.test_loss[i, -1])
        kappa = analysis.gap_closed(loss, run.oracle_bigram[i], run.oracle_unigram[i])
        prefix = f"{s.chain.tag}/seed{seed}"
        mine = table[table.seed == seed]
        mine_final = final[final.seed == seed]
        for column in measures:
            metrics[f"{prefix}/final/{column}"] = float(mine_final[column].iloc[0])
            metrics[f"{prefix}/all_steps/min_{column}"] = float(np.nanmin(mine[column]))
        metrics[f"{prefix}/final_loss"] = loss
        metrics[f"{prefix}/delta_bigram"] = loss - run.oracle_bigram[i]
        metrics[f"{prefix}/kappa"] = kappa
        metrics[f"{prefix}/class"] = float(analysis.classify(kappa, cls))
        deltas.append(loss - run.oracle_bigram[i])
    metrics["final/max_delta_bigram"] = max(deltas)
    constants = chain_constants(s.chain.p, s.chain.q)
    metrics["entropy_rate"], metrics["unigram_entropy"] = (
        constants.bigram_loss,
        constants.unigram_loss,
    )
    return metrics


def curves_frame(run: LowRankRun, s: LowRankSettings) -> pd.DataFrame:
    """Tidy test-loss curves: one row per (seed, evaluation step)."""
    return pd.DataFrame(
        [
            {"seed": seed, "step": int(step), "test_loss": float(run.trained.test_loss[i, k])}
            for i, seed in enumerate(s.seeds)
            for k, step in enumerate(run.trained.eval_steps)
        ]
    )


# ----------------------------------------------------------------------------- figure
def _matrix(ax: Axes, matrix: np.ndarray, title: str) -> None:
    limit = float(np.abs(matrix).max()) or 1.0
    image = ax.imshow(
        matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest"
    )
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    ax.set_title(title, fontsize=9)
    ax.grid(False)


def _curves(ax: Axes, table: pd.DataFrame, prefix: str, names: list[str], ylabel: str) -> None:
    """The mean over seeds of ``prefix``_<name> per matrix, each in its fixed colour."""
    for name in names:
        mean = table.groupby("step")[f"{prefix}_{name}"].mean()
        ax.plot(
            mean.index,
            mean.to_numpy(),
            marker="o",
            ms=3,
            color=plotting.QUANTITY_COLORS[name],
            label=f"$W_{name[1]}$",
        )
    ax.set(xlabel="training iteration", ylabel=ylabel, ylim=(0, 1.02))
    ax.legend(fontsize=7)


def plot_low_rank(
    s: LowRankSettings, run: LowRankRun, curves: pd.DataFrame, ctx: RunContext, heading: str
) -> None:
    """Rows: W_V and W_1^T of the first seed at the shown iterations; rank, alignment, loss, e."""
    snapshots = run.trained.module.snapshots
    shown = [k for k in s.shown_steps if k in snapshots]
    ncols = max(len(shown), 4)
    fig, axes = plotting.figure(3, ncols, width=3.9, height=3.0)
    first = s.seeds[0]
    for col, step in enumerate(shown):
        weights = tf.member_weights(snapshots[step], 0)
        rho_v, rho_1 = tf.top_share(weights.value), tf.top_share(weights.w1)
        _matrix(
            axes[col],
            weights.value,
            f"$W_V$ ({s.model.n_embd}×{s.model.n_embd}), it. {step}, ρ₁={rho_v:.3f}",
        )
        _matrix(
            axes[ncols + col],
            weights.w1.T,
            f"$W_1^T$ (shown {weights.w1.shape[1]}×"
            f"{weights.w1.shape[0]}), it. {step}, ρ₁={rho_1:.3f}",
        )
    for ax in axes[len(shown) : ncols] + axes[ncols + len(shown) : 2 * ncols]:
        ax.axis("off")
    row = axes[2 * ncols :]
    _curves(row[0], run.structure, "rho1", list(RANKED), "ρ₁ = σ₁²/Σσᵢ² (mean over seeds)")
    row[0].set_title("(rank) top singular value's share")
    _curves(row[1], run.structure, "cos_e", list(ALIGNED), "|cos(singular vector, e)|")
    row[1].set_title("(alignment) embedding-side factor vs e")
    for k, (_, group) in enumerate(curves.groupby("seed")):
        label = f"seeds ({len(s.seeds)})" if k == 0 else None
        row[2].plot(group.step, group.test_loss, lw=0.8, alpha=0.6, color="tab:blue", label=label)
    bigram, unigram = run.oracle_bigram[0], run.oracle_unigram[0]  # the test set's oracles
    plotting.reference_line(row[2], unigram, "unigram oracle", "unigram")
    plotting.reference_line(row[2], bigram, "bigram oracle", "bigram")
    row[2].set(
        xlabel="training iteration",
        ylabel="test loss (nats)",
        title="test loss (oracles on the same test set)",
        ylim=(bigram - 0.02, unigram + 0.05),
    )
    row[2].legend(fontsize=7)
    e_final = tf.member_weights(snapshots[max(snapshots)], 0).e
    row[3].bar(np.arange(1, e_final.size + 1), e_final, color="tab:blue")
    row[3].set(
        xlabel="coordinate i",
        ylabel="$e_i$",
        title=f"e at it. {max(snapshots)}, hc = {tf.hypercube_ratio(e_final):.3f}",
    )
    for ax in row[4:]:
        ax.axis("off")
    plotting.finish(
        fig,
        f"Paper B, {heading} — {ctx.scale} scale: p={s.chain.p:g}, q={s.chain.q:g}, "
        f"d={s.model.n_embd}, N={s.training.seq_len}, {s.training.steps} iterations (AdamW), "
        f"{len(s.seeds)} seed(s); matrices of seed {first}",
    )
    ctx.save_figure(fig)


def run_low_rank(
    s: LowRankSettings,
    recipe: tf.InitName,
    options: tf.InitOptions,
    ctx: RunContext,
    heading: str,
) -> Metrics:
    """Train, measure, save structure.csv and curves.csv, draw the figure, return the metrics."""
    run = train_low_rank(s, recipe, options, ctx)
    curves = curves_frame(run, s)
    ctx.save_csv(run.structure, "structure.csv")
    ctx.save_csv(curves, "curves.csv")
    plot_low_rank(s, run, curves, ctx, heading)
    return low_rank_metrics(s, run, ctx)
