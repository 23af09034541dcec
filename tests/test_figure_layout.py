"""The figures' layout check (`replicate.plotting.layout_problems`): texts over texts, texts
off the canvas, legends over labels; and no figure of any experiment has one."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from replicate import io, plotting
from replicate.experiments.base import RunContext
from replicate.params import SCALES, Classification, ExperimentEntry
from replicate.training import TrainingContext

from .conftest import LAYOUT_PROBLEMS, tiny_run_of_every_experiment


def _clean_figure() -> Figure:
    """Two panels in the project style: titles, labels, a legend, a suptitle."""
    fig, axes = plotting.figure(1, 2)
    for ax in axes:
        ax.plot([0, 1, 2], [0.2, 0.5, 0.4], label="a line")
        plotting.reference_line(ax, 0.6, "reference", "unigram")
        ax.set(title="a panel", xlabel="training iteration", ylabel="test loss (nats)")
        ax.legend(fontsize=7)
    plotting.finish(fig, "A clean figure")
    return fig


def test_a_clean_figure_passes() -> None:
    fig = _clean_figure()
    assert plotting.layout_problems(fig) == []
    plt.close(fig)


def test_two_texts_over_each_other_are_found() -> None:
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.text(0.40, 0.5, "first words", transform=ax.transAxes)
    ax.text(0.45, 0.5, "second words", transform=ax.transAxes)
    fig.tight_layout()
    (problem,) = plotting.layout_problems(fig)
    assert '"first words" overlaps' in problem and '"second words"' in problem
    plt.close(fig)


def test_colliding_tick_labels_are_found() -> None:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.set_xlim(0, 9)
    ax.set_xticks(range(10), [f"long label {i}" for i in range(10)])
    fig.tight_layout()
    problems = plotting.layout_problems(fig)
    assert (
        'x tick label of panel 0 "long label 0" overlaps x tick label of panel 0 "long label 1"'
        in (problems)
    )
    assert all("x tick label" in p for p in problems)
    plt.close(fig)


def test_a_text_off_the_canvas_is_found() -> None:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.axis("off")  # no tick labels: the title alone
    ax.set_title("a title far too long for a figure three inches wide")
    assert plotting.layout_problems(fig) == [
        'title "a title far too long for a figure three inches …" runs off the canvas'
    ]
    plt.close(fig)


def test_a_legend_over_a_neighbours_labels_is_found() -> None:
    fig, axes = plotting.figure(1, 2, width=3.0, height=2.5)
    for seed in range(3):
        axes[0].plot([0, 1], [seed, seed], label=f"seed {seed}")
    fig.tight_layout()
    axes[0].legend(loc="center left", bbox_to_anchor=(0.9, 0.5))  # onto the right panel
    problems = plotting.layout_problems(fig)
    assert problems
    assert all(
        p.startswith("the legend of panel 0 covers y tick label of panel 1") for p in problems
    )
    plt.close(fig)


def test_what_is_not_drawn_is_ignored() -> None:
    """An invisible text, an empty one and tick labels outside the view are not drawn."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.text(0.5, 0.5, "shown", transform=ax.transAxes)
    ax.text(0.5, 0.5, "hidden", transform=ax.transAxes, visible=False)
    ax.text(0.5, 0.5, "", transform=ax.transAxes)
    ax.set_xticks(np.arange(-50, 51), [f"tick {i}" for i in range(101)])  # all at x = -50..50
    ax.set_xlim(0.0, 1.0)  # only "tick 50" (x = 0) and "tick 51" (x = 1) are in view
    fig.tight_layout()
    assert plotting.layout_problems(fig) == []
    plt.close(fig)


def test_rotated_labels_are_compared_by_their_turned_boxes() -> None:
    """Labels at 45 degrees whose axis-aligned hulls overlap but whose boxes do not pass;
    squeezed together, they collide."""
    labels = [f"p0.{i}_q0.{i}" for i in range(6)]
    fig, ax = plt.subplots(figsize=(3.5, 3))
    ax.bar(labels, np.arange(6))
    ax.tick_params(axis="x", labelrotation=45)
    fig.tight_layout()
    fig.canvas.draw()
    hulls = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert hulls[0].overlaps(hulls[1])
    assert plotting.layout_problems(fig) == []
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {45.0}  # left as drawn
    fig.set_size_inches(1.6, 3)
    ax.tick_params(axis="x", labelsize=12)
    fig.tight_layout()
    assert plotting.layout_problems(fig) == [
        f'x tick label of panel 0 "{a}" overlaps x tick label of panel 0 "{b}"'
        for a, b in pairwise(labels)
    ]
    plt.close(fig)


