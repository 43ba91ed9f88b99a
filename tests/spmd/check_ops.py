"""Every collective of the horovod.mxnet API, checked on every rank against
values computed in NumPy from every rank's deterministic data.

Run under mpiexec at any size (tests/test_ops.py runs 1, 2 and 3 ranks).
Arguments: none (every section), --skip=fp16 (all but the float16-near-max
section) or --only=fp16 (just that one)."""
import gc
import json
import os
import sys
import tempfile
import warnings

import common
from common import assert_close, hvd, mx, np, rank_data
from mxplugin import plain_calls

rank, size = common.start()
RANKS = range(size)

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
FLOATS = ("float16", "float32", "float64")
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
TOL = {"float16": dict(rtol=1e-2, atol=2e-2), "float32": dict(rtol=1e-5, atol=1e-5),
       "float64": dict(rtol=1e-12, atol=1e-12)}

_checks = []  # (what, result NDArray or callable, expected) read after everything is issued
# Failed value checks are collected rather than raised at once, so that every
# rank keeps issuing the same collectives (no hang) and one run reports every
# wrong result; the script still exits non-zero at the end (see the bottom).
failures = []


def soft(what, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except AssertionError as e:
        failures.append(f"{what}: {e}")
        sys.stderr.write(f"FAIL rank {rank}: {what}: {str(e)[:2000]}\n")
        sys.stderr.flush()


def section(title):
    if rank == 0:
        print(f"-- {title}", flush=True)


def data(shape, r, dtype, seed=0, small=False):
    """Per-rank data suited to dtype: floats in [-4, 4) (or [-2, 2) when
    small), signed ints in [-3, 3] ([-2, 2] when small), uint8 in [0, 5]
    ([0, 3] when small), so that sums and products of 3 ranks never overflow."""
    if dtype in FLOATS:
        x = rank_data(shape, r, "float64", seed)
        return (x / 2 if small else x).astype(dtype)
    rng = np.random.RandomState(seed * 1000 + r + 500)
    if dtype == "uint8":
        lo, hi = (0, 4) if small else (0, 6)
    else:
        lo, hi = (-2, 3) if small else (-3, 4)
    return rng.randint(lo, hi, size=shape).astype(dtype)


def expected_reduce(arrays, op, dtype, pre=1.0, post=1.0, n=None):
    """op over the given per-rank arrays; floats are computed in float64 (the
    tolerances absorb float16/float32 rounding), ints exactly in their dtype."""
    n = len(arrays) if n is None else n
    if dtype in FLOATS:
        stack = np.stack([a.astype("float64") * pre for a in arrays])
    else:
        stack = np.stack([a.astype("int64") for a in arrays])
    if op in ("Sum", "Average"):
        r = stack.sum(axis=0)
        if op == "Average":
            r = r / n
    elif op == "Min":
        r = stack.min(axis=0)
    elif op == "Max":
        r = stack.max(axis=0)
    else:
        r = stack.prod(axis=0)
    if dtype in FLOATS:
        return r * post
    return r  # ints: float64 for Average (see check_reduced), int64 otherwise


def check_reduced(what, actual, expected, op, dtype):
    a = actual.asnumpy() if isinstance(actual, mx.nd.NDArray) else actual
    assert a.dtype == np.dtype(dtype), f"rank {rank}: {what}: dtype {a.dtype}, expected {dtype}"
    assert a.shape == expected.shape, f"rank {rank}: {what}: shape {a.shape}, expected {expected.shape}"
    if dtype in FLOATS:
        assert np.all(np.isfinite(a)), f"rank {rank}: {what}: non-finite values"
        np.testing.assert_allclose(a.astype("float64"), expected, err_msg=f"rank {rank}: {what}", **TOL[dtype])
    elif op == "Average":
        # integer average: the sum divided by the set size, rounded toward zero
        # (Horovod scales integers in double and truncates); allow either rounding.
        diff = np.abs(a.astype("float64") - expected)
        assert np.all(diff < 1.0), f"rank {rank}: {what}: {a} vs {expected}"
    else:
        np.testing.assert_array_equal(a, expected.astype(dtype), err_msg=f"rank {rank}: {what}")


def later(what, result, expected, op=None, dtype=None):
    _checks.append((what, result, expected, op, dtype))


def _check_one(what, result, expected, op, dtype):
    if op is None:
        r = result() if callable(result) else result
        actual = r.asnumpy() if isinstance(r, mx.nd.NDArray) else np.asarray(r)
        assert actual.shape == np.shape(expected), f"rank {rank}: {what}: shape {actual.shape} vs {np.shape(expected)}"
        if actual.dtype.kind == "f":
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank}: {what}")
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=f"rank {rank}: {what}")
    else:
        check_reduced(what, result, expected, op, dtype)


def run_checks():
    for what, result, expected, op, dtype in _checks:
        soft(what, _check_one, what, result, expected, op, dtype)
    _checks.clear()


