"""Paper C ("Sub-n-grams are near-stationary points"): one module per figure or table."""

from replicate.experiments import Experiment, entries

EXPERIMENTS: dict[str, Experiment] = entries(
    __name__,
    {
        "subngrams_references": ("references", "ReferencesSettings", "references"),
        "subngrams_fig2": ("fig2", "Fig2Settings", "fig2"),
        "subngrams_thm42": ("thm42", "Thm42Settings", "thm42"),
        "subngrams_prop32": ("prop32", "Prop32Settings", "prop32"),
        "subngrams_fig1": ("fig1", "Fig1Settings", "fig1"),
        "subngrams_fig3": ("fig3", "Fig3Settings", "fig3"),
        "subngrams_fig4": ("fig4", "Fig4Settings", "fig4"),
        "subngrams_fig5": ("fig5", "Fig5Settings", "fig5"),
        "subngrams_fig6": ("fig6", "Fig6Settings", "fig6"),
        "subngrams_fig7": ("fig7", "Fig7Settings", "fig7"),
    },
)
