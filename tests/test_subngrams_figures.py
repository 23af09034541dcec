"""Paper C's figures draw what their claims read, with no text over another: Figs. 3 and 4's
maps are of the seed whose heads switch (Fig. 4's those its probe averages, as attention.csv
keeps them), Figs. 1/6/7 mark the plateaus and their orders on their own panels (no twin
axis), Thm. 4.2's norms sit on log axes, Fig. 4 names its runs, long titles wrap. Every
figure is drawn from synthetic saved outputs (no training)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

from replicate import io, plotting
from replicate.config import load_params
from replicate.experiments.subngrams import drawing, fig3, fig4, fig5, thm42
from replicate.experiments.subngrams.general import (
    attention_map_probe,
    attention_mass_probe,
    general_config,
)
from replicate.experiments.subngrams.stages import masses_of
from replicate.training import gpt_ensemble


def _settings(name: str, model: type):
    ci = load_params(scale="ci", only=[name]).experiment(name).settings["ci"]
    return model(**ci)


def _clean(fig: Figure) -> None:
    """A title and no layout problem (no text over another, none off the canvas, the title
    included); closes ``fig``."""
    assert fig.get_suptitle()
    assert plotting.layout_problems(fig) == []
    plt.close(fig)


# ----------------------------------------------------------------------------- Fig. 3, Fig. 5
SEEDS = [1, 2, 3]
STEPS = np.arange(0, 16385, 1024)
T = 8


def _maps(members: int, n: int, seq_len: int, switched: int) -> torch.Tensor:
    """Causal first-layer maps (members, n, 2, T, T): every head uniform at first and on the
    (-1)-token from the middle on; member ``switched``'s second head on the (-2)-token at the
    end."""
    causal = torch.tril(torch.ones(seq_len, seq_len))
    uniform = causal / causal.sum(-1, keepdim=True)
    shifted = [torch.diag_embed(torch.ones(seq_len - d), offset=-d) for d in (1, 2)]
    on = [uniform.clone() for _ in shifted]
    for d, (target, shift) in enumerate(zip(on, shifted, strict=True), start=1):
        target[d:] = shift[d:]
    attention = uniform.repeat(members, n, 2, 1, 1)
    attention[:, n // 2 :] = on[0]
    attention[switched, -1, 1] = on[1]
    return attention


def _histories() -> dict:
    """Fig. 3's histories.pt: `_maps` of the three seeds, seed 3's heads switching."""
    n = len(STEPS)
    loss = torch.linspace(1.70, 1.60, n).repeat(len(SEEDS), 1)
    return {
        "seeds": SEEDS,
        "steps": torch.tensor(STEPS),
        "test_loss": loss,
        "attention": _maps(len(SEEDS), n, T, switched=2),
        "levels": torch.tensor([1.6256, 1.6112, 1.4326]),
        "level_noise": 0.003,
    }


def _fig3_metrics(switched: set[int]) -> dict[str, float]:
    metrics = {}
    for seed in SEEDS:
        metrics |= {
            f"seed{seed}/final_switch": float(seed in switched),
            f"seed{seed}/has_second_plateau": 1.0,
            f"seed{seed}/plateau_t0": 1024.0,
            f"seed{seed}/plateau_t1": 5120.0,
            f"seed{seed}/plateau_level": 1.634,
            f"seed{seed}/plateau_order": 1.0,
        }
    return metrics


def _fig3_curves() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"seed": seed, "step": int(t), **{f"kl_{k}-gram": 0.1 * k for k in (1, 2, 3)}}
            for seed in SEEDS
            for t in STEPS
        ]
    ).assign(test_loss=1.62)


@pytest.mark.parametrize(("switched", "shown"), [({2, 3}, 2), (set(), 1)])
def test_fig3_maps_are_of_the_first_seed_whose_heads_switch(switched: set[int], shown: int):
    s = _settings("subngrams_fig3", fig3.Fig3Settings)
    saved, metrics = _histories(), _fig3_metrics(switched)
    assert fig3.shown_seed(SEEDS, metrics) == shown
    fig = fig3.draw(saved, _fig3_curves(), metrics, s, "ci")
    title = fig.get_suptitle().replace("\n", " ")
    assert f"seed {shown}, the first seed whose heads switch" in title or (
        not switched and f"seed {shown} (no seed's heads switch" in title
    )
    columns = fig3.map_columns(STEPS, metrics, shown, s)
    assert [j for j, _ in columns] == [0, 3, len(STEPS) - 1]  # t = 115 -> 0, 3072, the end
    maps = [ax for ax in fig.axes if ax.images]
    assert len(maps) == 2 * len(columns)
    expected = saved["attention"][SEEDS.index(shown)]
    for ax, (h, (j, _)) in zip(maps, [(h, c) for h in range(2) for c in columns], strict=True):
        assert np.array_equal(ax.images[0].get_array(), expected[j, h].numpy())
    _clean(fig)


def test_fig5_names_each_seed_and_when_its_heads_form():
    saved = _histories()
    table = pd.DataFrame(
        {
            "seed": SEEDS,
            "t_first_on_1": [8192.0] * 3,
            "t_first_on_2": [math.inf, math.inf, 16384.0],
            "plateau_mid": [3072.0, 3072.0, np.nan],
        }
    )
    fig = fig5.draw(table, saved, "ci")
    titles = [ax.get_title() for ax in fig.axes if ax.images]
    assert len(titles) == 2 * 2  # two heads of the two seeds with a second plateau
    assert "seed 1, t = 3072" in titles[0] and "on −2: never" in titles[0]
    _clean(fig)


# ----------------------------------------------------------------------------- Figs. 1, 6, 7
def test_loss_and_gradient_marks_plateaus_on_their_own_panels():
    steps = np.arange(0, 3001, 16)
    loss = np.interp(steps, [0, 400, 1100, 1600, 3000], [1.06, 0.99, 0.985, 0.94, 0.94])
    curves = pd.concat(
        pd.DataFrame(
            {"seed": seed, "step": steps, "test_loss": loss, "grad_norm": 0.05 + 0.01 * seed}
        )
        for seed in (0, 1)
    )
    plateaus = pd.DataFrame(
        {
            "seed": [0, 0, 1],
            "t0": [400, 1632, 400],
            "t1": [1088, 3000, 3000],
            "level": [0.99, 0.94, 0.97],
            "order": [2, 3, None],
            "orders_within_noise": ["2 3", "3", "none"],
        }
    )
    marks = {seed: drawing.marks_from_frame(plateaus[plateaus.seed == seed]) for seed in (0, 1)}
    assert [m.label for m in marks[0]] == ["k=2/3", "k=3"]
    assert [m.label for m in marks[1]] == ["k=?"]
    levels = [1.0554, 1.0122, 0.9329, 0.7592]
    fig = drawing.loss_and_gradient(curves, levels, marks, "Paper C, Fig. 1 — a test")
    assert len(fig.axes) == 4  # a loss and a gradient panel per seed, no twin axis
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert labels == ["k=2/3", "k=3", "k=?"]
    assert "order a or b within the test loss's noise" in fig.get_suptitle().replace("\n", " ")
    _clean(fig)


def test_a_long_title_is_wrapped_to_the_canvas():
    fig, _ = drawing.figure(1, 1, width=5.0, height=3.6)
    drawing.finish(fig, "Paper C, Fig. 7 — " + "a long description of the run, " * 6)
    assert "\n" in fig.get_suptitle()
    _clean(fig)


# ----------------------------------------------------------------------------- Fig. 4
def test_the_map_probe_averages_causal_maps_whose_masses_the_mass_probe_reads():
    """Layer 1's maps of the general transformer, averaged over the probe sequences: causal,
    each row a distribution, one set per member; the masses F4b and F4c read are theirs."""
    cfg = general_config(states=3, order=3, seq_len=8, embedding="learned", mlp="none")
    model = gpt_ensemble(cfg, [0, 1])
    tokens = torch.randint(0, 3, (1, 5, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        maps = attention_map_probe(tokens)(model)
        masses = attention_mass_probe(tokens)(model)
    assert maps.shape == (2, 2, 8, 8)  # (members, heads, T, T)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-6)
    assert np.all(np.triu(maps, k=1) == 0.0)
    assert not np.allclose(maps[0], maps[1])  # one set per member
    np.testing.assert_array_equal(masses, masses_of(torch.from_numpy(maps)))


def _fig4_outputs(s: fig4.Fig4Settings, tmp_path: Path):
    """curves.csv, attention.csv (written and read back), metrics and plateaus of a run where
    only the second seed's heads end on the (-1)- and (-2)-token (F4c)."""
    steps = np.arange(0, 1201, 16)
    curves = pd.DataFrame(
        [
            {"embedding": e, "seed": seed, "step": int(t), "test_loss": 1.1 - 1e-4 * t}
            for e in s.embeddings
            for seed in s.seeds
            for t in steps
        ]
    )
    levels = {1: 1.07, 2: 1.04, 3: 0.95}
    metrics = {f"{e}/kgram/b{k}": b for e in s.embeddings for k, b in levels.items()}
    maps = _maps(len(s.seeds), len(steps), s.training.seq_len, switched=1).numpy()
    rows = []
    for e in s.embeddings:
        for i, seed in enumerate(s.seeds):
            values = {
                "b_read_step": 304.0,
                "b_read_at_marked_step": 0.0,
                fig4.CLAIMED["F4c"]: float(i == 1),
            }
            metrics |= {f"{e}/seed{seed}/{k}": v for k, v in values.items()}
            columns = fig4.map_columns(steps, values)
            rows.append(fig4.attention_rows(e, seed, steps, maps[i], columns))
    io.write_csv(tmp_path / "attention.csv", pd.concat(rows, ignore_index=True))
    attention = pd.read_csv(tmp_path / "attention.csv")
    mark = drawing.PlateauMark(400.0, 1200.0, 0.97, 3, (3,))
    plateaus = {(e, seed): [mark] for e in s.embeddings for seed in s.seeds}
    return steps, maps, curves, attention, metrics, plateaus