def large_shape(dtype):
    """A first-dim-major 2-D shape of ~300 KB: above the 256 KB direct threshold."""
    n = 300_000 // np.dtype(dtype).itemsize
    return (n // 50, 50)


# ---------------------------------------------------------------------------
# float16 near its maximum (65504): every rank contributes ~59000-60000. Sum
# with prescale_factor=1/size must predivide (finite result), and Average must
# not overflow either.


def check_fp16_mean(what, shape, a, mean):
    assert a.dtype == np.float16
    assert np.all(np.isfinite(a)), f"rank {rank}: float16 {what} {shape} overflowed: {a.reshape(-1)[:5]}"
    np.testing.assert_allclose(a.astype("float64"), mean, rtol=3e-3, atol=0,
                               err_msg=f"rank {rank}: float16 {what} {shape}")


def check_float16_near_max():
    for shape in [(10,), (160_000,)]:  # fused, and above the direct threshold
        n = int(np.prod(shape))
        per_rank = [(59000 + 256 * r + 64 * (np.arange(n) % 5)).astype("float16").reshape(shape) for r in RANKS]
        mean = np.mean([a.astype("float64") for a in per_rank], axis=0)
        y = hvd.allreduce(mx.nd.array(per_rank[rank], dtype="float16"), op=hvd.Sum,
                          prescale_factor=1.0 / size, postscale_factor=1.0)
        z = hvd.allreduce_(mx.nd.array(per_rank[rank], dtype="float16"), op=hvd.Sum,
                           prescale_factor=1.0 / size, postscale_factor=1.0)
        avg = hvd.allreduce(mx.nd.array(per_rank[rank], dtype="float16"), op=hvd.Average)
        avg_ = hvd.allreduce_(mx.nd.array(per_rank[rank], dtype="float16"), op=hvd.Average)
        for what, out in (("Sum prescale=1/size", y), ("Sum prescale=1/size in place", z),
                          ("Average", avg), ("Average in place", avg_)):
            soft(f"float16 near max {what} {shape}", check_fp16_mean, what, shape, out.asnumpy(), mean)


def conclude():
    """Every rank learns every rank's failures, so that all of them exit together."""
    all_failures = hvd.allgather_object(failures, name="failures")
    if any(all_failures):
        for r, fs in enumerate(all_failures if rank == 0 else []):
            for f in fs:
                sys.stderr.write(f"FAILED on rank {r}: {f[:3000]}\n")
        sys.stderr.flush()
        hvd.shutdown()
        sys.exit(1)
    common.finish()


# Sections: all by default; "--only=fp16" runs only the float16-near-max one,
# "--skip=fp16" everything else (so that one known failure does not mask the rest).
ONLY = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
SKIP = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--skip=")]
if "fp16" in ONLY or ("fp16" not in SKIP and not ONLY):
    section("float16 near its maximum: predivide instead of overflowing")
    check_float16_near_max()
if ONLY:
    conclude()
    sys.exit(0)

# ---------------------------------------------------------------------------
section("allreduce / allreduce_: every dtype x op, in and out of place, all shapes")
SMALL_SHAPES = [(1,), (0,), (0, 3), (7,), (3, 4), (2, 3, 2)]
keep_inputs = []
for dtype in DTYPES:
    for opname, op in OPS.items():
        small = opname == "Product"
        for shape in SMALL_SHAPES + [large_shape(dtype)]:
            per_rank = [data(shape, r, dtype, seed=3, small=small) for r in RANKS]
            exp = expected_reduce(per_rank, opname, dtype)
            # out of place: the input must be left untouched
            x = mx.nd.array(per_rank[rank], dtype=dtype)
            y = hvd.allreduce(x, op=op)
            later(f"allreduce {dtype} {opname} {shape}", y, exp, opname, dtype)
            keep_inputs.append((f"allreduce input {dtype} {opname} {shape}", x, per_rank[rank]))
            # in place
            z = mx.nd.array(per_rank[rank], dtype=dtype)
            ret = hvd.allreduce_(z, op=op)
            assert ret is z, "allreduce_ must return its argument"
            later(f"allreduce_ {dtype} {opname} {shape}", z, exp, opname, dtype)
run_checks()
for what, x, original in keep_inputs:
    np.testing.assert_array_equal(x.asnumpy(), original, err_msg=f"rank {rank}: {what} was modified")
del keep_inputs

section("allreduce with prescale/postscale (float types)")
for dtype in FLOATS:
    for opname in ("Sum", "Average", "Max", "Min"):
        for shape in [(1,), (5, 3), large_shape(dtype)]:
            for pre, post in [(0.5, 2.0), (0.25, 1.0), (1.0, 4.0)]:
                per_rank = [data(shape, r, dtype, seed=4) for r in RANKS]
                exp = expected_reduce(per_rank, opname, dtype, pre, post)
                y = hvd.allreduce(mx.nd.array(per_rank[rank], dtype=dtype), op=OPS[opname],
                                  prescale_factor=pre, postscale_factor=post)
                later(f"allreduce {dtype} {opname} {shape} pre={pre} post={post}", y, exp, opname, dtype)
                z = hvd.allreduce_(mx.nd.array(per_rank[rank], dtype=dtype), op=OPS[opname],
                                   prescale_factor=pre, postscale_factor=post)
                later(f"allreduce_ {dtype} {opname} {shape} pre={pre} post={post}", z, exp, opname, dtype)
# numpy scalars are accepted as factors
per_rank = [data((4,), r, "float32", seed=5) for r in RANKS]
y = hvd.allreduce(mx.nd.array(per_rank[rank]), op=hvd.Sum, prescale_factor=np.float32(0.5),
                  postscale_factor=np.int64(3))
later("allreduce numpy-scalar factors", y, expected_reduce(per_rank, "Sum", "float32", 0.5, 3.0), "Sum", "float32")
run_checks()

section("deprecated average= argument")
per_rank = [data((6,), r, "float32", seed=6) for r in RANKS]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y_avg = hvd.allreduce(mx.nd.array(per_rank[rank]), average=True)
    y_sum = hvd.allreduce(mx.nd.array(per_rank[rank]), average=False)
assert any(issubclass(w.category, DeprecationWarning) for w in caught), "average= must warn"
later("average=True", y_avg, expected_reduce(per_rank, "Average", "float32"), "Average", "float32")
later("average=False", y_sum, expected_reduce(per_rank, "Sum", "float32"), "Sum", "float32")
y_default = hvd.allreduce(mx.nd.array(per_rank[rank]))
later("default op is Average", y_default, expected_reduce(per_rank, "Average", "float32"), "Average", "float32")
run_checks()

# ---------------------------------------------------------------------------
section("grouped_allreduce / grouped_allreduce_: 60 tensors, mixed sizes and dtypes")


def group_spec(i):
    dtype = DTYPES[i % len(DTYPES)]
    if i == 13:
        return dtype, large_shape(dtype)
    shapes = [(1,), (4,), (3, 5), (2, 2, 3), (17,), (0,), (64, 3)]
    return dtype, shapes[(i * 3) % len(shapes)]


specs = [group_spec(i) for i in range(60)]
per_rank = [[data(s, r, d, seed=100 + i) for i, (d, s) in enumerate(specs)] for r in RANKS]
inputs = [mx.nd.array(a, dtype=d) for a, (d, _) in zip(per_rank[rank], specs)]
outs = hvd.grouped_allreduce(inputs, op=hvd.Sum, name="group60")
assert isinstance(outs, list) and len(outs) == 60
for i, (d, s) in enumerate(specs):
    later(f"grouped_allreduce[{i}] {d} {s}", outs[i], expected_reduce([p[i] for p in per_rank], "Sum", d), "Sum", d)
inplace = [mx.nd.array(a, dtype=d) for a, (d, _) in zip(per_rank[rank], specs)]
ret = hvd.grouped_allreduce_(inplace, op=hvd.Average, name="group60_")
assert ret is inplace or all(a is b for a, b in zip(ret, inplace))
for i, (d, s) in enumerate(specs):
    later(f"grouped_allreduce_[{i}] {d} {s}", inplace[i], expected_reduce([p[i] for p in per_rank], "Average", d),
          "Average", d)
# float-only group with scale factors, and an unnamed group
fspecs = [("float32", (5,)), ("float64", (2, 3)), ("float16", (9,)), ("float32", large_shape("float32"))]
fper = [[data(s, r, d, seed=200 + i) for i, (d, s) in enumerate(fspecs)] for r in RANKS]
fouts = hvd.grouped_allreduce([mx.nd.array(a, dtype=d) for a, (d, _) in zip(fper[rank], fspecs)], op=hvd.Average,
                              prescale_factor=0.5, postscale_factor=3.0)
for i, (d, s) in enumerate(fspecs):
    later(f"grouped_allreduce scaled[{i}] {d}", fouts[i],
          expected_reduce([p[i] for p in fper], "Average", d, 0.5, 3.0), "Average", d)
assert hvd.grouped_allreduce([]) == [] and hvd.grouped_allreduce_([]) == []
run_checks()

# ---------------------------------------------------------------------------
section("100 ops in flight with mixed priorities")
flight = []
for i in range(100):
    prio = (i * 37) % 11 - 5
    kind = i % 5
    dtype = ("float32", "int32", "float64", "int64", "float16")[i % 5]
    shape = (i % 9 + 1, 3)
    per = [data(shape, r, dtype, seed=300 + i) for r in RANKS]
    x = mx.nd.array(per[rank], dtype=dtype)
    if kind in (0, 1):
        out = hvd.allreduce(x, op=hvd.Sum, priority=prio, name=f"flight.{i}")
        flight.append((f"flight {i} allreduce", out, expected_reduce(per, "Sum", dtype), "Sum", dtype))
    elif kind == 2:
        hvd.allreduce_(x, op=hvd.Max, priority=prio, name=f"flight.{i}")
        flight.append((f"flight {i} allreduce_", x, expected_reduce(per, "Max", dtype), "Max", dtype))
    elif kind == 3:
        root = i % size
        out = hvd.broadcast(x, root_rank=root, priority=prio, name=f"flight.{i}")
        flight.append((f"flight {i} broadcast", out, per[root], None, None))
    else:
        out = hvd.allreduce(x, op=hvd.Min, priority=prio, name=f"flight.{i}")
        flight.append((f"flight {i} allreduce Min", out, expected_reduce(per, "Min", dtype), "Min", dtype))
# read them all, last issued first
for item in reversed(flight):
    later(*item)
run_checks()

# ---------------------------------------------------------------------------
section("allgather / grouped_allgather with a different first dimension per rank")
for dtype in DTYPES:
    for tail in [(), (3,), (2, 2)]:
        per = [data((r + 1,) + tail, r, dtype, seed=400) for r in RANKS]
        out = hvd.allgather(mx.nd.array(per[rank], dtype=dtype))
        later(f"allgather {dtype} tail={tail}", out, np.concatenate(per, axis=0))
# a rank with no rows at all (rank 0 has 0 rows)
per = [data((r, 4), r, "float32", seed=401) for r in RANKS]
out = hvd.allgather(mx.nd.array(per[rank], dtype="float32"), name="ag.zero_rows")
later("allgather with an empty rank", out, np.concatenate(per, axis=0))
gspecs = [("float32", lambda r: (r + 1, 3)), ("int32", lambda r: (r + 2,)), ("float64", lambda r: (1, 4)),
          ("uint8", lambda r: (2 * r + 1, 2, 2)), ("int64", lambda r: (size - r,))]
gper = [[data(f(r), r, d, seed=410 + i) for i, (d, f) in enumerate(gspecs)] for r in RANKS]
gouts = hvd.grouped_allgather([mx.nd.array(a, dtype=d) for a, (d, _) in zip(gper[rank], gspecs)], name="gag")
assert len(gouts) == len(gspecs)
for i, (d, _) in enumerate(gspecs):
    later(f"grouped_allgather[{i}] {d}", gouts[i], np.concatenate([p[i] for p in gper], axis=0))
    assert gouts[i].dtype == np.dtype(d)
assert hvd.grouped_allgather([]) == []
run_checks()

# ---------------------------------------------------------------------------
section("broadcast / broadcast_ from every root")
for root in RANKS:
    for dtype in DTYPES:
        for si, shape in enumerate([(4, 5), (1,), large_shape(dtype) if dtype in ("uint8", "float64") else (2, 2, 2)]):
            per = [data(shape, r, dtype, seed=500 + root) for r in RANKS]
            x = mx.nd.array(per[rank], dtype=dtype)
            y = hvd.broadcast(x, root_rank=root)
            later(f"broadcast root={root} {dtype} {shape}", y, per[root])
            later(f"broadcast root={root} {dtype} {shape}: input untouched", x, per[rank])
            z = mx.nd.array(per[rank], dtype=dtype)
            assert hvd.broadcast_(z, root_rank=root, name=f"bc_.{root}.{dtype}.{si}") is z
            later(f"broadcast_ root={root} {dtype} {shape}", z, per[root])
    # numpy integer root rank
    per = [data((3,), r, "float32", seed=520) for r in RANKS]
    later(f"broadcast np.int64 root {root}", hvd.broadcast(mx.nd.array(per[rank]), root_rank=np.int64(root)), per[root])
run_checks()

# ---------------------------------------------------------------------------
section("alltoall with uneven (and zero) splits, and without splits")


def split_matrix(kind):
    """S[src][dst] = rows src sends to dst."""
    if kind == "uneven":
        return [[(src + 2 * dst + 1) % 3 for dst in RANKS] for src in RANKS]
    if kind == "rank0_sends_nothing":
        return [[0 if src == 0 else dst + 1 for dst in RANKS] for src in RANKS]
    raise ValueError(kind)


def alltoall_rows(src, nrows, dtype, width=2):
    base = np.arange(nrows * width).reshape(nrows, width) % 50 + 100 * src
    if dtype == "int8" or dtype == "uint8":
        base = np.arange(nrows * width).reshape(nrows, width) % 40 + 40 * (src % 3)
    return base.astype(dtype)


for kind in ("uneven", "rank0_sends_nothing"):
    S = split_matrix(kind)
    for dtype in ("float32", "int32", "uint8", "float64"):
        for split_form in ("list", "numpy", "ndarray"):
            tensors = [alltoall_rows(src, sum(S[src]), dtype) for src in RANKS]
            expected = []
            for src in RANKS:
                off = sum(S[src][:rank])
                expected.append(tensors[src][off:off + S[src][rank]])
            expected = np.concatenate(expected, axis=0)
            splits = S[rank]
            if split_form == "numpy":
                splits = np.array(splits, dtype=np.int64)
            elif split_form == "ndarray":
                splits = mx.nd.array(splits, dtype="int32")
            res = hvd.alltoall(mx.nd.array(tensors[rank], dtype=dtype), splits=splits)
            assert isinstance(res, tuple) and len(res) == 2, "alltoall with splits returns (output, received_splits)"
            out, received = res
            later(f"alltoall {kind} {dtype} {split_form}", out, expected)
            later(f"alltoall {kind} {dtype} {split_form} received_splits", received,
                  np.array([S[src][rank] for src in RANKS]))
for dtype in ("float32", "int64"):
    tensors = [alltoall_rows(src, 2 * size, dtype, width=3) for src in RANKS]
    out = hvd.alltoall(mx.nd.array(tensors[rank], dtype=dtype))
    assert isinstance(out, mx.nd.NDArray), "alltoall without splits returns just the output"
    later(f"alltoall even {dtype}", out, np.concatenate([t[2 * rank:2 * rank + 2] for t in tensors], axis=0))
# 1-D alltoall
tensors = [np.arange(size, dtype="float32") + 10 * src for src in RANKS]
out = hvd.alltoall(mx.nd.array(tensors[rank]))
later("alltoall 1-D", out, np.array([tensors[src][rank] for src in RANKS], dtype="float32"))
run_checks()

# ---------------------------------------------------------------------------
section("repeated allgather and alltoall under one name, sizes changing on one rank")
# Cached responses keep the sizes negotiated with them (src/core/response_cache.h):
# a repeat whose sizes are unchanged everywhere reuses them; one rank changing
# its rows (the others repeating theirs) must be negotiated afresh, every time.
for step, changed in enumerate([None, None, 0, 0, size - 1, None]):
    rows = [r + 1 + (step if r == changed else 0) for r in RANKS]
    per = [data((rows[r], 3), r, "float32", seed=430 + step) for r in RANKS]
    out = hvd.allgather(mx.nd.array(per[rank]), name="ag.repeated")
    later(f"repeated allgather, step {step}", out, np.concatenate(per, axis=0))
    S = [[(src + dst + (step if src == changed else 0)) % 3 for dst in RANKS] for src in RANKS]
    tensors = [alltoall_rows(src, sum(S[src]), "float32") for src in RANKS]
    got, received = hvd.alltoall(mx.nd.array(tensors[rank]), splits=S[rank], name="a2a.repeated")
    expected = np.concatenate([tensors[src][sum(S[src][:rank]):sum(S[src][:rank + 1])] for src in RANKS], axis=0)
    later(f"repeated alltoall, step {step}", got, expected)
    later(f"repeated alltoall, step {step}: received splits", received, np.array([S[src][rank] for src in RANKS]))
    run_checks()  # each step's results read before the next call under the name

section("allgather's two paths under one name (Note [Outputs the core sizes])")
# Up to host_exchange.MOST_BYTES gathered by the name's last call, the core
# sizes the output in one round; past it, the exchange of sizes and an engine
# op. Only rank 0's rows grow past it, and every rank must take the same path.
from mxplugin import host_exchange  # noqa: E402

big = host_exchange.MOST_BYTES // 4 + 7  # float32 rows of one element: past the limit on rank 0 alone
for step, rank0_rows in enumerate([2, big, 3, 5]):
    rows = [rank0_rows if r == 0 else r + 1 for r in RANKS]
    per = [data((rows[r], 1), r, "float32", seed=470 + step) for r in RANKS]
    one_round = host_exchange.fits(host_exchange.key(hvd.global_process_set, "allgather", "ag.paths"))
    assert one_round == (step != 2), f"rank {rank}: step {step} took the {'one-round' if one_round else 'exchange'} path"
    out = hvd.allgather(mx.nd.array(per[rank]), name="ag.paths")
    later(f"allgather paths, step {step}", out, np.concatenate(per, axis=0))
    run_checks()

# ---------------------------------------------------------------------------
section("reducescatter / grouped_reducescatter")


def scatter_rows(total, r):
    base, extra = divmod(total, size)
    rows = [base + (1 if i < extra else 0) for i in RANKS]
    start = sum(rows[:r])
    return start, rows[r]


for dtype in ("float32", "float64", "float16", "int32"):
    for opname in ("Sum", "Average"):
        for first in (2 * size + 1, size, 1, 3 * size + 2):
            for pre, post in ([(1.0, 1.0), (0.5, 3.0)] if dtype in FLOATS else [(1.0, 1.0)]):
                shape = (first, 3)
                per = [data(shape, r, dtype, seed=600 + first) for r in RANKS]
                full = expected_reduce(per, opname, dtype, pre, post)
                start, rows = scatter_rows(first, rank)
                out = hvd.reducescatter(mx.nd.array(per[rank], dtype=dtype), op=OPS[opname],
                                        prescale_factor=pre, postscale_factor=post)
                later(f"reducescatter {dtype} {opname} first={first} pre={pre} post={post}", out,
                      full[start:start + rows], opname, dtype)
rsspecs = [("float32", (2 * size + 1, 2)), ("float64", (size + 2,)), ("float32", (5, 2, 2)),
           ("float32", (3000, 40))]
for opname in ("Sum", "Average"):
    per = [[data(s, r, d, seed=650 + i) for i, (d, s) in enumerate(rsspecs)] for r in RANKS]
    outs = hvd.grouped_reducescatter([mx.nd.array(a, dtype=d) for a, (d, _) in zip(per[rank], rsspecs)],
                                     op=OPS[opname], prescale_factor=2.0, postscale_factor=0.5)
    for i, (d, s) in enumerate(rsspecs):
        full = expected_reduce([p[i] for p in per], opname, d, 2.0, 0.5)
        start, rows = scatter_rows(s[0], rank)
        later(f"grouped_reducescatter {opname}[{i}] {d} {s}", outs[i], full[start:start + rows], opname, d)
# default op is Average
per = [data((size * 2, 3), r, "float32", seed=690) for r in RANKS]
out = hvd.reducescatter(mx.nd.array(per[rank]))
start, rows = scatter_rows(size * 2, rank)
later("reducescatter default op", out, expected_reduce(per, "Average", "float32")[start:start + rows], "Average",
      "float32")
run_checks()

# Named calls of legacy NDArrays on the global set, with float scale factors, take the plain path
# (Note [Plain calls] in mxplugin/plain_calls.py): the same results as the checked path.
section("plain calls: allreduce_, broadcast_ and reducescatter by name")
_plain_push, plain_pushes = plain_calls._enqueue, []
plain_calls._enqueue = lambda core, name, *rest: (plain_pushes.append(name), _plain_push(core, name, *rest))[1]
made = 0
for dtype in ("float32", "float64", "float16", "int32"):
    scales = [(1.0, 1.0), (0.5, 3.0)] if dtype in FLOATS else [(1.0, 1.0)]
    for opname in OPS:
        for pre, post in scales:
            per = [data((5, 3), r, dtype, seed=700) for r in RANKS]
            z = hvd.allreduce_(mx.nd.array(per[rank], dtype=dtype), op=OPS[opname], name=f"plain.ar.{dtype}.{opname}",
                               prescale_factor=pre, postscale_factor=post)
            made += 1
            later(f"plain allreduce_ {dtype} {opname} pre={pre} post={post}", z,
                  expected_reduce(per, opname, dtype, pre, post), opname, dtype)
            if opname not in ("Sum", "Average"):
                continue
            per = [data((2 * size + 1, 3), r, dtype, seed=710) for r in RANKS]
            out = hvd.reducescatter(mx.nd.array(per[rank], dtype=dtype), op=OPS[opname], prescale_factor=pre,
                                    postscale_factor=post, name=f"plain.rs.{dtype}.{opname}")
            made += 1
            start, rows = scatter_rows(2 * size + 1, rank)
            later(f"plain reducescatter {dtype} {opname} pre={pre} post={post}", out,
                  expected_reduce(per, opname, dtype, pre, post)[start:start + rows], opname, dtype)
    for root in RANKS:
        per = [data((4, 2), r, dtype, seed=720) for r in RANKS]
        z = mx.nd.array(per[rank], dtype=dtype)
        assert hvd.broadcast_(z, root, name=f"plain.bc.{dtype}.{root}") is z
        made += 1
        later(f"plain broadcast_ {dtype} root {root}", z, per[root])
plain_calls._enqueue = _plain_push
assert len(plain_pushes) == made, f"rank {rank}: {len(plain_pushes)} of {made} named calls took the plain path"
run_checks()

# ---------------------------------------------------------------------------
section("broadcast_object / allgather_object")
for root in RANKS:
    obj = {"rank": rank, "payload": list(range(rank * 3)), "text": "x" * (rank * 1000 + 1), "t": (rank, None)}
    got = hvd.broadcast_object(obj, root_rank=root, name=f"obj{root}")
    assert got == {"rank": root, "payload": list(range(root * 3)), "text": "x" * (root * 1000 + 1),
                   "t": (root, None)}, f"rank {rank}: broadcast_object from {root}: {got!r}"[:300]
got = hvd.broadcast_object(np.arange(rank + 3))
np.testing.assert_array_equal(got, np.arange(3))
everyone = hvd.allgather_object({"r": rank, "s": "y" * rank})
assert everyone == [{"r": r, "s": "y" * r} for r in RANKS], f"rank {rank}: allgather_object {everyone!r}"
assert hvd.allgather_object(rank * 10) == [r * 10 for r in RANKS]

# ---------------------------------------------------------------------------
section("broadcast_parameters: dict of NDArrays, ParameterDict, deferred init")
for root in (0, size - 1):
    shapes = {"a.weight": (3, 4), "a.bias": (4,), "b": (2, 2, 2)}
    params = {k: mx.nd.array(data(s, rank, "float32", seed=700 + i)) for i, (k, s) in enumerate(shapes.items())}
    params["ints"] = mx.nd.array(data((5,), rank, "int32", seed=710), dtype="int32")
    hvd.broadcast_parameters(params, root_rank=root, prefix=f"dict{root}.")
    for i, (k, s) in enumerate(shapes.items()):
        assert_close(params[k], data(s, root, "float32", seed=700 + i), what=f"broadcast_parameters dict {k}")
    np.testing.assert_array_equal(params["ints"].asnumpy(), data((5,), root, "int32", seed=710))

net = mx.gluon.nn.Dense(4, in_units=3, prefix="densea_")
net.initialize(mx.init.Zero())
net.weight.set_data(mx.nd.array(data((4, 3), rank, "float32", seed=720)))
net.bias.set_data(mx.nd.array(data((4,), rank, "float32", seed=721)))
hvd.broadcast_parameters(net.collect_params(), root_rank=0)
assert_close(net.weight.data(), data((4, 3), 0, "float32", seed=720), what="ParameterDict weight")
assert_close(net.bias.data(), data((4,), 0, "float32", seed=721), what="ParameterDict bias")

mx.random.seed(1234 + 17 * rank)
deferred = mx.gluon.nn.Dense(5, prefix="deferred_")  # in_units unknown: weight init is deferred
deferred.initialize(mx.init.Uniform(1.0))
hvd.broadcast_parameters(deferred.collect_params(), root_rank=0)
x_in = mx.nd.array(data((2, 7), 0, "float32", seed=730))  # the same input everywhere
y_out = deferred(x_in).asnumpy()
w = deferred.weight.data()
assert w.shape == (5, 7)
gathered = hvd.allgather(w.reshape((1, 5, 7)), name="deferred.check").asnumpy()
for r in RANKS:
    np.testing.assert_array_equal(gathered[r], gathered[0], err_msg=f"rank {rank}: deferred weight of rank {r}")
gathered_b = hvd.allgather(deferred.bias.data().reshape((1, 5)), name="deferred.checkb").asnumpy()
for r in RANKS:
    np.testing.assert_array_equal(gathered_b[r], gathered_b[0])
gathered_y = hvd.allgather(mx.nd.array(y_out).reshape((1, 2, 5)), name="deferred.checky").asnumpy()
for r in RANKS:
    np.testing.assert_allclose(gathered_y[r], gathered_y[0], rtol=1e-6)
if size > 1:
    # the seeds differ per rank, so without the broadcast the weights would differ
    mx.random.seed(1234 + 17 * rank)
    control = mx.gluon.nn.Dense(5, prefix="control_")
    control.initialize(mx.init.Uniform(1.0))
    control(x_in).wait_to_read()
    gc_ = hvd.allgather(control.weight.data().reshape((1, 5, 7)), name="control.check").asnumpy()
    assert not np.array_equal(gc_[0], gc_[size - 1]), "control: per-rank seeds should give different weights"

# ---------------------------------------------------------------------------
section("oneDNN layout: conv weight after an inference forward")


def np_conv(x, w, b):
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))  # n c h w kh kw
    return np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]


