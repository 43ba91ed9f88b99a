"""What the fuzz found in the Python API (issue 38), one check each: a bad
argument on one rank fails every rank's call (the others naming the call
and the rank) instead of leaving them waiting; auto names stay in step
when calls run on a process set or on a set that is not registered; the
argument checks that were missing or unclear. The library keeps working
after each. Rank 1 is the odd one out."""
import threading

from common import finish, hvd, mx, np, say, start

from mxnet.base import MXNetError

from mxplugin.errors import ArgumentError

r, n = start()
ODD = 1


def raises(call, parts, what, types=(MXNetError, hvd.MXPluginError, ValueError, TypeError)):
    """call() (and reading what it returns) raises one of `types`, its message holding every part."""
    try:
        out = call()
        for a in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(a, mx.nd.NDArray):
                a.wait_to_read()
    except types as e:
        for part in parts:
            assert part in str(e), f"rank {r}: {what}: expected {part!r} in: {e}"
        return
    raise AssertionError(f"rank {r}: {what}: nothing raised")


def works(tag):
    out = hvd.allreduce(mx.nd.ones((3,)) * (r + 1), op=hvd.Sum)  # auto-named: the names are in step
    np.testing.assert_allclose(out.asnumpy(), np.full(3, n * (n + 1) / 2), err_msg=f"rank {r}: after {tag}")


def one_rank_off(name, good, bad, own_parts):
    """good() on every rank but ODD, bad() there: every rank raises, ODD
    with its own error, the others naming the call and ODD."""
    if r == ODD:
        raises(bad, own_parts, f"{name}: the odd rank's own error")
    else:
        raises(good, [f"'{name}'", f"raised an error on rank {ODD}"], f"{name}: the other ranks")
    works(name)


x = mx.nd.ones((2 * n, 3))
one_rank_off("ar", lambda: hvd.allreduce(x, name="ar"), lambda: hvd.allreduce(x, name="ar", op=7), ["reduce op 7"])
one_rank_off("bc", lambda: hvd.broadcast(x, 0, name="bc"), lambda: hvd.broadcast(x, n, name="bc"), ["root_rank"])
one_rank_off("ag", lambda: hvd.allgather(x, name="ag"), lambda: hvd.allgather(x.asnumpy(), name="ag"), ["NDArray"])
one_rank_off("a2a", lambda: hvd.alltoall(x, splits=[2] * n, name="a2a"),
             lambda: hvd.alltoall(x, splits=[2.0] * n, name="a2a"), ["splits"])
one_rank_off("rs", lambda: hvd.reducescatter(x, name="rs"), lambda: hvd.reducescatter(x, op=hvd.Min, name="rs"),
             ["reducescatter supports Average and Sum"])
one_rank_off("grp", lambda: hvd.grouped_allreduce([x, x], name="grp"),
             lambda: hvd.grouped_allreduce([x, None], name="grp"), ["tensor 1"])
# What the one-call host path declines meets the sizes-first path's checks: the odd rank's error names the
# tensor, before any exchange of sizes (a later tensor of a group included), and refuses the call elsewhere.
one_rank_off("agd", lambda: hvd.grouped_allgather([x, x], name="agd"),
             lambda: hvd.grouped_allgather([x, x.astype("bool")], name="agd"), ["tensor 1: dtype bool"])
# (splits whose int64 sum wraps around to the rows, where there are 3 ranks or more)
huge = [2 ** 63 - 1, 2 ** 63 - 1, 2 * n + 2] + [0] * (n - 3) if n >= 3 else [2 ** 62, 2 ** 62]
one_rank_off("a2s", lambda: hvd.alltoall(x, splits=[2] * n, name="a2s"),
             lambda: hvd.alltoall(x, splits=huge, name="a2s"), ["must be non-negative and sum to the first dimension"])
one_rank_off("pri", lambda: hvd.allreduce(x, name="pri"), lambda: hvd.allreduce(x, name="pri", priority=2 ** 40),
             ["priority"])
# ... named calls of the plain path (Note [Plain calls]), refused by the odd rank's push or by its checks
flags = x.astype("bool")
one_rank_off("par", lambda: hvd.allreduce_(x.copy(), name="par"), lambda: hvd.allreduce_(flags, name="par"),
             ["dtype bool"])
one_rank_off("pbc", lambda: hvd.broadcast_(x.copy(), 0, name="pbc"), lambda: hvd.broadcast_(flags, 0, name="pbc"),
             ["dtype bool"])
one_rank_off("prs", lambda: hvd.reducescatter(x, op=hvd.Sum, name="prs"),
             lambda: hvd.reducescatter(flags, op=hvd.Sum, name="prs"), ["dtype bool"])
