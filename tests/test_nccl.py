"""The core's GPU path over NCCL (tests/spmd/check_nccl.py: every collective,
allreduces of every dtype (bfloat16 included) up to 524,301 elements over
1-3 lanes, 50 distinct priorities in one lane launch, half-type scale
factors equal bit for bit direct and fused, ordering against the producer's
stream, argument errors), the same with MXPLUGIN_GPU_DIRECT_THRESHOLD=1 at
1-3 ranks (every allreduce reduced where it lies, LaunchAllreduce, which the
default fuses away), and the errors every build gives for GPU tensors it
cannot run (check_gpu_errors.py, which needs no GPU).

The GPU tests need a build with NCCL, CuPy and a GPU; they skip, saying
which is missing, anywhere else. Where the ranks outnumber the GPUs, each
rank runs as a fake host of its own on GPU 0 (tests/fake_hosts.py; GPU.md),
which needs MPICH's launcher. test_fake_hosts_are_separate_hosts checks that
launch with no GPU."""
import pytest

import fake_hosts
from gpu_probe import no_gpu_reason
from mpi_harness import assert_spmd_ok, mpiexec_path
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


@pytest.fixture(scope="module")
def fakessh(tmp_path_factory):
    return fake_hosts.write_fakessh(str(tmp_path_factory.mktemp("fakessh")))


def launch_or_skip(ranks, gpus, fakessh):
    """The mpiexec options that run `ranks` ranks here, or a skip saying why none can."""
    launch, why = fake_hosts.launch_options(ranks, gpus, mpiexec_path(), fakessh)
    if launch is None:
        pytest.skip(why)
    return launch


def test_gpu_tensors_that_cannot_run_are_clear_errors():
    assert_spmd_ok("check_gpu_errors.py", 1)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
@pytest.mark.parametrize("streams", [1, 2, 3])
def test_nccl_one_rank(streams):
    assert_spmd_ok("check_nccl.py", 1, env={"MXPLUGIN_NUM_STREAMS": str(streams)}, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
@pytest.mark.parametrize("ranks", [2, 3])
def test_nccl_several_ranks(ranks, fakessh):
    assert_spmd_ok("check_nccl.py", ranks, timeout=300, launch=launch_or_skip(ranks, GPUS, fakessh))


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_nccl_direct_allreduce(ranks, fakessh):
    """By default every GPU allreduce that fits the fusion buffer is fused, so
    the direct path runs only for a tensor alone; a direct threshold of one
    byte sends every allreduce there (scaled, every dtype and reduce op)."""
    assert_spmd_ok("check_nccl.py", ranks, env={"MXPLUGIN_GPU_DIRECT_THRESHOLD": "1"}, timeout=300,
                   launch=launch_or_skip(ranks, GPUS, fakessh))


@pytest.mark.parametrize("ranks", [2, 3])
def test_fake_hosts_are_separate_hosts(ranks, fakessh):
    """The launch the tests above use when the ranks outnumber the GPUs, on
    any machine with MPICH (as if it had one GPU)."""
    assert_spmd_ok("check_fake_hosts.py", ranks, launch=launch_or_skip(ranks, 1, fakessh))


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
def test_cpu_against_gpu_is_a_mismatch_on_every_rank():
    assert_spmd_ok("check_gpu_mismatch.py", 2)
