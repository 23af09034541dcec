"""Paper A (journal version), Sec. 4.3 and Fig. 5: the symmetric S-state chain, tied vs untied.

The paper: with tying the single-layer model "tend[s] to get stuck in local minima
(unigram)", without tying it reaches the bigram; and it converges to the global minimum
"even at" some p > 1/2, "suggesting that the switching threshold exceeds 0.5" (the value is
left open). We derive the threshold p > (S-1)/S for the tied theta_pi to be a local
minimum (`replicate.theory.attn_markov`); that is our derivation, not the paper's, and the
optional ``threshold_ps`` (tied only) probe it. Settings follow the authors' code,
`Markov-Simple/src/schedule4.sh`, which we infer made Fig. 5 (S=5, d=8,
p in {0.1, 0.3, 0.6, 0.9}, 3 runs, 5000 iterations).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from pydantic import Field

from replicate import analysis, plotting
from replicate.experiments.attn_markov.common import StateRun, train_symmetric_runs
from replicate.experiments.base import Metrics, RunContext
from replicate.markov import symmetric_entropy_rate, symmetric_unigram_entropy
from replicate.settings import ModelSettings, OpenUnit, OptimSettings, Strict, TrainingSettings


class Fig5Settings(Strict):
    states: Annotated[int, Field(ge=2)]
    ps: list[OpenUnit] = Field(min_length=1)  # Fig. 5's switching probabilities
    threshold_ps: list[OpenUnit] = Field(default_factory=list)  # tied-only probes (derived)
    tying: list[bool] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    model: ModelSettings
    training: TrainingSettings
    optim: OptimSettings

    @property
    def threshold(self) -> float:
        """(S-1)/S: the derived switch of the tied theta_pi (our derivation; not the paper's)."""
        return (self.states - 1) / self.states


def p_tag(p: float) -> str:
    return f"p{p:g}"


def run_metrics(run: StateRun) -> Metrics:
    return {
        **run.fit_metrics(),
        "p_stay": run.p_stay,
        "dev_p_stay": abs(run.p_stay - (1.0 - run.p)),
        "dev_p_stay_uniform": abs(run.p_stay - 1.0 / run.states),
    }


def group_metrics(runs: list[StateRun]) -> Metrics:
    """Summary of a group of runs; the ``unigram_runs_*`` numbers are nan without stuck runs."""
    per_run = [run_metrics(r) for r in runs]

    def col(name: str, rows: list[Metrics]) -> np.ndarray:
        return np.array([m[name] for m in rows])

    classes = col("class", per_run)
    stuck = [m for m in per_run if m["class"] == analysis.RunClass.UNIGRAM]
    return {
        "frac_bigram": float(np.mean(classes == analysis.RunClass.BIGRAM)),
        "frac_unigram": float(np.mean(classes == analysis.RunClass.UNIGRAM)),
        "median_delta_unigram": float(np.median(col("delta_unigram", per_run))),
        "max_delta_bigram": float(col("delta_bigram", per_run).max()),
        "max_dev_p_stay": float(col("dev_p_stay", per_run).max()),
        "mean_p_stay": float(col("p_stay", per_run).mean()),
        "unigram_runs_max_dev_p_stay_uniform": (
            float(col("dev_p_stay_uniform", stuck).max()) if stuck else float("nan")
        ),
    }


def fig5_metrics(s: Fig5Settings, runs: list[StateRun]) -> Metrics:
    """Per run, per (p, tying), every Fig. 5 p below the largest, and the derived threshold."""
    metrics: Metrics = {"unigram_entropy": symmetric_unigram_entropy(s.states)}
    for p in sorted({*s.ps, *s.threshold_ps}):
        metrics[f"{p_tag(p)}/entropy_rate"] = symmetric_entropy_rate(s.states, p)
        for tying in ("tied", "untied"):
            group = [r for r in runs if r.p == p and r.tying == tying]
            if not group:
                continue
            for r in group:
                prefix = f"{p_tag(p)}/{tying}/seed{r.seed}"
                metrics.update({f"{prefix}/{k}": v for k, v in run_metrics(r).items()})
            metrics.update({f"{p_tag(p)}/{tying}/{k}": v for k, v in group_metrics(group).items()})
    below = [r for r in runs if r.p in s.ps and r.p < max(s.ps)]
    if below:
        prefix = f"p_below_{max(s.ps):g}"
        metrics.update({f"{prefix}/{k}": v for k, v in group_metrics(below).items()})
        for r in below:  # the pool per (tying, p, seed), for per-seed claims
            run = f"{prefix}/{r.tying}/{p_tag(r.p)}/seed{r.seed}"
            metrics.update({f"{run}/{k}": v for k, v in run_metrics(r).items()})
    tied = [r for r in runs if r.tied]
    for side, members in (
        ("below", [r for r in tied if r.p < s.threshold]),
        ("above", [r for r in tied if r.p > s.threshold]),
    ):
        if members:
            prefix = f"tied/{side}_threshold"
            metrics.update({f"{prefix}/{k}": v for k, v in group_metrics(members).items()})
    return metrics


def fig5(s: Fig5Settings, ctx: RunContext) -> Metrics:
    """Fig. 5: test loss of the S-state chain, tied vs untied, and the predicted P(stay)."""
    runs: list[StateRun] = []
    for tied in s.tying:
        ps = [*s.ps, *s.threshold_ps] if tied else s.ps
        runs += train_symmetric_runs(s.states, ps, tied, s.seeds, s.model, s.training, s.optim, ctx)
    metrics = fig5_metrics(s, runs)
    curves = curves_frame(runs)
    stay = stay_frame(runs, s.ps)
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(stay, "stay.csv")
    _plot_fig5(s, curves, stay, ctx)
    return metrics


def curves_frame(runs: list[StateRun]) -> pd.DataFrame:
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "p": r.p,
                    "tying": r.tying,
                    "seed": r.seed,
                    "step": r.steps,
                    "test_loss": r.test_loss,
                }
            )
            for r in runs
        ],
        ignore_index=True,
    )


