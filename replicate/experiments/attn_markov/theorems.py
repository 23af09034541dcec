"""Paper A, Theorems 1-3, Lemma 1 and the multi-state analogues: exact checks, no training.

Wraps `replicate.theory.attn_markov.run_theorem_checks` (its items 1-9): the
population loss of the single-layer theory model is enumerated exactly in float64 over all
S^N sequences, so gradient norms, Hessian eigenvalues and loss probes carry no Monte-Carlo
noise. Item 10 (App. D arithmetic) belongs to `attn_markov_appD`.

Metrics: every measurement as ``<check id>.<name>`` (check ids contain dots and are used
as keys as they are), ``<check id>.<name>.expected`` for the eigenvalue counts, one
``<check id>.passed`` per check, and the extremes over each theorem's checks that the
claims compare (``A-T1.max_grad_norm``, ...). Nothing here depends on the scale.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from pydantic import Field, model_validator

from replicate import plotting
from replicate.experiments.base import Metrics, RunContext
from replicate.settings import OpenUnit, PositiveInt, Strict
from replicate.theory import attn_markov as am


class SizesSettings(Strict):
    """d, m, r and N of the binary checks (ours: d = m = 3, r = 12, N = 6)."""

    d: PositiveInt
    m: PositiveInt
    r: PositiveInt
    n_positions: PositiveInt

    @model_validator(mode="after")
    def _r_differs_from_d(self) -> SizesSettings:
        if self.r == self.d:
            raise ValueError("r must differ from d: the printed-w_* negative check needs r != d")
        return self


class MultiStateSettings(Strict):
    """A symmetric S-state chain, its sequence length and the switch probabilities tested."""

    n_states: int = Field(ge=3)
    n_positions: PositiveInt
    switch_probs: list[OpenUnit] = Field(min_length=1)


class TheoremSettings(Strict):
    sizes: SizesSettings
    multistate: list[MultiStateSettings] = Field(min_length=1)
    probe_directions: PositiveInt  # random unit directions of the local-minimum probe
    seed: int = Field(ge=0)


# ----------------------------------------------------------------------------- aggregates
@dataclass(frozen=True)
class Extreme:
    """The max or min of some measurements over the checks whose id matches ``pattern``.

    For a "near" measurement the deviation |value - target| is aggregated, else the value.
    """

    key: str
    pattern: str
    names: tuple[str, ...]
    reduce: Callable[[list[float]], float]
    only_switching_above_one: bool = False


_THETA_STAR = r"A-T1\.eq(7|10)\.(tied|untied)\..*"
EXTREMES: tuple[Extreme, ...] = (
    Extreme("A-T1.max_kernel_error", _THETA_STAR, ("kernel_error",), max),
    Extreme("A-T1.max_loss_error", _THETA_STAR, ("loss",), max),
    Extreme("A-T1.max_grad_norm", _THETA_STAR, ("grad_norm",), max),
    Extreme("A-T1.min_hessian_eig", _THETA_STAR, ("hessian_min_eig",), min),
    Extreme("A-T2.theta_pi.max_loss_error", r"A-T2\.theta_pi\..*", ("loss",), max),
    Extreme("A-T2.theta_pi.max_grad_norm", r"A-T2\.theta_pi\..*", ("grad_norm",), max),
    Extreme(
        "A-T2.eq12.max_entry_error",
        r"A-T2\.hessian_blocks\..*",
        ("alpha_block_error", "off_alpha_max"),
        max,
    ),
    Extreme("A-T2.local_min.min_h_alpha_eig", r"A-T2\.local_min\..*", ("h_alpha_min_eig",), min),
    Extreme("A-T2.local_min.min_hessian_eig", r"A-T2\.local_min\..*", ("hessian_min_eig",), min),
    Extreme("A-T2.local_min.min_probe_delta", r"A-T2\.local_min\..*", ("probe_min_delta",), min),
    Extreme("A-T3.theta_pi.max_loss_error", r"A-T3\.theta_pi\..*", ("loss",), max),
    Extreme("A-T3.theta_pi.max_grad_norm", r"A-T3\.theta_pi\..*", ("grad_norm",), max),
    Extreme(
        "A-T3.b5.max_entry_error",
        r"A-T3\.hessian_blocks\..*",
        ("alpha_block_error", "off_alpha_max"),
        max,
    ),
    Extreme(
        "A-T3.saddle.max_hessian_min_eig",
        r"A-T3\.saddle\..*",
        ("hessian_min_eig",),
        max,
        only_switching_above_one=True,
    ),
    Extreme(
        "A-T3.saddle.max_descent_delta",
        r"A-T3\.saddle\..*",
        ("descent_delta",),
        max,
        only_switching_above_one=True,
    ),
    Extreme("A-L1.max_identity_error", r"A-L1\..*", ("eq1_loss", "kl_plus_entropy_rate"), max),
    Extreme("A-MS.max_loss_error", r"A-MS\.(tied|untied)\..*", ("loss",), max),
    Extreme("A-MS.max_grad_norm", r"A-MS\.(tied|untied)\..*", ("grad_norm",), max),
    Extreme("A-MS.tied.max_schur_eig_error", r"A-MS\.tied\..*", ("schur_min_eig",), max),
    Extreme("A-MS.untied.max_hessian_min_eig", r"A-MS\.untied\..*", ("hessian_min_eig",), max),
    Extreme("A-MS.max_e_block_error", r"A-MS\.e_block\..*", ("e_block_error",), max),
)

GROUPS = {
    "A-T1": "Theorem 1: global minima θ* (Eq. 7 for p+q ≤ 1, Eq. 10 for p+q > 1; App. B.1-B.3)",
    "A-T2": "Theorem 2: weight-tied θπ (Eq. 11) and its Hessian (Eq. 12, App. B.4)",
    "A-T3": "Theorem 3: untied extension of θπ is a saddle (App. B.5)",
    "A-L1": "Lemma 1: loss = mean KL + entropy rate",
    "A-MS": "Multi-state analogues (derived here; not claims of the paper)",
}


def _switching(check_id: str) -> float:
    """p + q of the binary chain named in a check id (``...p0.5_q0.8...``)."""
    p, q = re.search(r"p(\d+(?:\.\d+)?)_q(\d+(?:\.\d+)?)", check_id).groups()  # type: ignore[union-attr]
    return float(p) + float(q)


def _size(m: am.Measurement) -> float:
    return abs(m.value - m.target) if m.relation == "near" else float(m.value)


def _extreme(rows: list[am.CheckRow], spec: Extreme) -> float:
    chosen = [r for r in rows if re.fullmatch(spec.pattern, r.check_id)]
    if spec.only_switching_above_one:
        chosen = [r for r in chosen if _switching(r.check_id) > 1]
    values = [_size(m) for r in chosen for m in r.measurements if m.name in spec.names]
    return float(spec.reduce(values)) if values else float("nan")


def theorem_metrics(rows: list[am.CheckRow]) -> Metrics:
    """Measurements, count targets, per-check pass flags and per-theorem extremes."""
    metrics: Metrics = dict(am.flat_metrics(rows))
    for row in rows:
        metrics[f"{row.check_id}.passed"] = float(row.passed)
        for m in row.measurements:
            if m.relation == "==":
                metrics[f"{row.check_id}.{m.name}.expected"] = float(m.bound)
    metrics.update({spec.key: _extreme(rows, spec) for spec in EXTREMES})
    metrics["A-MS.tied.n_negative_mismatches"] = float(
        sum(
            not m.passed
            for r in rows
            if r.check_id.startswith("A-MS.tied.")
            for m in r.measurements
            if m.name == "n_negative"
        )
    )
    metrics["checks.n_total"] = float(len(rows))
    metrics["checks.n_failed"] = float(sum(not r.passed for r in rows))
    return metrics


# ----------------------------------------------------------------------------- tables
def measurement_table(rows: list[am.CheckRow]) -> pd.DataFrame:
    """One row per measurement: check, group, description, value, criterion, pass."""
    return pd.DataFrame(
        [
            {
                "check_id": r.check_id,
                "group": r.check_id.split(".")[0],
                "description": r.description,
                "measurement": m.name,
                "value": m.value,
                "criterion": m.criterion,
                "passed": m.passed,
            }
            for r in rows
            for m in r.measurements
        ]
    )


def markdown_table(rows: list[am.CheckRow]) -> str:
    """The checks grouped by theorem, one line per check with its measurements."""
    lines = [
        "# Paper A: exact checks of Theorems 1-3 (float64, population loss enumerated)",
        "",
        "Each line is one check of a theorem of the paper; a check passes when all its "
        "measurements meet their criteria. Values are exact up to float64 round-off.",
    ]
    for prefix, title in GROUPS.items():
        group = [r for r in rows if r.check_id.startswith(prefix + ".")]
        if not group:
            continue
        lines += [
            "",
            f"## {title}",
            "",
            "| check | what | measurements | pass |",
            "|---|---|---|---|",
        ]
        for r in group:
            shown = "; ".join(f"{m.name} = {m.value:.4g} ({m.criterion})" for m in r.measurements)
            mark = "✅" if r.passed else "❌"
            lines.append(f"| `{r.check_id}` | {_cell(r.description)} | {_cell(shown)} | {mark} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Table-safe text: a literal '|' (as in |value - target|) would end the cell."""
    return text.replace("|", "\\|")


