"""Experiment registry: one entry per `<paper>_<item>` rule, holding its settings schema."""

from __future__ import annotations

from replicate.experiments import attn_markov
from replicate.experiments.base import Experiment, RunContext, run_experiment

REGISTRY: dict[str, Experiment] = {
    "attn_markov_fig3": Experiment(attn_markov.Fig3Settings, attn_markov.fig3),
}

__all__ = ["REGISTRY", "Experiment", "RunContext", "run_experiment"]