conv_ranks = [data((8, 4, 3, 3), r, "float32", seed=800) for r in RANKS]
conv_bias = data((8,), 0, "float32", seed=801)
mx.random.seed(55 + rank)
conv = mx.gluon.nn.Conv2D(8, 3, in_channels=4, prefix="conv_")
conv.initialize(mx.init.Xavier())
conv.weight.set_data(mx.nd.array(conv_ranks[rank]))
conv.bias.set_data(mx.nd.array(conv_bias))
original = conv.weight.data().asnumpy()
np.testing.assert_array_equal(original, conv_ranks[rank])
x4 = mx.nd.array(data((2, 4, 9, 9), 0, "float32", seed=802))
y0 = conv(x4).asnumpy()  # inference: oneDNN may now hold the weight in a blocked layout
np.testing.assert_allclose(y0, np_conv(x4.asnumpy(), conv_ranks[rank], conv_bias), rtol=1e-4, atol=1e-4)
avg = np.mean(np.stack(conv_ranks).astype("float64"), axis=0)
wdata = conv.weight.data()
out_of_place = hvd.allreduce(wdata, op=hvd.Average, name="conv.oop")
assert_close(out_of_place, avg, rtol=1e-5, atol=1e-6, what="out-of-place allreduce of the oneDNN conv weight")
hvd.allreduce_(wdata, op=hvd.Average, name="conv.weight")
assert_close(conv.weight.data(), avg, rtol=1e-5, atol=1e-6, what="allreduce_ of the oneDNN conv weight")
y1 = conv(x4).asnumpy()  # still a usable weight
np.testing.assert_allclose(y1, np_conv(x4.asnumpy(), avg.astype("float32"), conv_bias), rtol=1e-4, atol=1e-4,
                           err_msg=f"rank {rank}: forward after allreduce_")
