"""Paper A ("Attention with Markov"): experiments, one function per figure or table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lightning_modules import ChainMember, GPTConfig, OptimConfig
from replicate import analysis, plotting
from replicate.config import (
    BinaryChainSettings,
    ModelSettings,
    OptimSettings,
    PositiveInt,
    Strict,
    TrainingSettings,
)
from replicate.experiments.base import Experiment, Metrics, RunContext
from replicate.markov import (
    binary_entropy_rate,
    binary_kernel,
    binary_stationary,
    binary_unigram_entropy,
)
from replicate.training import TrainingPlan, train_ensemble

InitialLaw = Literal["stationary", "uniform"]


# ----------------------------------------------------------------------------- shared training
@dataclass
class BinaryRun:
    """One trained model on a binary chain, with everything the figures and claims read."""

    chain: BinaryChainSettings
    tied: bool
    seed: int
    steps: np.ndarray
    test_loss: np.ndarray
    oracle_bigram: float
    oracle_unigram: float
    kappa: float
    run_class: analysis.RunClass
    transition_means: np.ndarray
    sequence: np.ndarray
    prob_one: np.ndarray
    norm_a: float
    bias: float

    @property
    def tying(self) -> str:
        return "tied" if self.tied else "untied"

    @property
    def final_loss(self) -> float:
        return float(self.test_loss[-1])


def initial_law(chain: BinaryChainSettings, law: InitialLaw) -> np.ndarray:
    """Law of x_1: the stationary pi(p, q) (paper A, Sec. 2.2) or uniform (authors' option)."""
    return binary_stationary(chain.p, chain.q) if law == "stationary" else np.full(2, 0.5)


def gpt_config(model: ModelSettings, vocab: int, seq_len: int, tied: bool) -> GPTConfig:
    return GPTConfig(vocab_size=vocab, block_size=seq_len, tied=tied, **model.model_dump())


def training_plan(training: TrainingSettings) -> TrainingPlan:
    return TrainingPlan(**training.model_dump())


def train_binary_runs(
    chains: list[BinaryChainSettings],
    tied: bool,
    seeds: list[int],
    model: ModelSettings,
    training: TrainingSettings,
    optim: OptimSettings,
    law: InitialLaw,
    ctx: RunContext,
    detail: str = "",
) -> list[BinaryRun]:
    """Train every (chain, seed) pair for one tying choice as a single ensemble."""
    pairs = [(c, s) for c in chains for s in seeds]
    members = [ChainMember(binary_kernel(c.p, c.q), initial_law(c, law), s) for c, s in pairs]
    tying = "tied" if tied else "untied"
    trained = train_ensemble(
        gpt_config(model, 2, training.seq_len, tied),
        members,
        training_plan(training),
        OptimConfig(**optim.model_dump()),
        label=ctx.label(f"{detail}{tying} ({len(members)} models)"),
        progress=ctx.progress,
    )
    final = trained.module.evaluate(trained.test_tokens)
    probs = analysis.next_token_probs(trained.module, trained.test_tokens[:, :1])[:, 0, :, 1]
    norm_a, bias = analysis.binary_output_layer(trained.module)
    cls = ctx.classification
    runs = []
    for i, (chain, seed) in enumerate(pairs):
        bigram, unigram = analysis.oracle_losses(trained.test_tokens[i], members[i].kernel)
        kappa = analysis.gap_closed(float(final.loss[i]), bigram, unigram)
        runs.append(
            BinaryRun(
                chain=chain,
                tied=tied,
                seed=seed,
                steps=trained.eval_steps,
                test_loss=trained.test_loss[i],
                oracle_bigram=bigram,
                oracle_unigram=unigram,
                kappa=kappa,
                run_class=analysis.classify(kappa, cls.bigram_kappa_min, cls.unigram_kappa_max),
                transition_means=final.transition_means[i],
                sequence=trained.test_tokens[i, 0, :-1].numpy(),
                prob_one=probs[i],
                norm_a=float(norm_a[i]),
                bias=float(bias[i]),
            )
        )
    return runs


def curves_frame(runs: list[BinaryRun], **extra: object) -> pd.DataFrame:
    """Tidy test-loss curves: one row per (run, evaluation step)."""
    frames = [
        pd.DataFrame(
            {
                "chain": r.chain.tag,
                "tying": r.tying,
                "seed": r.seed,
                **extra,
                "step": r.steps,
                "test_loss": r.test_loss,
            }
        )
        for r in runs
    ]
    return pd.concat(frames, ignore_index=True)


def chain_references(chain: BinaryChainSettings) -> Metrics:
    """Closed-form references of P(p, q) (paper A, Sec. 3)."""
    return {
        f"{chain.tag}/entropy_rate": binary_entropy_rate(chain.p, chain.q),
        f"{chain.tag}/unigram_entropy": binary_unigram_entropy(chain.p, chain.q),
        f"{chain.tag}/pi1": float(binary_stationary(chain.p, chain.q)[1]),
    }


# ----------------------------------------------------------------------------- Figure 3
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
        "final_loss": run.final_loss,
        "delta_bigram": run.final_loss - run.oracle_bigram,
        "delta_unigram": run.final_loss - run.oracle_unigram,
        "kappa": run.kappa,
        "class": float(run.run_class),
        "f0_bar": float(run.transition_means[0, 1]),
        "q_hat": float(run.transition_means[1, 0]),
        "max_dev_x0": float(np.abs(at0 - p).max()),
        "max_dev_x1": float(np.abs(at1 - (1 - q)).max()),
        "max_dev_pi1": float(np.abs(both - pi1).max()),
        "std_k": float(max(at0.std(), at1.std())),
        "norm_a": run.norm_a,
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
        f"{prefix}/unigram_runs_max_dev_sigmoid_b": stuck_max("dev_sigmoid_b"),
    }


def fig3(s: Fig3Settings, ctx: RunContext) -> Metrics:
    """Fig. 3: tied vs untied test loss (a, b) and predicted probabilities (c, d)."""
    runs: list[BinaryRun] = []
    for tied in s.tying:
        runs += train_binary_runs(
            s.chains, tied, s.seeds, s.model, s.training, s.optim, s.initial_law, ctx
        )
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


EXPERIMENTS: dict[str, Experiment] = {
    "attn_markov_fig3": Experiment(Fig3Settings, fig3),
}
