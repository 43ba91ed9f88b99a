"""The horovod.mxnet-compatible collectives, checked against NumPy on 1, 2
and 3 ranks (tests/spmd/check_ops.py, tests/spmd/check_process_sets.py), and
the errors raised before init()."""
import subprocess
import sys
import textwrap

import pytest

from mpi_harness import REPO, assert_spmd_ok, rank_env


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_ops(np_):
    """Every collective, dtype and reduce op, and float16 values ~60000 per
    rank: Sum with prescale_factor=1/size, and Average, give the finite mean
    instead of overflowing to inf. Ranks share this host, so allreduces take
    the shared-memory path. (One launch per size: each rank process's start
    costs seconds of CPU, MXNet's import.)"""
    out, _ = assert_spmd_ok("check_ops.py", np_, timeout=400)
    assert "-- float16 near its maximum" in out, out[-3000:]


@pytest.mark.parametrize("np_", [2, 3])
def test_ops_with_flat_mpi_allreduce(np_):
    """The same with MXPLUGIN_HIERARCHICAL_ALLREDUCE=0: allreduces go to MPI."""
    out, err = assert_spmd_ok("check_ops.py", np_, args=["--skip=fp16"], timeout=400,
                              env={"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0", "MXPLUGIN_LOG_LEVEL": "debug"})
    assert "flat MPI allreduce (MXPLUGIN_HIERARCHICAL_ALLREDUCE=0)" in err, err[-3000:]


def test_ranks_that_disagree_on_hierarchical_allreduce_agree_on_flat():
    """MPMD: rank 0 turns the shared-memory allreduce off, rank 1 leaves it
    on; both take the flat path (the set-up agrees first) instead of making
    different MPI calls."""
    import os
    import subprocess
    import sys

    from mpi_harness import SPMD_DIR, mpiexec_path

    script = os.path.join(SPMD_DIR, "check_topology.py")
    cmd = [mpiexec_path(), "-n", "1", "-env", "MXPLUGIN_HIERARCHICAL_ALLREDUCE", "0", sys.executable, script, "2",
           ":", "-n", "1", sys.executable, script, "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=rank_env({"MXPLUGIN_LOG_LEVEL": "debug"}))
    assert out.returncode == 0 and "PASS 0" in out.stdout and "PASS 1" in out.stdout, out.stdout + out.stderr
    assert out.stderr.count("flat MPI allreduce (MXPLUGIN_HIERARCHICAL_ALLREDUCE=0)") == 2, out.stderr[-3000:]


@pytest.mark.parametrize("np_,hierarchical", [(2, "1"), (3, "1"), (2, "0")])
def test_allreduce_at_slice_and_piece_boundaries(np_, hierarchical):
    """Sizes below, at and across the shared-memory path's slices and 4 MiB
    pieces, every dtype and op; and the same through flat MPI."""
    assert_spmd_ok("check_hierarchical.py", np_, timeout=300, env={"MXPLUGIN_HIERARCHICAL_ALLREDUCE": hierarchical})


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_process_sets(np_):
    assert_spmd_ok("check_process_sets.py", np_, timeout=300)


BEFORE_INIT = textwrap.dedent("""
    import sys

    import mxnet as mx
    import mxplugin as hvd

    assert issubclass(hvd.NotInitializedError, ValueError)
    assert not hvd.is_initialized()
    x = mx.nd.ones((4, 2))
    calls = {
        "rank": lambda: hvd.rank(),
        "size": lambda: hvd.size(),
        "local_rank": lambda: hvd.local_rank(),
        "allreduce": lambda: hvd.allreduce(x),
        "allreduce_": lambda: hvd.allreduce_(x, op=hvd.Sum),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([x]),
        "grouped_allreduce_": lambda: hvd.grouped_allreduce_([x]),
        "allgather": lambda: hvd.allgather(x),
        "grouped_allgather": lambda: hvd.grouped_allgather([x]),
        "broadcast": lambda: hvd.broadcast(x, 0),
        "broadcast_": lambda: hvd.broadcast_(x, 0),
        "alltoall": lambda: hvd.alltoall(x),
        "alltoall_splits": lambda: hvd.alltoall(x, splits=[4]),
        "reducescatter": lambda: hvd.reducescatter(x),
        "grouped_reducescatter": lambda: hvd.grouped_reducescatter([x]),
        "barrier": lambda: hvd.barrier(),
        "broadcast_object": lambda: hvd.broadcast_object({"a": 1}),
        "allgather_object": lambda: hvd.allgather_object(1),
        "broadcast_parameters": lambda: hvd.broadcast_parameters({"x": x}),
        "add_process_set": lambda: hvd.add_process_set([0]),
        "process_set_rank": lambda: hvd.global_process_set.rank(),
        "process_set_size": lambda: hvd.global_process_set.size(),
        "start_timeline": lambda: hvd.start_timeline("/tmp/never.json"),
    }
    only = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else None
    skip = sys.argv[2].split(",") if len(sys.argv) > 2 else []
    selected = {k: v for k, v in calls.items() if (only is None or k in only) and k not in skip}
    assert selected
    bad = []
    for what, call in selected.items():
        try:
            call()
            bad.append(f"{what}: no error")
        except hvd.NotInitializedError as e:
            if "init" not in str(e):
                bad.append(f"{what}: unclear message {e!r}")
        except Exception as e:
            bad.append(f"{what}: {type(e).__name__}: {e}")
    assert not bad, "\\n".join(bad)
    # init() works afterwards (a single process needs no mpiexec)
    hvd.init()
    assert hvd.size() == 1 and hvd.rank() == 0
    assert hvd.allreduce(mx.nd.ones((3,)) * 2, op=hvd.Sum).asnumpy().tolist() == [2.0, 2.0, 2.0]
    hvd.shutdown()
    print("OK")
""")


def run_before_init(only="", skip=""):
    proc = subprocess.run([sys.executable, "-c", BEFORE_INIT, only, skip], capture_output=True, text=True,
                          cwd=REPO, env=rank_env(), timeout=180)
    assert proc.returncode == 0 and "OK" in proc.stdout, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_ops_before_init_raise_not_initialized():
    """Every API call before init() raises NotInitializedError (a ValueError)
    telling to call init(); init() then works in a single process."""
    run_before_init(skip="alltoall,alltoall_splits")


def test_alltoall_before_init_raises_not_initialized():
    run_before_init(only="alltoall,alltoall_splits")
