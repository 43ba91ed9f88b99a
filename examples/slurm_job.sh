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
cd "${SLURM_SUBMIT_DIR:-.}"
exec mxplugin-run --verbose -np "${SLURM_NTASKS}" python examples/mxnet_digits.py "$@"