ref = mx.nd.Convolution(x4, mx.nd.array(avg), mx.nd.array(conv_bias), kernel=(3, 3), num_filter=8).asnumpy()
np.testing.assert_allclose(y1, ref, rtol=1e-4, atol=1e-4)
# once more with a second inference forward between (re-reordered weight), in place only
y2 = conv(x4)
y2.wait_to_read()
hvd.allreduce_(conv.weight.data(), op=hvd.Sum, name="conv.weight.sum")
assert_close(conv.weight.data(), avg * size, rtol=1e-5, atol=1e-5, what="second allreduce_ of the conv weight")

# ---------------------------------------------------------------------------
section("a tensor dropped by Python while in flight")
for shape in [(1000,), large_shape("float32")]:
    per = [data(shape, r, "float32", seed=900) for r in RANKS]
    x = mx.nd.array(per[rank])
    out = hvd.allreduce(x, op=hvd.Sum)
    del x
    gc.collect()
    assert_close(out, expected_reduce(per, "Sum", "float32"), rtol=1e-5, atol=1e-5, what=f"dropped input {shape}")
    out2 = hvd.allreduce_(mx.nd.array(per[rank]), op=hvd.Max)  # only the returned object survives
    gc.collect()
    assert_close(out2, expected_reduce(per, "Max", "float32"), what=f"in place on a temporary {shape}")
    outs = [hvd.allgather(mx.nd.array(per[rank][: rank + 1]), name=f"drop.ag.{shape[0]}")]
    gc.collect()
    assert_close(outs[0], np.concatenate([per[r][: r + 1] for r in RANKS]), what="allgather of a temporary")

