"""Two full runs of the suite side by side (printed, never asserted): what a speed change
costs and what it moves. Give two checkouts that each ran ``snakemake --cores all`` at one
scale, the baseline first, back to back on one machine:

- the summed rule CPU per paper and in all, from Snakemake's benchmark files
  (``logs/<scale>/benchmarks/<rule>.tsv``, the last row: a rule's latest run), and the ratio;
- how many result files are byte-identical (``provenance.json`` aside: it names the commit);
- every metric that moved by more than ``--relative`` (1e-6) relative, per experiment, and
  with ``--list`` each of them with both values;
- every claim whose verdict differs between the two ``results/<scale>/claims.json``.

A change that keeps the bits shows no moved metric and no changed verdict; one that changes
them (docs/reproducibility.md) lists here what its closing note must.

    python benchmarks/compare_runs.py BASELINE NEW [--scale ci] [--relative 1e-6] [--list]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
from pathlib import Path

from replicate.config import read_params_file

Moved = tuple[str, str, object, object]


def rule_cpu(root: Path, scale: str) -> dict[str, float]:
    """CPU seconds of each rule's latest run in ``root`` (Snakemake's benchmark files)."""
    seconds = {}
    for path in sorted((root / "logs" / scale / "benchmarks").glob("*.tsv")):
        rows = list(csv.DictReader(path.open(), delimiter="\t"))
        if rows:
            seconds[path.stem] = float(rows[-1]["cpu_time"])
    return seconds


def paper_of_rule(root: Path) -> dict[str, str]:
    """Each experiment's paper, as ``root``'s params.yaml says (a rule is named as its
    experiment)."""
    params = read_params_file(root / "params.yaml")
    named = {**params["experiments"], **params.get("derived_experiments", {})}
    return {name: entry["paper"] for name, entry in named.items()}


def print_cpu(baseline: Path, new: Path, scale: str) -> None:
    before, after = rule_cpu(baseline, scale), rule_cpu(new, scale)
    papers = paper_of_rule(new)
    sums: dict[str, list[float]] = {}
    for rule in sorted(set(before) & set(after) & set(papers)):
        pair = sums.setdefault(papers[rule], [0.0, 0.0])
        pair[0] += before[rule]
        pair[1] += after[rule]
    sums["all"] = [sum(p[0] for p in sums.values()), sum(p[1] for p in sums.values())]
    print("summed rule CPU, seconds (baseline -> new, new / baseline):")
    for paper, (x, y) in sums.items():
        print(f"  {paper:<14} {x:8.1f} -> {y:8.1f}   {y / x if x else math.nan:5.2f}")
    unpaired = sorted((set(before) ^ set(after)) & set(papers))
    if unpaired:
        print(f"  (rules timed in one run only, left out: {', '.join(unpaired)})")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def print_bytes(baseline: Path, new: Path, scale: str) -> None:
    old_tree = baseline / "results" / scale
    same, differing = 0, []
    for path in sorted(p for p in old_tree.rglob("*") if p.is_file()):
        if path.name == "provenance.json" or path.parent == old_tree:
            continue  # the commit's name; the claims outputs are compared by verdict below
        other = new / path.relative_to(baseline)
        if other.is_file() and _digest(other) == _digest(path):
            same += 1
        else:
            differing.append(str(path.relative_to(old_tree)))
    print(f"result files byte-identical: {same}; differing or absent in the new run: "
          f"{len(differing)}")  # fmt: skip


def _moved(x: object, y: object, relative: float) -> bool:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) != math.isnan(y)
        return abs(x - y) > relative * max(abs(x), abs(y))
    return x != y


def moved_metrics(baseline: Path, new: Path, scale: str, relative: float) -> list[Moved]:
    """(experiment folder, key, baseline value, new value) of every metric that moved."""
    old_tree = baseline / "results" / scale
    moved = []
    for path in sorted(old_tree.rglob("metrics.json")):
        other = new / path.relative_to(baseline)
        x = json.loads(path.read_text())
        y = json.loads(other.read_text()) if other.is_file() else {}
        folder = str(path.parent.relative_to(old_tree))
        moved += [(folder, k, x.get(k), y.get(k)) for k in sorted(set(x) | set(y))
                  if _moved(x.get(k), y.get(k), relative)]  # fmt: skip
    return moved


def changed_verdicts(baseline: Path, new: Path, scale: str) -> list[tuple[str, str, str]]:
    """(claim, baseline verdict, new verdict) of every claim whose verdict differs."""

    def verdicts(root: Path) -> dict[str, str]:
        records = json.loads((root / "results" / scale / "claims.json").read_text())
        return {r["id"]: r["verdict"] for r in records}

    before, after = verdicts(baseline), verdicts(new)
    return [(claim, before.get(claim, "absent"), after.get(claim, "absent"))
            for claim in sorted(set(before) | set(after))
            if before.get(claim) != after.get(claim)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="the checkout of the baseline's run")
    parser.add_argument("new", type=Path, help="the checkout of the new run")
    parser.add_argument("--scale", default="ci")
    parser.add_argument("--relative", type=float, default=1e-6, help="what counts as moved")
    parser.add_argument("--list", action="store_true", help="print every moved metric")
    args = parser.parse_args()
    print_cpu(args.baseline, args.new, args.scale)
    print_bytes(args.baseline, args.new, args.scale)
    moved = moved_metrics(args.baseline, args.new, args.scale, args.relative)
    print(f"metrics moved by more than {args.relative:g} relative: {len(moved)}")
    for folder in dict.fromkeys(m[0] for m in moved):
        rows = [m for m in moved if m[0] == folder]
        print(f"  {folder}: {len(rows)}")
        for _, key, x, y in rows if args.list else []:
            print(f"    {key}: {x} -> {y}")
    changed = changed_verdicts(args.baseline, args.new, args.scale)
    print(f"claims whose verdict changed: {len(changed)}")
    for claim, x, y in changed:
        print(f"  {claim}: {x} -> {y}")


if __name__ == "__main__":
    main()
