"""Failure behaviour: mismatched collectives, stalls, dead ranks, shutdown with
ops pending, duplicate names. Each case runs as an SPMD script under mpiexec
(tests/spmd/check_*.py)."""
import re
import time

import pytest

from mpi_harness import HANG_S, assert_spmd_ok, run_spmd

TIMEOUT = 240  # generous: other test runs may share this machine's two cores


@pytest.mark.parametrize("np", [2, 3])
def test_mismatches_error_everywhere_and_library_recovers(np):
    """shape, dtype, operation, reduce op, pre/postscale, root rank, allgather
    trailing dims, one bad tensor of a 50-tensor group, a changed signature
    of a cached name, duplicate names in flight."""
    assert_spmd_ok("check_errors.py", np, timeout=TIMEOUT)


@pytest.mark.parametrize("np", [2, 3])
def test_mistakes_fail_fast_with_default_settings(np):
    """Grouped calls of different sizes, allreduce against broadcast under one
    name (fresh and after caching), Sum against Average naming the ops: each
    fails on every rank within 30 s with the default stall settings; then
    broadcast_object of None on non-root ranks, allgather_object of mixed
    types, argument errors that are ValueError and MXNetError at once, and
    non-integer splits rejected."""
    assert_spmd_ok("check_mistakes.py", np, timeout=TIMEOUT)


@pytest.mark.parametrize("np", [2, 3])
def test_stalled_names_warn_then_fail(np):
    env = {"MXPLUGIN_STALL_CHECK_TIME_SECONDS": 1, "MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS": 3}
    out, err = assert_spmd_ok("check_stall.py", np, env=env, timeout=TIMEOUT)
    missing_a = "rank 1" if np == 2 else "ranks 1, 2"
    for tensor, missing in (("allreduce.a", missing_a), ("allreduce.b", "rank 0")):
        pattern = (r"\[mxplugin rank 0\] WARNING: Stall: tensor '" + re.escape(tensor) +
                   r"' has waited \d+ s for " + re.escape(missing) + r"\.")
        assert re.search(pattern, err), (
            f"no stall warning for {tensor!r} (missing {missing}) from the coordinator on stderr:\n{err}")
    # Only the coordinator warns.
    assert not re.search(r"\[mxplugin rank [1-9]\d*\] WARNING: Stall", err), err


@pytest.mark.parametrize("np", [2, 3])
def test_shutdown_on_one_rank_fails_pending_ops(np):
    assert_spmd_ok("check_shutdown.py", np, timeout=TIMEOUT)


@pytest.mark.parametrize("how", ["exit", "kill"])
@pytest.mark.parametrize("np", [2, 3])
def test_dead_rank_is_detected_by_survivors(np, how):
    """Rank 1 dies (os._exit(1) or SIGKILL); the survivors' pending allreduce
    fails with a lost-contact error, later ops fail promptly, and survivors
    exit 0 by themselves through the ordinary interpreter exit."""
    start = time.time()
    rc, out, err = run_spmd("check_rank_death.py", np, [how], env={"MXPLUGIN_PEER_TIMEOUT_SECONDS": 5},
                            timeout=TIMEOUT, auto_cleanup=False)
    elapsed = time.time() - start
    report = f"exit {rc} after {elapsed:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}"
    survivors = [k for k in range(np) if k != 1]
    passed = sorted(int(line.split()[1]) for line in out.splitlines() if line.startswith("PASS "))
    assert passed == survivors, report
    status = dict(line.split(" ", 2)[1:] for line in out.splitlines() if line.startswith("STATUS "))
    for k in survivors:
        assert status.get(str(k)) == "exit 0", report
    assert status.get("1") == ("exit 1" if how == "exit" else "signal 9"), report
    assert elapsed < HANG_S, report  # Note [Hang limits]
