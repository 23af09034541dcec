"""Command line: `python -m replicate
{list,run,claims,check,expect,record,stability,controls,plan}` (Snakemake calls run, claims
and check).

The options --params and --scale go before or after the subcommand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicate.config import DEFAULT_PARAMS, load_params
from replicate.params import SCALES, ConfigError, Params, timings_dir

if TYPE_CHECKING:
    from replicate.verdicts import ClaimRecord

DISTRIBUTION = "markov-replicate"
"""The name in pyproject.toml, whose installed version `--version` prints."""


class _Version(argparse.Action):
    """--version: the installed package's version, looked up only when asked for (the
    metadata search would otherwise cost every job's start-up)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version(DISTRIBUTION)
        except PackageNotFoundError:
            text = "(not installed: run `pip install -e .`)"
        print(f"{parser.prog} {text}")
        parser.exit()


Subcommands = argparse._SubParsersAction  # the parser's subcommands (`_command` adds one)


def _global_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """--params and --scale. A subcommand's copies default to SUPPRESS: its parser writes
    only what is given after the subcommand, over a value given before it."""
    parser.add_argument(
        "--params",
        type=Path,
        default=DEFAULT_PARAMS if defaults else argparse.SUPPRESS,
        help="parameters file (default: params.yaml)",
    )
    parser.add_argument(
        "--scale",
        choices=SCALES,
        default=None if defaults else argparse.SUPPRESS,
        help="override the scale set in the params file",
    )


def _command(sub: Subcommands, name: str, help: str) -> argparse.ArgumentParser:
    """Subcommand ``name``, taking the global options after it too."""
    subparser = sub.add_parser(name, help=help)
    _global_options(subparser, defaults=False)
    return subparser


def _claims_commands(sub: Subcommands) -> None:
    """The commands that evaluate the claims and record what backs them."""
    _command(sub, "claims", help="evaluate every claim; write results/claims.json and REPORT.md")
    _command(sub, "check", help="exit non-zero if a verdict in results/claims.json is unexpected")
    expect = _command(
        sub,
        "expect",
        help="record the measurement behind claims' expectations in claims/recorded.json "
        "(from the current outputs, at a clean commit)",
    )
    expect.add_argument("ids", nargs="*", metavar="CLAIM_ID", help="the claims to record")
    expect.add_argument("--all", action="store_true", help="every claim")
    expect.add_argument(
        "--prune", action="store_true", help="drop recordings of claims that no longer exist"
    )
    _command(sub, "record", help="record in dvc.lock every stage whose outputs are current")


def _rerun_commands(sub: Subcommands) -> None:
    """The commands that rerun the whole suite in clones: stability and controls."""
    stability = _command(
        sub,
        "stability",
        help="rerun the suite under numerically neutral perturbations (another CPU's numerics) "
        "and list every claim whose verdict changes; write claims/stability.json",
    )
    stability.add_argument(
        "perturbations",
        nargs="*",
        metavar="PERTURBATION",
        help="aten-default, mkl-compatible, threads-2 (default: all)",
    )
    stability.add_argument(
        "--papers",
        nargs="+",
        metavar="PAPER",
        help="rerun only these papers' experiments and replace only their part of "
        "claims/stability.json (default: every paper)",
    )
    control = _command(
        sub,
        "controls",
        help="rerun the suite with learning switched off (the negative control) and record "
        "each claim's verdict there in claims/controls.json",
    )
    for rerun, kept in ((stability, "the clones"), (control, "the clone")):
        rerun.add_argument("--workdir", type=Path, help=f"keep {kept} here (default: none)")
        rerun.add_argument("--cores", default="all", help="Snakemake's --cores (default: all)")


def _plan_commands(sub: Subcommands) -> None:
    """The cost plan and the calibration of one experiment that it runs in a child process."""
    plan = _command(
        sub,
        "plan",
        help="cost plan: calibrate every rule (trainings cut to a few steps), print model-steps, "
        "peak memory, CPU/GPU-hours; write the cluster requests",
    )
    plan.add_argument("experiments", nargs="*", help="only these experiments (default: all)")
    plan.add_argument("--steps", type=int, default=None, help="calibration steps per training")
    plan.add_argument("--timeout", type=float, default=600.0, help="seconds per experiment")
    plan.add_argument("--no-write", action="store_true", help="print only; write no requests")
    calibrate = _command(sub, "calibrate", help="(used by plan) calibrate one experiment")
    calibrate.add_argument("experiment")
    calibrate.add_argument("--root", type=Path, required=True, help="scratch folder")
    calibrate.add_argument("--steps", type=int, required=True)
    calibrate.add_argument("--out", type=Path, required=True, help="JSON file to write")
    calibrate.add_argument(
        "--partial", type=Path, help="JSON-lines file: each training's cost once measured"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="markov-replicate", description=__doc__)
    parser.add_argument("--version", action=_Version)
    _global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True)
    _command(sub, "list", help="list the experiments and their outputs")
    run = _command(sub, "run", help="run one experiment (a figure or table)")
    run.add_argument("experiment", help="experiment name, e.g. attn_markov_fig3")
    run.add_argument("--no-progress", action="store_true", help="hide progress bars")
    _claims_commands(sub)
    _rerun_commands(sub)
    _plan_commands(sub)
    return parser


