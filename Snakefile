# markov-replicate workflow. Every rule is generated from params.yaml (validated by
# replicate.config); nothing here restates a setting, a resource request included.
#   snakemake fig3                                   Figure 3 of every paper (ci scale)
#   snakemake attn_markov_fig3 --config scale=paper  into results/paper/ (ci: results/ci/)
#   snakemake claims                                 evaluate every claim; fail on a surprise
#   snakemake --profile profiles/slurm ...           the same DAG as SLURM jobs
#   snakemake --report report.zip                    figures, captions and claims for a reviewer
# profiles/default (read automatically) sets cores, rerun-incomplete and printing.
import contextlib
import copy
import json
import signal
import sys
from pathlib import Path

import psutil

from snakemake.utils import update_config

from replicate.claim_files import load_claims
from replicate.claims import input_files
from replicate.config import DEFAULT_PARAMS, load_params, read_params_file
from replicate.params import ConfigError, ResourceRequest, logs_dir, value_at
from replicate.report import captions, claims_caption, console_summary, stored_records
from replicate.verdicts import ClaimsOutputs
from replicate.timings import critical_path_seconds, expected_seconds, read_resources
from replicate.record import record_in_dvc
from replicate.sources import CODE_ROOT, claims_sources, experiment_digest, source_digest

report: "report/workflow.rst"