# ---------------------------------------------------------------------------
section("results consumed by other MXNet ops (asynchronous engine path)")
per = [data((6, 7), r, "float32", seed=950) for r in RANKS]
x = mx.nd.array(per[rank])
doubled = (hvd.allreduce(x, op=hvd.Sum) * 2).asnumpy()
np.testing.assert_allclose(doubled, 2 * expected_reduce(per, "Sum", "float32"), rtol=1e-5, atol=1e-5)
chained = hvd.allreduce(x * 3, op=hvd.Sum)  # input produced by a pending engine op
chained = hvd.allreduce(chained + 1, op=hvd.Max)
np.testing.assert_allclose(chained.asnumpy(), 3 * expected_reduce(per, "Sum", "float32") + 1, rtol=1e-5, atol=1e-5)
y = mx.nd.array(per[rank])
hvd.allreduce_(y, op=hvd.Sum)
y *= 0.5  # write after the in-place collective: must be ordered after it
np.testing.assert_allclose(y.asnumpy(), 0.5 * expected_reduce(per, "Sum", "float32"), rtol=1e-5, atol=1e-5)
s = mx.nd.sum(hvd.allgather(x)).asscalar()
np.testing.assert_allclose(s, sum(p.sum() for p in per), rtol=1e-4)

# ---------------------------------------------------------------------------
section("names: allreduce.<name>, grouped _<i>of<n> (timeline)")
# "{rank}" gives every rank a timeline file of its own (a plain path is rank 0's alone)
tl_template = os.path.join(tempfile.gettempdir(), f"mxplugin_check_ops_tl_{os.getpid()}_{{rank}}.json")
hvd.start_timeline(tl_template)
hvd.allreduce(mx.nd.ones((3,)), name="named_tensor").wait_to_read()
for o in hvd.grouped_allreduce([mx.nd.ones((2,)), mx.nd.ones((3,)), mx.nd.ones((4,))], name="grp"):
    o.wait_to_read()
