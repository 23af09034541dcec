"""Write dvc.yaml from params.yaml: one DVC stage per paper, and one for the claims.

Snakemake decides what is stale; DVC records and shares what Snakemake wrote (issue 11). A
paper's stage runs the paper's Snakemake target (`snakemake attn_markov`); its outputs are
its experiments' folders, which `dvc repro` leaves in place (``persist``), so that the
target's rules rerun only what Snakemake finds stale. For `dvc status` to agree with
`snakemake -n`, a stage's ``params`` are the keys its experiments' rules read at the active
scale (`Params.input_keys`; ``${scale}`` stays a DVC template variable, so switching scale
needs no regeneration) less ``scale`` itself, which the settings keys and the command name
(`_dvc_params`), and its ``deps`` are exactly the code those rules' Snakemake inputs list
(`replicate.experiments.code_paths`, the same for every experiment of a paper; an
experiment's upstream is an item of the same paper, inside the stage). The claims stage
reads the whole of params.yaml (it validates every experiment at both scales) and the claims
files (`replicate.claim_files`), so both are among its deps, hashed as files: as params,
every experiment's values would make up most of dvc.lock and slow every DVC command.

A stage per paper, not per experiment (issue 23): DVC parses params.yaml, walks it and
hashes the code deps once per stage, and with 38 stages `dvc status` and `dvc repro` took
4.1-5.6 s on the full ci results; with 4 they take 1.2-1.6 s (README, "DVC's own time"). DVC's
status still names each changed key and folder; Snakemake keeps a rule per experiment; the
record step (replicate/record.py) records a paper whose experiments are partly absent, so
one figure's results can be pushed before the rest of its paper is run. DVC's templating
cannot make a list of keys conditional on an experiment (``reads``), hence a generated file;
`tests/test_workflow_files.py` fails when the committed dvc.yaml differs from this output.

    python -m replicate.dvcfile            # rewrite dvc.yaml
    python -m replicate.dvcfile --check    # exit 1 when dvc.yaml is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from replicate.config import load_params
from replicate.params import SCALES, ConfigError, Params

DVC_FILE = Path("dvc.yaml")
SCALE_VARIABLE = "${scale}"
HEADER = """\
# GENERATED from params.yaml by `python -m replicate.dvcfile`: do not edit (issue 11).
# DVC records what Snakemake writes: one stage per paper, running the paper's Snakemake target
# (which reruns only what Snakemake finds stale; the outputs persist through `dvc repro`), and
# one for the claims. A stage's params are the params.yaml keys its experiments' rules read at
# the active scale (but `scale`, which the settings keys and the command name), and its deps
# exactly the code those rules list as inputs: `snakemake -n` and `dvc status` agree on what
# is stale (tests/test_staleness.py). Metrics: the per-paper verdict counts.
"""


def _snakemake(target: str) -> str:
    return f"snakemake --cores all {target} --config scale={SCALE_VARIABLE}"


def _scale_free(keys: list[str], scale: str) -> list[str]:
    """Keys with the active scale's settings segment replaced by the DVC variable."""
    return [k.replace(f".settings.{scale}", f".settings.{SCALE_VARIABLE}") for k in keys]


def paper_stages(params: Params) -> dict[str, list[str]]:
    """Each paper's DVC stage (named by its key, as its Snakemake target is) and the
    experiments it records, in params.yaml's order."""
    papers: dict[str, list[str]] = {}
    for name, entry in params.experiments.items():
        papers.setdefault(entry.paper, []).append(name)
    return papers


def _dvc_params(params: Params, names: list[str]) -> list[str]:
    """The params.yaml keys of experiments ``names`` as DVC reads them, each once:
    `Params.input_keys` but ``scale``, whose change DVC sees anyway (the settings keys and the
    command name it through ``${scale}``), and each key DVC reads costs a walk of the whole
    parsed file (issue 23)."""
    keys = [k for name in names for k in _scale_free(params.input_keys(name), params.scale)]
    return [k for k in dict.fromkeys(keys) if k != "scale"]


def stages(params: Params) -> dict[str, Any]:
    from replicate.experiments import code_paths
    from replicate.verdicts import verdict_summary_paths

    out: dict[str, Any] = {}
    for paper, names in paper_stages(params).items():
        out[paper] = {
            "cmd": _snakemake(paper),
            "params": _dvc_params(params, names),
            "deps": code_paths(paper),
            "outs": [{str(params.experiment(n).directory): {"persist": True}} for n in names],
        }
    out["claims"] = {
        "cmd": _snakemake("claims"),
        "deps": [
            "params.yaml",
            str(params.raw.claims_dir),  # the claims files, hashed as one folder
            *code_paths(None),
            *(str(e.directory) for e in params.experiments.values()),
        ],
        "outs": ["results/claims.json", "results/REPORT.md"],
        # Small, and tracked by git rather than the DVC cache, so that `dvc metrics diff`
        # compares verdict counts across commits.
        "metrics": [{str(p): {"cache": False}} for p in verdict_summary_paths()],
    }
    return out


def render(params: Params) -> str:
    """dvc.yaml's text for ``params`` (stages, metrics and plots)."""
    document = {"stages": stages(params), "plots": plots(params)}
    body = yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body


def plots(params: Params) -> list[Any]:
    """Every experiment's figure as an image plot, then its ``curves`` (params.yaml), one
    line per run (template ``.dvc/plots/runs.json``)."""
    images: list[Any] = [
        str(path)
        for entry in params.experiments.values()
        for path in entry.output_paths
        if path.suffix == ".png"
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
                        "y": {str(entry.directory / curve.file): curve.y},
                        "y_label": curve.y_label,
                        "title": f"{name}: {curve.y_label}",
                    }
                }
            )
    return images + curves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m replicate.dvcfile", description=__doc__)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--check", action="store_true", help="exit 1 if dvc.yaml is stale")
    args = parser.parse_args(argv)
    try:
        params = load_params(args.params, scale=SCALES[0], only=[])
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = render(params)
    if args.check:
        if not DVC_FILE.exists() or DVC_FILE.read_text() != text:
            print(f"{DVC_FILE} is out of date: run `python -m replicate.dvcfile`", file=sys.stderr)
            return 1
        return 0
    from replicate import io

    io.write_text(DVC_FILE, text)
    print(f"wrote {DVC_FILE}: {len(paper_stages(params)) + 1} stages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
