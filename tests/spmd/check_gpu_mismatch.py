"""Rank 0 submits a tensor on its GPU, rank 1 the same name on the CPU: both
get a MismatchError that names the tensor, the device and the ranks. Needs
one GPU (rank 1 does not touch it) and CuPy; run at 2 ranks."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402
from mxplugin.errors import MismatchError  # noqa: E402

core = m.Core()
rank = core.topology()["rank"]
if rank == 0:
    import cupy as cp

    cp.cuda.Device(0).use()
    data = cp.ones(8, dtype="float32")
    device, ptr, stream = 0, data.data.ptr, cp.cuda.get_current_stream().ptr
else:
    data = np.ones(8, dtype="float32")
    device, ptr, stream = -1, data.ctypes.data, 0
handle = core.enqueue([m.Op("grad.w", m.OP_ALLREDUCE, m.DTYPES["float32"], [8], ptr, ptr, device=device,
                             stream=stream)], 0)
try:
    handle.wait()
    raise AssertionError("CPU against GPU was accepted")
except MismatchError as e:
    text = str(e)
    assert "grad.w" in text and "device" in text and "cpu" in text and "gpu" in text, text
core.shutdown()
sys.stdout.write(f"PASS {rank}\n")
