"""GPU tensors that cannot run are a ValueError on the enqueuing rank, with
the reason, whatever the build and machine: no NCCL in the build, no CUDA
device, a host pointer passed as GPU memory, input and output on different
devices. Runs without a GPU (and without CuPy) at 1 rank."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402

core = m.Core()
rank = core.topology()["rank"]
host = np.arange(16, dtype="float32")
nccl = m.nccl_built()
devices = m.cuda_device_count() if m.cuda_built() else 0


def enqueue(name, device, out_device=None, op_type=None):
    # The C API takes one device per op; a mixed op is made by the MXNet and
    # Python layers, so here the core sees the one device it is given.
    return core.enqueue([m.Op(name, m.OP_ALLREDUCE if op_type is None else op_type, m.DTYPES["float32"], [16],
                              host.ctypes.data, host.ctypes.data, device=device)], 0)


def expect_error(name, device, *fragments):
    try:
        enqueue(name, device)
    except ValueError as e:
        text = str(e)
        assert name in text, f"the error does not name the tensor: {text}"
        assert any(f in text for f in fragments), f"expected one of {fragments} in: {text}"
        return text
    raise AssertionError(f"{name}: a GPU op that cannot run was accepted")


if not nccl:
    text = expect_error("gpu.op", 0, "no NCCL backend")
elif devices == 0:
    text = expect_error("gpu.op", 0, "sees 0 CUDA device(s)")
else:
    text = expect_error("gpu.op", 0, "host memory", "not a CUDA pointer")
    expect_error("gpu.op.past.last", devices, f"sees {devices} CUDA device(s)")
sys.stdout.write(f"rank {rank}: {text}\n")

# The rejected op left nothing behind: the name is free and CPU ops still run.
out = np.zeros_like(host)
h = core.enqueue([m.Op("gpu.op", m.OP_ALLREDUCE, m.DTYPES["float32"], [16], host.ctypes.data, out.ctypes.data)], 0)
h.wait()
np.testing.assert_array_equal(out, host * core.topology()["size"])
core.shutdown()
sys.stdout.write(f"PASS {rank}\n")
