"""Experiment registry: one entry per `<paper>_<item>` rule, holding its settings schema."""

from __future__ import annotations

from pathlib import Path

from replicate.experiments import attn_markov, local_global, subngrams, two_layer
from replicate.experiments.base import Experiment, RunContext, run_experiment

# Each paper module declares its own EXPERIMENTS; the registry is their union.
REGISTRY: dict[str, Experiment] = {
    **attn_markov.EXPERIMENTS,
    **local_global.EXPERIMENTS,
    **subngrams.EXPERIMENTS,
    **two_layer.EXPERIMENTS,
}


SHARED_CODE = (
    "lightning_modules",
    "replicate/markov",
    "replicate/theory",
    "replicate/experiments/base.py",
    "replicate/analysis",
    "replicate/io.py",
    "replicate/plotting.py",
    "replicate/training.py",
)


def code_dependencies(paper: str) -> list[str]:
    """Source files whose change makes a paper's experiments stale (Snakemake inputs)."""
    paths = [*SHARED_CODE, f"replicate/experiments/{paper}"]
    files: list[str] = []
    for p in map(Path, paths):
        files += sorted(str(f) for f in p.rglob("*.py")) if p.is_dir() else [str(p)]
    return files


__all__ = [
    "REGISTRY",
    "SHARED_CODE",
    "Experiment",
    "RunContext",
    "code_dependencies",
    "run_experiment",
]
