"""Record in DVC what Snakemake wrote, so that the two agree on what is current.

Snakemake owns staleness: a rule reruns when an input is newer than its outputs, or the
params.yaml values it reads or the digest of the code it runs changed (`replicate.sources`).
After a successful `snakemake` run (the Snakefile's ``onsuccess``), `record_in_dvc` commits
to the run's scale's dvc.lock (the one beside its pipeline file,
`replicate.dvcfile.PIPELINE_FILES`; the other scale's is left alone) every DVC stage (one
per paper, and the claims) none of whose outputs Snakemake would rerun by the same rules:
an experiment is current when its outputs are present, newer than the upstream's outputs,
made by code of the same digest and with params.yaml's values (provenance.json); the
claims when they are newer than their inputs and equal a fresh evaluation. A paper is
recorded when each of its experiments is current or absent (none of its outputs written:
an experiment not run yet), so that one figure run alone is recorded, and can be pushed,
before the rest of its paper; an absent experiment's folder goes into dvc.lock without a
hash, so `dvc status` calls it deleted, as `snakemake -n` plans it. A stage with an
experiment present but stale is left as DVC last recorded it, so `dvc status` still calls
it changed. Under `dvc repro` (``DVC_STAGE`` set) DVC records the stage itself and nothing
is done here.

Two `snakemake` runs of different targets may share a checkout: their records
then take turns at DVC's repository lock, each waiting up to `LOCK_WAIT_SECONDS` for the
other. A record that still fails is one warning line, never a failed run: its job is done,
and the next record (the next `snakemake` run that runs a job, or `python -m replicate
record`) commits every current stage, those missed included.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from replicate import verdicts
from replicate.checkout import (
    absent_experiments,
    current_experiments,
    newer_than_inputs,
    paper_stages,
    pipeline_file,
)
from replicate.claim_files import load_claims
from replicate.params import Params

if TYPE_CHECKING:
    from dvc.repo import Repo
    from dvc.stage import Stage

LOCK_WAIT_SECONDS = 300.0
"""How long a record waits for DVC's repository lock: another run's record holds it for
seconds, a `dvc` command in the same checkout as long as it runs."""


def current_stages(params: Params, root: Path = Path(".")) -> list[str]:
    """The DVC stages to record: each paper with an experiment current and every other one
    current or absent, then the claims when every experiment is current and the claims
    outputs are (`claims_current`)."""
    current = set(current_experiments(params, root))
    recordable = current | set(absent_experiments(params, root))
    stages = [
        paper
        for paper, names in paper_stages(params).items()
        if current & set(names) and recordable >= set(names)
    ]
    if len(current) == len(params.experiments) and claims_current(params, root):
        stages.append("claims")
    return stages


def claims_current(params: Params, root: Path = Path(".")) -> bool:
    """Whether the claims outputs are newer than every input (params.yaml, the claims files,
    the experiments' outputs) and equal a fresh evaluation (by the claims code running)."""
    from replicate import claims

    claimset = load_claims(params)
    outputs = verdicts.ClaimsOutputs(params.scale).paths(root)
    inputs = [root / p for p in claims.input_files(params, claimset)]
    inputs += [root / p for name in params.experiments for p in params.output_paths(name)]
    if not newer_than_inputs(outputs, inputs):
        return False
    try:
        stored = verdicts.load_records(params.scale, root)
    except (OSError, ValueError):  # absent or malformed: not current
        return False
    fresh = claims.evaluate(params, root, claimset)
    return [r.to_json() for r in stored] == [r.to_json() for r in fresh]


def record(params: Params, root: Path = Path("."), wait: float = LOCK_WAIT_SECONDS) -> list[str]:
    """`dvc commit` the current stages (none under `dvc repro`, or outside a DVC project),
    waiting up to ``wait`` seconds for DVC's lock; DVC's error when that fails."""
    if "DVC_STAGE" in os.environ or not (root / ".dvc").is_dir():
        return []
    stages = current_stages(params, root)
    if stages:
        waited = _commit_when_unlocked(root, pipeline_file(params.scale), stages, wait)
        after = f" (after {waited:.0f} s waiting for DVC's lock)" if waited >= 1 else ""
        lock = pipeline_file(params.scale).with_suffix(".lock")
        print(f"recorded {len(stages)} stage(s) in {lock}{after}", file=sys.stderr)
    return stages


def record_in_dvc(
    params: Params, root: Path = Path("."), wait: float = LOCK_WAIT_SECONDS
) -> list[str]:
    """`record`, as Snakemake's ``onsuccess`` calls it: a failure is one
    warning line, not an exception (which would fail a run whose jobs are done)."""
    from dvc.exceptions import DvcException

    try:
        return record(params, root, wait)
    except (DvcException, OSError) as exc:
        print(
            f"warning: dvc.lock not updated ({' '.join(str(exc).split())}); the next "
            "`snakemake` run that runs a job records it, or `python -m replicate record`",
            file=sys.stderr,
        )
        return []


def _commit_when_unlocked(root: Path, pipeline: Path, stages: list[str], wait: float) -> float:
    """`_commit`, tried again while another process holds DVC's lock (each try waits the
    few seconds DVC's lock waits by itself), for up to ``wait`` seconds; returns the seconds
    spent before the try that succeeded. Raises DVC's LockError, naming the lock file, when
    the time is up."""
    from dvc.lock import LockError

    start = time.monotonic()
    told = False
    while True:
        attempt = time.monotonic()
        try:
            _commit(root, pipeline, stages)
            return attempt - start
        except LockError as exc:
            waited = time.monotonic() - start
            if waited >= wait:
                lock_file = root / ".dvc" / "tmp" / "lock"
                raise LockError(f"another DVC process held {lock_file} for {waited:.0f} s") from exc
            if not told:
                print(f"dvc.lock: waiting up to {wait:.0f} s for DVC's lock", file=sys.stderr)
                told = True


def _commit(root: Path, pipeline: Path, stages: list[str]) -> None:
    """`dvc commit --force` of ``stages`` of the pipeline file ``pipeline`` (one scale's,
    `replicate.dvcfile.PIPELINE_FILES`), in this process: one collection of its stages, one
    write of its dvc.lock, and params.yaml parsed once.

    DVC's own `Repo.commit` takes one target (or all stages) per call, and each call
    collects every stage from dvc.yaml and rewrites dvc.lock: seconds per stage.
    `_commit_stages` is its loop (dvc/repo/commit.py, ``force=True``)
    over the given stages at once. DVC parses params.yaml with ruamel's loader for the
    templating of dvc.yaml and again for each stage's params; the file cannot change during
    this call, so the parse is shared: DVC's loader (`load_path`, as the params dependency
    and the templating context call it) is memoised by path, modification time and size.
    dvc.lock comes out as `dvc commit --force` and `dvc repro` write it (tests/test_staleness.py
    compares it with `dvc status` and checks that it holds no YAML alias).
    """
    from unittest import mock

    import dvc.dependency.param as dvc_param
    import dvc.utils.serialize as dvc_serialize
    from dvc.repo import Repo

    parsed: dict[tuple[str, int, int], object] = {}
    load = dvc_serialize.load_path

    def load_once(path: str, fs: object, **kwargs: object) -> object:
        info = os.stat(path)
        key = (os.path.abspath(path), info.st_mtime_ns, info.st_size)
        if key not in parsed:
            parsed[key] = load(path, fs, **kwargs)
        # A copy for each caller: stages sharing one parsed object would be written to
        # dvc.lock as YAML anchors and aliases, which `dvc repro` writes out in full.
        return copy.deepcopy(parsed[key])

    with (
        mock.patch.object(dvc_param, "load_path", load_once),
        mock.patch.object(dvc_serialize, "load_path", load_once),
        Repo(str(root)) as repo,
    ):
        _commit_stages(repo, str(root.resolve() / pipeline), set(stages))


def _commit_stages(repo: Repo, pipeline: str, names: set[str]) -> None:
    """DVC's `commit(force=True)` loop for the stages ``names`` of pipeline file
    ``pipeline``, under the repository lock,
    with absent outputs allowed (`dvc commit --force --allow-missing`) and recorded without
    a hash (`_forget_absent_outputs`).

    DVC's run-cache is left alone: it restores a stage's outputs when `dvc repro` meets deps
    and params it has run before, and here `dvc repro` runs Snakemake, which decides what is
    stale itself; writing it was a third of the record's time.
    """
    from itertools import groupby

    from dvc.repo import lock_repo

    with lock_repo(repo):
        infos = [i for i in repo.stage.collect_granular(pipeline) if i.stage.name in names]
        for dvcfile, group in groupby(infos, key=lambda info: info.stage.dvcfile):
            saved = []
            for info in group:
                _forget_absent_outputs(info.stage)
                info.stage.save(allow_missing=True, run_cache=False)
                info.stage.commit(filter_info=info.filter_info, allow_missing=True)
                saved.append(info.stage)
            dvcfile.dump_stages(saved, update_pipeline=False)


def _forget_absent_outputs(stage: Stage) -> None:
    """Drop the hash dvc.lock holds for each of ``stage``'s outputs that is absent now.

    DVC's `Output.save` leaves an absent output's hash as loaded from dvc.lock (with
    ``allow_missing`` it skips the output), so an output deleted since its last record would
    be recorded again with its old hash, beside params it was not made with; without a hash
    it is written to dvc.lock as a bare path, which `dvc status` calls deleted.
    """
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta

    for out in stage.outs:
        if not out.exists:
            out.hash_info, out.meta, out.obj = HashInfo(), Meta(), None