one_rank_off("pbr", lambda: hvd.broadcast_(x.copy(), 0, name="pbr"), lambda: hvd.broadcast_(x.copy(), n, name="pbr"),
             ["root_rank"])
# ... an auto-named call (the auto names advance alike whatever the arguments)
if r == ODD:
    raises(lambda: hvd.allreduce(x, prescale_factor="2"), ["prescale_factor"], "auto-named: the odd rank")
else:
    raises(lambda: hvd.allreduce(x), ["allreduce.noname", f"rank {ODD}"], "auto-named: the other ranks")
works("auto-named")
# ... a call cached on every rank before
for _ in range(3):
    hvd.allreduce(x, name="cached").wait_to_read()
one_rank_off("cached", lambda: hvd.allreduce(x, name="cached"),
             lambda: hvd.allreduce(x, name="cached", postscale_factor=None), ["postscale_factor"])
# ... objects: the root's that cannot be pickled, one rank's in an allgather_object
raises(lambda: hvd.broadcast_object(threading.Lock() if r == 0 else None, root_rank=0, name="obj"),
       ["lock"] if r == 0 else ["'obj.sz'", "raised an error on rank 0"], "broadcast_object")
works("broadcast_object")
raises(lambda: hvd.allgather_object(threading.Lock() if r == ODD else r, name="objs"),
       ["lock"] if r == ODD else ["'objs.sz'", f"raised an error on rank {ODD}"], "allgather_object")
works("allgather_object")

# -- allgather on some ranks, alltoall on the odd one, under one name: each rank's one round meets the other kind
raises(lambda: hvd.alltoall(x, name="both") if r == ODD else hvd.allgather(x, name="both"),
       ["Mismatched collectives under the name 'both'", f"alltoall on rank {ODD}"], "allgather against alltoall")
works("allgather against alltoall")

# -- a sparse array in an allgather: named as such, not as a mismatch of its shape
sparse = mx.nd.sparse.zeros("row_sparse", (2, 3))
raises(lambda: hvd.allgather(sparse if r == ODD else x, name="sparse"),
       ["sparse"] if r == ODD else ["'sparse'", f"rank {ODD}"], "sparse allgather")
works("sparse")

# -- auto names count per process set: calls on a set leave the global set's names in step
last = hvd.add_process_set([n - 1])
if r == n - 1:
    hvd.allreduce(x, process_set=last).wait_to_read()
    hvd.broadcast(x, n - 1, process_set=last).wait_to_read()
works("calls on a set of one rank")
if r == ODD:  # a set nobody registered: an error, and no auto name used up
    raises(lambda: hvd.allreduce(x, process_set=hvd.ProcessSet([ODD])), ["not registered"], "unregistered set")
works("a call on an unregistered set")

# -- process sets added with different ranks: the calls, with their ranks, named
mine = [0] if r == ODD else [n - 1] if n > 2 else [1]
theirs = [n - 1] if n > 2 else [1]
raises(lambda: hvd.add_process_set(mine), ["Mismatched control calls", f"add_process_set(ranks {theirs})",
                                           f"add_process_set(ranks [0]) on rank {ODD}"], "add_process_set")
works("add_process_set")

# -- argument checks that were missing or unclear
raises(lambda: hvd.allreduce(x, priority="high"), ["priority must be an int"], "priority 'high'", (TypeError,))
raises(lambda: hvd.allreduce(x, priority=1.5), ["priority must be an int"], "priority 1.5", (TypeError,))
raises(lambda: hvd.allreduce(x, priority=2 ** 40), ["priority", "out of range"], "priority 2**40", (ArgumentError,))
raises(lambda: hvd.broadcast_object(1, name=12), ["name must be a str"], "broadcast_object name", (TypeError,))
raises(lambda: hvd.grouped_allreduce([], priority="high"), ["priority"], "an empty grouped call", (TypeError,))
raises(lambda: hvd.grouped_allreduce(x), ["list of NDArrays"], "one NDArray as a group", (TypeError,))
if r != n - 1:
    raises(lambda: hvd.grouped_allreduce([], process_set=last), ["not a member"], "an empty call on another set")
works("argument checks")

# -- a generator of tensors is a group (it read as no tensors)
outs = hvd.grouped_allreduce((a for a in [x, x * 2]), op=hvd.Sum, name="gen")
assert len(outs) == 2, f"rank {r}: {len(outs)} outputs of a generator of 2 tensors"
np.testing.assert_allclose(outs[1].asnumpy(), np.full((2 * n, 3), 2.0 * n), err_msg=f"rank {r}: generator")

hvd.remove_process_set(last)
say(f"rank {r}: all refusal checks passed")
finish()