ROOT_FILES = (DEFAULT_PARAMS.name, "Snakefile")
"""The files that mark the repository root, where every command runs: the paths it reads and
writes (results/, logs/, dvc.lock) start there."""


def _repository_root(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` that holds `ROOT_FILES`."""
    for candidate in (folder, *folder.parents):
        if all((candidate / name).is_file() for name in ROOT_FILES):
            return candidate
    return None


def _not_at_root(args: argparse.Namespace) -> str:
    """Why the command cannot run here: the default params.yaml is missing because the current
    folder lies inside the repository below its root (empty: it can run). Run there, it would
    write results/ and logs/ into the subfolder. A file named with --params is the caller's
    choice; argparse hands over the default object itself when --params is not given."""
    if args.params is not DEFAULT_PARAMS or DEFAULT_PARAMS.exists():
        return ""
    here = Path.cwd()
    root = _repository_root(here)
    if root is None:
        return ""
    return (
        f"this command must be run from the repository root, {root} (the current folder, "
        f"{here}, has no {DEFAULT_PARAMS})"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = _not_at_root(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (`... list | head -1`). As the Python docs advise (library/signal,
        # "Note on SIGPIPE"): send the rest of stdout to devnull, so that the flush at exit
        # cannot fail again, and exit 1.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        if exc.filename is None:  # no file to name: the traceback is all there is
            raise
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1


def _record_timing(path: Path) -> None:
    """Append this process's wall seconds (from its start), peak memory (MB) and CPU seconds
    as a row in Snakemake's benchmark format (the columns Snakemake's ``benchmark:`` starts
    with), read by `replicate.timings.expected_seconds`."""
    import datetime
    import resource
    import time

    import psutil

    from replicate import io

    wall = time.time() - psutil.Process().create_time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    row = [
        f"{wall:.4f}",
        str(datetime.timedelta(seconds=round(wall))),
        f"{usage.ru_maxrss / 1024:.2f}",  # ru_maxrss is in KiB on Linux
        f"{usage.ru_utime + usage.ru_stime:.2f}",
    ]
    io.write_text(path, "s\th:m:s\tmax_rss\tcpu_time\n" + "\t".join(row) + "\n")


def _missing_upstream(name: str, params: Params) -> str:
    """Why ``name`` cannot run yet: an output of its upstream experiment is missing (empty:
    none is, or it has no upstream)."""
    upstream = params.upstream_of(name)
    if upstream is None:
        return ""
    missing = [p for p in params.output_paths(upstream) if not p.exists()]
    if not missing:
        return ""
    more = f" (and {len(missing) - 1} more of its outputs)" if len(missing) > 1 else ""
    return (
        f"{name} reads the outputs of {upstream}, but {missing[0]} is missing{more}; "
        f"build it first with `python -m replicate run {upstream}` or `snakemake {name}`"
    )


def _print_errors(errors: list[str]) -> None:
    for line in errors:
        print(f"error: {line}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    # Only this experiment's settings are validated, so only its paper's code is
    # imported, which keeps the job's start-up short; `snakemake` validated the whole file.
    params = load_params(args.params, scale=args.scale, only=[args.experiment])
    from replicate.experiments.runner import run_experiment

    params.experiment(args.experiment)  # unknown name -> ConfigError before any work
    problem = _missing_upstream(args.experiment, params)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    run_experiment(args.experiment, params, progress=not args.no_progress)
    _record_timing(timings_dir(params.scale) / f"{args.experiment}.tsv")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from replicate.plan import calibrate

    params = load_params(args.params, scale=args.scale, only=[args.experiment])
    params.experiment(args.experiment)
    cost = calibrate(args.experiment, params, args.root, args.steps, args.partial)
    args.out.write_text(json.dumps(cost))
    return 0


def _stability(args: argparse.Namespace) -> int:
    from replicate.stability import PERTURBATIONS, stability

    params = load_params(args.params, scale=args.scale)
    names = args.perturbations or list(PERTURBATIONS)
    path = stability(params, names, args.papers, workdir=args.workdir, cores=args.cores)
    print(f"wrote {path}")
    return 0


def _controls(args: argparse.Namespace) -> int:
    from replicate.controls import controls

    params = load_params(args.params, scale=args.scale)
    print(f"wrote {controls(params, workdir=args.workdir, cores=args.cores)}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from replicate import claims, io, verdicts

    params = load_params(args.params, scale=args.scale)
    outputs = verdicts.ClaimsOutputs(params.scale)
    # Re-evaluate from the claims files and the metrics rather than trusting a stored file:
    # a claims.json left over from an earlier run must not make the check pass.
    try:
        stored = verdicts.load_records(params.scale)
    except FileNotFoundError:
        print(
            f"error: {outputs.claims} is missing; build it with "
            "`python -m replicate claims` (or `snakemake claims`)",
            file=sys.stderr,
        )
        return 1
    except io.MalformedFile as exc:
        print(f"error: {exc}; rebuild it with `python -m replicate claims`", file=sys.stderr)
        return 1
    records, errors = claims.evaluate_with_errors(params)
    _print_errors(errors)
    if [r.to_json() for r in stored] != [r.to_json() for r in records]:
        print(
            f"error: {outputs.claims} is stale (it differs from a fresh evaluation); "
            "rebuild it with `python -m replicate claims`",
            file=sys.stderr,
        )
        return 1
    bad = verdicts.unexpected(records)
    for r in bad:
        _print_unexpected(r)
    print(f"claims check: {len(records) - len(bad)} of {len(records)} verdicts as expected")
    return 1 if bad else 0


def _print_unexpected(r: ClaimRecord) -> None:
    """Why `check` fails on record ``r``: a control that cannot fail it, a stale stability
    mark, a verdict other than the expected one."""
    if r.control_problem:
        print(f"CANNOT FAIL {r.id}: {r.control_problem}", file=sys.stderr)
    if r.stability_problem:
        print(f"STALE MARK {r.id}: {r.stability_problem}", file=sys.stderr)
    if r.matches_expectation:
        return
    print(
        f"UNEXPECTED {r.id}: verdict {r.verdict} (measured {r.measured}, reference "
        f"{r.reference}, {r.comparison} tol {r.tolerance}), expected {r.expected}"
        + (f" — {r.note}" if r.note else ""),
        file=sys.stderr,
    )


def _list(args: argparse.Namespace) -> int:
    params = load_params(args.params, scale=args.scale)
    for name, entry in params.experiments.items():
        outs = ", ".join(str(p) for p in params.output_paths(name))
        print(f"{name}\t{entry.title}\t{outs}")
    return 0


def _claims(args: argparse.Namespace) -> int:
    from replicate import claims, verdicts

    params = load_params(args.params, scale=args.scale)
    outputs = verdicts.ClaimsOutputs(params.scale)
    # A malformed metrics file is reported and its claims recorded as missing, but the
    # files are written and the exit is 0 (see replicate.claims: Snakemake would delete
    # the outputs of a failed job); `check` fails on the missing claims.
    records, errors = claims.evaluate_with_errors(params)
    _print_errors(errors)
    claims.write_claims(records, params)
    bad = verdicts.unexpected(records)
    print(
        f"wrote {outputs.claims}, {outputs.report} and {outputs.verdicts_dir}/: "
        f"{len(records)} claims, {len(bad)} unexpected verdict(s)"
    )
    return 0


def _expect(args: argparse.Namespace) -> int:
    from replicate.claim_files import load_claims, write_recorded
    from replicate.expect import expect

    params = load_params(args.params, scale=args.scale)
    if args.prune and not args.ids and not args.all:
        kept = load_claims(params, prune=True).recorded
        path = write_recorded(params.claims_dir, kept)
        print(f"kept the recordings of {len(kept)} claim(s) in {path}")
        return 0
    if bool(args.ids) == args.all:
        print("error: name the claims to record, or give --all", file=sys.stderr)
        return 2
    recorded = expect(params, None if args.all else args.ids, prune=args.prune)
    print(
        f"recorded {len(recorded.ids)} claim(s) at {params.scale} scale, commit "
        f"{recorded.commit}, in {recorded.path}"
    )
    if recorded.skipped:
        print(
            f"skipped {len(recorded.skipped)} claim(s) whose expectation gives a written basis "
            f"at {params.scale} scale (delete it to record one): {', '.join(recorded.skipped)}"
        )
    return 0


def _record(args: argparse.Namespace) -> int:
    from dvc.exceptions import DvcException

    from replicate.record import record

    params = load_params(args.params, scale=args.scale)
    try:
        stages = record(params)
    except DvcException as exc:
        print(f"error: dvc.lock not updated: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    print(f"{len(stages)} stage(s) current")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from replicate import plan

    params = load_params(args.params, scale=args.scale)
    for name in args.experiments:
        params.experiment(name)
    costs = plan.plan(
        params,
        args.params,
        names=args.experiments or None,
        steps=args.steps or plan.CALIBRATION_STEPS,
        timeout=args.timeout,
    )
    print(
        f"cost plan at {params.scale} scale ({costs[0].device if costs else 'cpu'}, "
        f"{params.raw.runtime.threads} thread(s)):"
    )
    print(plan.table(costs))
    if not args.no_write:
        print(f"wrote {plan.write_resources(costs, params.scale)}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "list": _list,
    "run": _run,
    "claims": _claims,
    "check": _check,
    "expect": _expect,
    "record": _record,
    "stability": _stability,
    "controls": _controls,
    "plan": _plan,
    "calibrate": _calibrate,
}
"""Each subcommand's function: it returns the exit status, and imports what it alone needs
when it runs (`run` only the experiment's paper), which keeps every job's start-up short."""