hvd.broadcast(mx.nd.ones((2,)), root_rank=0, name="bname").wait_to_read()
hvd.stop_timeline()
tl_path = tl_template.replace("{rank}", str(rank))
with open(tl_path) as f:
    events = json.load(f)
os.remove(tl_path)
rows = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
for expected_name in ["allreduce.named_tensor", "allreduce.grp_1of3", "allreduce.grp_2of3", "allreduce.grp_3of3",
                      "broadcast.bname"]:
    assert expected_name in rows, f"rank {rank}: timeline rows {sorted(rows)} lack {expected_name}"

# ---------------------------------------------------------------------------
section("argument errors are raised before anything is enqueued")
x = mx.nd.ones((2 * size + 1, 2))


def raises(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"rank {rank}: {fn.__name__} raised {type(e).__name__}: {e}, expected {exc.__name__}")
    raise AssertionError(f"rank {rank}: {fn.__name__}{args} did not raise {exc.__name__}")


raises(TypeError, hvd.allreduce, [1.0, 2.0])
raises(TypeError, hvd.allreduce_, np.ones(3))
raises(TypeError, hvd.allgather, [1, 2])
raises(TypeError, hvd.broadcast, (1, 2), 0)
raises(TypeError, hvd.broadcast_, np.ones(2), 0)
raises(TypeError, hvd.grouped_allreduce, [mx.nd.ones(2), [1, 2]])
raises(TypeError, hvd.alltoall, [1, 2])
raises(TypeError, hvd.reducescatter, np.ones((2, 2)))
raises(ValueError, hvd.allreduce, x, average=True, op=hvd.Sum)
raises(ValueError, hvd.allreduce_, x, average=False, op=hvd.Average)
raises(ValueError, hvd.grouped_allreduce, [x], average=True, op=hvd.Sum)
raises(NotImplementedError, hvd.allreduce, x, op=hvd.Adasum)
raises(NotImplementedError, hvd.allreduce_, x, op=hvd.Adasum)
raises(NotImplementedError, hvd.grouped_allreduce, [x], op=hvd.Adasum)
raises(ValueError, hvd.allreduce, x, op=42)
for bad in (hvd.Min, hvd.Max, hvd.Product, hvd.Adasum):
    raises(ValueError, hvd.reducescatter, x, op=bad)
    raises(ValueError, hvd.grouped_reducescatter, [x], op=bad)
