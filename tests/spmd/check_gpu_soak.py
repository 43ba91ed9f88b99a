"""A soak of the GPU lanes (Note [GPU lanes]): several NCCL communicators
running at once on streams of their own, for a bounded time.

    mpiexec -n 3 python3 check_gpu_soak.py [--seconds 120]

Each round submits a random subset of groups (the same subset on every rank,
from a shared seed), each group a call of its own, so the groups spread over
the lanes and their collectives overlap: fused groups of several tensors (up
to tens of MB, float32 and int32, some postscaled), a lone allreduce larger
than the fusion buffer (reduced where it lies), a broadcast from a root that
moves round by round. Meanwhile a producer stream is kept busy with matrix
products before, between and after the inputs are made on it, so the lanes
wait on ready events while compute kernels hold the SMs beside the NCCL
kernels (NCCL's warning about communicators that deadlock when their
kernels cannot all be resident at once). Every output of every round is
compared, on the GPU, with what it must be (integer values: every sum is
exact). The ranks stop together: each round ends with a MAX allreduce of
"my time is up".

MXPLUGIN_NUM_STREAMS defaults to 4 here. Run by tests/test_gpu_soak.py."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

os.environ.setdefault("MXPLUGIN_NUM_STREAMS", "4")

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--seconds", type=float, default=120, help="how long to keep submitting (default %(default)s)")
parser.add_argument("--seed", type=int, default=27, help="the groups' sizes and each round's subset")
args = parser.parse_args()

core = m.Core()
topo = core.topology()
rank, size = topo["rank"], topo["size"]
dev = topo["local_rank"]
cp.cuda.Device(dev).use()
stream = cp.cuda.Stream(non_blocking=True)  # the producer: inputs and busy work
DT = m.DTYPES
FUSION_LIMIT = 64 << 20  # the default fusion threshold: the lone tensor is larger
LONE = FUSION_LIMIT // 4 + 1_000_003  # float32 elements
BUSY_SIDE = 2048


def say(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# The groups, the same on every rank: (name, dtype, postscale, element counts).
plan_rng = np.random.RandomState(args.seed)
GROUPS = []
for g in range(10):
    dtype = "int32" if g % 3 == 2 else "float32"
    post = 0.5 if dtype == "float32" and g % 2 else 1.0
    counts = [int(c) for c in plan_rng.randint(200_000, 3_000_000, size=plan_rng.randint(2, 7))]
    GROUPS.append((f"soak.g{g}", dtype, post, counts))

with stream:
    busy_a = cp.random.RandomState(rank).standard_normal((BUSY_SIDE, BUSY_SIDE), dtype="float32")
    busy_b = cp.empty_like(busy_a)
    bufs = {}  # name -> (input, output): allocated once, reused every round as a training loop would
    for name, dtype, post, counts in GROUPS:
        for j, n in enumerate(counts):
            inp = cp.empty((n,), dtype=dtype)
            bufs[f"{name}.{j}"] = (inp, inp if j % 2 else cp.empty_like(inp))  # odd ones in place
    lone = cp.empty((LONE,), dtype="float32")
    lone_out = cp.empty_like(lone)
    cast = cp.empty((1_500_007,), dtype="float32")
    stop = cp.empty((1,), dtype="int32")
    mismatches = cp.zeros((1,), dtype="int64")


def busy(products):
    """Matrix products on the producer stream: compute kernels holding the SMs."""
    with stream:
        for _ in range(products):
            cp.matmul(busy_a, busy_a, out=busy_b)


def pattern(n, salt, dtype):
    """The values every rank starts from: small integers, so sums are exact."""
    return ((cp.arange(n, dtype="int64") + salt) % 17).astype(dtype)


def fill(arr, salt, r):
    """Rank r's input: the pattern plus r, made on the producer stream."""
    with stream:
        arr[...] = pattern(arr.size, salt, arr.dtype) + r


