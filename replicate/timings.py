"""How long each rule is expected to run, and the longest chain of rules after it: the last
run's timings on this machine, else the cost plan's estimates (`python -m replicate plan`
writes them). Read by the Snakefile (its jobs' priorities and cluster requests) and by the
stability check (how many suites it runs side by side)."""

from __future__ import annotations

from pathlib import Path

import yaml

from replicate.params import timings_dir

PLANNED_DIR = Path("profiles/slurm")


def planned_resources_file(scale: str, root: Path = Path(".")) -> Path:
    """Where `plan` writes the per-rule requests of ``scale`` and the Snakefile reads them."""
    return root / PLANNED_DIR / f"planned-{scale}.yaml"


def read_plan(scale: str, root: Path = Path(".")) -> dict[str, dict]:
    """The cost plan of ``scale`` as written: rule -> {mem_mb, runtime, seconds} (empty
    without a plan)."""
    path = planned_resources_file(scale, root)
    if not path.exists():
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader) or {}


def read_resources(scale: str, root: Path = Path(".")) -> dict[str, dict]:
    """The planned requests of ``scale``, rule -> {mem_mb, runtime} (empty without a plan)."""
    return {
        name: {k: v for k, v in rule.items() if k != "seconds"}
        for name, rule in read_plan(scale, root).items()
    }


def expected_seconds(scale: str, names: list[str], root: Path = Path(".")) -> dict[str, float]:
    """How long each rule is expected to run: its last timing at ``scale`` on this machine
    (``logs/<scale>/benchmarks/<rule>.tsv``, `timings_dir`, measured), else the cost plan's
    estimate, else 0. The Snakefile starts the longest jobs first with it."""
    planned = read_plan(scale, root)
    seconds = {}
    for name in names:
        benchmark = root / timings_dir(scale) / f"{name}.tsv"
        rows = benchmark.read_text().splitlines() if benchmark.exists() else []
        if len(rows) > 1:
            seconds[name] = float(rows[-1].split("\t")[0])
        else:
            seconds[name] = float(planned.get(name, {}).get("seconds", 0.0))
    return seconds


def critical_path_seconds(
    seconds: dict[str, float], upstream: dict[str, str | None]
) -> dict[str, float]:
    """Per rule, its expected seconds plus the longest chain of derived rules downstream of
    it: the time from its start to the end of everything that waits for it. Snakemake's
    priorities from this start a short rule whose consumers are long (paper A's Fig. 3,
    75 s, before Fig. 1, 160 s, which reads it) ahead of a longer rule nobody waits for, so
    the last job to finish is a short one and every core stays busy until the end."""
    children: dict[str, list[str]] = {name: [] for name in seconds}
    for name, parent in upstream.items():
        if parent is not None:
            children[parent].append(name)

    def length(name: str) -> float:
        return seconds[name] + max((length(child) for child in children[name]), default=0.0)

    return {name: length(name) for name in seconds}
