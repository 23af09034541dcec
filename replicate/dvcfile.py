"""Write the DVC pipeline files from params.yaml, one per scale: per paper one stage, and
one for the claims.

Snakemake decides what is stale; DVC records and shares what Snakemake wrote. Each scale has
its own results tree (`replicate.params.results_dir`) and its own pipeline file
(`PIPELINE_FILES`): the ci scale's is the project's dvc.yaml, so that a bare `dvc repro`
runs the small default; the paper scale's is ``scales/paper/dvc.yaml`` (its stages run from
the project root, ``wdir``), run with `dvc repro scales/paper/dvc.yaml`. Each file has its
own dvc.lock beside it, so a paper-scale run made on a GPU node is recorded and pulled next
to the ci results of the same commit, and running one scale leaves the other's records and
outputs as they were.

A paper's stage runs the paper's Snakemake target at its scale (`snakemake attn_markov
--config scale=paper`); its outputs are its experiments' folders, which `dvc repro` leaves in
place (``persist``), so that the target's rules rerun only what Snakemake finds stale. For
`dvc status` to agree with `snakemake -n`, a stage's ``params`` are the keys its
experiments' rules read at its scale (`Params.input_keys`) less ``scale`` itself, which the
file's results tree and command fix (`_dvc_params`), and its ``deps`` are exactly the source
files its experiments' jobs import (`replicate.sources.paper_sources`: the files whose
digest is a ``params`` value of their rules; DVC hashes their bytes, so an edit that leaves
their syntax trees as they were makes DVC, not Snakemake, call the stage changed, and `dvc
repro` then records it without running a job). An experiment's upstream is an item of the
same paper, inside the stage. The claims stage reads the whole of params.yaml (it
validates every experiment at both scales) and the claims files (`replicate.claim_files`),
so both are among its deps, hashed as files: as params, every experiment's values would
make up most of dvc.lock and slow every DVC command.

A stage per paper, not per experiment: DVC parses params.yaml, walks it and hashes the code
deps once per stage, and with 38 stages `dvc status` and `dvc repro` took 4.1-5.6 s on the
full ci results; with 4 they take 1.2-1.6 s. DVC's status still names each changed key and
folder; Snakemake keeps a rule per experiment; the record step (replicate/record.py)
records a paper whose experiments are partly absent, so one figure's results can be pushed
before the rest of its paper is run. DVC's templating cannot make a list of keys
conditional on an experiment (``reads``), hence generated files;
`tests/test_workflow_files.py` fails when a committed file differs from this output.

    python -m replicate.dvcfile            # rewrite both pipeline files
    python -m replicate.dvcfile --check    # exit 1 when one is out of date
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from replicate.checkout import paper_stages, pipeline_file
from replicate.config import load_params
from replicate.params import SCALES, ConfigError, Params

HEADER = """\
# GENERATED from params.yaml by `python -m replicate.dvcfile`: do not edit.
# DVC records what Snakemake writes at the {scale} scale, in results/{scale}/: one stage per
# paper, running the paper's Snakemake target (which reruns only what Snakemake finds stale;
# the outputs persist through `dvc repro`), and one for the claims. A stage's params are the
# params.yaml keys its experiments' rules read at this scale, and its deps exactly the code
# those rules list as inputs: `snakemake -n --config scale={scale}` and `dvc status` agree on
# what is stale (tests/test_staleness.py). Metrics: the per-paper verdict counts.{other}
"""
OTHER_SCALE = {
    "ci": "\n# The paper scale's pipeline: `dvc repro scales/paper/dvc.yaml`.",
    "paper": "\n# Its stages run from the project root (wdir); the ci scale's is dvc.yaml.",
}


def _snakemake(target: str, scale: str) -> str:
    return f"snakemake --cores all {target} --config scale={scale}"


def _dvc_params(params: Params, names: list[str]) -> list[str]:
    """The params.yaml keys of experiments ``names`` at the active scale as DVC reads them,
    each once: `Params.input_keys` but ``scale``, which the pipeline file's results tree and
    command fix (and each key DVC reads costs a walk of the whole parsed file)."""
    keys = [k for name in names for k in params.input_keys(name)]
    return [k for k in dict.fromkeys(keys) if k != "scale"]


def stages(params: Params) -> dict[str, Any]:
    """The stages of the active scale's pipeline file, paths from the project root."""
    from replicate.sources import claims_sources, paper_sources
    from replicate.verdicts import ClaimsOutputs

    scale = params.scale
    root = {"wdir": _to_root(scale)} if _to_root(scale) != "." else {}
    out: dict[str, Any] = {}
    for paper, names in paper_stages(params).items():
        out[paper] = {
            "cmd": _snakemake(paper, scale),
            **root,
            "params": _dvc_params(params, names),
            "deps": list(paper_sources(names, Path("."))),
            "outs": [{str(params.directory(n)): {"persist": True}} for n in names],
        }
    claims = ClaimsOutputs(scale)
    out["claims"] = {
        "cmd": _snakemake("claims", scale),
        **root,
        "deps": [
            "params.yaml",
            str(params.raw.claims_dir),  # the claims files, hashed as one folder
            *claims_sources(Path(".")),
            *(str(params.directory(n)) for n in params.experiments),
        ],
        "outs": [str(claims.claims), str(claims.report)],
        # Small, and tracked by git rather than the DVC cache, so that `dvc metrics diff`
        # compares verdict counts across commits.
        "metrics": [{str(p): {"cache": False}} for p in claims.summaries()],
    }
    return out