def expect_sum(arr, salt, post):
    return (pattern(arr.size, salt, arr.dtype) * size + size * (size - 1) // 2) * arr.dtype.type(post)


def op(name, op_type, dtype, inp, out, reduce_op=m.REDUCE_SUM, root=0, post=1.0, priority=0):
    return m.Op(name, op_type, DT[dtype], list(inp.shape), inp.data.ptr, out.data.ptr, out_shape=list(out.shape),
                reduce_op=reduce_op, device=dev, root_rank=root, postscale=post, priority=priority,
                stream=stream.ptr)


def count_wrong(got, want):
    """Adds the wrong elements to a count on the GPU: read back once a round."""
    with stream:
        mismatches[...] += cp.count_nonzero(got != want)


round_rng = np.random.RandomState(args.seed + 1)  # the same sequence on every rank
start = time.monotonic()
rounds = launched_bytes = 0
while True:
    salt_base = rounds * 101
    how_many = round_rng.randint(3, len(GROUPS) + 1)
    chosen = sorted(int(g) for g in round_rng.choice(len(GROUPS), size=how_many, replace=False))
    with_lone, root = rounds % 2 == 0, rounds % size
    busy(12)  # the inputs come after busy work on the same stream: the lanes must wait for it
    checks = []
    for g in chosen:
        name, dtype, post, counts = GROUPS[g]
        for j in range(len(counts)):
            fill(bufs[f"{name}.{j}"][0], salt_base + 7 * g + j, rank)
    if with_lone:
        fill(lone, salt_base + 5, rank)
    fill(cast, salt_base + 3, rank)
    handles = []
    for g in chosen:  # a call each: the groups spread over the lanes
        name, dtype, post, counts = GROUPS[g]
        ops = []
        for j in range(len(counts)):
            inp, out = bufs[f"{name}.{j}"]
            ops.append(op(f"{name}.{j}", m.OP_ALLREDUCE, dtype, inp, out, post=post, priority=-g))
            checks.append((f"{name}.{j}", out, salt_base + 7 * g + j, post))
            launched_bytes += inp.nbytes
        handles.append(core.enqueue(ops, 0))
        busy(2)  # more compute between the submissions
    if with_lone:
        handles.append(core.enqueue([op("soak.lone", m.OP_ALLREDUCE, "float32", lone, lone_out)], 0))
        checks.append(("soak.lone", lone_out, salt_base + 5, 1.0))
        launched_bytes += lone.nbytes
    handles.append(core.enqueue([op("soak.broadcast", m.OP_BROADCAST, "float32", cast, cast, root=root)], 0))
    launched_bytes += cast.nbytes
    busy(12)  # and while the collectives run
    for h in handles:
        h.wait()
    for _, out, salt, post in checks:
        with stream:
            want = expect_sum(out, salt, post)
        count_wrong(out, want)
    with stream:
        count_wrong(cast, pattern(cast.size, salt_base + 3, cast.dtype) + root)
        wrong = int(mismatches.get(stream=stream)[0])
    stream.synchronize()
    if wrong:
        raise AssertionError(f"rank {rank}: round {rounds}: {wrong} elements wrong among "
                             f"{', '.join(c[0] for c in checks)} and soak.broadcast")
    rounds += 1
    # Every rank runs the same rounds: stop when any rank's time is up.
    with stream:
        stop[...] = 1 if time.monotonic() - start >= args.seconds else 0
    core.enqueue([op("soak.stop", m.OP_ALLREDUCE, "int32", stop, stop, reduce_op=m.REDUCE_MAX)], 0).wait()
    if int(stop.get(stream=stream)[0]):
        break
    if rounds % 20 == 0:
        say(f"rank {rank}: {rounds} rounds, {launched_bytes / 1e9:.1f} GB submitted, "
            f"{time.monotonic() - start:.0f} s")

seconds = time.monotonic() - start
say(f"rank {rank}: {rounds} rounds in {seconds:.0f} s on {os.environ['MXPLUGIN_NUM_STREAMS']} lanes, "
    f"{launched_bytes / 1e9:.1f} GB through the collectives, every result right")
stream.synchronize()
core.shutdown()
say(f"PASS {rank}")