def test_fig4_draws_the_saved_maps_of_the_seed_whose_heads_switch(tmp_path: Path):
    s = _settings("subngrams_fig4", fig4.Fig4Settings)
    steps, maps, curves, attention, metrics, plateaus = _fig4_outputs(s, tmp_path)
    by_row = attention.groupby(["embedding", "seed", "column", "head", "query"]).weight.sum()
    np.testing.assert_allclose(by_row, 1.0, atol=1e-5)  # every saved row a distribution
    assert sorted(attention.step.unique()) == [0, 304, 1200]  # start, F4b's read, the end
    assert set(attention.what) == {
        "start of training", "middle of the bigram plateau", "end of training",
    }  # fmt: skip
    fig = fig4.draw(curves, attention, metrics, plateaus, s, "ci")
    shown = 1  # the second seed's heads switch (F4c), the first seed's do not
    assert [fig4.shown_seed(e, metrics, s) for e in s.embeddings] == [s.seeds[shown]] * 2
    map_axes = [ax for ax in fig.axes if ax.images]
    columns = [0, int(np.flatnonzero(steps == 304)[0]), len(steps) - 1]
    assert len(map_axes) == len(s.embeddings) * 2 * len(columns)  # embeddings x heads x steps
    expected = [maps[shown, j, h] for _ in s.embeddings for h in range(2) for j in columns]
    for ax, drawn in zip(map_axes, expected, strict=True):
        np.testing.assert_allclose(ax.images[0].get_array(), drawn, atol=1e-6)
    end_head_2 = map_axes[2 * len(columns) - 1].get_title()
    assert "end of training, t = 1200" in end_head_2 and "m(1) = 0.00, m(2) = 1.00" in end_head_2
    loss_axes = [ax for ax in fig.axes if ax.get_legend() is not None]
    for ax, embedding in zip(loss_axes, s.embeddings, strict=True):
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == [f"seed {seed}: plateaus at k = 3" for seed in s.seeds]
        title = ax.get_title()
        assert fig4.EMBEDDING_NAMES.get(embedding, embedding) in title
        assert f"seed {s.seeds[shown]}'s heads, the first to end on −1 and −2" in title
    _clean(fig)


