"""N ranks of the real core as N threads of this process (the in-memory
world, src/backend/memory): each rank's Core is made and driven from its own
thread, as each process would under mpiexec. Used by test_in_process.py."""
import threading
import time
import traceback

import numpy as np

from mxplugin._loader import core_module as m

DT = m.DTYPES


class RankFailed(AssertionError):
    pass


def run_ranks(size, body, ranks_per_host=0, timeout=60, job=None, keep_cores=False):
    """Runs body(core, rank, size, job) on every rank at once; returns the
    results by rank. Raises RankFailed with every failing rank's traceback.
    The cores are shut down afterwards (all ranks together)."""
    job = job or m.MemoryJob(size, ranks_per_host)
    results, errors, cores = [None] * size, {}, [None] * size

    def one(rank):
        try:
            cores[rank] = m.Core(job=job, rank=rank)
            results[rank] = body(cores[rank], rank, size, job)
        except BaseException:  # noqa: B036 (reported below, per rank)
            errors[rank] = traceback.format_exc()

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if not keep_cores:
        shutdown(cores)
    if stuck:
        raise RankFailed(f"ranks {stuck} did not finish within {timeout} s")
    if errors:
        raise RankFailed("\n".join(f"--- rank {r}:\n{errors[r]}" for r in sorted(errors)))
    return results


def shutdown(cores):
    threads = [threading.Thread(target=c.shutdown, daemon=True) for c in cores if c is not None]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def op(name, op_type, inp, out, reduce_op=m.REDUCE_SUM, root=0, pre=1.0, post=1.0, splits=None, out_shape=None,
       priority=0):
    return m.Op(name, op_type, DT[inp.dtype.name], list(inp.shape), inp.ctypes.data, out.ctypes.data,
                out_shape=list(out.shape if out_shape is None else out_shape), reduce_op=reduce_op, root_rank=root,
                prescale=pre, postscale=post, splits=splits, priority=priority)


def run(core, ops, set_id=0, group=None):
    core.enqueue(ops, set_id, group=group).wait()


def data(shape, rank, dtype, seed=0):
    rng = np.random.RandomState(seed * 1000 + rank)
    if dtype.startswith("float"):
        return (rng.uniform(-1, 1, size=shape) * 4).astype(dtype)
    return rng.randint(-100, 100, size=shape).astype(dtype)
