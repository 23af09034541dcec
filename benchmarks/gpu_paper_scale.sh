#!/usr/bin/env bash
# The paper scale on one GPU machine, in two steps that each fit a short lease:
#
#   bash benchmarks/gpu_paper_scale.sh calibrate   # device, per-model-step costs, the cost plan
#   bash benchmarks/gpu_paper_scale.sh run RULE... # full paper-scale runs, side by side
#
# `calibrate` prints the GPU and software, `benchmarks/gpu_readiness.py` at the ci and the
# papers' sequence lengths, and `python -m replicate plan --scale paper` over every rule
# (GPU-hours per rule that trains; writes profiles/slurm/planned-paper.yaml). `run` starts
# every named rule at paper scale at once (each its own process; the GPU is shared, so their wall
# times are upper bounds: read per-rule costs from the plan), each stopped after
# RUN_SECONDS, then packs results/ and logs/ into $OUT/paper-results.tar.gz. `A+B` runs B
# after A in one process chain (B reads A's outputs). Where no package index is reachable,
# make pydantic importable first (PYTHONPATH): the GPU image has the project's other
# dependencies.
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
    mkdir -p logs
    start=$SECONDS
    for chain in "$@"; do
        (
            for rule in ${chain//+/ }; do
                left=$((RUN_SECONDS - (SECONDS - start)))
                if ((left <= 0)); then
                    echo "== $rule: not started, RUN_SECONDS spent" && continue
                fi
                timeout "$left" "$PY" -m replicate run "$rule" --scale paper --no-progress \
                    >"logs/$rule.log" 2>&1
                echo "== $rule: exit $? after $((SECONDS - start)) s"
            done
        ) &
    done
    wait
    tar czf "$OUT/paper-results.tar.gz" results logs
    ;;
*)
    echo "usage: $0 calibrate | run RULE..." >&2
    exit 2
    ;;
esac
