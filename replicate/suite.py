"""Run the whole suite in a fresh clone of the project under a perturbation: what the
stability check (`replicate.stability`: numerically neutral changes, and a redraw of every
seed) and the negative control (`replicate.controls`, learning switched off) both do, each
with its own perturbations."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replicate import verdicts
from replicate.verdicts import ClaimRecord


@dataclass(frozen=True)
class Perturbation:
    """One change to how the suite runs: environment variables set for every job, and
    optionally the torch thread count (``runtime.threads`` in the clone's params.yaml) or a
    shift of every seed there (``seed_offset``, `shift_seeds`)."""

    what: str
    env: dict[str, str] = field(default_factory=dict)
    threads: int | None = None
    seed_offset: int | None = None


def shift_seeds(node: Any, offset: int) -> None:
    """Add ``offset`` to every seed in the parsed params.yaml ``node``, in place: the integer
    of each key named ``seed`` or ending in ``_seed`` (``test_seed``) and each integer of a
    list under a key ending in ``seeds`` (``seeds``, ``extra_seeds``), at any depth, both
    scales. Every experiment draws its initialisation and data from streams of these seeds
    (`lightning_modules.seeding`), so the shifted suite draws everything anew from the same
    laws."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("seed") and isinstance(value, int) and not isinstance(value, bool):
                node[key] = value + offset
            elif key.endswith("seeds") and isinstance(value, list):
                for i, seed in enumerate(value):
                    if isinstance(seed, int):
                        value[i] = seed + offset
            else:
                shift_seeds(value, offset)
    elif isinstance(node, list):
        for item in node:
            shift_seeds(item, offset)


def _edit_params(params_file: Path, perturbation: Perturbation) -> None:
    """Apply ``perturbation``'s thread count and seed shift to a clone's params.yaml,
    keeping the rest of the file (comments, order, layout)."""
    if perturbation.threads is None and perturbation.seed_offset is None:
        return
    from ruamel.yaml import YAML

    yaml = YAML()
    data = yaml.load(params_file)
    if perturbation.threads is not None:
        data["runtime"]["threads"] = perturbation.threads
    if perturbation.seed_offset is not None:
        shift_seeds(data, perturbation.seed_offset)
    with params_file.open("w") as handle:
        yaml.dump(data, handle)


def clone_project(root: Path, commit: str, clone: Path) -> Path:
    """A fresh clone of the project ``root`` at ``commit``, in ``clone``."""
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "--quiet", str(root), str(clone)], check=True)
    subprocess.run(["git", "checkout", "--quiet", commit], cwd=clone, check=True)
    return clone


def run_in_clone(
    clone: Path, name: str, perturbation: Perturbation, commands: list[list[str]], log: Path
) -> None:
    """Run ``commands`` in ``clone`` under ``perturbation`` (named ``name``), one after the
    other, their output in ``log``; RuntimeError at the first that fails."""
    _edit_params(clone / "params.yaml", perturbation)
    env = {**os.environ, **perturbation.env}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        for command in commands:
            done = subprocess.run(
                command, cwd=clone, env=env, stdout=handle, stderr=subprocess.STDOUT
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"the suite under {name} failed (exit {done.returncode}); see {log}"
                )


def run_suite(
    root: Path,
    commit: str,
    name: str,
    perturbation: Perturbation,
    workdir: Path,
    cores: str,
    log: Path,
    scale: str,
) -> list[ClaimRecord]:
    """Clone ``root`` at ``commit`` into ``workdir/name``, run every experiment and the
    claims there at ``scale`` under ``perturbation`` (Snakemake's ``claims_evaluation``),
    and return the clone's claim records (`replicate.controls` runs its control so)."""
    clone = clone_project(root, commit, workdir / name)
    command = [sys.executable, "-m", "snakemake", "--cores", cores, "claims_evaluation"]
    run_in_clone(clone, name, perturbation, [[*command, "--config", f"scale={scale}"]], log)
    return verdicts.load_records(scale, clone)
