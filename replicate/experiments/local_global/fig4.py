"""Paper B, Fig. 4: standard vs proposed initialisation of the full model (p = 0.5, q = 0.8).

App. A.3.2: from the standard N(0, 0.02^2) init the model "converges to a local minimum
corresponding to the unigram model"; from the proposed init (e coordinates 0.5, W_1 = 1,
W_2 = -1, "corresponding to I_* in Fig. 1d") it reaches the bigram loss. Our re-implementation
found the first half fragile: a unigram *plateau* that the runs leave at the paper's N. So this
rule reports per-seed outcomes, the loss at the plateau iterations and at the end, and the
prediction P(x_{n+1} = 1 | x_n) there. It also runs the proposed inits on p = 0.2, q = 0.3
(ours, not the paper's) and trains the canonical 3-scalar model with SGD from basin inits
(`canonical_sgd`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import seaborn as sns
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from pydantic import Field, model_validator

from lightning_modules import ChainMember, GPTConfig, OptimConfig, TestEvaluation
from replicate import analysis, plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.experiments.local_global import canonical_sgd
from replicate.experiments.local_global import transformer as tf
from replicate.experiments.local_global.flows import PositiveFloat, chain_label
from replicate.markov import binary_kernel, binary_stationary
from replicate.settings import (
    BinaryChainSettings,
    ModelSettings,
    OpenUnit,
    OptimSettings,
    PositiveInt,
    Strict,
    TrainingSettings,
)
from replicate.theory import local_global as lg
from replicate.training import TrainedEnsemble, TrainingPlan, gpt_ensemble, train_ensemble


class Fig4Settings(Strict):
    chain: BinaryChainSettings
    seeds: list[int] = Field(min_length=1)
    inits: list[tf.InitName] = Field(min_length=2)
    """Initialisations compared on ``chain``; "standard" first."""
    extra_chain: BinaryChainSettings
    extra_inits: list[tf.InitName]
    extra_seeds: list[int]
    canonical_point: tuple[float, float]
    model: ModelSettings
    training: TrainingSettings
    optim: OptimSettings
    plateau_steps: list[PositiveInt] = Field(min_length=1)
    final_fraction: OpenUnit
    """The "final loss" is the mean test loss over this last fraction of the iterations."""
    unigram_band: PositiveFloat
    """A run "ends at the unigram" when |final loss - unigram oracle| <= this."""
    sgd: canonical_sgd.CanonicalSGDSettings

    @model_validator(mode="after")
    def _standard_first(self) -> Fig4Settings:
        if self.inits[0] != "standard":
            raise ValueError("inits must start with 'standard' (the paper's baseline)")
        return self


@dataclass(frozen=True)
class Member:
    chain: BinaryChainSettings
    init: tf.InitName
    seed: int

    @property
    def group(self) -> str:
        return f"{self.chain.tag}/{self.init}"


def members_of(s: Fig4Settings) -> list[Member]:
    main = [Member(s.chain, init, seed) for init in s.inits for seed in s.seeds]
    extra = [Member(s.extra_chain, init, seed) for init in s.extra_inits for seed in s.extra_seeds]
    return main + extra


def train(s: Fig4Settings, members: list[Member], ctx: RunContext) -> TrainedEnsemble:
    """Every (chain, init, seed) as one ensemble, with snapshots at the plateau iterations."""
    chains = [
        ChainMember(
            binary_kernel(m.chain.p, m.chain.q), binary_stationary(m.chain.p, m.chain.q), m.seed
        )
        for m in members
    ]
    cfg = GPTConfig(vocab_size=2, block_size=s.training.seq_len, tied=True, **s.model.model_dump())
    plan = TrainingPlan(**s.training.model_dump(), snapshot_steps=tuple(s.plateau_steps))
    options = tf.InitOptions(canonical_point=s.canonical_point)
    recipes = [m.init for m in members]
    seeds = [m.seed for m in members]
    return train_ensemble(
        gpt_ensemble(cfg, seeds, tf.initializer(recipes, seeds, options)),
        chains,
        plan,
        OptimConfig(**s.optim.model_dump()),
        label=ctx.label(f"inits ({len(members)} models)"),
        context=ctx.training,
    )


def evaluate_snapshot(trained: TrainedEnsemble, step: int) -> TestEvaluation | None:
    """Test loss and mean predictions with the parameters of iteration ``step``.

    None when no snapshot of that iteration was kept (the run is shorter)."""
    snapshot = trained.module.snapshots.get(step)
    if snapshot is None:
        return None
    params = dict(trained.module.model.named_parameters())
    final = {name: p.detach().clone() for name, p in params.items()}
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(snapshot[name])
        evaluation = trained.evaluate()
        for name, p in params.items():
            p.copy_(final[name])
    return evaluation


# ----------------------------------------------------------------------------- metrics
def member_table(s: Fig4Settings, members: list[Member], trained: TrainedEnsemble) -> pd.DataFrame:
    """One row per member: final loss (mean over the last iterations), oracles, predictions."""
    steps = trained.eval_steps
    last = steps >= (1.0 - s.final_fraction) * steps.max()
    final_eval = trained.evaluate()
    plateau = {k: evaluate_snapshot(trained, k) for k in s.plateau_steps}
    rows = []
    for i, m in enumerate(members):
        kernel = binary_kernel(m.chain.p, m.chain.q)
        bigram, unigram = analysis.oracle_losses(trained.test_tokens[i], kernel)
        row = {
            "group": m.group,
            "chain": m.chain.tag,
            "init": m.init,
            "seed": m.seed,
            "initial_loss": float(trained.test_loss[i, 0]),
            "final_loss": float(trained.test_loss[i, last].mean()),
            "oracle_bigram": bigram,
            "oracle_unigram": unigram,
            "p1_given_0": float(final_eval.transition_means[i, 0, 1]),
            "p1_given_1": float(final_eval.transition_means[i, 1, 1]),
        }
        for k, evaluation in plateau.items():
            known = evaluation is not None
            means = evaluation.transition_means[i] if known else np.full((2, 2), np.nan)
            row[f"loss_at_{k}"] = float(evaluation.loss[i]) if known else np.nan
            row[f"prob_gap_at_{k}"] = float(abs(means[0, 1] - means[1, 1]))
        rows.append(row)
    return pd.DataFrame(rows)


def _seed_metrics(s: Fig4Settings, table: pd.DataFrame, ctx: RunContext) -> Metrics:
    """Per seed (``<chain>/<init>/seed<s>/...``): what `group_metrics` reduces over seeds, and
    ``<chain>/seed<s>/gap_standard_minus_<init>``."""
    cls = ctx.classification
    metrics: Metrics = {}
    for row in table.itertuples():
        chain = s.chain if row.chain == s.chain.tag else s.extra_chain
        kappa = analysis.gap_closed(row.final_loss, row.oracle_bigram, row.oracle_unigram)
        prefix = f"{row.group}/seed{row.seed}"
        metrics |= {
            f"{prefix}/final_loss": row.final_loss,
            f"{prefix}/delta_bigram": row.final_loss - row.oracle_bigram,
            f"{prefix}/at_unigram_final": float(
                abs(row.final_loss - row.oracle_unigram) <= s.unigram_band
            ),
            f"{prefix}/dev_p1_given_0": abs(row.p1_given_0 - chain.p),
            f"{prefix}/dev_p1_given_1": abs(row.p1_given_1 - (1 - chain.q)),
            f"{prefix}/kappa": kappa,
            f"{prefix}/class": float(analysis.classify(kappa, cls)),
        }
        for k in s.plateau_steps:
            excess = getattr(row, f"loss_at_{k}") - row.oracle_unigram
            metrics |= {
                f"{prefix}/abs_delta_unigram_at_{k}": abs(excess),
                f"{prefix}/loss_minus_unigram_at_{k}": excess,
                f"{prefix}/prob_gap_at_{k}": getattr(row, f"prob_gap_at_{k}"),
            }
    main = table[table.chain == s.chain.tag].set_index(["init", "seed"]).final_loss
    for init in s.inits[1:]:
        for seed in s.seeds:
            gap = main[("standard", seed)] - main[(init, seed)]
            metrics[f"{s.chain.tag}/seed{seed}/gap_standard_minus_{init}"] = float(gap)
    return metrics


def group_metrics(s: Fig4Settings, table: pd.DataFrame) -> Metrics:
    """Worst case over seeds per (chain, init): bigram reached, predictions, unigram plateau."""
    metrics: Metrics = {}
    for group, rows in table.groupby("group", sort=False):
        chain = s.chain if rows.chain.iloc[0] == s.chain.tag else s.extra_chain
        delta_unigram = rows.final_loss - rows.oracle_unigram
        metrics |= {
            f"{group}/max_delta_bigram": float((rows.final_loss - rows.oracle_bigram).max()),
            f"{group}/mean_final_loss": float(rows.final_loss.mean()),
            f"{group}/mean_initial_loss": float(rows.initial_loss.mean()),
            f"{group}/frac_unigram_final": float(np.mean(delta_unigram.abs() <= s.unigram_band)),
            f"{group}/max_dev_p1_given_0": float((rows.p1_given_0 - chain.p).abs().max()),
            f"{group}/max_dev_p1_given_1": float((rows.p1_given_1 - (1 - chain.q)).abs().max()),
        }
        for k in s.plateau_steps:
            excess = rows[f"loss_at_{k}"] - rows.oracle_unigram
            metrics |= {
                f"{group}/max_abs_delta_unigram_at_{k}": float(excess.abs().max()),
                f"{group}/max_loss_minus_unigram_at_{k}": float(excess.max()),
                f"{group}/max_prob_gap_at_{k}": float(rows[f"prob_gap_at_{k}"].max()),
            }
    baseline = metrics[f"{s.chain.tag}/standard/mean_final_loss"]
    for init in s.inits[1:]:
        proposed = metrics[f"{s.chain.tag}/{init}/mean_final_loss"]
        metrics[f"{s.chain.tag}/gap_standard_minus_{init}"] = baseline - proposed
    return metrics


def curves_frame(members: list[Member], trained: TrainedEnsemble) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "chain": m.chain.tag,
                "init": m.init,
                "seed": m.seed,
                "step": int(step),
                "test_loss": float(trained.test_loss[i, k]),
            }
            for i, m in enumerate(members)
            for k, step in enumerate(trained.eval_steps)
        ]
    )


# ----------------------------------------------------------------------------- figure
def _loss_panel(
    ax: Axes,
    curves: pd.DataFrame,
    table: pd.DataFrame,
    chain: BinaryChainSettings,
    s: Fig4Settings,
    per_seed: bool,
) -> None:
    mine = curves[curves.chain == chain.tag]
    rows = table[table.chain == chain.tag]
    if per_seed:
        mine = mine[mine.init == "standard"]
        runs = mine.assign(run="seed " + mine.seed.astype(str))  # the legend names the seed
        plotting.per_seed_lines(ax, runs, x="step", y="test_loss", hue="run")
        ax.set(xlabel="training iteration", ylabel="test loss (nats)")
    else:
        plotting.loss_curves(ax, mine, hue="init", title="")
    bigram, unigram = rows.oracle_bigram.iloc[0], rows.oracle_unigram.iloc[0]
    plotting.reference_line(ax, unigram, "unigram oracle", "unigram")
    plotting.reference_line(ax, bigram, "bigram oracle", "bigram")
    for k in s.plateau_steps:
        ax.axvline(k, color="0.7", lw=0.8, ls=":")
    ax.set_ylim(bigram - 0.015, unigram + 0.04)
    ax.legend(fontsize=7, loc="upper right")


def _init_colors(paths: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """One colour per SGD init, the same in panels (d), (e) and (f)."""
    inits = sorted(paths.init.unique())
    return dict(zip(inits, sns.color_palette("dark", len(inits)), strict=True))


def _sgd_panel(
    ax: Axes,
    paths: pd.DataFrame,
    chain: BinaryChainSettings,
    letter: str,
    colors: dict[str, tuple[float, float, float]],
) -> None:
    """SGD paths of (e, w) over the basins of Thm 2 / Thm 8 (green I_*, red I_min)."""
    axis = np.linspace(-2.0, 2.0, 401)
    w_grid, e_grid = np.meshgrid(axis, axis)
    basin = lg.basin_of(e_grid, w_grid, chain.p, chain.q)
    ax.pcolormesh(
        w_grid,
        e_grid,
        np.where(basin == lg.LimitClass.MIN, 1, 0),
        cmap=ListedColormap(["#c7e9c0", "#fcbba1"]),
        vmin=0,
        vmax=1,
        shading="auto",
        rasterized=True,
    )
    e_star = lg.global_min_locus_e(axis, chain.p, chain.q)
    ax.plot(axis, e_star, "k--", lw=1.1, label=r"$\Theta_\star$: $\Delta = c^*$")
    ax.plot(axis, -e_star, "k--", lw=1.1)
    for init, path in paths[paths.chain == chain.tag].groupby("init"):
        color = colors[init]
        ax.plot(path.w, path.e, color=color, lw=1.5, label=f"SGD from {init}")
        ax.plot(path.w.iloc[0], path.e.iloc[0], "o", color=color, ms=5)
        ax.plot(path.w.iloc[-1], path.e.iloc[-1], "s", color=color, ms=5)
    side = "<" if chain.p + chain.q < 1 else ">"
    ax.set(
        xlim=(-2, 2),
        ylim=(-0.2, 2),
        xlabel="w (feed-forward scalar)",
        ylabel="e (embedding scalar)",
        title=f"({letter}) canonical model + SGD, p={chain.p:g}, q={chain.q:g} (p+q{side}1)\n"
        "green I*, red Imin (Thm 2/8); ○ start, □ end",
    )
    ax.legend(fontsize=7, loc="upper left")


def _gap_panel(
    ax: Axes, paths: pd.DataFrame, s: Fig4Settings, colors: dict[str, tuple[float, float, float]]
) -> None:
    """Delta per SGD run: the init's colour of (d), (e); one line style per chain."""
    styles = {chain.tag: ("-", ":", "-.")[k % 3] for k, chain in enumerate(s.sgd.chains)}
    for (tag, init), path in paths.groupby(["chain", "init"]):
        ax.plot(path.step, path.gap, lw=1.2, color=colors[init], linestyle=styles[tag])
    for chain in s.sgd.chains:
        ax.plot([], [], color="0.3", linestyle=styles[chain.tag], label=chain_label(chain))
        c_star = lg.chain_constants(chain.p, chain.q).c_star
        ax.axhline(c_star, color="k", ls="--", lw=0.9)
        above = c_star >= 0  # outside the band the runs cross on their way from Delta ~ 0
        ax.annotate(
            f"c* ({chain.tag}) = {c_star:.3f}",
            (1, c_star),
            xycoords=ax.get_yaxis_transform(),
            fontsize=7,
            xytext=(-2, 3 if above else -3),
            textcoords="offset points",
            ha="right",
            va="bottom" if above else "top",
        )
    ax.set(
        xlabel="SGD step",
        ylabel="logit gap Δ = e²(1+2w|w|)",
        title="(f) canonical model: Δ → c* (global) or 0 (e → 0)\n"
        "colour: the SGD init, as in (d), (e)",
    )
    ax.margins(y=0.1)  # room for the c* labels
    ax.legend(fontsize=7, loc="center right", framealpha=0.9)


