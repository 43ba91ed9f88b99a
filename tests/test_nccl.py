"""The core's GPU path over NCCL (tests/spmd/check_nccl.py: every collective,
fused and direct allreduces over 1-3 lanes, ordering against the producer's
stream, argument errors) and the errors every build gives for GPU tensors it
cannot run (check_gpu_errors.py, which needs no GPU).

The GPU tests need a build with NCCL, CuPy and a GPU per rank; they skip,
saying which is missing, anywhere else."""
import pytest

from gpu_probe import no_gpu_reason
from mpi_harness import assert_spmd_ok
from mxplugin._loader import core_module as core


def gpu_count():
    if no_gpu_reason():
        return 0, no_gpu_reason()
    if not core.nccl_built():
        return 0, "mxplugin was built without NCCL (mxplugin-run --check-build says why)"
    try:
        import cupy
    except ImportError:
        return 0, "CuPy is not installed (it drives the core with device pointers)"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver
        return 0, f"no CUDA device: {e}"
    return n, "no CUDA device" if n == 0 else ""


GPUS, WHY = gpu_count()


def test_gpu_tensors_that_cannot_run_are_clear_errors():
    assert_spmd_ok("check_gpu_errors.py", 1)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
@pytest.mark.parametrize("streams", [1, 2, 3])
def test_nccl_one_rank(streams):
    assert_spmd_ok("check_nccl.py", 1, env={"MXPLUGIN_NUM_STREAMS": str(streams)}, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=WHY or f"needs 2 GPUs (NCCL runs one rank per GPU); this machine has {GPUS}")
def test_nccl_two_ranks():
    assert_spmd_ok("check_nccl.py", 2, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
def test_cpu_against_gpu_is_a_mismatch_on_every_rank():
    assert_spmd_ok("check_gpu_mismatch.py", 2)
