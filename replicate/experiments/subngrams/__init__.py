"""Paper C ("Sub-n-grams are near-stationary points"): one module per figure or table."""

from replicate.experiments.base import Experiment
from replicate.experiments.subngrams import (
    fig1,
    fig2,
    fig3,
    fig4,
    fig5,
    fig6,
    fig7,
    references,
    thm42,
)

EXPERIMENTS: dict[str, Experiment] = {
    "subngrams_references": Experiment(references.ReferencesSettings, references.references),
    "subngrams_fig2": Experiment(fig2.Fig2Settings, fig2.fig2),
    "subngrams_thm42": Experiment(thm42.Thm42Settings, thm42.thm42),
    "subngrams_fig1": Experiment(fig1.Fig1Settings, fig1.fig1),
    "subngrams_fig3": Experiment(fig3.Fig3Settings, fig3.fig3),
    "subngrams_fig4": Experiment(fig4.Fig4Settings, fig4.fig4),
    "subngrams_fig5": Experiment(fig5.Fig5Settings, fig5.fig5),
    "subngrams_fig6": Experiment(fig6.Fig6Settings, fig6.fig6),
    "subngrams_fig7": Experiment(fig7.Fig7Settings, fig7.fig7),
}
