#!/bin/bash
# A Slurm batch job: 2 nodes x 2 ranks of the digits example.
#   sbatch examples/slurm_job.sh [arguments of mxnet_digits.py]
# mxplugin-run takes the hosts and ranks per node from the allocation
# (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE); MPI starts its daemons on the
# nodes with srun, so no ssh between nodes is needed. The Python environment
# holding mxplugin must be at the same path on every node (a shared file
# system), and active here: sbatch passes this environment on.
#SBATCH --job-name=mxplugin-digits
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --output=mxplugin-digits-%j.out
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: sbatch examples/slurm_job.sh [arguments of examples/mxnet_digits.py]

A Slurm batch job: the digits example (examples/mxnet_digits.py) on 2 nodes
x 2 ranks, started by `mxplugin-run --verbose -np $SLURM_NTASKS`. The
arguments go to the example (`python examples/mxnet_digits.py --help` lists
them), as in

  sbatch examples/slurm_job.sh --epochs 5

mxplugin-run takes the hosts and the ranks per node from the allocation
(SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), and MPI starts its daemons on
the nodes with srun: no ssh between nodes is needed. The Python environment
holding mxplugin must be at the same path on every node (a shared file
system) and active where you run sbatch, which passes the environment on.
Change the #SBATCH lines at the top of the script for other sizes; the output
goes to mxplugin-digits-<job id>.out.
USAGE
}

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
esac
if [ -z "${SLURM_NTASKS:-}" ]; then
    echo "slurm_job.sh: SLURM_NTASKS is not set: this is a batch script, submit it with sbatch" \
         "(sbatch examples/slurm_job.sh --epochs 5); --help says more" >&2
    exit 2
fi
cd "${SLURM_SUBMIT_DIR:-.}"
exec mxplugin-run --verbose -np "${SLURM_NTASKS}" python examples/mxnet_digits.py "$@"
