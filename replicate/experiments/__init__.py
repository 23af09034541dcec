"""Experiment registry: one entry per `<paper>_<item>` rule, holding its settings schema.

The registry is lazy (issue 13): a paper package names the module, settings schema and
function of each of its experiments without importing them, so looking an experiment up,
or checking that params.yaml names only implemented ones, imports no experiment code; the
module is imported when its schema or function is first used, and running one experiment
imports its own module only (not its paper's others, nor their heavy dependencies).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
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


SHARED_CODE = (
    "lightning_modules",
    "replicate/__init__.py",
    "replicate/__main__.py",
    "replicate/cli.py",
    "replicate/config.py",
    "replicate/params.py",
    "replicate/settings.py",
    "replicate/io.py",
    "replicate/plotting.py",
    "replicate/provenance.py",
    "replicate/training.py",
    "replicate/lightning_callbacks.py",
    "replicate/analysis",
    "replicate/markov",
    "replicate/theory",
    "replicate/experiments/__init__.py",
    "replicate/experiments/base.py",
    "replicate/experiments/runner.py",
    "replicate/experiments/hyperparameter_tables.py",
)
"""Code every experiment runs through (issue 11: a change to any of it makes every experiment
stale, in Snakemake and in DVC alike)."""

CLAIMS_CODE = (
    "replicate/__init__.py",
    "replicate/__main__.py",
    "replicate/cli.py",
    "replicate/config.py",
    "replicate/params.py",
    "replicate/settings.py",
    "replicate/experiments/__init__.py",
    "replicate/io.py",
    "replicate/provenance.py",
    "replicate/claim_files.py",
    "replicate/claims.py",
    "replicate/verdicts.py",
    "replicate/report.py",
)
"""Code the claims check runs through."""


def code_paths(paper: str | None) -> list[str]:
    """The files and folders whose content shapes paper ``paper``'s outputs (None: the
    claims'): DVC's deps, each folder hashed whole."""
    return [*SHARED_CODE, f"replicate/experiments/{paper}"] if paper else list(CLAIMS_CODE)


def code_dependencies(paper: str | None, root: Path = Path(".")) -> list[str]:
    """`code_paths` with folders expanded to their source files, relative to the project
    ``root``: Snakemake's inputs. The same files DVC hashes (`.dvcignore` leaves out
    ``__pycache__``)."""
    return list(_code_files(paper, root))


@functools.cache
def _code_files(paper: str | None, root: Path) -> tuple[str, ...]:
    files: list[str] = []
    for p in code_paths(paper):
        if (root / p).is_dir():
            files += sorted(
                str(f.relative_to(root))
                for f in (root / p).rglob("*")
                if f.is_file() and "__pycache__" not in f.parts
            )
        else:
            files.append(p)
    return tuple(files)


__all__ = [
    "CLAIMS_CODE",
    "PAPERS",
    "REGISTRY",
    "SHARED_CODE",
    "code_dependencies",
    "code_paths",
    "paper_of",
]
