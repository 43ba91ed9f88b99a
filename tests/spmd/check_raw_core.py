"""Tier 1: the C++ core driven through the raw entry with NumPy buffers, no
MXNet ops and no mxplugin.init() (mxplugin._loader imports mxnet only to load
libmxnet.so). Run under mpiexec at 1 and 2 ranks."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402
from mxplugin.errors import MismatchError  # noqa: E402

core = m.Core()
topo = core.topology()
rank, size = topo["rank"], topo["size"]
assert 0 <= rank < size and topo["local_rank"] == rank and topo["local_size"] == size
assert core.process_set_ranks(0) == list(range(size))
assert core.process_set_rank(0) == rank

DT = m.DTYPES
TOL = {"float16": dict(rtol=1e-2, atol=1e-2), "float32": dict(rtol=1e-5, atol=1e-5)}


def data(shape, r, dtype, seed=0):
    rng = np.random.RandomState(seed * 1000 + r)
    if dtype.startswith("float"):
        return (rng.uniform(-1, 1, size=shape) * 4).astype(dtype)
    return rng.randint(-100, 100, size=shape).astype(dtype)


def op(name, op_type, dtype, inp, out, reduce_op=m.REDUCE_SUM, root=0, pre=1.0, post=1.0, splits=None,
       shape=None, out_shape=None, priority=0):
    return m.Op(name, op_type, DT[dtype], list(inp.shape if shape is None else shape), inp.ctypes.data,
                out.ctypes.data, out_shape=list(out.shape if out_shape is None else out_shape), reduce_op=reduce_op,
                root_rank=root, prescale=pre, postscale=post, splits=splits, priority=priority)


def run(ops, set_id=0):
    handle = core.enqueue(ops, set_id)
    handle.wait()
    assert handle.done()


def check(what, actual, expected, dtype):
    if dtype.startswith("float"):
        assert np.all(np.isfinite(actual)), f"rank {rank}: {what}: non-finite"
        np.testing.assert_allclose(actual.astype("float64"), expected, err_msg=f"rank {rank}: {what}", **TOL[dtype])
    else:
        np.testing.assert_array_equal(actual, np.asarray(expected).astype(dtype), err_msg=f"rank {rank}: {what}")


def barrier(name):
    run([m.Op(name, m.OP_BARRIER, DT["float32"], [], 0, 0)])


# --- allreduce: Sum and Average, float32/float16/int32, scaled, in and out of place
keep = []
ops = []
expect = []
for dtype in ("float32", "float16", "int32"):
    for reduce_name, reduce_op in (("sum", m.REDUCE_SUM), ("avg", m.REDUCE_AVERAGE)):
        scales = [(1.0, 1.0), (0.5, 4.0)] if dtype != "int32" else [(1.0, 1.0), (2.0, 1.0)]
        for pre, post in scales:
            for shape in ((5,), (3, 4), (70_000,)):  # the last is above the 256 KB direct threshold for 4-byte types
                per = [data(shape, r, dtype, seed=len(ops)) for r in range(size)]
                total = sum(p.astype("float64") * pre for p in per) * post
                if reduce_op == m.REDUCE_AVERAGE:
                    total = total / size
                if dtype == "int32":
                    total = np.trunc(total)
                inp = per[rank].copy()
                out = np.zeros_like(inp)
                name = f"ar.{dtype}.{reduce_name}.{pre}.{post}.{len(shape)}.{shape[0]}"
                ops.append(op(name, m.OP_ALLREDUCE, dtype, inp, out, reduce_op, pre=pre, post=post))
                expect.append((name, out, total, dtype))
                inplace = per[rank].copy()
                ops.append(op(name + ".inplace", m.OP_ALLREDUCE, dtype, inplace, inplace, reduce_op, pre=pre,
                              post=post))
                expect.append((name + ".inplace", inplace, total, dtype))
                keep.append((name + " input untouched", inp, per[rank]))
# all in one enqueue (fused where small), then each in its own enqueue
run(ops)
for name, out, total, dtype in expect:
    check(name, out, total, dtype)
for name, inp, original in keep:
    np.testing.assert_array_equal(inp, original, err_msg=f"rank {rank}: {name}")
handles = []
for (name, out, total, dtype), o in zip(expect, ops):
    out[...] = 0
for o in ops[::2]:  # out-of-place ones, one handle each, all in flight together
    o.name = "single." + o.name
    handles.append(core.enqueue([o], 0))
for h in handles:
    h.wait()
for name, out, total, dtype in expect[::2]:
    check("single " + name, out, total, dtype)
del keep, ops, expect, handles

# --- integer scaling saturates at the type's limits (src/common/saturate.h), as on
# the GPU: the product is taken in float64, truncated toward zero and clamped
# (NaN gives 0). Postscale acts after the sum, so each rank sends values whose
# sum fits and the scaled result saturates.
def saturated(values, dtype):
    info = np.iinfo(dtype)
    v = np.trunc(np.asarray(values, dtype=np.float64))
    out = np.where(v <= info.min, info.min, np.where(v >= float(info.max), info.max, 0)).astype(dtype)
    inside = (v > info.min) & (v < float(info.max))
    out[inside] = v[inside].astype(dtype)
    return out


for dtype, post in (("int32", 4.0), ("int32", -3.5), ("int64", 8.0), ("int8", 3.0), ("uint8", 2.5),
                    ("int32", 0.5), ("int64", float("nan"))):
    info = np.iinfo(dtype)
    share = [info.max // (2 * size), info.min // (2 * size) if info.min else 7, 5, -5 if info.min else 9, 1, 0]
    inp = np.array(share, dtype=dtype)
    out = np.zeros_like(inp)
    run([op(f"sat.{dtype}.{post}", m.OP_ALLREDUCE, dtype, inp, out, post=post)])
    total = np.array(share, dtype=np.float64) * size
    check(f"{dtype} postscale {post} saturates", out, saturated(total * post, dtype), dtype)
barrier("after.saturation")

# --- allgather: rank r contributes r+1 rows
for dtype in ("float32", "int32", "float16"):
    per = [data((r + 1, 3), r, dtype, seed=50) for r in range(size)]
    total_rows = sum(r + 1 for r in range(size))
    out = np.zeros((total_rows, 3), dtype=dtype)
    run([op(f"ag.{dtype}", m.OP_ALLGATHER, dtype, per[rank], out)])
    np.testing.assert_array_equal(out, np.concatenate(per), err_msg=f"rank {rank}: allgather {dtype}")

# --- broadcast from every root, in and out of place
for root in range(size):
    per = [data((4, 2), r, "float32", seed=60 + root) for r in range(size)]
    out = np.zeros_like(per[rank])
    inplace = per[rank].copy()
    run([op(f"bc.{root}", m.OP_BROADCAST, "float32", per[rank], out, root=root),
         op(f"bc_.{root}", m.OP_BROADCAST, "float32", inplace, inplace, root=root)])
    np.testing.assert_array_equal(out, per[root])
    np.testing.assert_array_equal(inplace, per[root])

# --- alltoall with explicit splits (rank r sends j+1 rows to rank j)
splits = [j + 1 for j in range(size)]
rows = sum(splits)
per = [np.arange(rows * 2, dtype="float32").reshape(rows, 2) + 100 * r for r in range(size)]
recv = rank + 1
out = np.zeros((recv * size, 2), dtype="float32")
run([op("a2a", m.OP_ALLTOALL, "float32", per[rank], out, splits=splits)])
off = sum(splits[:rank])
np.testing.assert_array_equal(out, np.concatenate([p[off:off + recv] for p in per]))

# --- reducescatter, uneven: lower ranks get one extra row
first = 2 * size + 1
per = [data((first, 2), r, "float32", seed=70) for r in range(size)]
counts = [first // size + (1 if i < first % size else 0) for i in range(size)]
start = sum(counts[:rank])
out = np.zeros((counts[rank], 2), dtype="float32")
run([op("rs", m.OP_REDUCESCATTER, "float32", per[rank], out, m.REDUCE_AVERAGE, pre=2.0, post=0.5)])
full = sum(p.astype("float64") for p in per) / size
check("reducescatter", out, full[start:start + counts[rank]], "float32")

barrier("raw.barrier.1")

# --- errors -----------------------------------------------------------------------
a = np.ones(4, dtype="float32")
b = np.ones(5, dtype="float32")
try:  # input and output sizes differ: refused at enqueue
    core.enqueue([op("bad.sizes", m.OP_ALLREDUCE, "float32", a, b)], 0)
    raise AssertionError("differing input/output sizes were accepted")
except ValueError as e:
    assert "differ" in str(e), e
try:  # the same name twice in one call
    core.enqueue([op("twice", m.OP_ALLREDUCE, "float32", a, a), op("twice", m.OP_ALLREDUCE, "float32", b, b)], 0)
    raise AssertionError("a duplicate name was accepted")
except ValueError as e:
    assert "twice" in str(e), e
try:
    core.enqueue([op("no.set", m.OP_ALLREDUCE, "float32", a, a)], 12345)
    raise AssertionError("an unknown process set was accepted")
except ValueError:
    pass
if size > 1:
    # same name, different shapes: every rank's Handle.wait() raises MismatchError
    mine = np.ones(4 + rank, dtype="float32")
    handle = core.enqueue([op("mismatch", m.OP_ALLREDUCE, "float32", mine, mine)], 0)
    try:
        handle.wait()
        raise AssertionError("a shape mismatch went through")
    except MismatchError as e:
        assert "'mismatch'" in str(e) and "shape" in str(e), e
    assert handle.done()
    # different dtypes under the same name
    mine = np.ones(4, dtype="float32" if rank == 0 else "int32")
    dt = "float32" if rank == 0 else "int32"
    handle = core.enqueue([op("mismatch.dtype", m.OP_ALLREDUCE, dt, mine, mine)], 0)
    try:
        handle.wait()
        raise AssertionError("a dtype mismatch went through")
    except MismatchError as e:
        assert "mismatch.dtype" in str(e), e

# the core keeps working after the errors, and the names can be reused
per = [data((6,), r, "float32", seed=80) for r in range(size)]
x = per[rank].copy()
run([op("mismatch", m.OP_ALLREDUCE, "float32", x, x)])
check("allreduce after errors", x, sum(p.astype("float64") for p in per), "float32")

barrier("raw.barrier.final")
sys.stdout.write(f"PASS {rank}\n")  # one write, as common.finish()
sys.stdout.flush()
core.shutdown()
