"""Paper A, Fig. 1 (and Sec. 4.3 of the workshop version / 4.4 of the journal version).

Single-layer transformers trained on P(0.5, 0.8) get stuck at the unigram loss H(pi);
deeper ones "first reach a plateau at H(pi)" and then drop to the entropy rate. Both model
variants are trained (spec A, Sec. 1.4 and 7.1: `theory` without layer norm, `gpt2` with
it), one ensemble per (variant, depth), and every run is reported; no variant is preferred.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from pydantic import Field, model_validator

from replicate import analysis, plotting
from replicate.config import (
    BinaryChainSettings,
    ModelSettings,
    OpenUnit,
    OptimSettings,
    PositiveInt,
    Strict,
    TrainingSettings,
)
from replicate.experiments.attn_markov.common import (
    BinaryRun,
    InitialLaw,
    chain_references,
    train_binary_runs,
)
from replicate.experiments.base import Metrics, RunContext

Variant = Literal["theory", "gpt2"]


class Architecture(Strict):
    """`ModelSettings` without the two fields Fig. 1 sweeps (variant and depth)."""

    activation: Literal["relu", "gelu"]
    n_embd: PositiveInt
    n_head: PositiveInt
    mlp_ratio: PositiveInt
    init_std: Annotated[float, Field(gt=0.0)]

    def model(self, variant: Variant, depth: int) -> ModelSettings:
        return ModelSettings(variant=variant, n_layer=depth, **self.model_dump())


class PlateauSettings(Strict):
    """When a loss curve counts as sitting on the H(pi) plateau before it drops (spec A, Fig. 1).

    ``band``: |L - L_uni| <= band, L_uni the unigram oracle on the run's own test batch.
    ``min_fraction``: the stretch must last at least this fraction of the training iterations
    (a proposal: a curve that merely passes through the band does not make a plateau).
    """

    band: Annotated[float, Field(gt=0.0)]
    min_fraction: OpenUnit


class Fig1Settings(Strict):
    chain: BinaryChainSettings
    tied: bool
    variants: list[Variant] = Field(min_length=1)
    depths: list[PositiveInt] = Field(min_length=2)
    seeds: list[int] = Field(min_length=1)
    initial_law: InitialLaw
    architecture: Architecture
    plateau: PlateauSettings
    training: TrainingSettings
    optim: OptimSettings

    @model_validator(mode="after")
    def _single_and_deep(self) -> Fig1Settings:
        if 1 not in self.depths or max(self.depths) < 2:
            raise ValueError(f"depths {self.depths} must contain 1 and a depth >= 2")
        return self


def run_prefix(variant: str, depth: int) -> str:
    return f"{variant}/l{depth}"


def half_gap_step(run: BinaryRun) -> float:
    """First evaluation step at which the run has closed half of the unigram->bigram gap."""
    kappas = (run.oracle_unigram - run.test_loss) / (run.oracle_unigram - run.oracle_bigram)
    return analysis.first_step_reaching(run.steps, kappas, 0.5)


def run_metrics(run: BinaryRun, plateau: PlateauSettings, steps: int) -> Metrics:
    """Per-run numbers; a plateau-then-drop run sits on H(pi) and ends at the bigram."""
    half = half_gap_step(run)
    length = analysis.plateau_length(
        run.steps,
        run.test_loss,
        run.oracle_unigram,
        plateau.band,
        before=half if np.isfinite(half) else np.inf,
    )
    drops = run.run_class is analysis.RunClass.BIGRAM
    long_enough = bool(np.nan_to_num(length, nan=-1.0) >= plateau.min_fraction * steps)
    return {
        **run.fit_metrics(),
        "f0_bar": float(run.transition_means[0, 1]),
        "q_hat": float(run.transition_means[1, 0]),
        "half_gap_step": half,
        "plateau_iters": length,
        "plateau_then_drop": float(drops and long_enough),
    }


def group_metrics(per_run: list[Metrics]) -> Metrics:
    """Summary over the runs of one (variant, depth), or over the deep depths."""

    def col(name: str) -> np.ndarray:
        return np.array([m[name] for m in per_run])

    classes = col("class")
    return {
        "frac_bigram": float(np.mean(classes == analysis.RunClass.BIGRAM)),
        "frac_unigram": float(np.mean(classes == analysis.RunClass.UNIGRAM)),
        "median_final_loss": float(np.median(col("final_loss"))),
        "median_delta_unigram": float(np.median(col("delta_unigram"))),
        "max_delta_bigram": float(col("delta_bigram").max()),
        "median_half_gap_step": float(np.median(col("half_gap_step"))),
        "frac_plateau_then_drop": float(np.mean(col("plateau_then_drop"))),
    }


def fig1_metrics(s: Fig1Settings, runs: dict[tuple[str, int], list[BinaryRun]]) -> Metrics:
    """Flat metrics: per run, per (variant, depth), per variant over depths >= 2."""
    metrics: Metrics = dict(chain_references(s.chain))
    first = next(iter(runs.values()))[0]
    metrics["oracle_bigram"], metrics["oracle_unigram"] = first.oracle_bigram, first.oracle_unigram
    for variant in s.variants:
        deep: list[Metrics] = []
        for depth in s.depths:
            prefix = run_prefix(variant, depth)
            per_run = [run_metrics(r, s.plateau, s.training.steps) for r in runs[variant, depth]]
            for r, values in zip(runs[variant, depth], per_run, strict=True):
                metrics.update({f"{prefix}/seed{r.seed}/{k}": v for k, v in values.items()})
            metrics.update({f"{prefix}/{k}": v for k, v in group_metrics(per_run).items()})
            if depth >= 2:
                deep += per_run
        metrics.update({f"{variant}/deep/{k}": v for k, v in group_metrics(deep).items()})
    return metrics


def fig1(s: Fig1Settings, ctx: RunContext) -> Metrics:
    """Fig. 1: test loss vs iteration for depths l, tied, p=0.5, q=0.8, both model variants."""
    runs: dict[tuple[str, int], list[BinaryRun]] = {}
    for variant in s.variants:
        for depth in s.depths:
            runs[variant, depth], _ = train_binary_runs(
                [s.chain],
                s.tied,
                s.seeds,
                s.architecture.model(variant, depth),
                s.training,
                s.optim,
                s.initial_law,
                ctx,
                detail=f"{variant} l={depth} ",
            )
    metrics = fig1_metrics(s, runs)
    curves = curves_frame(runs)
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(runs_frame(metrics, runs), "runs.csv")
    _plot_fig1(s, curves, metrics, ctx)
    return metrics


def curves_frame(runs: dict[tuple[str, int], list[BinaryRun]]) -> pd.DataFrame:
    """Tidy loss curves with the gap fraction kappa at every evaluation."""
    frames = []
    for (variant, depth), group in runs.items():
        for r in group:
            kappa = (r.oracle_unigram - r.test_loss) / (r.oracle_unigram - r.oracle_bigram)
            frames.append(
                pd.DataFrame(
                    {
                        "variant": variant,
                        "depth": depth,
                        "seed": r.seed,
                        "step": r.steps,
                        "test_loss": r.test_loss,
                        "kappa": kappa,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def runs_frame(metrics: Metrics, runs: dict[tuple[str, int], list[BinaryRun]]) -> pd.DataFrame:
    """One row per run: the per-run metrics (class as a name)."""
    rows = []
    for (variant, depth), group in runs.items():
        for r in group:
            prefix = f"{run_prefix(variant, depth)}/seed{r.seed}/"
            values = {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}
            values["class"] = analysis.RunClass(int(values["class"])).name
            rows.append({"variant": variant, "depth": depth, "seed": r.seed, **values})
    return pd.DataFrame(rows)


def _depth_label(metrics: Metrics, variant: str, depth: int, seeds: list[int]) -> str:
    steps = [metrics[f"{run_prefix(variant, depth)}/seed{s}/half_gap_step"] for s in seeds]
    shown = ", ".join("never" if np.isnan(v) else f"{v:.0f}" for v in steps)
    return f"ℓ={depth} (half gap at: {shown})"


def _plot_fig1(s: Fig1Settings, curves: pd.DataFrame, metrics: Metrics, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, len(s.variants), width=6.0, height=4.2)
    refs = chain_references(s.chain)
    tag = s.chain.tag
    for ax, variant in zip(axes, s.variants, strict=True):
        frame = curves[curves.variant == variant].copy()
        frame["depth"] = [_depth_label(metrics, variant, d, s.seeds) for d in frame.depth]
        plotting.loss_curves(ax, frame, hue="depth", title=f"{variant} model")
        palette = sns.color_palette(n_colors=len(s.depths))
        for color, depth in zip(palette, s.depths, strict=True):
            _mark_half_gap(ax, curves, metrics, variant, depth, s.seeds, color)
        plotting.reference_line(ax, refs[f"{tag}/unigram_entropy"], "H(π)", "unigram")
        plotting.reference_line(ax, refs[f"{tag}/entropy_rate"], "entropy rate", "bigram")
        ax.set(ylim=(refs[f"{tag}/entropy_rate"] - 0.01, np.log(2) + 0.01))
        ax.legend(fontsize=7, title="markers: first iteration with κ ≥ 0.5", title_fontsize=7)
    plotting.finish(
        fig,
        f"Paper A, Fig. 1 — {ctx.scale} scale: {'tied' if s.tied else 'untied'}, "
        f"p={s.chain.p:g}, q={s.chain.q:g}, d={s.architecture.n_embd}, N={s.training.seq_len}, "
        f"{s.training.steps} iterations, {len(s.seeds)} seeds per depth (mean ± std, thin: seeds)",
    )
    ctx.save_figure(fig)


def _mark_half_gap(
    ax: Axes,
    curves: pd.DataFrame,
    metrics: Metrics,
    variant: str,
    depth: int,
    seeds: list[int],
    color: tuple[float, float, float],
) -> None:
    """A dot on each seed's curve at the first evaluation that closes half the gap."""
    for seed in seeds:
        step = metrics[f"{run_prefix(variant, depth)}/seed{seed}/half_gap_step"]
        if np.isnan(step):
            continue
        row = curves[
            (curves.variant == variant)
            & (curves.depth == depth)
            & (curves.seed == seed)
            & (curves.step == step)
        ]
        ax.plot(step, row.test_loss.iloc[0], "o", color=color, markersize=4, zorder=5)
