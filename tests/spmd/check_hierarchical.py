"""Allreduce at the sizes where the hierarchical (shared-memory) path cuts
its work: fewer elements than local ranks, slices that do not divide, piece
boundaries (1 MiB per rank: 262,144 float32), many pieces, and every
dtype and reduce op, in place and out of place, against NumPy; then
reduce-scatter and allgather, which take the segment too. Run it with
ranks sharing hosts (and across fake hosts in tests/test_multi_host.py)."""
from common import finish, hvd, mx, np, start

r, n = start()
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}


def values(size, rank, dtype, seed):
    rng = np.random.RandomState(seed * 100 + rank)
    if dtype in ("int32", "int64", "uint8"):
        return rng.randint(1, 4, size=size).astype(dtype)
    return rng.uniform(0.5, 1.5, size=size).astype(dtype)


seed = 0
for count in (1, 3, 17, 262_143, 262_145, 2_621_441):
    for dtype, ops in (("float32", OPS), ("float16", ("sum", "max")), ("float64", ("average", "min")),
                       ("int32", ("sum", "product")), ("uint8", ("max",))):
        if count > 100_000 and dtype != "float32" and dtype != "float16":
            continue
        for op_name in ops:
            seed += 1
            per = [values(count, k, dtype, seed).astype("float64") for k in range(n)]
            want = {"sum": sum(per), "average": sum(per) / n, "min": np.min(per, 0), "max": np.max(per, 0),
                    "product": np.prod(per, 0)}[op_name]
            x = mx.nd.array(values(count, r, dtype, seed), dtype=dtype)
            inplace = x.copy()
            out = hvd.allreduce(x, op=OPS[op_name], name=f"h.{seed}")
            hvd.allreduce_(inplace, op=OPS[op_name], name=f"h.{seed}.inplace")
            tol = 2e-2 if dtype == "float16" else 1e-6
            for what, got in (("out of place", out), ("in place", inplace)):
                np.testing.assert_allclose(got.asnumpy().astype("float64"), want, rtol=tol, atol=tol,
                                           err_msg=f"rank {r}: {count} x {dtype} {op_name} {what}")

# Tensors in one batch (Communicator::AllreduceMany; the shared-memory data
# plane takes small ones too, unfused): pieces that end one tensor and start
# the next, tensors smaller than a slice between large ones, each tensor's
# own prescale and postscale (folded into the copy out, with and without
# scaling in one piece), and two dtypes at once (two batches), in place and
# out of place.
SIZES = (262_145, 70_001, 3, 300_000, 17, 65_537, 1_048_577)
for dtype, tol in (("float32", 1e-5), ("float16", 3e-2)):
    seed += 1
    per = [[values(c, k, dtype, seed + i).astype("float64") for i, c in enumerate(SIZES)] for k in range(n)]
    xs = [mx.nd.array(values(c, r, dtype, seed + i), dtype=dtype) for i, c in enumerate(SIZES)]
    copies = [x.copy() for x in xs]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name=f"batch.{dtype}")
    hvd.grouped_allreduce_(copies, op=hvd.Average, name=f"batch.{dtype}.inplace")
    singles = [x.copy() for x in xs]
    posts = [0.5 if i % 2 else 1.0 for i in range(len(SIZES))]
    for i, x in enumerate(singles):  # one request each, scales differing, submitted together
        hvd.allreduce_(x, op=hvd.Sum, prescale_factor=float(i + 1), postscale_factor=posts[i],
                       name=f"single.{dtype}.{i}")
    for i in range(len(SIZES)):
        total = sum(per[k][i] for k in range(n))
        for what, got, want in (("grouped", outs[i], total * 1.5), ("grouped in place", copies[i], total / n),
                                ("single", singles[i], total * (i + 1) * posts[i])):
            np.testing.assert_allclose(got.asnumpy().astype("float64"), want, rtol=tol, atol=tol,
                                       err_msg=f"rank {r}: batch tensor {i} ({SIZES[i]} x {dtype}) {what}")

