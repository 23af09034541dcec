"""Paper A, Fig. 1 (and Sec. 4.3 of the workshop version / 4.4 of the journal version).

Single-layer transformers trained on P(0.5, 0.8) get stuck at the unigram loss H(pi);
deeper ones "first reach a plateau at H(pi)" and then drop to the entropy rate. Both model
variants are trained (docs/choices.md; paper A, Sec. 2.1 vs Table 1: `theory` without layer
norm, `gpt2` with it), one ensemble per (variant, depth), and every run is reported; no
variant is preferred.

The `theory` depth-1 runs are Fig. 3's tied p = 0.5, q = 0.8 runs (same model, data, seeds
and training, hence bit-identical): Fig. 1 reads them from its upstream `attn_markov_fig3`
(metrics.json and curves.csv, a DAG edge) instead of training them again, after checking
that the settings coincide. Their curves are read as written (6 decimals).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from pydantic import Field, model_validator

from replicate import analysis, plotting
from replicate.experiments import hyperparameter_tables as hp
from replicate.experiments.attn_markov.common import (
    FittedRun,
    InitialLaw,
    chain_references,
    train_binary_runs,
)
from replicate.experiments.attn_markov.fig3 import Fig3Settings
from replicate.experiments.base import Metrics, RunContext
from replicate.params import METRICS_FILE
from replicate.settings import (
    BinaryChainSettings,
    ModelSettings,
    OpenUnit,
    OptimSettings,
    PositiveInt,
    Strict,
    TrainingSettings,
)

Variant = Literal["theory", "gpt2"]
REUSED: tuple[Variant, int] = ("theory", 1)
"""(variant, depth) whose runs are Fig. 3's, read from the upstream instead of trained."""


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
    """The slope-based plateau detector shared by the papers (ours, no paper defines one;
    `replicate.analysis.detect_plateaus`): running-median window (evaluations), flatness
    threshold kappa (fraction of the curve's mean descent rate) and minimum length rho
    (fraction of the training iterations). A run "sits on the H(pi) plateau" when one of its
    plateaus has a level in the unigram band of our level assignment
    (`replicate.analysis.assign_level` with the run's unigram and bigram oracles) and a
    later one lies lower; a curve that merely passes through H(pi) while descending has no
    flat stretch there, however close to H(pi) it passes.
    """

    window: Annotated[int, Field(ge=1)]
    kappa: Annotated[float, Field(gt=0.0)]
    rho: OpenUnit


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
    other_tying_depths: list[Annotated[int, Field(ge=2)]] = Field(default_factory=list)
    """Depths also trained with the other tying choice (paper A Sec. 4.3: depth >= 2 reaches
    the global minimum "irrespective of the weight tying"); metrics under
    ``<variant>/<other tying>_deep/``."""

    @model_validator(mode="after")
    def _single_and_deep(self) -> Fig1Settings:
        if 1 not in self.depths or max(self.depths) < 2:
            raise ValueError(f"depths {self.depths} must contain 1 and a depth >= 2")
        return self

    @property
    def other_tying(self) -> str:
        return "untied" if self.tied else "tied"


def run_prefix(variant: str, depth: int) -> str:
    return f"{variant}/l{depth}"


def half_gap_step(run: FittedRun) -> float:
    """First evaluation step at which the run has closed half of the unigram->bigram gap."""
    kappas = (run.oracle_unigram - run.test_loss) / (run.oracle_unigram - run.oracle_bigram)
    return analysis.first_step_reaching(run.steps, kappas, 0.5)


def unigram_plateau(run: FittedRun, plateau: PlateauSettings) -> analysis.Plateau | None:
    """The first detected plateau whose level is assigned to the unigram (order 1) band."""
    found = analysis.detect_plateaus(
        run.steps, run.test_loss, window=plateau.window, kappa=plateau.kappa, rho=plateau.rho
    )
    levels = [run.oracle_unigram, run.oracle_bigram]
    return next((p for p in found if analysis.assign_level(p.level, levels) == 1), None)


