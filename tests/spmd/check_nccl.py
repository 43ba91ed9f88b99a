"""The core's GPU path (NCCL backend, lanes, ready events, device fusion
buffer) through the raw entry with CuPy arrays: no MXNet needed, so it runs
in a core-only build too. Each rank uses GPU local_rank; NCCL needs one GPU
per rank. Run under mpiexec by tests/test_nccl.py, also with
MXPLUGIN_GPU_DIRECT_THRESHOLD=1, which reduces every GPU allreduce where it
lies (GpuExecutor::LaunchAllreduce) instead of through the fusion buffer."""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402

core = m.Core()
topo = core.topology()
rank, size = topo["rank"], topo["size"]
dev = topo["local_rank"]
cp.cuda.Device(dev).use()
# The producer stream: the core must wait for it through the ready event.
stream = cp.cuda.Stream(non_blocking=True)
DT = m.DTYPES
TOL = {"float16": dict(rtol=2e-3, atol=2e-2), "float32": dict(rtol=1e-5, atol=1e-5),
       "float64": dict(rtol=1e-12, atol=1e-12)}
# bfloat16 keeps 8 significant bits, and NCCL rounds every partial sum to
# them: an element's error is a few half-ulps of the largest partial sum, so
# the absolute tolerance follows the largest result, not the element's own.
BF16_RTOL, BF16_ATOL_OF_LARGEST = 2.0 ** -7, 2.0 ** -6
# Allreduces below this many bytes are fused (the planner's GPU policy,
# Executor::Fusable); -1: everything that fits the fusion buffer is.
DIRECT_THRESHOLD = int(float(os.environ.get("MXPLUGIN_GPU_DIRECT_THRESHOLD",
                                            os.environ.get("HOROVOD_GPU_DIRECT_THRESHOLD", "-1"))))


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def to_bfloat16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest even (NumPy has no bfloat16)."""
    b = np.atleast_1d(np.asarray(x, dtype="float32")).view("uint32").astype("uint64")
    one, sixteen = np.uint64(1), np.uint64(16)
    return ((b + np.uint64(0x7FFF) + ((b >> sixteen) & one)) >> sixteen).astype("uint16")


def from_bfloat16_bits(b):
    return (np.asarray(b, dtype="uint32") << 16).view("float32")


def is_float(dtype):
    return dtype.startswith("float") or dtype == "bfloat16"


def host_data(shape, r, dtype, seed):
    """Rank r's values; bfloat16 ones as float32 that bfloat16 holds exactly."""
    rng = np.random.RandomState(seed * 1000 + r)
    if dtype == "bfloat16":
        return from_bfloat16_bits(to_bfloat16_bits(rng.uniform(-1, 1, size=shape) * 4)).reshape(shape)
    if dtype.startswith("float"):
        return (rng.uniform(-1, 1, size=shape) * 4).astype(dtype)
    return rng.randint(-50, 50, size=shape).astype(dtype)


def upload(host, dtype=None):
    """`dtype` bfloat16: the float32 values `host` go up as bfloat16 bits."""
    if dtype == "bfloat16":
        host = to_bfloat16_bits(host).reshape(np.shape(host))
    with stream:
        return cp.asarray(host)


def zeros(shape, dtype):
    """Every array the core reads or writes is made on `stream`: the ready
    event orders the core's lanes after work there, not after other streams."""
    with stream:
        return cp.zeros(shape, dtype=dtype)


def zeros_like(a):
    return zeros(a.shape, a.dtype)


def op(name, op_type, dtype, inp, out, reduce_op=m.REDUCE_SUM, root=0, pre=1.0, post=1.0, splits=None,
       device=None):
    return m.Op(name, op_type, DT[dtype], list(inp.shape), inp.data.ptr, out.data.ptr, out_shape=list(out.shape),
                reduce_op=reduce_op, device=dev if device is None else device, root_rank=root, prescale=pre,
                postscale=post, splits=splits, stream=stream.ptr)


def run(ops):
    handle = core.enqueue(ops, 0)
    handle.wait()


def check(what, actual, expected, dtype):
    got = cp.asnumpy(actual)
    if dtype == "bfloat16":
        expected = np.asarray(expected, dtype="float64")
        atol = BF16_ATOL_OF_LARGEST * float(np.abs(expected).max(initial=0.0))
        np.testing.assert_allclose(from_bfloat16_bits(got).astype("float64"), expected, rtol=BF16_RTOL, atol=atol,
                                   err_msg=f"rank {rank}: {what}")
    elif dtype.startswith("float"):
        np.testing.assert_allclose(got.astype("float64"), expected, err_msg=f"rank {rank}: {what}", **TOL[dtype])
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(dtype), err_msg=f"rank {rank}: {what}")


