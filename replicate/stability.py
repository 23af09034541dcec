"""Verdicts that do not depend on the machine, nor on the data drawn: `python -m replicate
stability`.

Floating-point results differ between CPUs (ATen's kernel dispatch level, MKL's code path,
the order of a reduction) and the differences grow through training: a claim whose verdict
hinges on them turns CI red or green by the machine it lands on. This check reruns papers'
experiments at the active scale in scratch clones of HEAD (the tree must be clean): once as
committed (native), then once per perturbation, and lists every claim whose own verdict
differs between the native run and the perturbed one. The default perturbations
(`PERTURBATIONS`) are numerically neutral (each changes the last bits of a sum, nothing a
model means) and imitate another CPU. ``redraw`` (`REDRAWS`, run by name) is not: it shifts
every seed of the clone's params.yaml (`replicate.suite.shift_seeds`), so every training,
initialisation and test set is drawn anew from the same laws, and what it lists are the
verdicts that sit within the seed-to-seed noise of their tolerance at this scale: readings
of the draw, not results, until more seeds or longer runs settle them. A change that draws
other data (another exact sampler, another seed) moves those verdicts, whatever its
numerics. It is not part of a CI run: at ci scale one perturbation of every paper costs a
full suite (52 minutes measured for ``aten-default`` on 2 cores). ``--papers`` reruns only
the named papers' experiments (their Snakemake targets) and replaces only their part of the
record.

The native run and the perturbed ones are independent clones, so several may run at the same
time (`suites_at_once`): a suite whose longest chain of rules is most of its time keeps about
one core busy whatever Snakemake's ``--cores`` (paper D at ci: ``two_layer_maps``, then
Tables 3 and 4, about 1,000 of its 1,050 CPU-seconds), and two such suites on two cores take
the time of one. A suite's results do not depend on how many run beside it: each job's torch
threads are ``runtime.threads`` of its clone's params.yaml, whatever cores Snakemake has.

In each clone the claims files lose their ``cpu_dependent`` marks before the run: there a
claim's verdict is its run's own evidence, the one compared, and the loader does not ask the
record being remade to back a mark (`replicate.claim_files._check_cpu_dependence`).

What it measured is written to ``claims/stability.json`` (machine-written, like
``claims/recorded.json``), after each perturbation, so a long check keeps its part. Format 2::

    {
      "format": 2,
      "scale": "ci",
      "perturbations": {
        "<perturbation>": {
          "what": "<what it changes>", "env": {"<VARIABLE>": "<value>"}, "threads": null,
          "seed_offset": <the shift of every seed (redraw), else null>,
          "papers": {
            "<paper>": {
              "commit": "<short hash of the commit that ran>",
              "date": "<UTC date, YYYY-MM-DD>",
              "cpu": "<the CPU's model name>",
              "code_sha256": "<replicate.provenance.paper_digest(paper) at that commit>",
              "seconds": <wall seconds of the perturbed run, all its papers>,
              "claims": <the paper's claims>,
              "values_moved": <how many of their measured values differ>,
              "verdicts_changed": [
                {"id": "<claim>", "paper": "<paper>",
                 "verdict": "<native own verdict>", "perturbed_verdict": "<perturbed>",
                 "measured": <native value>, "perturbed_measured": <perturbed value>,
                 "seed_values": {"<seed>": <value>},
                 "perturbed_seed_values": {"<seed>": <value>}}
              ]
            }
          }
        }
      },
      "sha256": "<SHA-256 of the canonical JSON of every other key>"
    }

Canonical JSON: keys sorted, no whitespace between tokens, UTF-8 (`claim_files.record_digest`);
a value or verdict is null for a claim absent from one side. A check of some perturbations or
papers keeps the others' entries as they were, from a record whose digest matches; the entries
of a record in the format before this one (no digests) or edited by hand are dropped, never
signed anew. A record read before perturbations carried ``seed_offset`` reads it as null. A
claim on a numerically neutral perturbation's list needs a form that does not sit on a knife
edge (more seeds, a longer run, a statement about the fraction of seeds, or ``cpu_dependent``:
`inconclusive` with the measured spread), never a moved tolerance; one on the redraw's list
needs more seeds or longer runs (a mark does not rest on it).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replicate import verdicts
from replicate.checkout import clean_commit, cpu_model
from replicate.claim_files import (
    STABILITY_FORMAT,
    claims_file,
    read_stability,
    stability_file,
    write_stability,
)
from replicate.params import PAPERS, ConfigError, Params
from replicate.sources import paper_digest
from replicate.suite import Perturbation, clone_project, run_in_clone
from replicate.timings import critical_path_seconds, expected_seconds
from replicate.verdicts import ClaimRecord

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

REDRAW_OFFSET = 100
"""How far the redraw shifts every seed of params.yaml (`replicate.suite.shift_seeds`)."""

REDRAWS: dict[str, Perturbation] = {
    "redraw": Perturbation(
        f"every seed of params.yaml shifted by {REDRAW_OFFSET} (training data, initialisation, "
        "test sets drawn anew from the same laws): not numerically neutral; it lists the claims "
        "whose verdict depends on the data drawn at this scale",
        seed_offset=REDRAW_OFFSET,
    ),
}
"""Perturbations that redraw the data instead of imitating another CPU: what they list is
the seed-to-seed noise of a verdict, which a ``cpu_dependent`` mark may not rest on
(`replicate.claim_files`); run them by name (`python -m replicate stability redraw`)."""

CHECKS: dict[str, Perturbation] = {**PERTURBATIONS, **REDRAWS}
"""Every perturbation the check can run."""

NATIVE = "native"
"""The name of the unperturbed run, the one each perturbed run is compared with."""


def _drop_cpu_marks(folder: Path) -> None:
    """Remove every ``cpu_dependent`` mark from the claims files in a clone's claims
    ``folder`` (module docstring), keeping the rest of each file."""
    from ruamel.yaml import YAML

    yaml = YAML()
    for paper in PAPERS:
        path = claims_file(folder, paper)
        if not path.exists():
            continue
        data = yaml.load(path)
        marked = [claim for claim in data["claims"] if "cpu_dependent" in claim]
        for claim in marked:
            del claim["cpu_dependent"]
        if marked:
            with path.open("w") as handle:
                yaml.dump(data, handle)


@dataclass(frozen=True)
class _Suite:
    """How the stability check runs its clones: the project and commit cloned, the papers
    run, the scale, the claims folder (relative to the project), where the clones and logs
    go, and the cores."""

    root: Path
    commit: str
    papers: tuple[str, ...]
    scale: str
    claims_dir: Path
    workdir: Path
    logs: Path
    cores: str

    def clone(self, name: str) -> Path:
        """A fresh clone of the project at the commit, in ``workdir/name``."""
        return clone_project(self.root, self.commit, self.workdir / name)

    def run(self, clone: Path, name: str, perturbation: Perturbation) -> list[ClaimRecord]:
        """Run the papers' Snakemake targets and then the claims in ``clone`` (made by
        `clone`, its ``cpu_dependent`` marks dropped) under ``perturbation``, logging to
        ``logs/<name>.log``; the claim records of those papers."""
        _drop_cpu_marks(clone / self.claims_dir)
        # The targets go before --config, which takes every word after it.
        scale = ["--config", f"scale={self.scale}"]
        commands = [
            [sys.executable, "-m", "snakemake", "--cores", self.cores, *self.papers, *scale],
            [sys.executable, "-m", "replicate", "--scale", self.scale, "claims"],
        ]
        run_in_clone(clone, name, perturbation, commands, self.logs / f"{name}.log")
        return [r for r in verdicts.load_records(self.scale, clone) if r.paper in self.papers]

    def timed_run(self, name: str) -> tuple[list[ClaimRecord], int]:
        """Perturbation ``name``'s `run` in a clone of its own (`clone`), and its wall
        seconds."""
        perturbation = CHECKS[name]
        print(f"stability: running {', '.join(self.papers)} under {name} ({perturbation.what}) ...")
        start = time.monotonic()
        records = self.run(self.clone(name), name, perturbation)
        return records, round(time.monotonic() - start)


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


def paper_check(
    paper: str,
    run: Mapping[str, Any],
    code_sha256: str,
    native: Iterable[ClaimRecord],
    perturbed: Iterable[ClaimRecord],
) -> dict[str, Any]:
    """Paper ``paper``'s entry under one perturbation: the perturbed ``run`` (its commit,
    date, cpu and seconds), the digest of the paper's code at that commit, and `compare` of
    the paper's claims between the native and the perturbed records."""
    mine = [r for r in native if r.paper == paper], [r for r in perturbed if r.paper == paper]
    return {**run, "code_sha256": code_sha256, **compare(*mine)}


