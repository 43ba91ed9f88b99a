"""Every collective x both array kinds (legacy NDArrays, the NumPy interface's
mx.np.ndarray under npx.set_np()) x dtypes: the result's type is the
caller's kind and its values equal NumPy's from every rank's data; grouped
calls mixing kinds return each tensor in its own kind; process sets,
objects, and broadcast_parameters with deferred initialisation of a
NumPy-interface model (Note [Array kinds] in mxplugin/array_kinds.py)."""
import common
from common import assert_close, hvd, mx, np, rank_data, say

from mxnet import gluon, npx

npx.set_np()  # as a NumPy-interface program starts; legacy arrays still work beside
rank, size = common.start()
DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
KINDS = {"legacy": mx.nd.array, "numpy": mx.np.array}
KIND_TYPES = {"legacy": mx.nd.NDArray, "numpy": mx.np.ndarray}


def data(shape, r, dtype, seed=0):
    """Per-rank values exact in every dtype: small integers, not negative for uint8."""
    values = np.round(rank_data(shape, r, "float64", seed))
    return (np.abs(values) if dtype == "uint8" else values).astype(dtype)


def check(what, kind, result, expected, dtype):
    """`result` is exactly of the caller's kind and holds `expected`."""
    want = KIND_TYPES[kind]
    assert type(result) is want, f"rank {rank}: {what} ({kind}, {dtype}) returned {type(result).__name__}"
    assert np.dtype(result.dtype) == np.dtype(dtype), f"{what}: dtype {result.dtype} for {dtype}"
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == "float16" else dict(rtol=1e-6, atol=1e-6)
    assert_close(result.asnumpy(), expected, what=f"{what} ({kind}, {dtype})", **tol)


def rows_of(r):
    return r + 1  # uneven first dimensions: rank r has r + 1 rows


def collectives(kind, dtype):
    make = KINDS[kind]
    mine = data((4, 3), rank, dtype)
    everyone = [data((4, 3), r, dtype) for r in range(size)]
    total = np.sum(np.stack(everyone).astype("float64"), axis=0)

    check("allreduce Sum", kind, hvd.allreduce(make(mine, dtype=dtype), op=hvd.Sum), total, dtype)
    x = make(mine, dtype=dtype)
    back = hvd.allreduce_(x, op=hvd.Max, name=f"inplace.{kind}.{dtype}")
    assert back is x, "allreduce_ returns the caller's array"
    check("allreduce_ Max", kind, x, np.max(np.stack(everyone), axis=0), dtype)
    if dtype.startswith("float"):
        check("allreduce Average", kind, hvd.allreduce(make(mine, dtype=dtype)), total / size, dtype)

    outs = hvd.grouped_allreduce([make(mine, dtype=dtype), make(mine * 0 + 1, dtype=dtype)], op=hvd.Sum)
    check("grouped_allreduce[0]", kind, outs[0], total, dtype)
    check("grouped_allreduce[1]", kind, outs[1], np.full((4, 3), size), dtype)
    pair = [make(mine, dtype=dtype), make(mine, dtype=dtype)]
    assert hvd.grouped_allreduce_(pair, op=hvd.Sum) is pair
    for t in pair:
        check("grouped_allreduce_", kind, t, total, dtype)

    gathered = np.concatenate([data((rows_of(r), 2), r, dtype, seed=1) for r in range(size)])
    check("allgather", kind, hvd.allgather(make(data((rows_of(rank), 2), rank, dtype, seed=1), dtype=dtype)),
          gathered, dtype)
    big = (70000, 2)  # past the one-round path's bytes on the second call of a name: the exchange path too
    for _ in range(2):
        got = hvd.allgather(make(np.full(big, rank, dtype=dtype), dtype=dtype), name=f"big.{kind}.{dtype}")
        check("allgather (exchange path)", kind, got,
              np.concatenate([np.full(big, r, dtype=dtype) for r in range(size)]), dtype)
    outs = hvd.grouped_allgather([make(data((rows_of(rank), 2), rank, dtype, seed=1), dtype=dtype),
                                  make(mine, dtype=dtype)])
    check("grouped_allgather[0]", kind, outs[0], gathered, dtype)
    check("grouped_allgather[1]", kind, outs[1], np.concatenate(everyone), dtype)

    root = size - 1
    check("broadcast", kind, hvd.broadcast(make(mine, dtype=dtype), root_rank=root), everyone[root], dtype)
    x = make(mine, dtype=dtype)
    assert hvd.broadcast_(x, root_rank=0) is x
    check("broadcast_", kind, x, everyone[0], dtype)

    rows = np.concatenate([data((size, 3), r, dtype, seed=2) for r in range(size)])
    check("alltoall", kind, hvd.alltoall(make(data((size, 3), rank, dtype, seed=2), dtype=dtype)),
          rows.reshape(size, size, 3)[:, rank], dtype)
    splits = [r + 1 for r in range(size)]  # rank r receives r + 1 rows from everyone
    sent = data((sum(splits), 3), rank, dtype, seed=3)
    out, received = hvd.alltoall(make(sent, dtype=dtype), splits=splits)
    expected = np.concatenate([data((sum(splits), 3), r, dtype, seed=3)[sum(splits[:rank]):sum(splits[:rank + 1])]
                               for r in range(size)])
    check("alltoall with splits", kind, out, expected, dtype)
    check("alltoall received splits", kind, received, np.full(size, rank + 1), "int32")

    per = np.array_split(np.arange(size * 2), size)[rank]
    block = data((size * 2, 3), rank, dtype, seed=4)
    summed = np.sum(np.stack([data((size * 2, 3), r, dtype, seed=4).astype("float64") for r in range(size)]), 0)
    check("reducescatter", kind, hvd.reducescatter(make(block, dtype=dtype), op=hvd.Sum), summed[per], dtype)
    outs = hvd.grouped_reducescatter([make(block, dtype=dtype)] * 2, op=hvd.Sum)
    for o in outs:
        check("grouped_reducescatter", kind, o, summed[per], dtype)


