"""Experiment registry: one entry per `<paper>_<item>` rule, holding its settings schema.

The registry is lazy (issue 13): looking up ``attn_markov_fig3`` imports paper A's package
only, so a job that runs one experiment never imports the other papers' code (and their
heavy dependencies); iterating over the registry imports every paper.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from replicate.experiments.base import Experiment, RunContext, run_experiment

PAPERS: tuple[str, ...] = ("attn_markov", "local_global", "subngrams", "two_layer")
"""Each paper package declares its own ``EXPERIMENTS``; the registry is their union."""


def paper_of(name: str) -> str | None:
    """The paper key an experiment name ``<paper>_<item>`` starts with (None: no paper)."""
    return next((p for p in PAPERS if name.startswith(f"{p}_")), None)


class _Registry(Mapping[str, "Experiment"]):
    """Name -> `Experiment`, importing a paper's package the first time one of its
    experiments is looked up."""

    def _paper(self, paper: str) -> Mapping[str, Experiment]:
        return importlib.import_module(f"replicate.experiments.{paper}").EXPERIMENTS

    def __getitem__(self, name: str) -> Experiment:
        paper = paper_of(name)
        if paper is None:
            raise KeyError(name)
        return self._paper(paper)[name]

    def __contains__(self, name: object) -> bool:
        paper = paper_of(name) if isinstance(name, str) else None
        return paper is not None and name in self._paper(paper)

    def __iter__(self) -> Iterator[str]:
        for paper in PAPERS:
            yield from self._paper(paper)

    def __len__(self) -> int:
        return sum(len(self._paper(p)) for p in PAPERS)


REGISTRY: Mapping[str, Experiment] = _Registry()


SHARED_CODE = (
    "lightning_modules",
    "replicate/markov",
    "replicate/theory",
    "replicate/experiments/base.py",
    "replicate/experiments/hyperparameter_tables.py",
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


_FROM_BASE = ("Experiment", "RunContext", "run_experiment")


def __getattr__(name: str) -> Any:
    """`Experiment`, `RunContext` and `run_experiment` load the runner (torch) on first use."""
    if name in _FROM_BASE:
        from replicate.experiments import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PAPERS",
    "REGISTRY",
    "SHARED_CODE",
    "Experiment",
    "RunContext",
    "code_dependencies",
    "paper_of",
    "run_experiment",
]
