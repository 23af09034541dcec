#!/usr/bin/env bash
# The paper scale on one GPU machine, in two steps that each fit a short lease:
#
#   bash benchmarks/gpu_paper_scale.sh calibrate   # device, per-model-step costs, the cost plan
#   bash benchmarks/gpu_paper_scale.sh run RULE... # full paper-scale runs, side by side
#
# `calibrate` prints the GPU and software, `benchmarks/gpu_readiness.py` at the ci and the
# papers' sequence lengths, and `python -m replicate plan --scale paper` over every rule
# (GPU-hours per rule that trains; writes profiles/slurm/planned-paper.yaml). `run` starts
# every named rule at paper scale at once (each its own process; the GPU is shared, so their
# wall times are upper bounds: read per-rule costs from the plan), each stopped after
# RUN_SECONDS (its last progress line printed: the step it reached and its rate), then packs
# results/paper/ and logs/paper/ into $OUT/paper-results.tar.gz. `A+B` runs B after A in one process
# chain (B reads A's outputs). Where no package index is reachable, make pydantic importable
# first (PYTHONPATH): the GPU image has the project's other dependencies.
#
# Measured on an H100 (26 Nov 2026, two rules sharing the GPU): paper C's Fig. 7 runs at
# 14.6 steps/s (12,288 steps: ~14 min), Fig. 3 at 16.3 steps/s (16,384 steps: ~17 min),
# evaluation included: neither fits one 10-minute call, so run them over two calls (the
# second with the first's checkpoints/ carried).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
PY=${PY:-python3}
RUN_SECONDS=${RUN_SECONDS:-360}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"


case "${1:-}" in
calibrate)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PY" -c 'import torch, lightning; print("torch", torch.__version__, "lightning",
lightning.__version__, torch.cuda.get_device_name())'
    timeout 55 "$PY" benchmarks/gpu_readiness.py --sizes 1 16 64 --steps 10 2>&1 |
        tee "$OUT/readiness-256.txt"
    timeout 40 "$PY" benchmarks/gpu_readiness.py --sizes 16 125 --steps 6 --seq-len 1024 2>&1 |
        tee "$OUT/readiness-1024.txt"
    # Each rule's line is printed as it is calibrated; the table comes at the end.
    "$PY" -m replicate plan --scale paper --steps 8 --timeout "${RULE_SECONDS:-25}" 2>&1 |
        tee "$OUT/plan.txt"
    cp profiles/slurm/planned-paper.yaml "$OUT/" 2>/dev/null
    ;;
run)
    shift
    mkdir -p logs/paper
    start=$SECONDS
    for chain in "$@"; do
        (
            for rule in ${chain//+/ }; do
                left=$((RUN_SECONDS - (SECONDS - start)))
                if ((left <= 0)); then
                    echo "== $rule: not started, RUN_SECONDS spent" && continue
                fi
                timeout "$left" "$PY" -m replicate run "$rule" --scale paper \
                    >"logs/paper/$rule.log" 2>&1
                echo "== $rule: exit $? after $((SECONDS - start)) s"
                # The last progress line: how far a run that was stopped had come, and its rate.
                tr '\r' '\n' <"logs/paper/$rule.log" | grep 'it/s' | tail -1
            done
        ) &
    done
    wait
    # checkpoints/ too: unpacked into the checkout and carried to the next call (`carry`),
    # a stopped rule resumes at its last checkpoint (cluster.checkpoint_every: 500 steps).
    tar czf "$OUT/paper-results.tar.gz" results/paper logs/paper $([ -d checkpoints ] && echo checkpoints)
    ;;
*)
    echo "usage: $0 calibrate | run RULE..." >&2
    exit 2
    ;;
esac
