"""Paper A ("Attention with Markov"): one module per figure or table."""

from replicate.experiments.attn_markov import fig3
from replicate.experiments.base import Experiment

EXPERIMENTS: dict[str, Experiment] = {
    "attn_markov_fig3": Experiment(fig3.Fig3Settings, fig3.fig3),
    # training figures (fig1, fig4, fig5)
    # theory, data check, tables, App. D
}
