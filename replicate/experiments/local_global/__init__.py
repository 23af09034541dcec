"""Paper B ("Local to Global"): one module per figure or table."""

from replicate.experiments.base import Experiment
from replicate.experiments.local_global import fig1, fig2, fig3, fig4, fig5, fig6, tables

EXPERIMENTS: dict[str, Experiment] = {
    "local_global_fig1": Experiment(fig1.Fig1Settings, fig1.fig1),
    "local_global_fig2": Experiment(fig2.Fig2Settings, fig2.fig2),
    "local_global_fig3": Experiment(fig3.Fig3Settings, fig3.fig3),
    "local_global_fig4": Experiment(fig4.Fig4Settings, fig4.fig4),
    "local_global_fig5": Experiment(fig5.Fig5Settings, fig5.fig5),
    "local_global_fig6": Experiment(fig6.Fig6Settings, fig6.fig6),
    "local_global_table1": Experiment(tables.Table1Settings, tables.table1),
    "local_global_table2": Experiment(tables.Table2Settings, tables.table2),
}
