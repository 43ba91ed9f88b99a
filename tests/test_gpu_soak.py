"""A soak of the GPU lanes (tests/spmd/check_gpu_soak.py): 4 lanes, so 4
NCCL communicators per rank running at once, large groups submitted
concurrently, a producer stream kept busy with matrix products, every
result checked, at 3 ranks (fake hosts on one GPU, tests/fake_hosts.py).
A lane order that differed between ranks, or communicators whose kernels
could not all be resident beside the producer's, would hang it (README,
"Training on GPUs": what keeps every rank's lanes in the same order).

It runs for MXPLUGIN_TEST_SOAK_SECONDS (60 by default, so that the GPU
command, gpu/run_gpu_suite.py, stays within one call of 9 minutes; the
script alone defaults to 2 minutes). Skips, saying why, without a GPU,
NCCL or CuPy."""
import os

import pytest

import fake_hosts
from mpi_harness import assert_spmd_ok, mpiexec_path
from test_nccl import GPUS, WHY

SECONDS = float(os.environ.get("MXPLUGIN_TEST_SOAK_SECONDS", "60"))
RANKS, LANES = 3, 4


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
def test_lanes_soak(tmp_path):
    launch, why = fake_hosts.launch_options(RANKS, GPUS, mpiexec_path(), fake_hosts.write_fakessh(str(tmp_path)))
    if launch is None:
        pytest.skip(why)
    out, _ = assert_spmd_ok("check_gpu_soak.py", RANKS, args=["--seconds", SECONDS],
                            env={"MXPLUGIN_NUM_STREAMS": str(LANES)}, timeout=SECONDS + 150, launch=launch)
    print(out)