for bad_root in (size, -1, 1000):
    raises(ValueError, hvd.broadcast, x, root_rank=bad_root)
    raises(ValueError, hvd.broadcast_, x, root_rank=bad_root)
raises(ValueError, hvd.alltoall, x, splits=[1] * (size + 1))                     # wrong count
raises(ValueError, hvd.alltoall, x, splits=[x.shape[0] + 1] + [0] * (size - 1))  # wrong sum
raises(ValueError, hvd.alltoall, x, splits=([-1, x.shape[0] + 1] + [0] * (size - 2)) if size > 1 else [-1])
if size > 1:
    raises(ValueError, hvd.alltoall, mx.nd.ones((size + 1, 2)))  # not divisible, no splits
raises(TypeError, hvd.allreduce, x, prescale_factor="2")
raises(TypeError, hvd.allreduce, x, name=3)
raises(ValueError, hvd.allgather, mx.nd.array(np.float32(3.0).reshape(())))  # 0-d: no first dimension
raises(TypeError, hvd.allreduce, mx.nd.ones((2,), dtype="bool"))  # unsupported dtype


def says(exc, fragments, fn, *args, **kwargs):
    """raises(), and the message holds each of `fragments`."""
    text = str(raises(exc, fn, *args, **kwargs))
    for f in fragments:
        assert f in text, f"rank {rank}: {fn.__name__}: expected {f!r} in: {text}"


