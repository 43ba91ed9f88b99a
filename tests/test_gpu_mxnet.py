"""MXNet GPU NDArrays: the adapter hands the core device pointers and the
engine's CUDA stream; tensors on different devices in one op are an error.

test_device_placement_errors runs everywhere (check_gpu_contexts.py makes
gpu(i) NDArrays whose storage is never allocated, so even the CPU wheel has
them). The tests marked `gpu` run every collective and DistributedTrainer on
mx.gpu() arrays (check_gpu_mxnet.py); they need a CUDA build of MXNet, an
NCCL build of mxplugin and one GPU per rank, and skip saying which is missing."""
import types

import mxnet as mx
import numpy as np
import pytest

from mpi_harness import assert_spmd_ok
from mxplugin.training import native_update
from mxplugin._loader import core_module as core


def gpus():
    try:
        n = mx.context.num_gpus()
    except mx.base.MXNetError:  # a CUDA build of MXNet without a driver
        n = 0
    if n == 0:
        return 0, "needs a GPU and a CUDA build of MXNet"
    if not core.nccl_built():
        return 0, "mxplugin was built without NCCL (mxplugin-run --check-build says why)"
    return n, ""


GPUS, WHY = gpus()


@pytest.mark.parametrize("np_", [1, 2])
def test_device_placement_errors(np_):
    """A grouped call spanning cpu and gpu, and input/output on different
    devices, are ValueErrors naming tensors and contexts, raised before
    anything is queued; cpu and cpu_pinned mix; a gpu(i) array reaches the
    core as device i."""
    assert_spmd_ok("check_gpu_contexts.py", np_)


def test_gpu_buckets_are_not_given_to_the_cpu_optimizer_kernels():
    sgd = mx.optimizer.SGD(momentum=0.9)
    for ctx, expected in [(mx.cpu(), True), (mx.cpu_pinned(0), True), (mx.gpu(0), False)]:
        bucket = types.SimpleNamespace(ctx=ctx, grad=types.SimpleNamespace(dtype=np.float32))
        assert native_update.supports(sgd, bucket) is expected, ctx


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason=WHY or "needs a GPU")
def test_gpu_collectives_and_trainer_one_rank():
    assert_spmd_ok("check_gpu_mxnet.py", 1, timeout=400)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason=WHY or f"needs 2 GPUs (NCCL runs one rank per GPU); this machine has {GPUS}")
def test_gpu_collectives_and_trainer_two_ranks():
    assert_spmd_ok("check_gpu_mxnet.py", 2, timeout=400)