def _to_root(scale: str) -> str:
    """The project root as seen from ``scale``'s pipeline file (its stages' ``wdir``)."""
    return os.path.relpath(".", pipeline_file(scale).parent)


def render(params: Params) -> str:
    """The active scale's pipeline file's text for ``params`` (stages, metrics and plots)."""
    document = {"stages": stages(params), "plots": plots(params)}
    body = yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)
    return HEADER.format(scale=params.scale, other=OTHER_SCALE[params.scale]) + body


def plots(params: Params) -> list[Any]:
    """Every experiment's figure as an image plot, then its ``curves`` (params.yaml), one
    line per run (template ``.dvc/plots/runs.json``); paths from the pipeline file's folder,
    as DVC reads a file's top-level plots."""
    here = pipeline_file(params.scale).parent

    def path(file: Path) -> str:
        return os.path.relpath(file, here)

    images: list[Any] = [
        path(file)
        for name in params.experiments
        for file in params.output_paths(name)
        if file.suffix == ".png"
    ]
    curves: list[Any] = []
    for name, entry in params.experiments.items():
        for curve in entry.curves:
            plot_id = "_".join([name, Path(curve.file).stem, *curve.y])
            curves.append(
                {
                    plot_id: {
                        "template": "runs",
                        "x": curve.x,
                        "x_label": curve.x_label,
                        "y": {path(params.directory(name) / curve.file): curve.y},
                        "y_label": curve.y_label,
                        "title": f"{name} ({params.scale} scale): {curve.y_label}",
                    }
                }
            )
    return images + curves


def render_all(params_file: Path) -> dict[Path, str]:
    """Each scale's pipeline file and its text."""
    return {
        pipeline_file(scale): render(load_params(params_file, scale=scale, only=[]))
        for scale in SCALES
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replicate.dvcfile", description=__doc__)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    try:
        files = render_all(args.params)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        stale = [str(f) for f, text in files.items() if not f.exists() or f.read_text() != text]
        if stale:
            print(
                f"{', '.join(stale)} out of date: run `python -m replicate.dvcfile`",
                file=sys.stderr,
            )
            return 1
        return 0
    from replicate import io

    for file, text in files.items():
        file.parent.mkdir(parents=True, exist_ok=True)
        io.write_text(file, text)
        print(f"wrote {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