def interrupt_jobs(signum, frame):
    """SIGINT sent to this process alone (by a scheduler, or `kill -INT`; a terminal's
    Ctrl-C reaches the jobs as well) is passed on to the running jobs, then handled as
    Ctrl-C: otherwise Snakemake waits for the jobs to finish and marks their complete
    outputs incomplete. A job stopped so leaves no output (Snakemake deletes a failed
    job's outputs); its trainings resume from their checkpoints on the next run."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.send_signal(signal.SIGINT)
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, interrupt_jobs)


def live_runs_here():
    """The process ids of the other Snakemake runs whose working folder is this one (not
    this process or its parents: a `dvc repro` starting Snakemake)."""
    here = Path.cwd().resolve()
    mine = {p.pid for p in (psutil.Process(), *psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        command, cwd = proc.info["cmdline"] or [], proc.info["cwd"]
        if proc.info["pid"] in mine or cwd is None:
            continue
        if any(Path(arg).name == "snakemake" for arg in command[:3]) and Path(cwd) == here:
            found.append(proc.info["pid"])
    return found


# Snakemake's own message when another run holds the lock ends with `--unlock`, which, while
# that run is alive, lets two runs write the same outputs: say which run it is.
LIVE = live_runs_here()
if LIVE:
    print(
        f"note: another Snakemake run is live in this folder (pid {', '.join(map(str, LIVE))}). "
        "If this run is refused the directory's lock, that run holds it: wait for it to end or "
        "stop it; `--unlock` would let both write the same outputs.",
        file=sys.stderr,
    )

# params.yaml is read by the project's loader, not by `configfile:` (which would accept a key
# given twice and report a syntax error without its line). Snakemake starts `config` with the
# --config values; they go on top of the file's, as `configfile:` would put them.
COMMAND_LINE = copy.deepcopy(config)
try:
    update_config(config, read_params_file(DEFAULT_PARAMS))
    update_config(config, COMMAND_LINE)
    PARAMS = load_params(config, overrides=COMMAND_LINE)
    CLAIMS = load_claims(PARAMS)
except ConfigError as exc:
    sys.exit(f"error: {exc}")

SCALE = PARAMS.scale
EXPERIMENTS = PARAMS.experiments
THREADS = PARAMS.raw.runtime.threads
LOGS = str(logs_dir(SCALE))
# The interpreter is filled in when a job runs ({PYTHON}): a rule's code, which Snakemake
# compares with the one that made its outputs, then does not change with where the checkout
# or its environment lies, and a moved or copied checkout retrains nothing.
PYTHON = sys.executable
PY = "{PYTHON} -m replicate --scale " + SCALE
# The cost plan's requests (`python -m replicate plan`, profiles/slurm/planned-<scale>.yaml)
# stand in for cluster.resources where written; an experiment's own block still wins.
PLANNED = read_resources(SCALE)
PRIORITY_SECONDS = critical_path_seconds(
    expected_seconds(SCALE, list(EXPERIMENTS)),
    {name: PARAMS.upstream_of(name) for name in EXPERIMENTS},
)

localrules:
    all,
    claims,
    claims_report,


def values_of(keys):
    """The params.yaml values a rule reads (a Snakemake re-run trigger; the same keys, but the
    scale, are among its paper's DVC stage's params, replicate/dvcfile.py). A function, so that
    braces in the values are not taken for wildcards."""
    text = json.dumps({key: value_at(config, key) for key in keys}, sort_keys=True)
    return lambda wildcards: text


def outputs_of(names):
    return [str(path) for name in names for path in PARAMS.output_paths(name)]


CLAIMS_OUTPUTS = [str(p) for p in ClaimsOutputs(SCALE).paths()]


# Snakemake renders a caption with the workflow's config alone: what the captions show
# (report/experiment.rst, report/claims.rst) is added to it, escaped for reStructuredText:
# per experiment its title, source and claims with the expected verdicts and the measured
# ones of the scale's claims.json; and the measured verdicts' counts.
STORED, STORED_PROBLEM = stored_records(SCALE)
config["report_captions"] = captions(PARAMS, CLAIMS.claims, STORED)
config["report_verdicts"] = claims_caption(STORED, STORED_PROBLEM)


def for_report(name, path):
    """Figures (or, for a table without one, its CSVs) go into Snakemake's report, with the
    caption report/experiment.rst renders (title, source, the claims checked on it)."""
    entry = EXPERIMENTS[name]
    shown = ".png" if any(o.endswith(".png") for o in entry.outputs) else ".csv"
    if not str(path).endswith(shown):
        return str(path)
    return report(
        str(path),
        caption="report/experiment.rst",
        category=entry.paper,
        subcategory=entry.item,
        labels={"experiment": name, "file": path.name},
    )


def grouped(attribute):
    groups = {}
    for name, entry in EXPERIMENTS.items():
        groups.setdefault(getattr(entry, attribute), []).append(name)
    return groups


rule all:
    input:
        outputs_of(EXPERIMENTS),
        CLAIMS_OUTPUTS,
    default_target: True
    log:
        f"{LOGS}/all.log",
    shell:
        PY + " check > {log} 2>&1"


for exp_name, exp in EXPERIMENTS.items():

    rule:
        name:
            exp_name
        input:
            outputs_of([PARAMS.upstream_of(exp_name)] if exp.upstream else []),
        output:
            [for_report(exp_name, p) for p in PARAMS.output_paths(exp_name)],
        log:
            f"{LOGS}/{exp_name}.log",
        threads: THREADS
        # Longest chains first, so that the last job to finish is a short one:
        # the rule's seconds plus its longest chain of derived rules, from each rule's last
        # timing (logs/<scale>/benchmarks/, written by `run`), else from the cost plan.
        priority: round(PRIORITY_SECONDS[exp_name])
        resources:
            **PARAMS.resources(
                exp_name, ResourceRequest(**PLANNED[exp_name]) if exp_name in PLANNED else None
            ).model_dump(),
        params:
            # Values are bound here; a loop variable used inside `shell:` would be read
            # when the job runs, i.e. after the loop has moved on to the last experiment.
            name=exp_name,
            inputs=values_of(PARAMS.input_keys(exp_name)),
            # The code it runs, by meaning: the digest of the syntax trees of the files its
            # job imports (replicate/sources.py), not their bytes or times, so that a
            # comment, a reformat or an edit of a module it does not import retrains nothing.
            code=experiment_digest(exp_name),
        shell:
            PY + " run {params.name} > {log} 2>&1"


# Aggregates: one per item name (fig3 = Figure 3 of every paper) and one per paper key.
for group_name, names in sorted({**grouped("item"), **grouped("paper")}.items()):

    rule:
        name:
            group_name
        input:
            outputs_of(names),


rule claims_evaluation:
    input:
        # params.yaml whole (the claims step validates every experiment at both scales) and
        # the claims files (the DVC stage has them as deps too, replicate/dvcfile.py).
        [str(path) for path in input_files(PARAMS, CLAIMS)],
        outputs_of(EXPERIMENTS),
    output:
        report(CLAIMS_OUTPUTS[0], caption="report/claims.rst", category="claims"),
        report(CLAIMS_OUTPUTS[1], caption="report/claims.rst", category="claims"),
        CLAIMS_OUTPUTS[2:],
    log:
        f"{LOGS}/claims_evaluation.log",
    params:
        code=source_digest(claims_sources(CODE_ROOT), CODE_ROOT),
    threads: 1
    shell:
        PY + " claims > {log} 2>&1"


# The targets for the claims list every experiment output as well, as `all` does: Snakemake
# remakes a deleted file only when a target needs it, not when only the files made from it
# (the claims) do, so an output deleted since would otherwise go unnoticed.
rule claims_report:
    input:
        outputs_of(EXPERIMENTS),
        CLAIMS_OUTPUTS,


rule claims:
    input:
        outputs_of(EXPERIMENTS),
        CLAIMS_OUTPUTS,
    log:
        f"{LOGS}/claims.log",
    shell:
        PY + " check > {log} 2>&1"


# Every run ends with the claims' verdicts (the scale's claims.json as last written, saying so
# when an input changed since), the unexpected ones and where REPORT.md is: after the jobs'
# input lists Snakemake prints, the last lines a console shows, whether the run succeeded
# (`onsuccess`) or failed (`onerror`, e.g. the claims check).
def print_verdicts():
    """The last lines of every run: the claims' verdicts, the unexpected ones, REPORT.md."""
    inputs = [*input_files(PARAMS, CLAIMS), *outputs_of(EXPERIMENTS)]
    lines = console_summary(SCALE, inputs=[Path(p) for p in inputs])
    print("\n" + "\n".join(lines), flush=True)


# DVC records what Snakemake wrote: every stage (a paper, the claims) of this scale whose
# outputs are now current or not written yet goes into this scale's dvc.lock, so `dvc status`
# agrees with `snakemake -n`. A failed or interrupted run records nothing, so that Ctrl-C
# returns at once: the next run's
# record, or `python -m replicate record`, commits every stage current by then, the jobs that
# finished before the failure included.
onsuccess:
    record_in_dvc(PARAMS)
    print_verdicts()


onerror:
    print_verdicts()
