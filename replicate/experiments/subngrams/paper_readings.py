"""Paper C's own test-loss curves as we read them off its figures: the positive control of
our plateau detector (the paper has none).

Each reading is a (step, loss) point we read by eye off a figure of paper C (as the authors'
notebooks show it, about +-0.003 nats and +-5 % in steps), together with the figure's dashed lines
b_1 > ... > b_n and the plateaus the figure shows. `FigureReadings.curve` evaluates the
readings at the cadence the harness evaluates that figure's runs at, so that the stage
analysis, with the settings params.yaml gives the figure, can be run on the paper's curve
itself: a plateau it misses there, it misses on a run that reproduces the paper exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PaperPlateau:
    """A plateau a figure shows: the k-gram order of its level and its span (steps)."""

    order: int
    t0: float
    t1: float


@dataclass(frozen=True)
class FigureReadings:
    """One figure's test-loss curve as (step, loss) readings in increasing steps, its dashed
    lines b_1 > ... > b_n and its plateaus; ``experiment`` names the params.yaml entry that
    replicates the figure."""

    experiment: str
    readings: tuple[tuple[float, float], ...]
    baselines: tuple[float, ...]
    plateaus: tuple[PaperPlateau, ...]

    def curve(
        self, eval_every: int, noise: float = 0.0, seed: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """(steps, losses) at steps 0, E, 2E, ... up to the last reading (E = ``eval_every``).

        The losses interpolate the readings piecewise-linearly (`numpy.interp`): between two
        readings the loss changes at a constant rate, so a drop the figure shows as sharp
        but we read at its two ends only (Fig. 1's at ~1,650-2,500, Fig. 4's at
        ~320-800) becomes a slower ramp, which blurs a plateau's edge more, not less. With
        ``noise`` > 0, independent Gaussian noise of that standard deviation (nats) is added
        at each evaluation, drawn from ``numpy.random.default_rng(seed)``: deterministic.
        """
        t, loss = (np.array(v, dtype=np.float64) for v in zip(*self.readings, strict=True))
        steps = np.arange(0.0, t[-1] + 1.0, eval_every)
        clean = np.interp(steps, t, loss)
        if noise == 0.0:
            return steps, clean
        return steps, clean + np.random.default_rng(seed).normal(0.0, noise, steps.shape)


def standard_error(test_sequences: int) -> float:
    """The Monte-Carlo standard error (nats) of a test loss over ``test_sequences``
    sequences: 0.005 at 2^12, falling as one over the square root of their number (our
    estimate: about 0.005 nats at 2^12 and 0.002 at 2^14)."""
    return 0.005 * math.sqrt(2**12 / test_sequences)


FIG1 = FigureReadings(
    experiment="subngrams_fig1",
    readings=(
        # paper C, Fig. 1 (our reading by eye): "From 1.10, fast to a plateau at
        # ≈1.058 (about steps 20-250)"; 1.10 = ln 3, the uniform prediction over S = 3
        (0.0, 1.10),
        (20.0, 1.058),
        (250.0, 1.058),
        # "A plateau at ≈1.003-1.008 (about steps 450-1650)", falling along it
        (450.0, 1.008),
        (1650.0, 1.003),
        # "A drop to ≈0.93 around step 2500, then a slow fall to 0.917 by 6000"
        (2500.0, 0.93),
        (6000.0, 0.917),
    ),
    # paper C, Fig. 1's dashed lines, k = 1..4 (read by eye off the figure)
    baselines=(1.057, 1.015, 0.929, 0.762),
    # paper C, Fig. 1 (our reading): unigram, bigram, then trigram until the run's end; the
    # curve never reaches the 4-gram level
    plateaus=(
        PaperPlateau(order=1, t0=20.0, t1=250.0),
        PaperPlateau(order=2, t0=450.0, t1=1650.0),
        PaperPlateau(order=3, t0=2500.0, t1=6000.0),
    ),
)
"""Paper C, Fig. 1: the 4-gram task (S = 3, n = 4, T = 128, alpha = 0.5; inferred from its
curve and dashed lines)."""

FIG4 = FigureReadings(
    experiment="subngrams_fig4",
    readings=(
        # paper C, Fig. 4 (a) and (c) (our reading by eye; one-hot and learned
        # embeddings look almost the same): "1.098 = ln 3 -> 1.064 at t ≈ 30-50", read at 40
        (0.0, 1.098),
        (40.0, 1.064),
        # "plateau ≈1.03 around t = 200-300", until the "sharp drop at ≈320"
        (200.0, 1.03),
        (300.0, 1.03),
        (320.0, 1.03),
        # "to ≈0.97 by 800" (the figure is cut at 900 steps)
        (800.0, 0.97),
    ),
    # paper C, Fig. 4's dashed lines, k = 1..3: the add-alpha losses of its setting (S = 3,
    # n = 3, T = 32, alpha = 1 of App. I.1; computed by us on 2^14 sequences)
    baselines=(1.0747, 1.0405, 0.9521),
    # paper C, Fig. 4 (our reading): the bigram plateau before the drop near step 320
    plateaus=(PaperPlateau(order=2, t0=200.0, t1=320.0),),
)
"""Paper C, Fig. 4: the general attention-only transformer (S = 3, n = 3, T = 32,
alpha = 1; App. I.1), read up to step 800."""
