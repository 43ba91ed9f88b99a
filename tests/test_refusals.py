"""What the fuzz (tests/test_fuzz.py, issue 38) found, kept as checks: a
call refused on one rank fails every rank's (Note [Refused calls] in
src/core/message_table.cc); a conflict under one name waits until every
rank has submitted something under it; the size exchanges of different
calls under one name conflict; control calls that differ are named. The
core's part runs on in-memory ranks (tier 0); the Python API's part runs
under mpiexec (tests/spmd/check_refusals.py)."""
import time

import numpy as np
import pytest

from in_process import m, op, run, run_ranks
from mpi_harness import HANG_S, assert_spmd_ok


def refusal(group):
    """What the Python API submits in place of a call it raised for (mxplugin.calls.refuse)."""
    return m.Op("mxplugin.refused:" + group, m.OP_REFUSAL, m.DTYPES["float32"], [], 0, 0)


def works_after(core, rank, size):
    y = np.full(3, rank + 1.0, "float32")
    run(core, [op("after", m.OP_ALLREDUCE, y, y)])
    np.testing.assert_allclose(y, np.full(3, size * (size + 1) / 2))


@pytest.mark.parametrize("cached", [False, True])
def test_a_refusal_fails_the_other_ranks_call(cached):
    """Rank 1 refuses the call named 'x' (fresh, or after the others'
    allreduce under that name was cached): every other rank's call fails,
    naming the call and rank 1, instead of waiting for it."""
    def body(core, rank, size, job):
        x = np.ones(4, "float32")
        for _ in range(3 if cached else 0):
            run(core, [op("allreduce.x", m.OP_ALLREDUCE, x, x)], group="x")
        t0 = time.monotonic()
        if rank == 1:
            core.enqueue([refusal("x")], 0, group="x")
            message = ""
        else:
            with pytest.raises(m.MismatchError) as e:
                run(core, [op("allreduce.x", m.OP_ALLREDUCE, x, x)], group="x")
            message = str(e.value)
        took = time.monotonic() - t0
        works_after(core, rank, size)
        return message, took

    for rank, (message, took) in enumerate(run_ranks(3, body)):
        if rank != 1:
            for part in ("The call named 'x' raised an error on rank 1", "allreduce on ranks 0, 2 fails with it"):
                assert part in message, f"rank {rank}: {part!r} not in: {message}"
            assert took < HANG_S, (rank, took)


def test_refusals_on_every_rank_complete_and_leave_nothing_behind():
    def body(core, rank, size, job):
        core.enqueue([refusal("y")], 0, group="y").wait()
        x = np.full(2, rank + 1.0, "float32")
        run(core, [op("allreduce.y", m.OP_ALLREDUCE, x, x)], group="y")  # the next call under the name works
        np.testing.assert_allclose(x, np.full(2, size * (size + 1) / 2))

    run_ranks(3, body)


def test_a_conflict_waits_for_every_rank(monkeypatch):
    """Ranks 0 and 1 submit different collectives under 'k' while rank 2 is
    late (past the grace): the conflict waits for rank 2, whose call then
    fails with the others'. Failed before it came, rank 2's call waited for
    the others forever."""
    monkeypatch.setenv("MXPLUGIN_MISMATCH_GRACE_SECONDS", "0.2")

    def body(core, rank, size, job):
        x = np.ones(4, "float32")
        if rank == 2:
            time.sleep(1.0)
        kind = m.OP_BROADCAST if rank == 1 else m.OP_ALLREDUCE
        with pytest.raises(m.MismatchError) as e:
            run(core, [op(("broadcast.k" if rank == 1 else "allreduce.k"), kind, x, x)], group="k")
        works_after(core, rank, size)
        return str(e.value)

    for rank, message in enumerate(run_ranks(3, body)):
        assert "Mismatched collectives under the name 'k': allreduce on ranks 0, 2; broadcast on rank 1" in message, (
            rank, message)


def test_size_exchanges_of_different_calls_under_one_name_conflict(monkeypatch):
    """allgather's and alltoall's first steps are both an allgather of sizes:
    ranks calling one and the other under one name differ by the names."""
    monkeypatch.setenv("MXPLUGIN_MISMATCH_GRACE_SECONDS", "0.2")

    def body(core, rank, size, job):
        mine = np.full(2, rank, "int64")
        out = np.zeros(2 * size, "int64")
        name = "alltoall.n.splits" if rank == 1 else "allgather.n.sizes"
        with pytest.raises(m.MismatchError) as e:
            run(core, [op(name, m.OP_ALLGATHER, mine, out)], group="n")
        works_after(core, rank, size)
        return str(e.value)

    for message in run_ranks(3, body):
        assert ("allgather 'allgather.n.sizes' on ranks 0, 2; allgather 'alltoall.n.splits' on rank 1" in message
                ), message


@pytest.mark.parametrize("what", ["ranks", "add and remove"])
def test_control_calls_that_differ_are_named(what):
    """Ranks that add different process sets, or add on some ranks and
    remove on others, fail on every rank with the calls and their arguments
    (they stalled, or were called a shape)."""
    def body(core, rank, size, job):
        extra = core.add_process_set([0, 1])
        with pytest.raises(m.MismatchError) as e:
            if what == "ranks":
                core.add_process_set([1, 2] if rank == 1 else [0, 2])
            elif rank == 1:
                core.remove_process_set(extra)
            else:
                core.add_process_set([0, 2])
        works_after(core, rank, size)
        assert core.remove_process_set(extra)  # nothing was added or removed
        return str(e.value)

    other = "add_process_set(ranks [1, 2])" if what == "ranks" else "remove_process_set(id 1)"
    for message in run_ranks(3, body):
        assert "Mismatched control calls" in message and "add_process_set(ranks [0, 2]) on ranks 0, 2" in message \
            and f"{other} on rank 1" in message, message


@pytest.mark.parametrize("np_", [2, 3])
def test_the_python_api_refuses_on_every_rank(np_):
    """One rank's bad argument, for every collective; auto names per process
    set; argument checks the fuzz found missing (tests/spmd/check_refusals.py)."""
    assert_spmd_ok("check_refusals.py", np_, env={"MXPLUGIN_MISMATCH_GRACE_SECONDS": 0.5},
                   timeout=HANG_S)