def mixed_kinds():
    """One grouped call of a legacy and a NumPy-interface array: each comes
    back in its own kind; legacy arrays made inside a NumPy-mode program work."""
    a, b = mx.nd.array(np.full(3, rank + 1.0)), mx.np.array(np.full(3, 2.0 * rank), dtype="float32")
    outs = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    expected = sum(range(1, size + 1))
    check("mixed grouped[legacy]", "legacy", outs[0], np.full(3, expected), "float32")
    check("mixed grouped[numpy]", "numpy", outs[1], np.full(3, 2.0 * sum(range(size))), "float32")
    outs = hvd.grouped_allgather([b, a])
    check("mixed grouped_allgather[numpy]", "numpy", outs[0],
          np.concatenate([np.full(3, 2.0 * r) for r in range(size)]), "float32")
    # A NumPy-interface result goes back to legacy code without a copy.
    legacy = hvd.allreduce(b, op=hvd.Sum).as_nd_ndarray()
    assert type(legacy) is mx.nd.NDArray
    assert_close(mx.nd.sum(legacy).asnumpy(), 3 * 2.0 * sum(range(size)), what="as_nd_ndarray of a result")


def process_sets_and_objects():
    if size >= 3:  # at 2 ranks [0, 1] is the global set
        pair = hvd.add_process_set([0, 1])
        if rank in (0, 1):
            got = hvd.allreduce(mx.np.array(np.full(2, rank + 1.0), dtype="float32"), op=hvd.Sum, process_set=pair)
            check("allreduce on a process set", "numpy", got, np.full(2, 3.0), "float32")
        hvd.remove_process_set(pair)
    obj = {"rank": rank, "array": mx.np.array([rank, 1.0]).asnumpy()}
    everyone = hvd.allgather_object(obj)
    assert [o["rank"] for o in everyone] == list(range(size)), everyone
    assert hvd.broadcast_object(mx.np.array([7.0 * (rank + 1)]).asnumpy(), root_rank=0)[0] == 7.0


def deferred_broadcast():
    """A NumPy-interface model with deferred shapes: broadcast_parameters
    before the first forward, weights equal rank 0's after it."""
    mx.random.seed(10 + rank)  # different initial weights on every rank
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(5, activation="relu"), gluon.nn.Dense(2))
    net.initialize(mx.init.Uniform(1.0))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    out = net(mx.np.ones((3, 4)))
    assert type(out) is mx.np.ndarray
    for name, p in sorted(net.collect_params().items()):
        mine = p.data().asnumpy()
        assert type(p.data()) is mx.np.ndarray
        theirs = hvd.broadcast(p.data(), root_rank=0, name=f"check.{name}").asnumpy()
        assert_close(mine, theirs, what=f"{name} equals rank 0's after deferred init")
    say(f"deferred broadcast ok {rank}")


for kind in KINDS:
    for dtype in DTYPES:
        collectives(kind, dtype)
    say(f"collectives {kind} ok {rank}")
mixed_kinds()
process_sets_and_objects()
deferred_broadcast()
common.finish()
