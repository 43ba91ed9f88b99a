"""Process sets added after init(): membership queries, collectives on a
subset from members, ValueError for non-members, duplicates and removal.

At 1 rank only the trivial set exists: [0] is the global set itself."""
import sys

import common
from common import assert_close, hvd, mx, np, rank_data

rank, size = common.start()



def raises(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"rank {rank}: {getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e}, "
                             f"expected {exc.__name__}")
    raise AssertionError(f"rank {rank}: {getattr(fn, '__name__', fn)} did not raise {exc.__name__}")


# --- the global set ----------------------------------------------------------
gps = hvd.global_process_set
assert gps.process_set_id == 0
assert gps.ranks == list(range(size))
assert gps.size() == size and gps.rank() == rank and gps.included() is True
assert hvd.remove_process_set(gps) is False, "the global set cannot be removed"
assert gps.process_set_id == 0 and gps.size() == size

x = mx.nd.array(rank_data((4,), rank))
assert_close(hvd.allreduce(x, op=hvd.Sum, process_set=gps), sum(rank_data((4,), r) for r in range(size)),
             rtol=1e-5, atol=1e-5, what="allreduce on global_process_set")
hvd.barrier(process_set=gps)

# an unregistered set: queries give None, ops refuse it
loose = hvd.ProcessSet([0])
assert loose.process_set_id is None and loose.size() is None and loose.rank() is None
assert loose.included() is (rank == 0)
raises(ValueError, hvd.allreduce, x, process_set=loose)
raises(ValueError, hvd.allgather, x, process_set=loose)
raises(ValueError, hvd.broadcast, x, 0, process_set=loose)
raises(ValueError, hvd.alltoall, mx.nd.ones((1,)), process_set=loose)
raises(ValueError, hvd.reducescatter, x, process_set=loose)
raises(ValueError, hvd.barrier, process_set=loose)
raises(TypeError, hvd.allreduce, x, process_set=[0])
assert hvd.remove_process_set(loose) is False, "removing an unregistered set returns False"

# invalid rank lists are refused locally, on every rank
raises(ValueError, hvd.add_process_set, [0, size])
raises(ValueError, hvd.add_process_set, [-1])
raises(ValueError, hvd.add_process_set, [0, 0])
raises(ValueError, hvd.ProcessSet, "ab")
raises(ValueError, hvd.ProcessSet, [0.5])
text = str(raises(ValueError, hvd.ProcessSet, 3))
assert "list of integer ranks, got 3 (int)" in text and "MPI" not in text, text
raises(TypeError, hvd.remove_process_set, [0])  # the ranks, not the set

# a set with the global set's ranks is a duplicate of it: ValueError everywhere
raises(ValueError, hvd.add_process_set, list(range(size)))
raises(ValueError, hvd.add_process_set, hvd.ProcessSet(list(reversed(range(size)))))

if size == 1:
    # the only possible set is the global one; adding [0] is a duplicate
    raises(ValueError, hvd.add_process_set, [0])
    raises(ValueError, hvd.add_process_set, hvd.ProcessSet([0]))
    common.finish()
    sys.exit(0)

# --- a proper subset ------------------------------------------------------------
members = [0, size - 1] if size > 2 else [1]
ps = hvd.add_process_set(hvd.ProcessSet(members))
assert ps.process_set_id is not None and ps.process_set_id > 0
assert ps.ranks == members
member = rank in members
assert ps.included() is member
assert ps.size() == len(members)
if member:
    assert ps.rank() == members.index(rank)
else:
    raises(ValueError, ps.rank)

# a second set, added by the ranks list (returns a ProcessSet)
others = [r for r in range(size) if r not in members] + ([members[-1]] if size > 2 else [])
ps2 = hvd.add_process_set(others)
assert isinstance(ps2, hvd.ProcessSet) and ps2.process_set_id not in (None, 0, ps.process_set_id)
assert ps2.ranks == sorted(others)

# duplicates of an existing subset: ValueError on every rank, in any order
raises(ValueError, hvd.add_process_set, list(reversed(members)))
raises(ValueError, hvd.add_process_set, hvd.ProcessSet(members))
raises(ValueError, hvd.add_process_set, ps)  # already registered

