"""Paper A ("Attention with Markov"): one module per figure or table."""

from replicate.experiments.attn_markov import (
    appendix_d,
    fig1,
    fig2,
    fig3,
    fig4,
    fig5,
    tables,
    theorems,
)
from replicate.experiments.base import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    "attn_markov_fig3": Experiment(fig3.Fig3Settings, fig3.fig3),
    # training figures (fig1, fig4, fig5)
    "attn_markov_fig1": Experiment(fig1.Fig1Settings, fig1.fig1),
    "attn_markov_fig4": Experiment(fig4.Fig4Settings, fig4.fig4),
    "attn_markov_fig5": Experiment(fig5.Fig5Settings, fig5.fig5),
    # theory, data check, tables, App. D
    "attn_markov_theorems": Experiment(theorems.TheoremSettings, theorems.theorems),
    "attn_markov_fig2": Experiment(fig2.Fig2Settings, fig2.fig2),
    "attn_markov_table1": Experiment(tables.Table1Settings, tables.table1),
    "attn_markov_table2": Experiment(tables.Table2Settings, tables.table2),
    "attn_markov_appD": Experiment(appendix_d.AppendixDSettings, appendix_d.appendix_d),
}