def run_metrics(run: FittedRun, plateau: PlateauSettings) -> Metrics:
    """Per-run numbers; a plateau-then-drop run has a unigram plateau and ends at the bigram
    (so the plateau is followed by a drop)."""
    found = unigram_plateau(run, plateau)
    drops = run.run_class is analysis.RunClass.BIGRAM
    return {
        **run.fit_metrics(),
        "f0_bar": float(run.transition_means[0, 1]),
        "q_hat": float(run.transition_means[1, 0]),
        "half_gap_step": half_gap_step(run),
        "plateau_iters": float("nan") if found is None else found.t1 - found.t0,
        "plateau_level_minus_unigram": (
            float("nan") if found is None else found.level - run.oracle_unigram
        ),
        "plateau_then_drop": float(drops and found is not None),
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


def fig1_metrics(s: Fig1Settings, runs: dict[tuple[str, int], list[FittedRun]]) -> Metrics:
    """Flat metrics: per run, per (variant, depth), per variant over depths >= 2."""
    metrics: Metrics = dict(chain_references(s.chain))
    first = next(iter(runs.values()))[0]
    metrics["oracle_bigram"], metrics["oracle_unigram"] = first.oracle_bigram, first.oracle_unigram
    for variant in s.variants:
        deep: list[Metrics] = []
        for depth in s.depths:
            prefix = run_prefix(variant, depth)
            per_run = [run_metrics(r, s.plateau) for r in runs[variant, depth]]
            for r, values in zip(runs[variant, depth], per_run, strict=True):
                metrics.update({f"{prefix}/seed{r.seed}/{k}": v for k, v in values.items()})
                if depth >= 2:  # the deep pool per (depth, seed), for per-seed claims
                    deep_run = f"{variant}/deep/l{depth}/seed{r.seed}"
                    metrics.update({f"{deep_run}/{k}": v for k, v in values.items()})
            metrics.update({f"{prefix}/{k}": v for k, v in group_metrics(per_run).items()})
            if depth >= 2:
                deep += per_run
        metrics.update({f"{variant}/deep/{k}": v for k, v in group_metrics(deep).items()})
    return metrics


def other_tying_metrics(s: Fig1Settings, runs: dict[tuple[str, int], list[FittedRun]]) -> Metrics:
    """Per run and pooled over the depths of ``runs`` (trained with the other tying):
    ``<variant>/<other>_deep/l<depth>/seed<s>/...`` and ``<variant>/<other>_deep/...``."""
    metrics: Metrics = {}
    for variant in s.variants:
        pooled: list[Metrics] = []
        prefix = f"{variant}/{s.other_tying}_deep"
        for depth in s.other_tying_depths:
            per_run = [run_metrics(r, s.plateau) for r in runs[variant, depth]]
            for r, values in zip(runs[variant, depth], per_run, strict=True):
                metrics.update(
                    {f"{prefix}/l{depth}/seed{r.seed}/{k}": v for k, v in values.items()}
                )
            pooled += per_run
        if pooled:
            metrics.update({f"{prefix}/{k}": v for k, v in group_metrics(pooled).items()})
    return metrics


def _check_reusable(s: Fig1Settings, upstream: Fig3Settings) -> None:
    """Fig. 3's runs are Fig. 1's `REUSED` runs only if every setting coincides."""
    model = s.architecture.model(*REUSED)
    same = {
        "model": upstream.model == model,
        "training": upstream.training == s.training,
        "optim": upstream.optim == s.optim,
        "initial_law": upstream.initial_law == s.initial_law,
        "chain": s.chain in upstream.chains,
        "tying": s.tied in upstream.tying,
        "seeds": set(s.seeds) <= set(upstream.seeds),
    }
    differ = [name for name, ok in same.items() if not ok]
    if differ:
        raise ValueError(
            f"attn_markov_fig1 reads its {REUSED} runs from attn_markov_fig3, but their "
            f"settings differ in {differ}: make them equal"
        )


def reused_runs(s: Fig1Settings, ctx: RunContext) -> list[FittedRun]:
    """The `REUSED` runs rebuilt from the upstream Fig. 3's metrics.json and curves.csv."""
    _check_reusable(s, hp.upstream_settings(ctx, Fig3Settings))
    directory = ctx.upstream_dir
    metrics = json.loads((directory / METRICS_FILE).read_text())
    curves = pd.read_csv(directory / "curves.csv")
    tying = "tied" if s.tied else "untied"
    runs = []
    for seed in s.seeds:
        m = {
            k.rsplit("/", 1)[1]: v
            for k, v in metrics.items()
            if k.startswith(f"{s.chain.tag}/{tying}/seed{seed}/")
        }
        curve = curves[
            (curves.chain == s.chain.tag) & (curves.tying == tying) & (curves.seed == seed)
        ]
        f0, q_hat = m["f0_bar"], m["q_hat"]
        runs.append(
            FittedRun(
                tied=s.tied,
                seed=seed,
                steps=curve.step.to_numpy(),
                test_loss=curve.test_loss.to_numpy(),
                oracle_bigram=m["final_loss"] - m["delta_bigram"],
                oracle_unigram=m["final_loss"] - m["delta_unigram"],
                kappa=m["kappa"],
                run_class=analysis.RunClass(int(m["class"])),
                transition_means=np.array([[1.0 - f0, f0], [q_hat, 1.0 - q_hat]]),
            )
        )
    return runs


def fig1(s: Fig1Settings, ctx: RunContext) -> Metrics:
    """Fig. 1: test loss vs iteration for depths l, tied, p=0.5, q=0.8, both model variants."""
    runs: dict[tuple[str, int], list[FittedRun]] = {}
    for variant in s.variants:
        for depth in s.depths:
            if (variant, depth) == REUSED and ctx.entry.upstream is not None:
                runs[variant, depth] = reused_runs(s, ctx)
                continue
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
    other: dict[tuple[str, int], list[FittedRun]] = {}
    for variant in s.variants:
        for depth in s.other_tying_depths:
            other[variant, depth], _ = train_binary_runs(
                [s.chain],
                not s.tied,
                s.seeds,
                s.architecture.model(variant, depth),
                s.training,
                s.optim,
                s.initial_law,
                ctx,
                detail=f"{variant} l={depth} ",
            )
    metrics = fig1_metrics(s, runs) | other_tying_metrics(s, other)
    curves = curves_frame(runs)
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(runs_frame(metrics, runs), "runs.csv")
    _plot_fig1(s, curves, metrics, ctx)
    return metrics


def curves_frame(runs: dict[tuple[str, int], list[FittedRun]]) -> pd.DataFrame:
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


def runs_frame(metrics: Metrics, runs: dict[tuple[str, int], list[FittedRun]]) -> pd.DataFrame:
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
    import seaborn as sns  # only where drawn (start-up time)

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