# Unnamed collectives are named from per-process counters (as in Horovod), so
# once ranks have issued different numbers of them (here: only members use
# `ps`) the automatic names no longer pair up; name everything from here on.
n = len(members)
data = {r: rank_data((2 * n + 1, 3), r, seed=7) for r in range(size)}
if member:
    me = ps.rank()
    # allreduce: Sum, Average divides by the set's size, in place, scaled
    exp_sum = sum(data[r].astype("float64") for r in members)
    assert_close(hvd.allreduce(mx.nd.array(data[rank]), op=hvd.Sum, process_set=ps, name="ps.sum"), exp_sum, rtol=1e-5,
                 atol=1e-5, what="Sum on the subset")
    assert_close(hvd.allreduce(mx.nd.array(data[rank]), process_set=ps, name="ps.avg"), exp_sum / n, rtol=1e-5, atol=1e-5,
                 what="Average on the subset")
    y = mx.nd.array(data[rank])
    hvd.allreduce_(y, op=hvd.Average, process_set=ps, prescale_factor=2.0, postscale_factor=0.5,
                   name="ps.scaled")
    assert_close(y, exp_sum / n, rtol=1e-5, atol=1e-5, what="scaled in-place Average on the subset")
    outs = hvd.grouped_allreduce([mx.nd.array(data[rank]), mx.nd.array(data[rank][:1], dtype="float64")],
                                 op=hvd.Max, process_set=ps, name="ps.grouped")
    exp_max = np.max([data[r] for r in members], axis=0)
    assert_close(outs[0], exp_max, what="grouped Max on the subset")
    assert_close(outs[1], exp_max[:1], what="grouped Max on the subset (float64)")
    # allgather: each member contributes rank+1 rows
    ag = hvd.allgather(mx.nd.array(data[rank][: rank + 1]), process_set=ps, name="ps.ag")
    assert_close(ag, np.concatenate([data[r][: r + 1] for r in members]), what="allgather on the subset")
    # broadcast: root_rank is a global rank
    for root in members:
        assert_close(hvd.broadcast(mx.nd.array(data[rank]), root_rank=root, process_set=ps, name=f"ps.bc.{root}"), data[root],
                     what=f"broadcast from global rank {root} on the subset")
        z = mx.nd.array(data[rank])
        hvd.broadcast_(z, root_rank=root, process_set=ps, name=f"ps.bc_.{root}")
        assert_close(z, data[root], what=f"broadcast_ from global rank {root} on the subset")
    # a root outside the set is refused
    outsider = next(r for r in range(size) if r not in members)
    raises(ValueError, hvd.broadcast, mx.nd.array(data[rank]), outsider, process_set=ps)
    # alltoall with splits over the set's ranks
    splits = [i + 1 for i in range(n)]
    t = np.arange(sum(splits) * 2, dtype="float32").reshape(-1, 2) + 100 * rank
    out, received = hvd.alltoall(mx.nd.array(t), splits=splits, process_set=ps, name="ps.a2a")
    expected = []
    for r in members:
        tr = np.arange(sum(splits) * 2, dtype="float32").reshape(-1, 2) + 100 * r
        off = sum(splits[:me])
        expected.append(tr[off:off + splits[me]])
    assert_close(out, np.concatenate(expected), what="alltoall on the subset")
    np.testing.assert_array_equal(received.asnumpy(), [splits[me]] * n)
    # reducescatter: rows split over the set's members, lower ranks get the extra row
    rs = hvd.reducescatter(mx.nd.array(data[rank]), op=hvd.Sum, process_set=ps, name="ps.rs")
    total = 2 * n + 1
    rows = [total // n + (1 if i < total % n else 0) for i in range(n)]
    start = sum(rows[:me])
    assert_close(rs, exp_sum[start:start + rows[me]], rtol=1e-5, atol=1e-5, what="reducescatter on the subset")
    rsa = hvd.reducescatter(mx.nd.array(data[rank]), op=hvd.Average, process_set=ps, name="ps.rsa")
    assert_close(rsa, exp_sum[start:start + rows[me]] / n, rtol=1e-5, atol=1e-5, what="reducescatter Average")
    hvd.barrier(process_set=ps)
else:
    # non-members are told, before anything is enqueued
    raises(ValueError, hvd.allreduce, mx.nd.array(data[rank]), process_set=ps)
    raises(ValueError, hvd.allreduce_, mx.nd.array(data[rank]), process_set=ps)
    raises(ValueError, hvd.grouped_allreduce, [mx.nd.array(data[rank])], process_set=ps)
    raises(ValueError, hvd.allgather, mx.nd.array(data[rank]), process_set=ps)
    raises(ValueError, hvd.broadcast, mx.nd.array(data[rank]), members[0], process_set=ps)
    raises(ValueError, hvd.broadcast_, mx.nd.array(data[rank]), members[0], process_set=ps)
    raises(ValueError, hvd.alltoall, mx.nd.ones((n,)), process_set=ps)
    raises(ValueError, hvd.reducescatter, mx.nd.array(data[rank]), process_set=ps)
    raises(ValueError, hvd.barrier, process_set=ps)

# the second set works at the same time (ranks outside `members` use it)
if rank in ps2.ranks:
    exp2 = sum(data[r].astype("float64") for r in ps2.ranks)
    assert_close(hvd.allreduce(mx.nd.array(data[rank]), op=hvd.Sum, process_set=ps2, name="ps2.sum"), exp2, rtol=1e-5, atol=1e-5,
                 what="Sum on the second set")
# and the global set too
assert_close(hvd.allreduce(mx.nd.array(data[rank]), op=hvd.Sum, name="global.sum"),
             sum(data[r].astype("float64") for r in range(size)), rtol=1e-5, atol=1e-5,
             what="Sum on the global set")

# --- removal --------------------------------------------------------------------
old_id = ps.process_set_id
assert hvd.remove_process_set(ps) is True
assert ps.process_set_id is None and ps.size() is None
assert hvd.remove_process_set(ps) is False, "a second removal returns False"
raises(ValueError, hvd.allreduce, mx.nd.array(data[rank]), process_set=ps)
# the core no longer knows the old id either
assert hvd.basics._core().remove_process_set(old_id) is False
# the same ranks can be registered again once removed
again = hvd.add_process_set(members)
assert again.process_set_id is not None and again.process_set_id != 0
if rank in members:
    assert_close(hvd.allreduce(mx.nd.array(data[rank]), op=hvd.Sum, process_set=again, name="again.sum"),
                 sum(data[r].astype("float64") for r in members), rtol=1e-5, atol=1e-5, what="Sum on re-added set")
assert hvd.remove_process_set(again) is True
assert hvd.remove_process_set(ps2) is True
assert hvd.remove_process_set(ps2) is False

common.finish()