# ----------------------------------------------------------------------------- Thm. 4.2
def test_thm42_draws_positive_norms_on_log_axes():
    s = _settings("subngrams_thm42", thm42.Thm42Settings)
    rows = []
    for seq_len, points in thm42._evaluations(s):  # the experiment's grid
        for eps in s.eps:
            for label, k, c in points:
                zero = k == 3 and c == s.reference_scale and eps == s.eps[0]
                rows.append(
                    {"T": seq_len, "point": label, "k": k, "c": c, "eps": eps, "loss": 1.0,
                     "grad_norm": 0.0 if zero else 0.5 / (k + 1), "noise_floor": 0.05}
                )  # fmt: skip
    table = pd.DataFrame(rows)
    lengths = sorted({*s.seq_lens, *s.diagonal_seq_lens})
    general = pd.DataFrame(
        [{"T": t, "k": k, "c": t / 2, "grad_norm": 1e5 / t, "noise_floor": 1e3, "loss": 1.0}
         for t in lengths for k in (2, 3)]
    )  # fmt: skip
    first_term = pd.DataFrame(
        [{"T": t, "k": k, "sq_error": k / t, "sem": 0.01 / t}
         for t in s.first_term_seq_lens for k in (1, 2, 3)]
    )  # fmt: skip
    fig = thm42.draw(table, general, first_term, s, "ci")
    assert len(fig.axes) == 6  # a 2 x 3 grid, not a strip
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
        assert ax.get_ylim()[0] > 0
    hollow = [
        line
        for line in fig.axes[0].get_lines()
        if line.get_marker() == "v" and len(line.get_ydata())
    ]
    assert hollow and all(np.allclose(line.get_ydata(), 0.05) for line in hollow)
    _clean(fig)