# Reduce-scatter and allgather, which go through the segment on one host
# (Note [Shared-memory reduce-scatter and allgather]): blocks that differ by
# a row, blocks of nothing, many pieces, a prescale, and dtypes of 1 to 8
# bytes; between allreduces, whose piece counter they share.
for rows, cols in ((1, 1), (n - 1, 3), (n + 1, 7), (3 * n + 1, 65_537), (2 * n, 1_048_577 // n)):
    for dtype, op_name in (("float32", "sum"), ("float16", "sum"), ("float64", "average"), ("uint8", "sum"),
                           ("int64", "sum")):
        if rows * cols > 300_000 and dtype not in ("float32", "float16"):
            continue
        seed += 1
        per = [values((rows, cols), k, dtype, seed).astype("float64") for k in range(n)]
        want = sum(per) / n if op_name == "average" else sum(per)
        lo = r * (rows // n) + min(r, rows % n)
        hi = lo + rows // n + (1 if r < rows % n else 0)
        x = mx.nd.array(values((rows, cols), r, dtype, seed), dtype=dtype)
        pre = 0.5 if dtype == "float32" else 1.0
        got = hvd.reducescatter(x, op=OPS[op_name], prescale_factor=pre, name=f"rs.{seed}")
        tol = 2e-2 if dtype == "float16" else 1e-6
        np.testing.assert_allclose(got.asnumpy().astype("float64"), want[lo:hi] * pre, rtol=tol, atol=tol,
                                   err_msg=f"rank {r}: reducescatter {rows}x{cols} {dtype} {op_name}")
        # Each rank gives rows of its own (some none), gathered in rank order.
        mine = values((r % 3, cols), r, dtype, seed)
        gathered = hvd.allgather(mx.nd.array(mine, dtype=dtype), name=f"ag.{seed}").asnumpy()
        expect = np.concatenate([values((k % 3, cols), k, dtype, seed) for k in range(n)])
        np.testing.assert_array_equal(gathered, expect, err_msg=f"rank {r}: allgather of {cols} columns {dtype}")
        hvd.allreduce_(x, op=hvd.Sum, name=f"between.{seed}")  # interleaved with the segment's other users

# Broadcast and alltoall, through the segment on one host too (Note
# [Shared-memory broadcast and alltoall]): every root, one element to many
# pieces; alltoall blocks of nothing, blocks that differ per pair, one
# rank's block past a piece while others' are small (the longest block
# decides every rank's number of pieces), dtypes of 1 to 8 bytes, both of
# allgather's paths for alltoall (one round, then by name past
# host_exchange.MOST_BYTES the exchange of splits and an engine op), and
# alltoall in the segment's alternation with allreduces.
for count in (1, 1023, 262_145, 1_048_577):
    for root in range(n):
        seed += 1
        x = mx.nd.array(values(count, r, "float32", seed))
        hvd.broadcast_(x, root_rank=root, name=f"bc.{seed}")
        np.testing.assert_array_equal(x.asnumpy(), values(count, root, "float32", seed),
                                      err_msg=f"rank {r}: broadcast of {count} from {root}")
for cols, scale, dtype in [(1, 0, "float32"), (3, 1, "uint8"), (5, 2, "float64"), (65_537, 1, "float32"),
                           (1, 300_001, "float32"), (2, 70_001, "int64")] * 2:  # twice: both paths for the large
    seed += 1
    # rank k sends (k + 2 * j) * scale rows to rank j; rank 0 sends rank 1 none
    sends = [[0 if (k, j) == (0, 1) else (k + 2 * j) * scale + (1 if scale == 0 else 0) for j in range(n)]
             for k in range(n)]
    if cols == 2:
        sends[n - 1][0] = 300_001  # one block of many pieces among small ones
    per = [values((sum(sends[k]), cols), k, dtype, seed) for k in range(n)]

    def block(k, j):
        start = sum(sends[k][:j])
        return per[k][start:start + sends[k][j]]
    got, received = hvd.alltoall(mx.nd.array(per[r], dtype=dtype), splits=sends[r], name=f"a2a.{dtype}.{cols}.{scale}")
    np.testing.assert_array_equal(got.asnumpy(), np.concatenate([block(k, r) for k in range(n)]),
                                  err_msg=f"rank {r}: alltoall {dtype} x {cols} with splits {sends}")
    np.testing.assert_array_equal(received.asnumpy(), [sends[k][r] for k in range(n)])
    hvd.allreduce_(mx.nd.ones(3 + seed % 5), name=f"a2a.between.{seed}")

# A rank with no rows at all (every split 0), past host_exchange.MOST_BYTES:
# it remembers the exchange's bytes as the others do, so that the next call
# under the name takes the same path on every rank.
for step in range(3):
    seed += 1
    sends = [[0] * n if k == 0 else [150_001] * n for k in range(n)]
    per = [values((sum(sends[k]), 2), k, "float32", seed) for k in range(n)]
    got = hvd.alltoall(mx.nd.array(per[r]), splits=sends[r], name="a2a.empty.rank")[0]
    want = np.concatenate([per[k][r * sends[k][r]:(r + 1) * sends[k][r]] for k in range(n)])
    np.testing.assert_array_equal(got.asnumpy(), want, err_msg=f"rank {r}: alltoall with rank 0 empty, step {step}")
finish()
