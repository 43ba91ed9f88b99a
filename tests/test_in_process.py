"""The real core at world sizes 1 to 8 in one process: every rank a thread
with its own Core, meeting in memory (src/backend/memory) instead of MPI.
Negotiation (the controller, message table and response cache), the
executor, mismatch detection, stalls, a rank that stops and process sets run
exactly as under mpiexec, in seconds. The mpiexec suite (tests/spmd) still
covers MPI itself, MXNet and the launcher."""
import re
import threading
import time

import numpy as np
import pytest

from in_process import DT, RankFailed, data, m, op, run, run_ranks
from mpi_harness import HANG_S

SIZES = [1, 2, 3, 4, 5, 8]


def ranks_text(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def collectives(core, rank, size, job):
    """Every collective, checked against NumPy on every rank."""
    per = lambda shape, dtype, seed: [data(shape, r, dtype, seed) for r in range(size)]  # noqa: E731
    checks = []

    def check(what, got, want, tol=1e-5):
        checks.append(what)
        np.testing.assert_allclose(got.astype("float64"), np.asarray(want, dtype="float64"), rtol=tol, atol=tol,
                                   err_msg=f"rank {rank}: {what}")

    # allreduce: fused (small) and direct (above the 256 KB threshold), scaled, in and out of place
    for seed, (shape, dtype, red, pre, post) in enumerate([
            ((7,), "float32", m.REDUCE_SUM, 1.0, 1.0), ((70_000,), "float32", m.REDUCE_AVERAGE, 0.5, 3.0),
            ((3, 4), "float64", m.REDUCE_PRODUCT, 1.0, 1.0), ((33,), "int32", m.REDUCE_MAX, 1.0, 1.0),
            ((33,), "int64", m.REDUCE_MIN, 1.0, 1.0), ((9,), "float16", m.REDUCE_AVERAGE, 1.0, 1.0)]):
        xs = per(shape, dtype, seed)
        wide = [x.astype("float64") * pre for x in xs]
        want = {m.REDUCE_SUM: sum(wide), m.REDUCE_AVERAGE: sum(wide) / size, m.REDUCE_MAX: np.max(wide, 0),
                m.REDUCE_MIN: np.min(wide, 0), m.REDUCE_PRODUCT: np.prod(wide, 0)}[red] * post
        out, inplace = np.zeros_like(xs[rank]), xs[rank].copy()
        run(core, [op(f"ar{seed}", m.OP_ALLREDUCE, xs[rank], out, red, pre=pre, post=post),
                   op(f"ar{seed}.inplace", m.OP_ALLREDUCE, inplace, inplace, red, pre=pre, post=post)])
        tol = 2e-2 if dtype == "float16" else 1e-5
        check(f"allreduce {dtype} op {red}", out, want, tol)
        check(f"allreduce {dtype} op {red} in place", inplace, want, tol)

    # a grouped allreduce of three tensors
    xs = [per((5 + k,), "float32", 10 + k) for k in range(3)]
    outs = [np.zeros(5 + k, "float32") for k in range(3)]
    run(core, [op(f"grads.{k}", m.OP_ALLREDUCE, xs[k][rank], outs[k]) for k in range(3)], group="grads")
    for k in range(3):
        check(f"grouped allreduce member {k}", outs[k], sum(xs[k]))

    # allgather: rank r contributes r + 1 rows
    rows = [data((r + 1, 3), r, "float32", 20) for r in range(size)]
    out = np.zeros((sum(r + 1 for r in range(size)), 3), "float32")
    run(core, [op("gather", m.OP_ALLGATHER, rows[rank], out)])
    check("allgather", out, np.concatenate(rows))

    # broadcast from the last rank
    x = data((4, 2), rank, "float64", 30)
    run(core, [op("bcast", m.OP_BROADCAST, x, x, root=size - 1)])
    check("broadcast", x, data((4, 2), size - 1, "float64", 30))

    # alltoall: rank r sends (r + j) % 3 rows of 2 to rank j
    splits = lambda r: [(r + j) % 3 for j in range(size)]  # noqa: E731
    sends = [data((sum(splits(r)), 2), r, "float32", 40) for r in range(size)]
    blocks = [np.split(sends[r], np.cumsum(splits(r))[:-1]) for r in range(size)]
    want = np.concatenate([blocks[r][rank] for r in range(size)])
    out = np.zeros_like(want)
    run(core, [op("a2a", m.OP_ALLTOALL, sends[rank], out, splits=splits(rank))])
    check("alltoall", out, want)

    # reducescatter of 2 * size + 1 rows: the lower ranks get the extra row
    rows = 2 * size + 1
    xs = per((rows, 4), "float32", 50)
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    lo = sum(counts[:rank])
    out = np.zeros((counts[rank], 4), "float32")
    run(core, [op("rs", m.OP_REDUCESCATTER, xs[rank], out)])
    check("reducescatter", out, sum(xs)[lo:lo + counts[rank]])

    run(core, [m.Op("barrier", m.OP_BARRIER, DT["float32"], [], 0, 0)])
    return len(checks)


@pytest.mark.parametrize("size", SIZES)
def test_every_collective_matches_numpy(size):
    assert run_ranks(size, collectives) == [19] * size


@pytest.mark.parametrize("size,per_host", [(1, 0), (4, 2), (5, 2), (6, 3), (8, 0)])
def test_topology_of_pretend_hosts(size, per_host):
    topos = run_ranks(size, lambda core, rank, size, job: core.topology(), ranks_per_host=per_host)
    h = per_host or size
    for rank, t in enumerate(topos):
        assert (t["rank"], t["size"], t["local_rank"], t["cross_rank"]) == (rank, size, rank % h, rank // h)
        assert t["local_size"] == sum(1 for r in range(size) if r // h == rank // h)
        assert t["cross_size"] == sum(1 for r in range(size) if r % h == rank % h)


def test_cached_rounds_skip_the_coordinator_and_a_new_shape_invalidates():
    """A repeated call is negotiated from the response cache: rounds with no
    gather at the coordinator. The same name with a new shape is negotiated
    in full again, and gives the right numbers."""
    counts = []
    together = threading.Barrier(3, timeout=HANG_S)  # a rank that failed breaks it: no hang

    def body(core, rank, size, job):
        def allreduce(n):
            x = np.full(n, rank + 1.0, "float32")
            run(core, [op("w", m.OP_ALLREDUCE, x, x)])
            np.testing.assert_allclose(x, np.full(n, size * (size + 1) / 2))

        def look():
            # The counters are the job's, and any rank's request starts a
            # round on all: no rank may submit the next call while rank 0
            # reads (a CI run saw rank 1's allreduce(12) counted among the
            # cached calls: full rounds 2 -> 3).
            together.wait()
            if rank == 0:
                counts.append(job.negotiation_counts())
            together.wait()

        allreduce(10)
        run(core, [m.Op("b1", m.OP_BARRIER, DT["float32"], [], 0, 0)])
        look()
        for _ in range(20):
            allreduce(10)
        look()
        allreduce(12)  # new shape: invalidated everywhere, negotiated in full
        run(core, [m.Op("b2", m.OP_BARRIER, DT["float32"], [], 0, 0)])
        look()
        for _ in range(5):
            allreduce(12)
        look()

    run_ranks(3, body)
    (r0, f0), (r1, f1), (r2, f2), (r3, f3) = counts
    assert r1 >= r0 + 20 and f1 == f0, f"20 cached calls: rounds {r0} -> {r1}, full rounds {f0} -> {f1}"
    assert f2 > f1, f"a new shape must be negotiated in full: full rounds {f1} -> {f2}"
    assert f3 == f2, f"the new shape is cached again: full rounds {f2} -> {f3}"


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("threshold", [64 << 20, 1 << 20])
def test_one_round_is_fused_across_priorities(size, threshold, monkeypatch):
    """Fifty small allreduces and fifty direct ones (above the 256 KB direct
    threshold), each with a priority of its own (as DistributedOptimizer and
    kvstore='mxplugin' give every gradient), submitted together: the small
    ones are one fused call and the direct ones one batched call per fusion
    threshold's worth, not a call per priority (Note [Fusion across
    priorities]). Each result is still its own sum, scaled by its own factor."""
    monkeypatch.setenv("MXPLUGIN_FUSION_THRESHOLD", str(threshold))
    monkeypatch.setenv("MXPLUGIN_DIRECT_THRESHOLD", str(256 << 10))
    n, big_elems = 50, 70_000  # 280,000 bytes, a multiple of the 64-byte fusion alignment
    calls = []

    def body(core, rank, size, job):
        small = [data((3 + k,), rank, "float32", k) for k in range(n)]
        big = [data((big_elems,), rank, "float32", 100 + k) for k in range(n)]
        ops = []
        for k in range(n):  # interleaved, every priority distinct
            ops.append(op(f"small.{k}", m.OP_ALLREDUCE, small[k], small[k], m.REDUCE_AVERAGE, priority=-2 * k))
            ops.append(op(f"big.{k}", m.OP_ALLREDUCE, big[k], big[k], post=k % 3 + 1.0, priority=-2 * k - 1))
        run(core, [m.Op("before", m.OP_BARRIER, DT["float32"], [], 0, 0)])
        before = job.reduction_calls()  # counted by rank 0, which reads it after its own calls
        run(core, ops)
        if rank == 0:
            calls.append(job.reduction_calls() - before)
        for k in range(n):
            want_small = sum(data((3 + k,), r, "float32", k).astype("float64") for r in range(size)) / size
            want_big = sum(data((big_elems,), r, "float32", 100 + k).astype("float64") for r in range(size))
            np.testing.assert_allclose(small[k], want_small, rtol=1e-5, atol=1e-5, err_msg=f"small.{k}")
            np.testing.assert_allclose(big[k], want_big * (k % 3 + 1), rtol=1e-5, atol=1e-4, err_msg=f"big.{k}")

    run_ranks(size, body)
    per_batch = threshold // (big_elems * 4)
    want = 1 + -(-n // per_batch)
    assert calls == [want], f"{2 * n} allreduces of distinct priorities took {calls} data-plane calls, want {want}"


MISMATCHES = {
    # kind: (what the odd rank does differently, the parts every rank's message must contain)
    "shape": ("shape", ["Mismatched shape", "'t'", "(4,)", "(5,)"]),
    "dtype": ("dtype", ["Mismatched dtype", "'t'", "float32", "float64"]),
    "operation": ("operation", ["'t'", "allreduce on", "broadcast on"]),
    "reduce op": ("reduce op", ["Mismatched reduce op", "Sum on", "Average on"]),
    "prescale": ("prescale", ["Mismatched prescale factor", "'t'"]),
    "root": ("root", ["Mismatched root rank", "'t'", "root 0", "root 1"]),
    "group size": ("group size", ["Mismatched group size", "2 tensor(s) in the call", "3 tensor(s) in the call"]),
    "allgather rows": ("allgather rows", ["Mismatched allgather", "'t'", "trailing dims (2,)", "trailing dims (3,)"]),
}


def mismatching(kind, odd):
    def body(core, rank, size, job):
        me = rank == odd
        x = np.ones(5 if (kind == "shape" and me) else 4, "float64" if (kind == "dtype" and me) else "float32")
        out = np.zeros_like(x)
        if kind in ("shape", "dtype", "prescale"):
            ops = [op("t", m.OP_ALLREDUCE, x, out, pre=2.0 if (kind == "prescale" and me) else 1.0)]
        elif kind == "operation":
            ops = [op("t", m.OP_BROADCAST if me else m.OP_ALLREDUCE, x, out)]
        elif kind == "reduce op":
            ops = [op("t", m.OP_ALLREDUCE, x, out, m.REDUCE_AVERAGE if me else m.REDUCE_SUM)]
        elif kind == "root":
            ops = [op("t", m.OP_BROADCAST, x, out, root=1 if me else 0)]
        elif kind == "group size":
            xs = [np.ones(4, "float32") for _ in range(3 if me else 2)]
            ops = [op(f"t.{k}", m.OP_ALLREDUCE, a, a) for k, a in enumerate(xs)]
        else:  # allgather with another trailing dimension
            x = np.ones((2, 3 if me else 2), "float32")
            out = np.zeros((2 * size, x.shape[1]), "float32")
            ops = [op("t", m.OP_ALLGATHER, x, out)]
        t0 = time.monotonic()
        try:
            run(core, ops, group="t")
        except m.MismatchError as e:
            message, took = str(e), time.monotonic() - t0
        else:
            raise AssertionError(f"rank {rank}: no error for a mismatched {kind}")
        # the library keeps working
        y = np.full(3, rank + 1.0, "float32")
        run(core, [op("after", m.OP_ALLREDUCE, y, y)])
        np.testing.assert_allclose(y, np.full(3, size * (size + 1) / 2))
        return message, took
    return body


@pytest.mark.parametrize("kind", sorted(MISMATCHES))
def test_every_mismatch_fails_on_every_rank_naming_ranks(kind):
    size, odd = 3, 1
    others = [r for r in range(size) if r != odd]
    for rank, (message, took) in enumerate(run_ranks(size, mismatching(kind, odd))):
        for part in MISMATCHES[kind][1]:
            assert part in message, f"rank {rank}: {part!r} not in: {message}"
        assert ranks_text([odd]) in message and ranks_text(others) in message, f"rank {rank}: {message}"
        assert took < HANG_S, f"rank {rank}: the {kind} mismatch took {took:.1f} s"


def test_mismatch_at_eight_ranks_names_the_groups_of_ranks():
    message, _ = run_ranks(8, mismatching("shape", 5))[0]
    assert "(4,) on ranks 0, 1, 2, 3, 4, 6, 7" in message and "(5,) on rank 5" in message, message


def test_stalled_name_warns_then_fails(monkeypatch, capfd):
    """Rank 0 submits a name the others never do: a warning naming the
    missing ranks, then the op fails at the stall shutdown time."""
    monkeypatch.setenv("MXPLUGIN_STALL_CHECK_TIME_SECONDS", "1")
    monkeypatch.setenv("MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS", "3")

    def body(core, rank, size, job):
        if rank == 0:
            x = np.ones(3, "float32")
            t0 = time.monotonic()
            with pytest.raises(m.MXPluginError) as e:
                run(core, [op("lonely", m.OP_ALLREDUCE, x, x)])
            return str(e.value), time.monotonic() - t0
        time.sleep(4)
        return None

    message, took = run_ranks(3, body)[0]
    # not before the stall shutdown time (3 s), and the stall's own message
    assert "lonely" in message and 2.5 < took < HANG_S, (took, message)
    err = capfd.readouterr().err
    assert re.search(r"lonely.*ranks? 1, 2|ranks? 1, 2.*lonely", err, re.S), err[-2000:]


def test_a_rank_that_stops_mid_round_fails_every_other_rank(monkeypatch):
    """Rank 2 dies while the others wait for it in an allreduce: they fail
    within the peer timeout, saying they lost their peers."""
    monkeypatch.setenv("MXPLUGIN_PEER_TIMEOUT_SECONDS", "2")

    def body(core, rank, size, job):
        x = np.ones(4, "float32")
        run(core, [op("before", m.OP_ALLREDUCE, x, x)])
        if rank == 2:
            job.kill(2)
            return None
        t0 = time.monotonic()
        with pytest.raises(m.PeerFailureError) as e:
            run(core, [op("during", m.OP_ALLREDUCE, x, x)])
        took = time.monotonic() - t0
        # and later calls fail at once, for the same reason
        with pytest.raises(m.PeerFailureError):
            run(core, [op("later", m.OP_ALLREDUCE, x, x)])
        return str(e.value), took

    for rank, result in enumerate(run_ranks(4, body)):
        if rank == 2:
            continue
        message, took = result
        assert "lost contact with its peers" in message and took < HANG_S, (rank, took, message)


def test_shutdown_on_one_rank_fails_the_others_pending_ops():
    def body(core, rank, size, job):
        if rank == 1:
            core.shutdown()
            return None
        x = np.ones(4, "float32")
        with pytest.raises(m.PeerFailureError) as e:
            run(core, [op("pending", m.OP_ALLREDUCE, x, x)])
        return str(e.value)

    for rank, message in enumerate(run_ranks(3, body)):
        assert rank == 1 or "shut down" in message, message


def test_what_a_rank_pushes_in_the_batch_of_a_missed_fence_fails_with_it():
    """Note [Diverged pushes] (src/core/diverged_pushes.cc): rank 0 waits in a fence that
    ranks 1 and 2 went on without; their first call fails with it, and so
    does one they make afterwards in the same push batch (a trainer's step),
    at once, rather than stall waiting for rank 0. After the batch, calls
    work again."""
    fence = m.FENCE_PREFIX + "check.batch()"

    def body(core, rank, size, job):
        x = np.ones(4, "float32")
        if rank == 0:
            with pytest.raises(m.MismatchError, match="went on without it"):
                run(core, [m.Op(fence, m.OP_BARRIER, DT["float32"], [], 0, 0)])
        else:
            core.begin_push_batch()
            with pytest.raises(m.MismatchError, match="check.batch\\(\\) must be called by every rank"):
                run(core, [op("first", m.OP_ALLREDUCE, x, x)])
            start = time.monotonic()
            with pytest.raises(m.MismatchError, match="check.batch\\(\\) must be called by every rank"):
                run(core, [op("second", m.OP_ALLREDUCE, x, x)])
            assert time.monotonic() - start < HANG_S
            core.end_push_batch()
        run(core, [op("after", m.OP_ALLREDUCE, x, x)])
        return x.tolist()

    assert run_ranks(3, body) == [[3.0] * 4] * 3


def test_a_cached_call_of_a_rank_that_missed_a_fence_fails_with_it():
    """Note [Diverged pushes]: ranks 1 and 2 call 'first' and then 'x', which
    the response cache knows (a bit, not a request the coordinator sees),
    before rank 0 enters a fence. When the round that fails 'first' and the
    fence is the one the fence arrived in, it is not a full one and 'x' was
    never seen: it must fail with the fence too, not wait for rank 0 (a
    loaded run's PowerSGD P did). 'x' may also reach the loop a round later
    (it then fails by its stamp); without the unseen requests failing, this
    test hung in 2 runs of 2."""
    fence = m.FENCE_PREFIX + "check.cached()"
    submitted = threading.Semaphore(0)

    def body(core, rank, size, job):
        for _ in range(2):  # cached from the first call on
            x = np.ones(4, "float32")
            run(core, [op("x", m.OP_ALLREDUCE, x, x)])
        x, first = np.ones(4, "float32"), np.ones(4, "float32")
        if rank == 0:
            for _ in range(size - 1):
                submitted.acquire()
            with pytest.raises(m.MismatchError, match="went on without it"):
                run(core, [m.Op(fence, m.OP_BARRIER, DT["float32"], [], 0, 0)])
        else:
            handles = [core.enqueue([op("first", m.OP_ALLREDUCE, first, first)], 0),
                       core.enqueue([op("x", m.OP_ALLREDUCE, x, x)], 0)]
            submitted.release()
            for handle in handles:
                with pytest.raises(m.MismatchError, match="check.cached\\(\\) must be called by every rank"):
                    handle.wait()
        after = np.ones(4, "float32")
        run(core, [op("after", m.OP_ALLREDUCE, after, after)])
        return after.tolist()

    assert run_ranks(3, body) == [[3.0] * 4] * 3


def test_process_sets_run_beside_the_world():
    def body(core, rank, size, job):
        evens = core.add_process_set([0, 2, 4])
        odds = core.add_process_set([1, 3])
        mine = evens if rank % 2 == 0 else odds
        assert core.process_set_rank(mine) == rank // 2
        assert core.process_set_rank(odds if mine == evens else evens) == -1
        x = np.full(3, rank + 1.0, "float32")
        run(core, [op("in.set", m.OP_ALLREDUCE, x, x)], set_id=mine)
        members = [0, 2, 4] if mine == evens else [1, 3]
        np.testing.assert_allclose(x, np.full(3, sum(r + 1 for r in members)))
        # a broadcast whose root is a global rank of the set
        y = np.full(2, float(rank), "float32")
        run(core, [op("root", m.OP_BROADCAST, y, y, root=members[-1])], set_id=mine)
        np.testing.assert_allclose(y, np.full(2, float(members[-1])))
        # the world still works, and sets can be removed
        z = np.ones(2, "float32")
        run(core, [op("world", m.OP_ALLREDUCE, z, z)])
        np.testing.assert_allclose(z, np.full(2, 5.0))
        with pytest.raises(m.ArgumentError):
            core.add_process_set([0, 2, 4])  # exists already
        assert core.remove_process_set(odds) and core.remove_process_set(evens)
        return core.process_set_rank(0)

    assert run_ranks(5, body) == list(range(5))


def test_a_rank_outside_the_job_is_refused():
    job = m.MemoryJob(2)
    with pytest.raises(m.ArgumentError, match="not in an in-memory job of 2 ranks"):
        m.Core(job=job, rank=2)


def test_a_failing_rank_is_reported_not_hidden():
    """The harness itself: a rank whose body fails makes run_ranks fail."""
    def body(core, rank, size, job):
        assert rank != 1, "rank 1 fails on purpose"

    with pytest.raises(RankFailed, match="rank 1 fails on purpose"):
        run_ranks(2, body)


def test_alltoall_splits_whose_sum_wraps_to_the_rows_are_refused():
    """Checked where the op is queued: splits of int64 entries whose sum
    wraps around 2**64 to exactly the rows are refused, not taken."""
    def body(core, rank, size, job):
        x = np.zeros((6, 2), "float32")
        out = np.zeros((6, 2), "float32")
        bad = op("wraps", m.OP_ALLTOALL, x, out, splits=[2 ** 63 - 1, 2 ** 63 - 1, 8])
        with pytest.raises(m.ArgumentError, match="splits sum to more than the first dimension, 6"):
            run(core, [bad])

    run_ranks(3, body)
