"""Verdicts that do not depend on the machine (issue 23): `python -m replicate stability`.

Floating-point results differ between CPUs (ATen's kernel dispatch level, MKL's code path,
the order of a reduction) and the differences grow through training: a claim whose verdict
hinges on them turns CI red or green by the machine it lands on. This check reruns the whole
suite at the active scale in a scratch clone of HEAD, once per perturbation, each a change
that is numerically neutral (it changes the last bits of a sum, nothing a model means) and
imitates another CPU, and lists every claim whose verdict differs from the checkout's own
(``results/claims.json``, which must be current). It is not part of a CI run: at ci scale
one perturbation costs a full suite (52 minutes measured for ``aten-default`` on 2 cores).

What it measured is written to ``claims/stability.json`` (machine-written, like
``claims/recorded.json``): per perturbation, the commit, date and CPU it ran on, how many
measured values moved and which verdicts changed, with both values; a check of some
perturbations keeps the entries of the others. A claim on that list
needs a form that does not sit on a knife edge (more seeds, a longer run, a statement about
the fraction of seeds, or `inconclusive` with the measured spread), never a moved tolerance.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replicate import io, verdicts
from replicate.claim_files import stability_file
from replicate.expect import clean_commit
from replicate.params import ConfigError, Params
from replicate.verdicts import ClaimRecord


@dataclass(frozen=True)
class Perturbation:
    """One numerically neutral change: environment variables set for every job, and
    optionally the torch thread count (``runtime.threads`` in the clone's params.yaml)."""

    what: str
    env: dict[str, str] = field(default_factory=dict)
    threads: int | None = None


PERTURBATIONS: dict[str, Perturbation] = {
    "aten-default": Perturbation(
        "ATen's portable kernels instead of its vectorised ones (another vector width: "
        "AVX-512 against AVX2, or a CPU without either)",
        env={"ATEN_CPU_CAPABILITY": "default"},
    ),
    "mkl-compatible": Perturbation(
        "MKL's SSE2 code path for matrix products (another MKL branch, as on another "
        "vendor's or generation's CPU)",
        env={"MKL_CBWR": "COMPATIBLE"},
    ),
    "threads-2": Perturbation(
        "two torch threads per process instead of one (parallel reductions in another order)",
        threads=2,
    ),
}


def _cpu() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _set_threads(params_file: Path, threads: int) -> None:
    """Set ``runtime.threads`` in a clone's params.yaml, keeping the rest of the file."""
    from ruamel.yaml import YAML

    yaml = YAML()
    data = yaml.load(params_file)
    data["runtime"]["threads"] = threads
    with params_file.open("w") as handle:
        yaml.dump(data, handle)


def _run_suite(
    root: Path,
    commit: str,
    name: str,
    perturbation: Perturbation,
    workdir: Path,
    cores: str,
    log: Path,
) -> list[ClaimRecord]:
    """Clone ``root`` at ``commit`` into ``workdir/name``, run every experiment and the
    claims there under ``perturbation``, and return the clone's claim records."""
    clone = workdir / name
    if clone.exists():
        shutil.rmtree(clone)
    subprocess.run(["git", "clone", "--quiet", str(root), str(clone)], check=True)
    subprocess.run(["git", "checkout", "--quiet", commit], cwd=clone, check=True)
    if perturbation.threads is not None:
        _set_threads(clone / "params.yaml", perturbation.threads)
    env = {**os.environ, **perturbation.env}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", "--cores", cores, "claims_evaluation"],
            cwd=clone,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the suite under {name} failed (exit {done.returncode}); see {log}")
    return verdicts.load_records(clone)


def _own(record: ClaimRecord) -> str:
    """The verdict of the run's own evidence (a ``cpu_dependent`` claim's ``verdict`` is
    inconclusive on every machine, so the check compares what lies under it)."""
    return record.own_verdict or record.verdict


def compare(baseline: Iterable[ClaimRecord], perturbed: Iterable[ClaimRecord]) -> dict[str, Any]:
    """How many measured values moved, and each claim whose own verdict changed (both values
    and verdicts; a claim absent from either side counts as changed)."""
    before = {r.id: r for r in baseline}
    after = {r.id: r for r in perturbed}
    moved = sum(1 for i in before.keys() & after.keys() if before[i].measured != after[i].measured)
    changed = []
    for claim_id in sorted(before.keys() | after.keys()):
        old, new = before.get(claim_id), after.get(claim_id)
        if old is not None and new is not None and _own(old) == _own(new):
            continue
        changed.append(
            {
                "id": claim_id,
                "paper": (old or new).paper,  # type: ignore[union-attr]
                "verdict": _own(old) if old else None,
                "perturbed_verdict": _own(new) if new else None,
                "measured": old.measured if old else None,
                "perturbed_measured": new.measured if new else None,
                "seed_values": old.seed_values if old else {},
                "perturbed_seed_values": new.seed_values if new else {},
            }
        )
    return {"claims": len(before), "values_moved": moved, "verdicts_changed": changed}


def stability(
    params: Params,
    names: list[str],
    root: Path = Path("."),
    workdir: Path | None = None,
    cores: str = "all",
) -> Path:
    """Run the suite under each perturbation in ``names`` and write what changed to
    ``claims/stability.json`` (after each perturbation, so a long check keeps its part)."""
    unknown = [n for n in names if n not in PERTURBATIONS]
    if unknown:
        raise ConfigError(
            f"unknown perturbation {', '.join(unknown)}; choose from {', '.join(PERTURBATIONS)}"
        )
    path = stability_file(params.claims_dir)
    commit = clean_commit(root, path)
    try:
        baseline = verdicts.load_records(root)
    except FileNotFoundError:
        raise ConfigError(
            f"{verdicts.CLAIMS_FILE} is missing: the check compares with this checkout's own "
            "verdicts; run `snakemake claims` first"
        ) from None
    if {r.scale for r in baseline} != {params.scale}:
        raise ConfigError(
            f"{verdicts.CLAIMS_FILE} holds verdicts at another scale than {params.scale}: run "
            f"`snakemake claims` at {params.scale} scale first"
        )
    run = {
        "commit": commit,
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "cpu": _cpu(),
    }
    result: dict[str, Any] = {"scale": params.scale, "perturbations": _kept(path, params.scale)}
    with tempfile.TemporaryDirectory(prefix="replicate-stability-") as scratch:
        where = workdir or Path(scratch)
        for name in names:
            perturbation = PERTURBATIONS[name]
            print(f"stability: running the suite under {name} ({perturbation.what}) ...")
            start = time.monotonic()
            log = root / "logs" / "stability" / f"{name}.log"
            records = _run_suite(root.resolve(), commit, name, perturbation, where, cores, log)
            entry = run | compare(baseline, records)
            entry |= {
                "what": perturbation.what,
                "env": perturbation.env,
                "threads": perturbation.threads,
                "seconds": round(time.monotonic() - start),
            }
            result["perturbations"][name] = entry
            io.write_json(path, result)
            print(summary_line(name, entry))
            for row in entry["verdicts_changed"]:
                print(
                    f"  {row['id']}: {row['verdict']} ({row['measured']}) -> "
                    f"{row['perturbed_verdict']} ({row['perturbed_measured']})"
                )
    return path


def _kept(path: Path, scale: str) -> dict[str, Any]:
    """The perturbations an earlier check wrote at ``scale``, each with the commit, date and
    CPU it ran on (a file that names them once, at its top, gives them to every entry), so a
    check of some perturbations keeps what was measured for the others."""
    if not path.exists():
        return {}
    earlier = io.read_json_object(path)
    if earlier.get("scale") != scale:
        return {}
    shared = {key: earlier[key] for key in ("commit", "date", "cpu") if key in earlier}
    return {name: shared | entry for name, entry in earlier["perturbations"].items()}


def summary_line(name: str, entry: dict[str, Any]) -> str:
    return (
        f"stability: {name}: {entry['values_moved']} of {entry['claims']} measured values "
        f"moved, {len(entry['verdicts_changed'])} verdict(s) changed ({entry['seconds']} s)"
    )