# --- allreduce: sum/average/min/max/product, scaled, in and out of place,
# every dtype, small and large (odd counts: 200,003, 2^18 + 3 and 2^19 + 13
# elements, which no NCCL chunk or channel divides), one grouped call. By
# default all of them are fused (every GPU allreduce that fits the fusion
# buffer is); with MXPLUGIN_GPU_DIRECT_THRESHOLD=1 each is reduced where it
# lies (LaunchAllreduce: pre-multiplied or scale passes around the sum).
ops, expect, keep, seed = [], [], [], 0
for dtype in ("float32", "float16", "bfloat16", "float64", "int32", "int64"):
    for reduce_name, reduce_op in (("sum", m.REDUCE_SUM), ("avg", m.REDUCE_AVERAGE), ("min", m.REDUCE_MIN),
                                   ("max", m.REDUCE_MAX), ("prod", m.REDUCE_PRODUCT)):
        scaled = reduce_name in ("sum", "avg") and is_float(dtype)
        for pre, post in ([(1.0, 1.0), (0.5, 3.0)] if scaled else [(1.0, 1.0)]):
            for shape in ((5,), (3, 7), (200_003,), (262_147,), (524_301,)):
                seed += 1
                per = [host_data(shape, r, dtype, seed) for r in range(size)]
                if reduce_name == "prod":
                    held = "float32" if dtype == "bfloat16" else dtype  # NumPy has no bfloat16
                    per = [np.sign(p).astype(held) + (p == 0).astype(held) for p in per]  # stays in range
                stack = np.stack([p.astype("float64") * pre for p in per])
                total = {"sum": stack.sum(0), "avg": stack.sum(0) / size, "min": stack.min(0), "max": stack.max(0),
                         "prod": stack.prod(0)}[reduce_name] * post
                if not is_float(dtype):
                    total = np.trunc(total)
                name = f"ar.{dtype}.{reduce_name}.{pre}.{shape}"
                inp = upload(per[rank], dtype)
                out = zeros_like(inp)
                keep.append(inp)  # the op holds only its pointer
                ops.append(op(name, m.OP_ALLREDUCE, dtype, inp, out, reduce_op, pre=pre, post=post))
                expect.append((name, out, total, dtype))
                inplace = upload(per[rank], dtype)
                ops.append(op(name + ".inplace", m.OP_ALLREDUCE, dtype, inplace, inplace, reduce_op, pre=pre,
                              post=post))
                expect.append((name + ".inplace", inplace, total, dtype))
run(ops)
for name, out, total, dtype in expect:
    check(name, out, total, dtype)
say(f"rank {rank}: {len(ops)} allreduces ok (GPU direct threshold {DIRECT_THRESHOLD})")

