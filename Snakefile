# markov-replicate workflow. Every rule is generated from params.yaml (validated by
# replicate.config); nothing here restates a setting.
#   snakemake --cores all fig3                       Figure 3 of every paper (ci scale)
#   snakemake --cores all attn_markov_fig3 --config scale=paper
#   snakemake --cores all claims                     evaluate every claim; fail on a surprise
import sys

from replicate.config import ConfigError, load_params
from replicate.experiments import code_dependencies

configfile: "params.yaml"

try:
    PARAMS = load_params(config)
except ConfigError as exc:
    sys.exit(f"error: {exc}")

SCALE = PARAMS.scale
EXPERIMENTS = PARAMS.experiments
PY = f"{sys.executable} -m replicate --scale {SCALE}"


def outputs_of(names):
    return [str(path) for name in names for path in EXPERIMENTS[name].output_paths]


def grouped(attribute):
    groups = {}
    for name, entry in EXPERIMENTS.items():
        groups.setdefault(getattr(entry, attribute), []).append(name)
    return groups


rule all:
    input:
        outputs_of(EXPERIMENTS),
        "results/claims.json",
        "results/REPORT.md",
    default_target: True
    shell:
        f"{PY} check"


for exp_name, exp in EXPERIMENTS.items():

    rule:
        name:
            exp_name
        input:
            code_dependencies(exp.paper),
            outputs_of([PARAMS.upstream_of(exp_name)] if exp.upstream else []),
        output:
            [str(p) for p in exp.output_paths],
        params:
            # Values are bound here; a loop variable used inside `shell:` would be read
            # when the job runs, i.e. after the loop has moved on to the last experiment.
            name=exp_name,
            scale=SCALE,
            settings=PARAMS.settings_json(exp_name),
        shell:
            f"{PY} run {{params.name}}"


# Aggregates: one per item name (fig3 = Figure 3 of every paper) and one per paper key.
for group_name, names in sorted({**grouped("item"), **grouped("paper")}.items()):

    rule:
        name:
            group_name
        input:
            outputs_of(names),


rule claims_report:
    input:
        "params.yaml",
        outputs_of(EXPERIMENTS),
    output:
        "results/claims.json",
        "results/REPORT.md",
    shell:
        f"{PY} claims"


rule claims:
    input:
        "results/claims.json",
    shell:
        f"{PY} check"
