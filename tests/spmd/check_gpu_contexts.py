"""How the MXNet adapter places tensors, checked on any build and machine
(no GPU needed): GPU NDArrays reach the core as GPU tensors of their device
id, and tensors on different devices in one op are a ValueError naming the
tensors and their contexts, raised before anything is queued.

The GPU arrays here are real NDArrays on a gpu(i) context whose storage is
never allocated (MXNet allocates lazily); every check below fails before
anything would touch it, so the CPU wheel can create them."""
import common
from common import assert_close, hvd, mx, np

from mxnet.ndarray.ndarray import NDArray, _new_alloc_handle

from mxplugin._loader import core_module as m

rank, size = common.start()


def unallocated(shape, ctx, dtype="float32"):
    return NDArray(handle=_new_alloc_handle(shape, ctx, True, np.dtype(dtype)))


def raises_value_error(fn, *fragments):
    try:
        fn()
    except ValueError as e:
        text = str(e)
        for f in fragments:
            assert f in text, f"expected {f!r} in: {text}"
        return text
    raise AssertionError(f"no ValueError (expected one mentioning {fragments})")


host = mx.nd.ones((4,))
gpu0 = unallocated((4,), mx.gpu(0))

# A grouped call spanning devices is an error (one engine op runs on one
# device), naming both tensors and both contexts.
text = raises_value_error(lambda: hvd.grouped_allreduce_([host, gpu0], name="mixed"),
                          "'allreduce.mixed_2of2' is on gpu(0)", "'allreduce.mixed_1of2'", "on cpu(0)",
                          "one device")
common.say(f"rank {rank}: {text}")
raises_value_error(lambda: hvd.grouped_allreduce_([gpu0, host], name="mixed"),
                   "'allreduce.mixed_2of2' is on cpu(0)", "'allreduce.mixed_1of2'", "on gpu(0)")

# Input and output of one tensor on different devices (the Python API always
# allocates outputs beside inputs; the raw MXNet entry can be given anything).
core = hvd.basics._core()
for inp, out, fragment in [(host, gpu0, "input is on cpu(0) but output on gpu(0)"),
                           (gpu0, host, "input is on gpu(0) but output on cpu(0)")]:
    op = m.Op("allreduce.split", m.OP_ALLREDUCE, m.DTYPES["float32"], [4], inp.handle.value, out.handle.value)
    raises_value_error(lambda: core.enqueue([op], 0, True, 0), "allreduce 'allreduce.split'", fragment)

# Host contexts are one device: cpu and cpu_pinned mix freely.
pinned = mx.nd.ones((4,), ctx=mx.cpu_pinned(0)) * 2
a, b = mx.nd.ones((4,)), pinned
hvd.grouped_allreduce_([a, b], name="host.kinds", op=hvd.Sum)
assert_close(a, np.full(4, size, "float32"), what="cpu member of a cpu/cpu_pinned group")
assert_close(b, np.full(4, 2 * size, "float32"), what="cpu_pinned member of a cpu/cpu_pinned group")

# An all-GPU op reaches the core as a GPU tensor of the array's device id:
# a build or machine that cannot run it says so (the core's message).
devices = m.cuda_device_count() if m.cuda_built() else 0
if not m.nccl_built() or devices == 0:
    gpu1 = unallocated((4,), mx.gpu(1))
    text = raises_value_error(lambda: hvd.allreduce_(gpu1, name="on.gpu1"), "allreduce 'allreduce.on.gpu1'",
                              "gpu(1)")
    assert "no NCCL backend" in text or "sees 0 CUDA device(s)" in text, text
    common.say(f"rank {rank}: {text}")

# Nothing of the rejected calls was queued: their names are free and ops run.
x, y = mx.nd.ones((4,)) * (rank + 1), mx.nd.ones((2,))
hvd.grouped_allreduce_([x, y], name="mixed", op=hvd.Sum)
assert_close(x, np.full(4, size * (size + 1) / 2, "float32"), what="allreduce after rejected calls")
assert_close(y, np.full(2, size, "float32"), what="allreduce after rejected calls")
common.finish()
