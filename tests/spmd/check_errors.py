"""Mismatched collectives: every rank gets an error naming the tensor, what
differed and the ranks; the library keeps working afterwards. Also:
duplicate names in flight."""
import sys
import time

from common import assert_close, hvd, mx, np, rank_data, finish, say, start

from mxnet.base import MXNetError

from mxplugin import MismatchError
from mxplugin._loader import core_module as m


r, n = start()
core = hvd.basics._core()
ODD = 1  # the rank that disagrees
others = [k for k in range(n) if k != ODD]


def ranks_text(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def disagreement(common_value, odd_value):
    """The core's 'X on ranks 0, 2; Y on rank 1' text (groups in rank order)."""
    return f"{common_value} on {ranks_text(others)}; {odd_value} on {ranks_text([ODD])}"


def check_message(message, expected, what):
    for part in expected:
        assert part in message, f"rank {r}: {what}: expected {part!r} in error message:\n{message}"


def expect_mxnet_error(array, expected, what):
    t0 = time.time()
    try:
        array.asnumpy()
    except MXNetError as e:
        check_message(str(e), expected, what)
    else:
        raise AssertionError(f"rank {r}: {what}: no error raised")
    return time.time() - t0


def expect_raw_error(handle, exc_type, expected, what):
    try:
        handle.wait()
    except exc_type as e:
        check_message(str(e), expected, what)
    else:
        raise AssertionError(f"rank {r}: {what}: no {exc_type.__name__} raised")


_ok_count = [0]


def check_ok(tag):
    """A correct collective after an error still works and gives the right value."""
    k = _ok_count[0] = _ok_count[0] + 1
    out = hvd.allreduce(mx.nd.array(rank_data((7,), r, seed=k)), op=hvd.Sum, name=f"ok.{tag}")
    expected = sum(rank_data((7,), q, seed=k) for q in range(n))
    assert_close(out, expected, rtol=1e-5, what=f"allreduce after {tag}")


def mismatch_text(what, tensor, detail):
    return [f"Mismatched {what} for tensor '{tensor}'", detail]


def raw_op(name, op_type, inp, out, reduce_op=m.REDUCE_SUM, root=0):
    return m.Op(name, op_type, m.DTYPES[inp.dtype.name], list(inp.shape), inp.ctypes.data, out.ctypes.data,
                out_shape=list(out.shape), reduce_op=reduce_op, root_rank=root)


odd = r == ODD

# --- shape
x = hvd.allreduce(mx.nd.ones((5,) if odd else (4,)), name="x")
expect_mxnet_error(x, mismatch_text("shape", "allreduce.x", disagreement("(4,)", "(5,)")), "shape")
check_ok("shape")

# --- a user's name is named as Horovod names it (horovod.mxnet's GetOpName): the
# kind, a dot, the name as given, even where the name starts with the kind
x = hvd.allreduce(mx.nd.ones((5,) if odd else (4,)), name="allreduce.grads")
expect_mxnet_error(x, mismatch_text("shape", "allreduce.allreduce.grads", disagreement("(4,)", "(5,)")),
                   "a name that starts with the kind")
x = hvd.broadcast(mx.nd.ones((5,) if odd else (4,)), root_rank=0, name="w.0")
expect_mxnet_error(x, mismatch_text("shape", "broadcast.w.0", disagreement("(4,)", "(5,)")), "broadcast's name")
check_ok("named")

# --- shape, 2-d
x = hvd.allreduce(mx.nd.ones((2, 4) if odd else (2, 3)), name="x2d", op=hvd.Sum)
expect_mxnet_error(x, mismatch_text("shape", "allreduce.x2d", disagreement("(2, 3)", "(2, 4)")), "shape 2-d")
check_ok("shape2d")

# --- dtype
x = hvd.allreduce(mx.nd.ones((4,), dtype="float64" if odd else "float32"), name="dt")
expect_mxnet_error(x, mismatch_text("dtype", "allreduce.dt", disagreement("float32", "float64")), "dtype")
check_ok("dtype")

# --- reduce op
x = hvd.allreduce(mx.nd.ones((4,)), name="red", op=hvd.Max if odd else hvd.Sum)
expect_mxnet_error(x, mismatch_text("reduce op", "allreduce.red", disagreement("Sum", "Max")), "reduce op")
check_ok("reduce_op")

# --- prescale factor
x = hvd.allreduce(mx.nd.ones((4,)), name="pre", op=hvd.Sum, prescale_factor=2.0 if odd else 1.0)
expect_mxnet_error(x, mismatch_text("prescale factor", "allreduce.pre", disagreement("1", "2")), "prescale")
check_ok("prescale")

# --- postscale factor
x = hvd.allreduce(mx.nd.ones((4,)), name="post", op=hvd.Sum, postscale_factor=0.5 if odd else 1.0)
expect_mxnet_error(x, mismatch_text("postscale factor", "allreduce.post", disagreement("1", "0.5")), "postscale")
check_ok("postscale")

# --- root rank of broadcast
x = hvd.broadcast(mx.nd.ones((3,)), root_rank=1 if odd else 0, name="root")
expect_mxnet_error(x, mismatch_text("root rank", "broadcast.root", disagreement("root 0", "root 1")), "root rank")
check_ok("root_rank")

# --- allgather trailing dims and dtype (first dims may differ, the rest may not):
# raised by allgather itself on every rank, as in Horovod, not when read
def expect_call_error(call, expected, what):
    try:
        call()
    except MismatchError as e:
        check_message(str(e), expected, what)
    else:
        raise AssertionError(f"rank {r}: {what}: the call raised nothing")


expect_call_error(lambda: hvd.allgather(mx.nd.ones((1 + r, 4) if odd else (1 + r, 3)), name="ag"),
                  ["Mismatched allgather for tensor 'allgather.ag'",
                   disagreement("float32, rank-2 with trailing dims (3,)", "float32, rank-2 with trailing dims (4,)")],
                  "allgather trailing dims")
check_ok("allgather")
expect_call_error(lambda: hvd.allgather(mx.nd.ones((2, 3), dtype="float16" if odd else "float32"), name="agt"),
                  [disagreement("float32, rank-2 with trailing dims (3,)", "float16, rank-2 with trailing dims (3,)")],
                  "allgather dtype")
expect_call_error(lambda: hvd.grouped_allgather([mx.nd.ones((2,)), mx.nd.ones((2, 2) if odd else (2,))], name="agg"),
                  ["Mismatched allgather for tensor 'allgather.agg_2of2'",
                   disagreement("float32, rank-1 with trailing dims ()", "float32, rank-2 with trailing dims (2,)")],
                  "grouped allgather")
check_ok("allgather dtype")

# --- grouped allreduce: one of 50 tensors mismatches
shapes = [(3,)] * 50
if odd:
    shapes[17] = (2, 3)
outs = hvd.grouped_allreduce([mx.nd.ones(s) for s in shapes], name="grp", op=hvd.Sum)
# One engine op writes every output; MXNet shares one exception among an op's
# outputs and clears it when it is first rethrown, so only the first read raises.
expect_mxnet_error(outs[17], mismatch_text("shape", "allreduce.grp_18of50", disagreement("(3,)", "(2, 3)")),
                   "grouped, output 17")
check_ok("grouped")
# the same group, correct this time
outs = hvd.grouped_allreduce([mx.nd.ones((3,)) * (i + r) for i in range(50)], name="grp", op=hvd.Sum)
for i in (0, 17, 49):
    assert_close(outs[i], np.full((3,), n * i + sum(range(n))), what=f"grouped retry, output {i}")

# --- a signature change after the name was negotiated (and cached) before
for _ in range(2):
    assert_close(hvd.allreduce(mx.nd.ones((4,)), name="cached", op=hvd.Sum), np.full((4,), n), what="cached")
x = hvd.allreduce(mx.nd.ones((6,) if odd else (4,)), name="cached", op=hvd.Sum)
expect_mxnet_error(x, mismatch_text("shape", "allreduce.cached", disagreement("(4,)", "(6,)")), "cached then changed")
check_ok("cached")
assert_close(hvd.allreduce(mx.nd.ones((4,)), name="cached", op=hvd.Sum), np.full((4,), n), what="cached again")

# --- operation type under one name (raw entry: the ops API prefixes names by kind)
inp = np.arange(4, dtype=np.float32) + r
out = np.zeros(4, dtype=np.float32)
h = core.enqueue([raw_op("optype", m.OP_BROADCAST if odd else m.OP_ALLREDUCE, inp, out)], 0)
expect_raw_error(h, MismatchError, mismatch_text("operation", "optype", disagreement("allreduce", "broadcast")),
                 "operation")
check_ok("operation")

# --- raw shape mismatch raises MismatchError
inp = np.ones(5 if odd else 4, dtype=np.float32)
out = np.zeros_like(inp)
h = core.enqueue([raw_op("rawshape", m.OP_ALLREDUCE, inp, out)], 0)
expect_raw_error(h, MismatchError, mismatch_text("shape", "rawshape", disagreement("(4,)", "(5,)")), "raw shape")
check_ok("raw_shape")

# --- a name reused while in flight: the second op waits behind the first
# (Note [Reused names] in src/core/core.cc), on every rank, in order.
inp = np.full(4, r + 1, dtype=np.float32)
inp2 = inp * 10
out = np.zeros(4, dtype=np.float32)
out2 = np.zeros(4, dtype=np.float32)
total = sum(range(1, n + 1))
if r == 0:
    h = core.enqueue([raw_op("dup", m.OP_ALLREDUCE, inp, out)], 0)  # pending: nobody else submitted it yet
    h2 = core.enqueue([raw_op("dup", m.OP_ALLREDUCE, inp2, out2)], 0)
    hvd.barrier()
else:
    hvd.barrier()
    h = core.enqueue([raw_op("dup", m.OP_ALLREDUCE, inp, out)], 0)
    h2 = core.enqueue([raw_op("dup", m.OP_ALLREDUCE, inp2, out2)], 0)
h.wait()
h2.wait()
np.testing.assert_allclose(out, np.full(4, total), err_msg=f"rank {r}: first 'dup' op")
np.testing.assert_allclose(out2, np.full(4, 10 * total), err_msg=f"rank {r}: second 'dup' op")
check_ok("dup_raw")

# --- duplicate name inside one grouped call: rejected before anything is queued
try:
    core.enqueue([raw_op("twice", m.OP_ALLREDUCE, inp, out), raw_op("twice", m.OP_ALLREDUCE, inp, out2)], 0)
except ValueError as e:
    check_message(str(e), ["'twice'", "appears twice in one grouped call"], "duplicate in one group")
else:
    raise AssertionError(f"rank {r}: duplicate name in one group: no error")
check_ok("dup_group")

# --- a name reused through the MXNet ops API, rank 0 well ahead of the others
if r == 0:
    a1 = hvd.allreduce(mx.nd.ones((4,)), name="dupnd", op=hvd.Sum)
    a2 = hvd.allreduce(mx.nd.ones((4,)) * 10, name="dupnd", op=hvd.Sum)
    time.sleep(1.0)  # let the engine hand both to the core while 'dupnd' is pending
    hvd.barrier()
else:
    hvd.barrier()
    a1 = hvd.allreduce(mx.nd.ones((4,)), name="dupnd", op=hvd.Sum)
    a2 = hvd.allreduce(mx.nd.ones((4,)) * 10, name="dupnd", op=hvd.Sum)
assert_close(a1, np.full((4,), n), what="first dupnd")
assert_close(a2, np.full((4,), 10 * n), what="second dupnd")
check_ok("dup_ndarray")

finish()