# --- scale factors the half types cannot hold (Note [Pre-multiplied sums]):
# a tensor alone is reduced where it lies (direct), two together are fused;
# both must give the bits of the float32 scaling: a bfloat16 Average (the
# core divides halves before the sum; 1/3 at 3 ranks keeps 8 bits in
# bfloat16; each element non-zero on one rank only), float16 times 2^17
# (infinity in float16: zeros would become NaN) and times 2^-25 (0 in
# float16). Every sum is exact whatever order NCCL adds the ranks in. With
# MXPLUGIN_GPU_DIRECT_THRESHOLD=1 the pair is reduced where it lies too, each
# tensor on a lane of its own. At an odd count and at the large odd counts
# above (the direct path's scale passes and NCCL's channels split them).
idx = None  # the element indices of the count being checked
half_cases = [  # name, dtype, reduce op, postscale, rank r's values, the float32 result before rounding
    ("bf16.average", "bfloat16", m.REDUCE_AVERAGE, 1.0,
     lambda r: np.where(idx % size == r, idx % 251 - 125, 0).astype("float32"),
     lambda: from_bfloat16_bits(to_bfloat16_bits((idx % 251 - 125).astype("float32") * np.float32(1.0 / size)))),
    ("f16.times.2^17", "float16", m.REDUCE_SUM, 2.0 ** 17,
     lambda r: np.where(idx % 4 == 0, 0.0, ((idx + r) % 3) * 2.0 ** -17).astype("float32"), None),
    ("f16.times.2^-25", "float16", m.REDUCE_SUM, 2.0 ** -25,
     lambda r: np.where(idx % 4 == 0, 0.0, 512.0 * ((idx + r) % 3 + 1)).astype("float32"), None),
]
for n_half, (name, dtype, reduce_op, post, value, result) in (
        (n, case) for n in (4099, 200_003, 262_147, 524_301) for case in half_cases):
    idx = np.arange(n_half)
    name = f"{name}.{n_half}"

    def bits(x, dtype=dtype):
        return to_bfloat16_bits(x) if dtype == "bfloat16" else x.astype("float16").view("uint16")
    inp = upload(bits(value(rank)))
    direct, fused, filler = zeros_like(inp), zeros_like(inp), zeros((5,), "uint16")
    run([op(name + ".direct", m.OP_ALLREDUCE, dtype, inp, direct, reduce_op, post=post)])
    run([op(name + ".fused", m.OP_ALLREDUCE, dtype, inp, fused, reduce_op, post=post),
         op(name + ".filler", m.OP_ALLREDUCE, dtype, filler, filler, reduce_op, post=post)])
    # Average: the prescaled value of the one contributing rank; else the exact sum times the postscale
    total = result() if result else sum(value(r) for r in range(size)) * np.float32(post)
    want = bits(total)
    for path, got in (("direct", cp.asnumpy(direct)), ("fused", cp.asnumpy(fused))):
        wrong = np.flatnonzero(got != want)
        if wrong.size:
            i = wrong[0]
            shown = from_bfloat16_bits if dtype == "bfloat16" else (lambda b: b.view("float16"))
            raise AssertionError(f"rank {rank}: {name} {path}: {wrong.size} elements differ from the float32 "
                                 f"scaling of the sum; element {i}: {shown(got[i:i + 1])[0]}, want "
                                 f"{shown(want[i:i + 1])[0]} (float32 {total[i]})")
say(f"rank {rank}: half-type scale factors, direct and fused bit for bit ok")

# --- 50 allreduces submitted together, each with a priority of its own (as
# DistributedOptimizer and kvstore='mxplugin' give gradients): one lane
# launch, not one each (Note [Fusion across priorities]). Counted from the
# timeline: the requests of one launch share its span to the nanosecond.
# With a direct threshold at or below the smallest (400 bytes) each is a
# launch of its own; at one between the sizes, the count is not checked.
timeline_dir = tempfile.mkdtemp(prefix="check_nccl_timeline.")
core.start_timeline(os.path.join(timeline_dir, "t.{rank}.json"))
per = [[host_data((100 + 37 * k,), r, "float32", 700 + k) for k in range(50)] for r in range(size)]
bufs = [upload(per[rank][k]) for k in range(50)]
ops = [m.Op(f"prio.{k}", m.OP_ALLREDUCE, DT["float32"], [b.size], b.data.ptr, b.data.ptr, out_shape=[b.size],
            device=dev, priority=-k, stream=stream.ptr) for k, b in enumerate(bufs)]
run(ops)
core.stop_timeline()
for k, b in enumerate(bufs):
    check(f"prio.{k}", b, sum(p[k].astype("float64") for p in per), "float32")
with open(os.path.join(timeline_dir, f"t.{rank}.json")) as f:
    events = json.load(f)