def merge(
    earlier: Mapping[str, Any] | None,
    scale: str,
    name: str,
    checks: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """A stability record's content: ``earlier`` (one `read_stability` accepted; None: none)
    with perturbation ``name``'s entry of each paper in ``checks`` (`paper_check`) replaced;
    the entries of the other papers and perturbations are kept as they were. An ``earlier``
    at another scale than ``scale`` is not kept."""
    content: dict[str, Any] = (
        copy.deepcopy(dict(earlier))
        if earlier is not None and earlier["scale"] == scale
        else {"format": STABILITY_FORMAT, "scale": scale, "perturbations": {}}
    )
    perturbation = CHECKS[name]
    papers = {**content["perturbations"].get(name, {}).get("papers", {}), **checks}
    content["perturbations"][name] = {
        "what": perturbation.what,
        "env": perturbation.env,
        "threads": perturbation.threads,
        "seed_offset": perturbation.seed_offset,
        "papers": dict(sorted(papers.items())),
    }
    content["perturbations"] = dict(sorted(content["perturbations"].items()))
    return content


def _earlier(path: Path, scale: str) -> dict[str, Any] | None:
    """The content of the record at ``path`` a check merges into: None when there is none,
    it holds another scale, or `read_stability` refuses it (said on stdout: the command
    signs only what it measured)."""
    try:
        record = read_stability(path)
    except FileNotFoundError:
        return None
    except ConfigError as exc:
        print(f"stability: the entries of {path} are not kept: {exc}")
        return None
    if record.scale != scale:
        print(f"stability: {path} holds the check at {record.scale} scale: it is replaced")
        return None
    return record.model_dump(mode="json")


def _papers(params: Params, papers: Iterable[str] | None) -> tuple[str, ...]:
    """The papers to rerun: ``papers`` (checked), else every paper with experiments."""
    present = [p for p in PAPERS if any(e.paper == p for e in params.experiments.values())]
    chosen = list(dict.fromkeys(papers or present))
    unknown = [p for p in chosen if p not in present]
    if unknown:
        raise ConfigError(f"unknown paper {', '.join(unknown)}; choose from {', '.join(present)}")
    return tuple(chosen)


def suites_at_once(total: float, chain: float, suites: int, cores: int) -> int:
    """How many of ``suites`` runs of the same experiments to run at the same time on
    ``cores`` cores, each run's Snakemake given ``cores // k`` of them: the ``k`` whose
    expected wall time, ``ceil(suites / k) * max(chain, total / (cores // k))``, is least
    (the fewest on a tie). ``total``: the experiments' expected seconds summed; ``chain``:
    their longest chain of rules (`replicate.timings.critical_path_seconds`), under which no
    number of cores takes a run. Unknown timings (``total`` 0) run one suite at a time."""
    if total <= 0 or suites < 2 or cores < 2:
        return 1
    candidates = range(1, min(suites, cores) + 1)
    return min(
        candidates,
        key=lambda k: (math.ceil(suites / k) * max(chain, total / (cores // k)), k),
    )


def _cores(cores: str) -> int:
    """Snakemake's ``--cores`` as a number: ``all`` is the cores this process may use."""
    if cores == "all":
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    return int(cores)


def _planned_at_once(
    params: Params, papers: tuple[str, ...], suites: int, cores: str, root: Path
) -> int:
    """`suites_at_once` for ``papers``' experiments from their expected seconds at the
    active scale (`replicate.timings.expected_seconds`: the last run's timings, else the cost
    plan); one at a time where a GPU is visible."""
    import torch

    if torch.cuda.is_available():
        return 1  # the suites would share the accelerator, which the plan does not count
    names = [n for n, e in params.experiments.items() if e.paper in papers]
    seconds = expected_seconds(params.scale, names, root)
    upstream = {n: params.upstream_of(n) for n in names}
    chain = max(critical_path_seconds(seconds, upstream).values(), default=0.0)
    return suites_at_once(sum(seconds.values()), chain, suites, _cores(cores))


def _interruptible() -> None:
    """Unblock SIGINT in the calling thread (a pool thread's initializer). A thread inherits
    its signal mask from the thread that started it, and a process from the thread that
    started it, across exec: a suite started from a thread with SIGINT blocked (a library
    of the caller may have blocked it in the main thread) would ignore
    `_interrupt_children`'s SIGINT and run to its end."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _sigint_handled() -> Iterator[None]:
    """Python's own SIGINT handler, for the duration, where the caller ignores SIGINT (a
    command a non-interactive shell starts in the background does): an ignored signal stays
    ignored across exec, so every suite started meanwhile would ignore
    `_interrupt_children`'s SIGINT too, while a handler is reset to the default there. Only
    the main thread can set a handler; elsewhere nothing changes."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    replace = ignored and threading.current_thread() is threading.main_thread()
    if replace:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if replace:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupt_children() -> None:
    """SIGINT to every process this one started (the running suites' Snakemake and their
    jobs), as a terminal's Ctrl-C sends it: each Snakemake stops its jobs and exits, so the
    threads waiting for them return."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.send_signal(signal.SIGINT)


def stability(
    params: Params,
    names: list[str],
    papers: Iterable[str] | None = None,
    root: Path = Path("."),
    workdir: Path | None = None,
    cores: str = "all",
    at_once: int | None = None,
) -> Path:
    """Run ``papers``' experiments (default: every paper's) natively and under each
    perturbation in ``names``, ``at_once`` runs at the same time (default: as
    `suites_at_once` plans), and write what changed into ``claims/stability.json`` (after
    each perturbation, in the order of ``names``, keeping the other papers' and
    perturbations' entries)."""
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ConfigError(
            f"unknown perturbation {', '.join(unknown)}; choose from {', '.join(CHECKS)}"
        )
    chosen = _papers(params, papers)
    path = stability_file(params.claims_dir)
    commit = clean_commit(root, path)
    content = _earlier(path, params.scale)
    date = datetime.datetime.now(datetime.UTC).date().isoformat()
    cpu = cpu_model()
    if at_once is None:
        at_once = _planned_at_once(params, chosen, len(names) + 1, cores, root)
    with tempfile.TemporaryDirectory(prefix="replicate-stability-") as scratch:
        suite = _Suite(
            root=root.resolve(),
            commit=commit,
            papers=chosen,
            scale=params.scale,
            claims_dir=params.claims_dir.resolve().relative_to(root.resolve()),
            workdir=workdir or Path(scratch),
            logs=root / "logs" / "stability",
            cores=cores if at_once == 1 else str(max(1, _cores(cores) // at_once)),
        )
        print(
            f"stability: running {', '.join(chosen)} at {commit} as committed and under "
            f"{', '.join(names) or 'nothing else'}, {at_once} at a time ..."
        )
        clone = suite.clone(NATIVE)
        digests = {paper: paper_digest(paper, clone) for paper in chosen}
        for name, native, records, seconds in _side_by_side(suite, clone, names, at_once):
            run = {"commit": commit, "date": date, "cpu": cpu, "seconds": seconds}
            checks = {p: paper_check(p, run, digests[p], native, records) for p in chosen}
            content = merge(content, params.scale, name, checks)
            write_stability(path, content)
            _print_checks(name, checks)
    return path


def _side_by_side(
    suite: _Suite, clone: Path, names: list[str], at_once: int
) -> Iterator[tuple[str, list[ClaimRecord], list[ClaimRecord], int]]:
    """The native run (in ``clone``) and each perturbation's, ``at_once`` at a time: per
    perturbation, in the order of ``names``, its name, the native records, its records and
    its wall seconds, as soon as both runs are done. A failure or an interrupt cancels the
    runs not started and stops the running ones (`_interrupt_children`), whose threads the
    pool would otherwise wait for."""
    with _sigint_handled(), ThreadPoolExecutor(at_once, initializer=_interruptible) as pool:
        started: dict[str, Future[Any]] = {
            NATIVE: pool.submit(suite.run, clone, NATIVE, Perturbation("nothing"))
        }
        started.update((name, pool.submit(suite.timed_run, name)) for name in names)
        try:
            native = started[NATIVE].result()
            for name in names:
                records, seconds = started[name].result()
                yield name, native, records, seconds
        except BaseException:
            for future in started.values():
                future.cancel()
            _interrupt_children()
            raise


def _print_checks(name: str, checks: Mapping[str, Mapping[str, Any]]) -> None:
    """Perturbation ``name``'s `summary_line` per paper, then each verdict it changed."""
    for paper, check in checks.items():
        print(summary_line(name, paper, check))
        for row in check["verdicts_changed"]:
            print(
                f"  {row['id']}: {row['verdict']} ({row['measured']}) -> "
                f"{row['perturbed_verdict']} ({row['perturbed_measured']})"
            )


def summary_line(name: str, paper: str, check: Mapping[str, Any]) -> str:
    """One line per perturbation and paper: values moved, verdicts changed, seconds."""
    return (
        f"stability: {name}: {paper}: {check['values_moved']} of {check['claims']} measured "
        f"values moved, {len(check['verdicts_changed'])} verdict(s) changed "
        f"({check['seconds']} s)"
    )