def stay_frame(runs: list[StateRun], figure_ps: list[float]) -> pd.DataFrame:
    """One row per run: mean predicted P(stay), class, and whether p is a derived probe."""
    return pd.DataFrame(
        [
            {
                "p": r.p,
                "tying": r.tying,
                "seed": r.seed,
                "p_stay": r.p_stay,
                "final_loss": r.final_loss,
                "kappa": r.kappa,
                "run_class": r.run_class.name,
                "threshold_probe": r.p not in figure_ps,
            }
            for r in runs
        ]
    )


def _plot_fig5(s: Fig5Settings, curves: pd.DataFrame, stay: pd.DataFrame, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, len(s.ps) + 1, width=4.4, height=3.8)
    unigram = symmetric_unigram_entropy(s.states)
    for ax, p in zip(axes, s.ps, strict=False):
        plotting.loss_curves(ax, curves[curves.p == p], hue="tying", title=f"test loss, p={p:g}")
        plotting.reference_line(ax, unigram, f"ln {s.states} = H(π)", "unigram")
        plotting.reference_line(ax, symmetric_entropy_rate(s.states, p), "entropy rate", "bigram")
        ax.legend(fontsize=7)
    _plot_stay(axes[-1], s, stay)
    plotting.finish(
        fig,
        f"Paper A, Fig. 5 — {ctx.scale} scale: S={s.states} symmetric chain, "
        f"{s.model.variant} model, d={s.model.n_embd}, N={s.training.seq_len}, "
        f"{s.training.steps} iterations, {len(s.seeds)} seeds per curve",
    )
    ctx.save_figure(fig)


def _plot_stay(ax: Axes, s: Fig5Settings, stay: pd.DataFrame) -> None:
    """Mean predicted P(stay) per run vs p, with the bigram (1-p) and unigram (1/S) targets."""
    import seaborn as sns  # only where drawn (start-up time)

    grid = np.linspace(0.0, 1.0, 101)
    ax.plot(grid, 1.0 - grid, **plotting.REFERENCE_STYLES["bigram"], label="1 − p (bigram)")
    uniform = 1.0 / s.states
    ax.axhline(
        uniform, **plotting.REFERENCE_STYLES["unigram"], label=f"1/S = {uniform:g} (unigram)"
    )
    ax.axvline(
        s.threshold,
        color="tab:red",
        linewidth=1.0,
        linestyle="-.",
        label=f"(S−1)/S = {s.threshold:g} (derived, not in the paper)",
    )
    colors = dict(zip(stay.tying.unique(), sns.color_palette(), strict=False))  # as the curves
    for (tying, probe), group in stay.groupby(["tying", "threshold_probe"]):
        ax.scatter(
            group.p + (-0.012 if tying == "tied" else 0.012),  # side by side, not on top
            group.p_stay,
            marker="o" if tying == "tied" else "s",
            facecolors="none" if probe else colors[tying],
            edgecolors=colors[tying],
            label=f"{tying}{' (threshold probe)' if probe else ''}",
            zorder=5,
        )
    ax.set(
        title="mean predicted P(stay) per run",
        xlabel="switching probability p",
        ylabel=r"mean predicted $P(x_{n+1}=x_n)$",
        xlim=(0, 1),
        ylim=(0, 1),
    )
    ax.legend(fontsize=7)