shutil.rmtree(timeline_dir)
rows = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
spans = {(e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["name"] == "NCCL_ALLREDUCE" and
         rows[e["tid"]].startswith("prio.")}
sizes = [b.nbytes for b in bufs]
if DIRECT_THRESHOLD < 0 or DIRECT_THRESHOLD > max(sizes):
    assert len(spans) == 1, f"rank {rank}: 50 allreduces of distinct priorities took {len(spans)} lane launches"
    say(f"rank {rank}: 50 allreduces of distinct priorities in one lane launch ok")
elif DIRECT_THRESHOLD <= min(sizes):
    assert len(spans) == 50, (f"rank {rank}: 50 allreduces at or above the GPU direct threshold "
                              f"({DIRECT_THRESHOLD} bytes) took {len(spans)} lane launches, not one each")
    say(f"rank {rank}: 50 allreduces above the direct threshold, one lane launch each ok")

# --- many groups at once: separate calls (and priorities) spread over the lanes
handles, expect = [], []
for k in range(24):
    per = [host_data((1000 + k,), r, "float32", 500 + k) for r in range(size)]
    bufs = [upload(per[rank]) for _ in range(3)]
    group = [op(f"lanes.{k}.{j}", m.OP_ALLREDUCE, "float32", b, b) for j, b in enumerate(bufs)]
    handles.append(core.enqueue(group, 0))
    expect += [(b, sum(p.astype("float64") for p in per)) for b in bufs]
for h in handles:
    h.wait()
for i, (b, total) in enumerate(expect):
    check(f"lanes {i}", b, total, "float32")
say(f"rank {rank}: 72 allreduces over the lanes ok")

# --- ready events: the input is still being computed on the producer stream
# when the op is enqueued; the result must see the finished values.
base = upload(np.full((4_000_000,), rank + 1, dtype="float32"))
with stream:
    for _ in range(100):
        base += 1  # each a kernel on `stream`
out = zeros_like(base)
run([op("ordered", m.OP_ALLREDUCE, "float32", base, out)])
check("ready event ordering", out[:10], np.full(10, sum(r + 1 + 100 for r in range(size)), "float64"), "float32")
say(f"rank {rank}: ordering against the producer stream ok")

# --- allgather (rows differ per rank), broadcast (in and out of place), alltoall, reducescatter
rows = [r + 2 for r in range(size)]
per = [host_data((rows[r], 3), r, "float32", 900) for r in range(size)]
inp = upload(per[rank])
gathered = zeros((sum(rows), 3), "float32")
run([op("ag", m.OP_ALLGATHER, "float32", inp, gathered)])
check("allgather", gathered, np.concatenate(per).astype("float64"), "float32")

root = size - 1
src = [host_data((6, 5), r, "float64", 901) for r in range(size)]
b_in = upload(src[rank])
b_out = zeros_like(b_in)
b_inplace = upload(src[rank])
run([op("bc", m.OP_BROADCAST, "float64", b_in, b_out, root=root),
     op("bc.inplace", m.OP_BROADCAST, "float64", b_inplace, b_inplace, root=root)])
check("broadcast", b_out, src[root], "float64")
check("broadcast in place", b_inplace, src[root], "float64")

splits_of = [[(r + d) % 3 for d in range(size)] for r in range(size)]  # rows rank r sends to each rank
send = [host_data((sum(splits_of[r]), 2), r, "int32", 902) for r in range(size)]
expected = []
for r in range(size):
    start = sum(splits_of[r][:rank])
    expected.append(send[r][start:start + splits_of[r][rank]])
a_in = upload(send[rank])
a_out = zeros((sum(splits_of[r][rank] for r in range(size)), 2), "int32")
run([op("a2a", m.OP_ALLTOALL, "int32", a_in, a_out, splits=splits_of[rank])])
check("alltoall", a_out, np.concatenate(expected), "int32")

total_rows = 2 * size + 1  # uneven: rank 0 gets the extra row
blocks = [total_rows // size + (1 if r < total_rows % size else 0) for r in range(size)]
rs = [host_data((total_rows, 4), r, "float32", 903) for r in range(size)]
full = sum(x.astype("float64") for x in rs)
lo = sum(blocks[:rank])
r_in = upload(rs[rank])
r_sum = zeros((blocks[rank], 4), "float32")
r_avg = zeros((blocks[rank], 4), "float32")
run([op("rs.sum", m.OP_REDUCESCATTER, "float32", r_in, r_sum),
     op("rs.avg", m.OP_REDUCESCATTER, "float32", r_in, r_avg, m.REDUCE_AVERAGE, pre=2.0)])
check("reducescatter sum", r_sum, full[lo:lo + blocks[rank]], "float32")
check("reducescatter average", r_avg, 2.0 * full[lo:lo + blocks[rank]] / size, "float32")
say(f"rank {rank}: allgather, broadcast, alltoall, reducescatter ok")

# --- errors found before anything runs, on this rank
host = np.zeros(16, dtype="float32")
try:
    core.enqueue([m.Op("host.as.gpu", m.OP_ALLREDUCE, DT["float32"], [16], host.ctypes.data, host.ctypes.data,
                       device=dev)], 0)
    raise AssertionError("a host pointer passed as GPU memory was accepted")
except ValueError as e:
    assert "host memory" in str(e) or "not a CUDA pointer" in str(e), e
g = upload(np.zeros(4, dtype="float32"))
try:
    run([op("bad.device", m.OP_ALLREDUCE, "float32", g, g, device=cp.cuda.runtime.getDeviceCount())])
    raise AssertionError("a device id past the last GPU was accepted")
except ValueError as e:
    assert "CUDA device" in str(e), e
say(f"rank {rank}: GPU argument errors ok")

stream.synchronize()
core.shutdown()
say(f"PASS {rank}")
