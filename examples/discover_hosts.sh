#!/bin/bash
# A host discovery script for elastic jobs: prints the hosts a job may use
# now, one "host:slots" line each, as mxplugin-run --host-discovery-script
# (and horovodrun's) expects. --help says how to use it.
set -euo pipefail -f  # -f: no file name expansion of the words read

usage() {
    cat <<'USAGE'
usage: examples/discover_hosts.sh [HOSTS_FILE]

Prints the hosts an elastic job may use now, one "host:slots" line each
(a host printed without ":slots" gets --slots-per-host, else 1), for

  mxplugin-run --min-np 2 --max-np 8 --host-discovery-script "examples/discover_hosts.sh hosts.txt" python train.py

mxplugin-run runs it every --discovery-interval seconds (1 by default).

With HOSTS_FILE: the hosts listed there, a line each, as "host:slots",
"host slots=N" (a --hostfile line) or "host"; blank lines and what follows a
"#" are left out. Edit the file while the job runs: a host added or removed
takes effect at the job's next commit (the job goes on in a new world). A file
that cannot be read exits 1, and mxplugin-run keeps the hosts it had.

Without HOSTS_FILE, inside a Slurm allocation: the allocation's nodes
(scontrol show hostnames "$SLURM_JOB_NODELIST"), each with the tasks per node
that Slurm gives it (SLURM_TASKS_PER_NODE).

Exit status: 0 with the hosts printed, 1 when the file cannot be read, 2 when
there is neither a HOSTS_FILE nor a Slurm allocation.
USAGE
}

# One line of a hosts file as "host:slots" or "host"; nothing for a blank line or a comment.
host_line() {
    local line=${1%%#*} name rest slots="" word
    read -r name rest <<<"$line" || true
    [ -n "${name:-}" ] || return 0
    for word in ${rest:-}; do
        case "$word" in slots=*) slots=${word#slots=} ;; esac
    done
    if [ -n "$slots" ] && [[ "$name" != *:* ]]; then
        echo "$name:$slots"
    else
        echo "$name"
    fi
}

from_file() {
    local line
    if [ ! -r "$1" ]; then
        echo "discover_hosts.sh: cannot read the hosts file $1" >&2
        exit 1
    fi
    while IFS= read -r line || [ -n "$line" ]; do
        host_line "$line"
    done <"$1"
}

# SLURM_TASKS_PER_NODE ("2(x3),1": 2 on each of the first 3 nodes, then 1), one count a line.
tasks_per_node() {
    local part count times
    for part in ${1//,/ }; do
        if [[ "$part" =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
            count=${BASH_REMATCH[1]} times=${BASH_REMATCH[2]}
        else
            count=$part times=1
        fi
        for ((; times > 0; times--)); do echo "$count"; done
    done
}

from_slurm() {
    local names
    names=$(scontrol show hostnames "$SLURM_JOB_NODELIST")  # its failure ends the script (set -e)
    local -a nodes counts
    mapfile -t nodes <<<"$names"
    mapfile -t counts < <(tasks_per_node "${SLURM_TASKS_PER_NODE:-}")
    local i
    for i in "${!nodes[@]}"; do
        echo "${nodes[$i]}:${counts[$i]:-1}"
    done
}

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
esac
if [ $# -ge 1 ]; then
    from_file "$1"
elif [ -n "${SLURM_JOB_NODELIST:-}" ]; then
    from_slurm
else
    echo "discover_hosts.sh: give a hosts file (examples/discover_hosts.sh hosts.txt) or run it inside a" \
         "Slurm allocation; --help says more" >&2
    exit 2
fi
