"""Paper A, Fig. 3: effect of weight tying on test loss and predicted probabilities."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field

from replicate import analysis, plotting
from replicate.experiments.attn_markov.common import (
    BinaryRun,
    InitialLaw,
    chain_references,
    curves_frame,
    ensemble_checkpoint,
    train_binary_runs,
)
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import binary_stationary
from replicate.settings import (
    BinaryChainSettings,
    ModelSettings,
    OptimSettings,
    PositiveInt,
    Strict,
    TrainingSettings,
)


class Fig3Settings(Strict):
    chains: list[BinaryChainSettings] = Field(min_length=1)
    tying: list[bool] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    initial_law: InitialLaw
    probability_positions: PositiveInt
    model: ModelSettings
    training: TrainingSettings
    optim: OptimSettings


def _position_profile(run: BinaryRun, count: int) -> pd.DataFrame:
    """Predicted P(x_{n+1}=1) at the first ``count`` positions with x_n = 0 and with x_n = 1."""
    rows = []
    for state in (0, 1):
        idx = analysis.first_positions(run.sequence, state, count)
        rows.append(
            pd.DataFrame(
                {
                    "chain": run.chain.tag,
                    "tying": run.tying,
                    "seed": run.seed,
                    "x_n": state,
                    "k": np.arange(1, idx.size + 1),
                    "position": idx + 1,
                    "prob_next_one": run.prob_one[idx],
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def _run_metrics(run: BinaryRun, profile: pd.DataFrame) -> Metrics:
    p, q = run.chain.p, run.chain.q
    pi1 = float(binary_stationary(p, q)[1])
    at0 = profile.loc[profile.x_n == 0, "prob_next_one"].to_numpy()
    at1 = profile.loc[profile.x_n == 1, "prob_next_one"].to_numpy()
    both = np.concatenate([at0, at1])
    prefix = f"{run.chain.tag}/{run.tying}/seed{run.seed}"
    values = {
        **run.fit_metrics(),
        "f0_bar": float(run.transition_means[0, 1]),
        "q_hat": float(run.transition_means[1, 0]),
        "max_dev_x0": float(np.abs(at0 - p).max()),
        "max_dev_x1": float(np.abs(at1 - (1 - q)).max()),
        "max_dev_pi1": float(np.abs(both - pi1).max()),
        "std_k": float(max(at0.std(), at1.std())),
        "norm_a": run.norm_a,
        "mean_norm_z": run.mean_norm_z,
        "mean_abs_a_dot_z": run.mean_abs_a_dot_z,
        "dev_sigmoid_b": abs(1 / (1 + np.exp(-run.bias)) - pi1),
        "half_gap_step": analysis.first_step_reaching(
            run.steps,
            (run.oracle_unigram - run.test_loss) / (run.oracle_unigram - run.oracle_bigram),
            0.5,
        ),
    }
    return {f"{prefix}/{k}": v for k, v in values.items()}


def _group_metrics(tag: str, tying: str, runs: list[BinaryRun], per_run: Metrics) -> Metrics:
    def col(name: str, subset: list[BinaryRun]) -> np.ndarray:
        return np.array([per_run[f"{tag}/{tying}/seed{r.seed}/{name}"] for r in subset])

    stuck = [r for r in runs if r.run_class is analysis.RunClass.UNIGRAM]

    def stuck_max(name: str) -> float:
        return float(col(name, stuck).max()) if stuck else float("nan")

    classes = np.array([r.run_class for r in runs])
    prefix = f"{tag}/{tying}"
    return {
        f"{prefix}/frac_bigram": float(np.mean(classes == analysis.RunClass.BIGRAM)),
        f"{prefix}/frac_unigram": float(np.mean(classes == analysis.RunClass.UNIGRAM)),
        f"{prefix}/median_final_loss": float(np.median(col("final_loss", runs))),
        f"{prefix}/median_delta_unigram": float(np.median(col("delta_unigram", runs))),
        f"{prefix}/max_delta_bigram": float(col("delta_bigram", runs).max()),
        f"{prefix}/max_dev_x0": float(col("max_dev_x0", runs).max()),
        f"{prefix}/max_dev_x1": float(col("max_dev_x1", runs).max()),
        f"{prefix}/unigram_runs_max_dev_pi1": stuck_max("max_dev_pi1"),
        f"{prefix}/unigram_runs_max_std_k": stuck_max("std_k"),
        f"{prefix}/unigram_runs_max_norm_a": stuck_max("norm_a"),
        f"{prefix}/unigram_runs_max_mean_abs_a_dot_z": stuck_max("mean_abs_a_dot_z"),
        f"{prefix}/unigram_runs_median_mean_norm_z": (
            float(np.median(col("mean_norm_z", stuck))) if stuck else float("nan")
        ),
        f"{prefix}/unigram_runs_max_dev_sigmoid_b": stuck_max("dev_sigmoid_b"),
    }


def fig3(s: Fig3Settings, ctx: RunContext) -> Metrics:
    """Fig. 3: tied vs untied test loss (a, b) and predicted probabilities (c, d)."""
    runs: list[BinaryRun] = []
    checkpoints = {}
    for tied in s.tying:
        tied_runs, trained = train_binary_runs(
            s.chains, tied, s.seeds, s.model, s.training, s.optim, s.initial_law, ctx
        )
        runs += tied_runs
        checkpoints["tied" if tied else "untied"] = ensemble_checkpoint(tied_runs, trained)
    ctx.save_torch(checkpoints, "models.pt")
    per_run = [_position_profile(r, s.probability_positions) for r in runs]
    metrics: Metrics = {}
    for r, profile in zip(runs, per_run, strict=True):
        metrics.update(_run_metrics(r, profile))
    profiles = pd.concat(per_run, ignore_index=True)
    for chain in s.chains:
        metrics.update(chain_references(chain))
        first = next(r for r in runs if r.chain == chain)
        metrics[f"{chain.tag}/oracle_bigram"] = first.oracle_bigram
        metrics[f"{chain.tag}/oracle_unigram"] = first.oracle_unigram
        chain_runs = [r for r in runs if r.chain == chain]
        for tied in s.tying:
            tying = "tied" if tied else "untied"
            group = [r for r in chain_runs if r.tied == tied]
            metrics.update(_group_metrics(chain.tag, tying, group, metrics))
        for name in ("max_delta_bigram", "max_dev_x0", "max_dev_x1"):
            metrics[f"{chain.tag}/{name}"] = max(
                metrics[f"{chain.tag}/{'tied' if t else 'untied'}/{name}"] for t in s.tying
            )

    curves = curves_frame(runs)
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(profiles, "probabilities.csv")
    _plot_fig3(s, runs, curves, profiles, ctx)
    return metrics


def _plot_fig3(
    s: Fig3Settings,
    runs: list[BinaryRun],
    curves: pd.DataFrame,
    profiles: pd.DataFrame,
    ctx: RunContext,
) -> None:
    n = len(s.chains)
    fig, axes = plotting.figure(2, n)
    for col, chain in enumerate(s.chains):
        refs = chain_references(chain)
        letter_loss, letter_prob = "ab"[col % 2], "cd"[col % 2]
        ax = axes[col]
        plotting.loss_curves(
            ax,
            curves[curves.chain == chain.tag],
            hue="tying",
            title=f"({letter_loss}) test loss, p={chain.p:g}, q={chain.q:g}",
        )
        plotting.reference_line(ax, refs[f"{chain.tag}/unigram_entropy"], "H(π)", "unigram")
        plotting.reference_line(ax, refs[f"{chain.tag}/entropy_rate"], "entropy rate", "bigram")
        ax.legend(fontsize=8)
        ax = axes[n + col]
        zero = profiles[(profiles.chain == chain.tag) & (profiles.x_n == 0)]
        plotting.per_seed_lines(ax, zero, x="k", y="prob_next_one", hue="tying")
        plotting.reference_line(ax, chain.p, "p", "bigram")
        plotting.reference_line(ax, refs[f"{chain.tag}/pi1"], "π₁", "unigram")
        ax.set(
            title=f"({letter_prob}) prediction at $x_n=0$, p={chain.p:g}, q={chain.q:g}",
            xlabel=r"$k$ ($k$-th position with $x_n=0$, test sequence 1)",
            ylabel=r"predicted $P(x_{n+1}=1)$",
            ylim=(0, 1),
        )
        ax.legend(fontsize=8)
    seeds = len(s.seeds)
    plotting.finish(
        fig,
        f"Paper A, Fig. 3 — {ctx.scale} scale: {s.model.variant} model, d={s.model.n_embd}, "
        f"N={s.training.seq_len}, {s.training.steps} iterations, {seeds} seeds per curve",
    )
    ctx.save_figure(fig)