def _off_scale(table: pd.DataFrame, chain: BinaryChainSettings) -> str:
    """A note naming the inits whose initial test loss is far above the plotted range."""
    start = table[table.chain == chain.tag].groupby("init").initial_loss.mean()
    high = [f"{init} starts at {loss:.0f} nats" for init, loss in start.items() if loss > 1.0]
    return f"\n({', '.join(high)})" if high else ""


def _plot(
    s: Fig4Settings, curves: pd.DataFrame, table: pd.DataFrame, paths: pd.DataFrame, ctx: RunContext
) -> None:
    fig, axes = plotting.figure(2, 3, width=5.4, height=4.2)
    _loss_panel(axes[0], curves, table, s.chain, s, per_seed=False)
    axes[0].set_title(
        f"(a) mean ± sd over {len(s.seeds)} seeds, p={s.chain.p:g}, "
        f"q={s.chain.q:g}{_off_scale(table, s.chain)}",
        fontsize=9,
    )
    _loss_panel(axes[1], curves, table, s.chain, s, per_seed=True)
    axes[1].set_title("(b) standard init, each seed (dotted: plateau checks)", fontsize=9)
    _loss_panel(axes[2], curves, table, s.extra_chain, s, per_seed=False)
    axes[2].set_title(
        f"(c) proposed inits on p={s.extra_chain.p:g}, q={s.extra_chain.q:g}, "
        f"{len(s.extra_seeds)} seed(s){_off_scale(table, s.extra_chain)}",
        fontsize=9,
    )
    colors = _init_colors(paths)
    for letter, ax, chain in zip("de", axes[3:5], s.sgd.chains, strict=False):
        _sgd_panel(ax, paths, chain, letter, colors)
    _gap_panel(axes[5], paths, s, colors)
    plotting.finish(
        fig,
        f"Paper B, Fig. 4 — {ctx.scale} scale: d={s.model.n_embd}, N={s.training.seq_len}, "
        f"{s.training.steps} iterations (AdamW, no LayerNorm); (d-f) canonical (e, w, b), SGD "
        f"lr {s.sgd.lr:g}, {s.sgd.steps} steps",
    )
    ctx.save_figure(fig)


def fig4(s: Fig4Settings, ctx: RunContext) -> Metrics:
    """Fig. 4: loss curves per init, per-seed outcomes, plateau checks, canonical SGD."""
    members = members_of(s)
    trained = train(s, members, ctx)
    table = member_table(s, members, trained)
    curves = curves_frame(members, trained)
    metrics = _seed_metrics(s, table, ctx) | group_metrics(s, table)
    paths = canonical_sgd.sgd_paths(s.sgd, canonical_sgd.train_canonical(s.sgd, ctx))
    metrics |= canonical_sgd.sgd_metrics(s.sgd, paths)
    ctx.save_csv(table, "runs.csv")
    ctx.save_csv(curves, "curves.csv")
    ctx.save_csv(paths, "sgd_paths.csv")
    _plot(s, curves, table, paths, ctx)
    return metrics
