#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests and for trying the slurm profile:
# munged, slurmctld and slurmd (Debian's slurm-wlm packages) run as root, with one default
# partition "local" holding every core and 90% of the memory. Nothing outside this machine
# is contacted (the daemons listen on their usual ports; clients find them through
# $SLURM_CONF).
#
#   scripts/slurm-local.sh start [DIR]   write DIR/slurm.conf, start the daemons, wait for the node
#   scripts/slurm-local.sh stop  [DIR]   stop the daemons started from DIR
#   export SLURM_CONF=DIR/slurm.conf     before sbatch / squeue / snakemake --profile profiles/slurm
#
# DIR defaults to /tmp/markov-replicate-slurm. Exit status 2: SLURM cannot start here (not
# root, packages missing, a daemon refused to start); the reason is printed.
set -euo pipefail

action=${1:-start}
dir=${2:-/tmp/markov-replicate-slurm}
conf="$dir/slurm.conf"

cannot() {
    echo "slurm-local: cannot start SLURM here: $*" >&2
    exit 2
}

stop() {
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"; do
        if [[ -s $pidfile ]]; then
            kill "$(cat "$pidfile")" 2>/dev/null || true
            rm -f "$pidfile"
        fi
    done
    if [[ $(readlink /run/slurm/conf 2>/dev/null) == "$dir"/* ]]; then
        rm -f /run/slurm/conf
    fi
}

write_conf() {
    local host cpus mem_mb
    host=$(hostname -s)
    cpus=$(nproc)
    mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$dir/state" "$dir/spool"
    cat >"$conf" <<EOF
ClusterName=markovlocal
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# slurmd fetches this file from slurmctld and caches it in /run/slurm/conf, where commands
# run inside jobs find it (Snakemake's job steps drop \$SLURM_CONF from their environment).
SlurmctldParameters=enable_configless
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
# Finished jobs stay visible to squeue for 5 minutes (Snakemake's status checks use squeue).
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
    [[ $(id -u) -eq 0 ]] || cannot "the daemons need root"
    for tool in munged slurmctld slurmd sinfo sbatch; do
        command -v "$tool" >/dev/null || cannot "$tool is not installed (apt-get install slurmctld slurmd slurm-client munge)"
    done
    stop
    write_conf
    mkdir -p /run/munge
    chown munge:munge /run/munge
    # munged runs as the munge user; its key is made by the Debian package.
    if ! su -s /bin/sh munge -c "munged --pid-file=/run/munge/munged.pid" 2>"$dir/munged.err"; then
        pgrep -x munged >/dev/null || cannot "munged did not start: $(cat "$dir/munged.err")"
    fi
    cp /run/munge/munged.pid "$dir/munged.pid" 2>/dev/null || true
    slurmctld -f "$conf" || cannot "slurmctld did not start (see $dir/slurmctld.log)"
    slurmd --conf-server "$(hostname -s)" || cannot "slurmd did not start (see $dir/slurmd.log)"
    export SLURM_CONF=$conf
    for _ in $(seq 60); do
        if sinfo --noheader --format=%t 2>/dev/null | grep -qx "idle"; then
            echo "slurm-local: up; export SLURM_CONF=$conf"
            return 0
        fi
        sleep 0.5
    done
    stop
    cannot "the node did not become idle in 30 s (see $dir/slurmctld.log and $dir/slurmd.log)"
}

case $action in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop [DIR]" >&2; exit 64 ;;
esac
