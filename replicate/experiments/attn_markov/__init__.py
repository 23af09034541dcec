"""Paper A ("Attention with Markov"): one module per figure or table."""

from replicate.experiments import Experiment, entries

EXPERIMENTS: dict[str, Experiment] = entries(
    __name__,
    {
        "attn_markov_fig3": ("fig3", "Fig3Settings", "fig3"),
        # training figures (fig1, fig4, fig5)
        "attn_markov_fig1": ("fig1", "Fig1Settings", "fig1"),
        "attn_markov_fig4": ("fig4", "Fig4Settings", "fig4"),
        "attn_markov_fig5": ("fig5", "Fig5Settings", "fig5"),
        # theory, data check, tables, App. D
        "attn_markov_theorems": ("theorems", "TheoremSettings", "theorems"),
        "attn_markov_fig2": ("fig2", "Fig2Settings", "fig2"),
        "attn_markov_table1": ("tables", "Table1Settings", "table1"),
        "attn_markov_table2": ("tables", "Table2Settings", "table2"),
        "attn_markov_appD": ("appendix_d", "AppendixDSettings", "appendix_d"),
    },
)
