"""Facts about the checkout a command runs in, shared by the commands (`expect`, `record`,
`stability`, `controls`, the pipeline files): its commit and whether the working tree is
clean, the CPU, which experiments' outputs are current by Snakemake's rules, and which DVC
pipeline file holds a scale's stages. No command imports another; each imports these."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path

from replicate import verdicts
from replicate.params import SCALES, ConfigError, Params
from replicate.provenance import mismatches, same_code

PIPELINE_FILES = {"ci": Path("dvc.yaml"), "paper": Path("scales/paper/dvc.yaml")}
"""Each scale's DVC pipeline file (its dvc.lock lies beside it)."""


def pipeline_file(scale: str) -> Path:
    """The DVC pipeline file of ``scale`` (`PIPELINE_FILES`)."""
    return PIPELINE_FILES[scale]


def paper_stages(params: Params) -> dict[str, list[str]]:
    """Each paper's DVC stage (named by its key, as its Snakemake target is) and the
    experiments it records, in params.yaml's order."""
    papers: dict[str, list[str]] = {}
    for name, entry in params.experiments.items():
        papers.setdefault(entry.paper, []).append(name)
    return papers


RECORDED_ELSEWHERE = tuple(str(f.with_suffix(".lock")) for f in PIPELINE_FILES.values())
"""Files a run itself rewrites (each scale's dvc.lock): changes to them do not make the tree
dirty for `clean_commit`; nor do changes to the per-paper verdict summaries
(`verdicts.ClaimsOutputs.verdicts_dir`), written by the claims step and tracked in git for
`dvc metrics diff`."""


class RefusedRecording(ConfigError):
    """A command would record a value its commit did not produce (the working tree differs
    from it, or git cannot say), or one nobody expects."""


def git(root: Path, *args: str) -> str:
    """``git args`` in ``root``: its output; RefusedRecording naming the command when it
    fails or git is missing."""
    try:
        result = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as exc:
        raise RefusedRecording("git is not installed: no commit to record") from exc
    if result.returncode != 0:
        raise RefusedRecording(f"`git {' '.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


def clean_commit(root: Path, *recorded: Path) -> str:
    """HEAD's short hash; RefusedRecording when the working tree has changes (to tracked
    files, or untracked files) besides `RECORDED_ELSEWHERE`, the verdict summaries and
    ``recorded`` (the files the caller writes): the commit would not be the code that ran."""
    git(root, "rev-parse", "--is-inside-work-tree")
    written = {str(path.resolve().relative_to(root.resolve())) for path in recorded}
    allowed = {*RECORDED_ELSEWHERE, *written}
    changed = [line[3:] for line in git(root, "status", "--porcelain").splitlines() if line[3:]]
    summaries = tuple(f"{verdicts.ClaimsOutputs(s).verdicts_dir}/" for s in SCALES)
    dirty = [p for p in changed if p not in allowed and not p.startswith(summaries)]
    if dirty:
        more = f" and {len(dirty) - 3} more" if len(dirty) > 3 else ""
        raise RefusedRecording(
            f"the working tree has uncommitted changes ({', '.join(dirty[:3])}{more}): commit "
            "them, rerun what they change, then record"
        )
    return git(root, "rev-parse", "--short", "HEAD").strip()


def cpu_model() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def newer_than_inputs(outputs: Iterable[Path], inputs: Iterable[Path]) -> bool:
    outs = list(outputs)
    if not all(p.exists() for p in outs):
        return False
    oldest_output = min(p.stat().st_mtime for p in outs)
    return all(p.stat().st_mtime <= oldest_output for p in inputs if p.exists())


def current_experiments(params: Params, root: Path = Path(".")) -> list[str]:
    """Experiments whose outputs Snakemake would not rerun (by mtime, code and params): newer
    than their upstream's outputs, produced by code of the same meaning as the code there
    now (`same_code`: the digest of its syntax trees) and with params.yaml's values."""
    current = []
    for name in params.experiments:
        upstream = params.upstream_of(name)
        upstream_outputs = [] if upstream is None else params.output_paths(upstream)
        outputs = [root / p for p in params.output_paths(name)]
        if (
            newer_than_inputs(outputs, [root / p for p in upstream_outputs])
            and same_code(name, params, root)
            and not mismatches(name, params, root)
        ):
            current.append(name)
    return current


def absent_experiments(params: Params, root: Path = Path(".")) -> list[str]:
    """Experiments none of whose outputs exist (not run yet, or deleted whole)."""
    return [
        name
        for name in params.experiments
        if not any((root / p).exists() for p in params.output_paths(name))
    ]