# What the one-call host path declines (it reads dtype, storage and shape in
# C++) is refused by the engine path's checks, by name, as before.
for call in (hvd.allgather, hvd.alltoall):
    says(TypeError, ["tensor: dtype bool is not supported"], call, mx.nd.ones((size,), dtype="bool"))
    says(ValueError, ["sparse NDArrays (row_sparse) are not supported", "tostype('default')"], call,
         mx.nd.sparse.zeros("row_sparse", (size, 3)))
says(ValueError, ["alltoall: tensor must have at least one dimension"], hvd.alltoall,
     mx.nd.array(np.float32(3.0).reshape(())))
says(TypeError, ["tensor 1: dtype bool is not supported"], hvd.grouped_allgather,
     [mx.nd.ones((2,)), mx.nd.ones((2,), dtype="bool")])
says(ValueError, ["splits [-1, 2] must be non-negative"], hvd.alltoall, mx.nd.ones((1,)), splits=[-1, 2]) \
    if size == 2 else None
# the library keeps working after all of that (and the ranks still agree on names)
per = [data((3, 3), r, "float32", seed=990) for r in RANKS]
assert_close(hvd.allreduce(mx.nd.array(per[rank]), op=hvd.Sum), expected_reduce(per, "Sum", "float32"),
             rtol=1e-5, atol=1e-5, what="allreduce after argument errors")
assert_close(hvd.broadcast(mx.nd.array(per[rank]), root_rank=size - 1), per[size - 1], what="broadcast after errors")
got = hvd.alltoall(mx.nd.array(np.repeat(np.arange(size, dtype="float32")[:, None], 2, axis=1) + 10 * rank))
assert_close(got, np.array([[rank + 10 * r] * 2 for r in RANKS], dtype="float32"), what="alltoall after errors")

conclude()