def _context(tmp_path: Path, stems: tuple[str, ...] = ("figure",)) -> RunContext:
    """A run context writing into ``tmp_path`` that expects each stem's PNG and PDF."""
    entry = ExperimentEntry(
        paper="attn_markov",
        item="check",
        title="a figure",
        source="none",
        outputs=[f"{stem}{suffix}" for stem in stems for suffix in (".png", ".pdf")],
        settings={scale: {} for scale in SCALES},
    )
    shared = Classification(bigram_kappa_min=0.9, unigram_kappa_max=0.1, unigram_kappa_min=-0.2)
    return RunContext("check", entry, "ci", tmp_path, shared, TrainingContext())


def test_save_figure_records_problems_and_writes_the_figure(tmp_path: Path) -> None:
    ctx = _context(tmp_path, ("clean", "crowded"))
    ctx.save_figure(_clean_figure(), "clean")
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.text(0.40, 0.5, "first words", transform=ax.transAxes)
    ax.text(0.45, 0.5, "second words", transform=ax.transAxes)
    fig.tight_layout()
    ctx.save_figure(fig, "crowded")
    assert sorted(ctx.written) == sorted(ctx.entry.outputs)
    assert all((tmp_path / name).stat().st_size > 0 for name in ctx.entry.outputs)
    assert ctx.layout_problems == [
        'crowded: text of panel 0 "first words" overlaps text of panel 0 "second words"'
    ]


def test_a_figure_is_drawn_once_for_the_check_and_the_png_and_once_for_the_pdf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A figure laid out by constrained layout (paper C's) is drawn on the Agg canvas once,
    for the layout check and the PNG, and once for the PDF, at the positions of the checked
    draw: no layout engine is left to lay it out anew (`Figure.savefig` would lay it out by
    a draw of its own before rendering each file: five draws in all)."""
    fig, axes = plt.subplots(1, 2, figsize=(6, 3), layout="constrained")
    for ax in axes:
        ax.plot([0, 1, 2], [0.2, 0.5, 0.4])
        ax.set(title="a panel", xlabel="training iteration", ylabel="test loss (nats)")
    drawn = []
    original = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda f, r: (drawn.append(r), original(f, r))[1])
    engines, save = [], io.save_figure
    monkeypatch.setattr(
        io, "save_figure", lambda f, p: (engines.append(f.get_layout_engine()), save(f, p))[1]
    )
    _context(tmp_path).save_figure(fig)
    assert [type(r).__name__ for r in drawn] == ["RendererAgg", "MixedModeRenderer"]
    assert engines == [None]
    assert (tmp_path / "figure.png").stat().st_size > 0
    assert (tmp_path / "figure.pdf").stat().st_size > 0


def test_the_png_is_what_savefig_writes_and_an_undrawn_figure_is_refused(
    tmp_path: Path,
) -> None:
    """The PNG written from the check's draw has the bytes `Figure.savefig` writes for the
    same figure (one laid out by tight layout draws the same every time)."""
    _context(tmp_path).save_figure(_clean_figure())
    again = _clean_figure()
    again.savefig(tmp_path / "by savefig.png", metadata={"Software": None})
    assert (tmp_path / "figure.png").read_bytes() == (tmp_path / "by savefig.png").read_bytes()
    plt.close(again)
    undrawn, _ = plt.subplots()
    with pytest.raises(ValueError, match="has not been drawn"):
        io.save_drawn_png(undrawn, tmp_path / "undrawn.png")
    assert not (tmp_path / "undrawn.png").exists()
    plt.close(undrawn)


def test_no_figure_of_any_experiment_has_a_layout_problem(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Every figure of the session's tiny run of every experiment (conftest) is clean."""
    root, _ = tiny_run_of_every_experiment(tmp_path_factory)
    problems = json.loads((root / LAYOUT_PROBLEMS).read_text())
    found = [f"{name}/{problem}" for name, mine in problems.items() for problem in mine]
    assert not found, "\n".join(found)
