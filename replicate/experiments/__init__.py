"""Experiment registry: one entry per `<paper>_<item>` rule, holding its settings schema.

The registry is lazy: a paper package names the module, settings schema and function of each
of its experiments without importing them, so looking an experiment up, or checking that
params.yaml names only implemented ones, imports no experiment code; the module is imported
when its schema or function is first used, and running one experiment imports its own module
only (not its paper's others, nor their heavy dependencies).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel

PAPERS: tuple[str, ...] = ("attn_markov", "local_global", "subngrams", "two_layer")
"""Each paper package declares its own ``EXPERIMENTS``; the registry is their union."""


def paper_of(name: str) -> str | None:
    """The paper key an experiment name ``<paper>_<item>`` starts with (None: no paper)."""
    return next((p for p in PAPERS if name.startswith(f"{p}_")), None)


@dataclass(frozen=True)
class Experiment:
    """A registry entry: the module that implements an experiment, and the names in it of
    its settings schema and of its function ``run(settings, ctx) -> metrics``."""

    module: str
    settings: str
    function: str

    @property
    def settings_model(self) -> type[BaseModel]:
        return getattr(importlib.import_module(self.module), self.settings)

    @property
    def run(self) -> Callable[..., dict[str, float]]:
        return getattr(importlib.import_module(self.module), self.function)


def entries(package: str, table: Mapping[str, tuple[str, str, str]]) -> dict[str, Experiment]:
    """A paper's registry from ``name -> (module, settings, function)``, modules relative to
    the paper's ``package``."""
    return {
        name: Experiment(f"{package}.{module}", settings, function)
        for name, (module, settings, function) in table.items()
    }


class _Registry(Mapping[str, Experiment]):
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


__all__ = [
    "PAPERS",
    "REGISTRY",
    "paper_of",
]
