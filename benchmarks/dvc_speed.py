"""How long DVC's bookkeeping takes on a project with every ci result.

Times, side by side in one run, with ruamel.yaml's C parser and without it (the pure-Python
parser DVC used before `ruamel.yaml.clib` was a dependency):
- `dvc status`;
- `dvc repro` with nothing to do;
- the record step that ends every `snakemake` run: as the Snakefile's ``onsuccess`` runs it
  (params.yaml already loaded and validated, as Snakemake has it), and as the command
  `python -m replicate record` (which loads and validates params.yaml first);

Then the commit of a subset of the stages, as after `snakemake fig3` when the claims are not
current (every paper's stage, the claims' not): in one collection of dvc.yaml and one write
of dvc.lock (`replicate.record._commit`, now) against one DVC commit per stage (before);
dvc.lock is put back byte for byte afterwards (DVC's per-stage commit drops its YAML anchors).

DVC parses params.yaml once per stage with params (4, one per paper), walks the parsed file
once per key such a stage reads (44 walks) and hashes each stage's code: most of each
command's time. Run it in a checkout whose results are complete and recorded (after
`snakemake --cores all`); it refuses otherwise, since `dvc repro` would then retrain and the
record step would have nothing to commit.

    python benchmarks/dvc_speed.py [--repeat 3] [--project .]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

WITHOUT_C_PARSER = "import sys; sys.modules['_ruamel_yaml'] = None; "
"""Makes `import _ruamel_yaml` fail, so ruamel.yaml falls back to its Python parser."""

COMMANDS = {
    "dvc status": "from dvc.cli import main; sys.exit(main(['status', '--quiet']))",
    "dvc repro (nothing to do)": "from dvc.cli import main; sys.exit(main(['repro']))",
    "record step (onsuccess)": (
        "import time; from replicate.config import load_params; from replicate.record import "
        "record; params = load_params(); start = time.perf_counter(); record(params); "
        "print(f'seconds={time.perf_counter() - start}')"
    ),
    "python -m replicate record": "from replicate.cli import main; sys.exit(main(['record']))",
}
SUBSET = (
    "from pathlib import Path; from replicate.config import load_params; "
    "from replicate.record import _commit, current_stages; "
    "stages = [s for s in current_stages(load_params()) if s != 'claims']; "
)
EVERY_EXPERIMENT_CURRENT = (
    "from replicate.config import load_params; from replicate.checkout import current_experiments; "
    "params = load_params(); sys.exit(len(current_experiments(params)) != len(params.experiments))"
)
COMMIT_AT_ONCE = SUBSET + "_commit(Path('.'), Path('dvc.yaml'), stages)"
COMMIT_EACH = SUBSET + "[_commit(Path('.'), Path('dvc.yaml'), [s]) for s in stages]"


def _seconds(code: str, project: Path, repeat: int) -> float:
    """The fastest of ``repeat`` wall times of ``python -c code`` in ``project``, or of the
    seconds the code prints itself as ``seconds=S`` (a step timed inside its process)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", f"import sys; {code}"],
            cwd=project,
            check=True,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        printed = [line for line in done.stdout.splitlines() if line.startswith("seconds=")]
        best = min(best, float(printed[-1].removeprefix("seconds=")) if printed else wall)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=Path("."))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    status = subprocess.run(
        [sys.executable, "-m", "dvc", "status", "--quiet"], cwd=args.project, check=False
    )
    if status.returncode != 0:
        print("error: `dvc status` lists changed stages: run `snakemake --cores all` first")
        return 1
    current = subprocess.run(
        [sys.executable, "-c", f"import sys; {EVERY_EXPERIMENT_CURRENT}"], cwd=args.project
    )
    if current.returncode != 0:
        print(
            "error: the record step finds experiments not current, so it would time a record "
            "with nothing to commit: run `snakemake --cores all` first"
        )
        return 1
    print(f"{'command':<28}{'C parser (s)':>14}{'Python parser (s)':>20}{'ratio':>8}")
    for name, code in COMMANDS.items():
        fast = _seconds(code, args.project, args.repeat)
        slow = _seconds(WITHOUT_C_PARSER + code, args.project, args.repeat)
        print(f"{name:<28}{fast:>14.2f}{slow:>20.2f}{slow / fast:>7.1f}x")
    print("\ncommit of the papers' stages (the claims' left out), C parser:")
    lock = args.project / "dvc.lock"
    recorded = lock.read_bytes()  # DVC's own per-stage commit rewrites it without anchors
    try:
        now, before = (_seconds(code, args.project, 1) for code in (COMMIT_AT_ONCE, COMMIT_EACH))
    finally:
        lock.write_bytes(recorded)
    print(f"{'all at once (now)':<28}{now:>14.2f}")
    print(f"{'one per DVC call (before)':<28}{before:>14.2f}{before / now:>27.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
