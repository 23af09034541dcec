"""Paper B ("Local to Global"): one module per figure or table."""

from replicate.experiments import Experiment, entries

EXPERIMENTS: dict[str, Experiment] = entries(
    __name__,
    {
        "local_global_fig1": ("fig1", "Fig1Settings", "fig1"),
        "local_global_fig2": ("fig2", "Fig2Settings", "fig2"),
        "local_global_fig3": ("fig3", "Fig3Settings", "fig3"),
        "local_global_fig4": ("fig4", "Fig4Settings", "fig4"),
        "local_global_fig5": ("fig5", "Fig5Settings", "fig5"),
        "local_global_fig6": ("fig6", "Fig6Settings", "fig6"),
        "local_global_table1": ("tables", "Table1Settings", "table1"),
        "local_global_table2": ("tables", "Table2Settings", "table2"),
    },
)
