"""Command line: `python -m replicate {list,run,claims,check,plan}` (Snakemake calls these)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from replicate.config import SCALES, ConfigError, load_params


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="markov-replicate", description=__doc__)
    parser.add_argument("--params", type=Path, default=Path("params.yaml"), help="parameters file")
    parser.add_argument("--scale", choices=SCALES, help="override the scale set in the params file")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the experiments and their outputs")
    run = sub.add_parser("run", help="run one experiment (a figure or table)")
    run.add_argument("experiment", help="experiment name, e.g. attn_markov_fig3")
    run.add_argument("--no-progress", action="store_true", help="hide progress bars")
    sub.add_parser("claims", help="evaluate every claim; write results/claims.json and REPORT.md")
    sub.add_parser("check", help="exit non-zero if a verdict in results/claims.json is unexpected")
    plan = sub.add_parser(
        "plan",
        help="cost plan: calibrate every rule (trainings cut to a few steps), print model-steps, "
        "peak memory, CPU/GPU-hours; write the cluster requests",
    )
    plan.add_argument("experiments", nargs="*", help="only these experiments (default: all)")
    plan.add_argument("--steps", type=int, default=None, help="calibration steps per training")
    plan.add_argument("--timeout", type=float, default=600.0, help="seconds per experiment")
    plan.add_argument("--no-write", action="store_true", help="print only; write no requests")
    calibrate = sub.add_parser("calibrate", help="(used by plan) calibrate one experiment")
    calibrate.add_argument("experiment")
    calibrate.add_argument("--root", type=Path, required=True, help="scratch folder")
    calibrate.add_argument("--steps", type=int, required=True)
    calibrate.add_argument("--out", type=Path, required=True, help="JSON file to write")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        # Only this experiment's settings are validated, so only its paper's code is
        # imported (issue 13: a job's start-up); `snakemake` validated the whole file.
        params = load_params(args.params, scale=args.scale, only=[args.experiment])
        from replicate.experiments import run_experiment

        params.experiment(args.experiment)  # unknown name -> ConfigError before any work
        run_experiment(args.experiment, params, progress=not args.no_progress)
        return 0

    if args.command == "calibrate":
        from replicate.plan import calibrate

        params = load_params(args.params, scale=args.scale, only=[args.experiment])
        params.experiment(args.experiment)
        args.out.write_text(json.dumps(calibrate(args.experiment, params, args.root, args.steps)))
        return 0
    if args.command == "plan":
        return _plan(args)

    from replicate import claims

    params = load_params(args.params, scale=args.scale)
    if args.command == "check":
        # Re-evaluate from params.yaml and the metrics rather than trusting a stored file:
        # a claims.json left over from an earlier run must not make the check pass.
        records = claims.evaluate(params)
        stored = claims.load_records() if claims.CLAIMS_FILE.exists() else []
        if [r.to_json() for r in stored] != [r.to_json() for r in records]:
            print(
                f"error: {claims.CLAIMS_FILE} is stale (it differs from a fresh evaluation); "
                "rebuild it with `python -m replicate claims`",
                file=sys.stderr,
            )
            return 1
        bad = claims.unexpected(records)
        for r in bad:
            print(
                f"UNEXPECTED {r.id}: verdict {r.verdict} (measured {r.measured}, reference "
                f"{r.reference}, {r.comparison} tol {r.tolerance}), expected {r.expected}"
                + (f" — {r.note}" if r.note else ""),
                file=sys.stderr,
            )
        print(f"claims check: {len(records) - len(bad)} of {len(records)} verdicts as expected")
        return 1 if bad else 0

    if args.command == "list":
        for name, entry in params.experiments.items():
            outs = ", ".join(str(p) for p in entry.output_paths)
            print(f"{name}\t{entry.title}\t{outs}")
        return 0
    if args.command == "claims":
        records = claims.evaluate(params)
        claims.write_claims(records, params)
        bad = claims.unexpected(records)
        print(
            f"wrote {claims.CLAIMS_FILE} and {claims.REPORT_FILE}: {len(records)} claims, "
            f"{len(bad)} unexpected verdict(s)"
        )
        return 0
    raise AssertionError(args.command)


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