# ----------------------------------------------------------------------------- figure
@dataclass(frozen=True)
class SpectrumCase:
    label: str
    p: float
    q: float
    tied: bool
    zero_positions: bool


SPECTRUM_CASES = (
    SpectrumCase("tied, p+q>1\n(0.5, 0.8): minimum", 0.5, 0.8, True, False),
    SpectrumCase("tied, p+q<1\n(0.2, 0.3), $p_n=0$: saddle", 0.2, 0.3, True, True),
    SpectrumCase("untied\n(0.5, 0.8): saddle", 0.5, 0.8, False, False),
)


def theta_pi_spectrum(
    case: SpectrumCase, sizes: am.ModelSizes, generator: torch.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues of the autograd Hessian at θπ, eigenvalues of the closed-form H_α)."""
    p_n = torch.zeros(sizes.n_positions, sizes.d, dtype=am.DTYPE) if case.zero_positions else None
    theta = am.theta_pi(case.p, case.q, sizes, generator, tied=case.tied, p_n=p_n)
    hessian = am.loss_hessian(theta, am.binary_law(case.p, case.q, sizes.n_positions))
    build = am.hessian_alpha_tied if case.tied else am.hessian_alpha_untied
    closed = build(case.p, case.q, theta.p_n)
    return torch.linalg.eigvalsh(hessian).numpy(), torch.linalg.eigvalsh(closed).numpy()


def _plot_spectra(ax, s: TheoremSettings) -> None:
    sizes = am.ModelSizes(**s.sizes.model_dump())
    generator = torch.Generator().manual_seed(s.seed)
    with torch.no_grad():
        spectra = [theta_pi_spectrum(c, sizes, generator) for c in SPECTRUM_CASES]
    for x, (full, closed) in enumerate(spectra):
        nonzero = full[np.abs(full) > am.ZERO_EIG_TOL]
        ax.scatter(
            np.full(nonzero.size, x),
            nonzero,
            marker="_",
            s=500,
            color="tab:blue",
            label="autograd Hessian (nonzero)" if x == 0 else None,
        )
        ax.scatter(
            np.full(closed.size, x),
            closed,
            marker="o",
            s=40,
            facecolors="none",
            edgecolors="tab:red",
            label="closed form $H_\\alpha$ (Eq. 12 / B.5)" if x == 0 else None,
        )
        ax.annotate(  # right of the bars (half-width 11 points), just above the zero line
            f"+{full.size - nonzero.size} zero",
            (x, 0),
            textcoords="offset points",
            xytext=(14, 2),
            fontsize=8,
        )
        values, counts = np.unique(nonzero.round(6), return_counts=True)
        for value, count in zip(values, counts, strict=True):
            if count > 1:
                ax.annotate(
                    f"×{count}", (x, value), textcoords="offset points", xytext=(14, -3), fontsize=8
                )
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_xticks(range(len(SPECTRUM_CASES)), [c.label for c in SPECTRUM_CASES], fontsize=8)
    ax.set(
        title="(a) Hessian spectrum at θπ (Eq. 11), exact",
        ylabel="eigenvalue",
        xlim=(-0.5, len(SPECTRUM_CASES) - 0.3),
    )
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 0.12))


def _plot_threshold(ax, s: TheoremSettings, metrics: Metrics) -> None:
    grid = np.linspace(0.02, 0.98, 200)
    for case, color in zip(s.multistate, ("tab:purple", "tab:green", "tab:orange"), strict=False):
        n = case.n_states
        curve = [am.tied_multistate_schur_min(n, p) for p in grid]
        ax.plot(grid, curve, color=color, linewidth=1.2, label=f"S={n}: min(0, (2/S)(pS/(S−1)−1))")
        measured = [metrics[f"A-MS.tied.S{n}.p{p:g}.schur_min_eig"] for p in case.switch_probs]
        ax.scatter(
            case.switch_probs, measured, color=color, zorder=3, label=f"S={n}: exact Hessian"
        )
        ax.axvline((n - 1) / n, color=color, linestyle=":", linewidth=1)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set(
        title="(b) tied θπ$^S$, constant $p_n$: saddle iff p < (S−1)/S (derived)",
        xlabel="switch probability p",
        ylabel="smallest eigenvalue of the E-block\n(Schur complement over b)",
    )
    ax.legend(fontsize=7)


def _plot(s: TheoremSettings, metrics: Metrics, ctx: RunContext) -> None:
    fig, axes = plotting.figure(1, 2, width=5.5, height=4.0)
    _plot_spectra(axes[0], s)
    _plot_threshold(axes[1], s, metrics)
    plotting.finish(
        fig,
        f"Paper A, Theorems 2-3 and the multi-state analogue — float64 enumeration, "
        f"d={s.sizes.d}, r={s.sizes.r}, N={s.sizes.n_positions}",
    )
    ctx.save_figure(fig)


# ----------------------------------------------------------------------------- experiment
def theorems(s: TheoremSettings, ctx: RunContext) -> Metrics:
    """Items 1-9 of `run_theorem_checks`: the table of exact checks, the figure and the metrics."""
    rows = am.run_theorem_checks(
        am.ModelSizes(**s.sizes.model_dump()),
        [am.MultiStateCase(c.n_states, c.n_positions, tuple(c.switch_probs)) for c in s.multistate],
        n_probe_directions=s.probe_directions,
        seed=s.seed,
        appendix_d=False,
    )
    metrics = theorem_metrics(rows)
    ctx.save_csv(measurement_table(rows), "checks.csv")
    ctx.save_text(markdown_table(rows), "checks.md")
    _plot(s, metrics, ctx)
    return metrics
