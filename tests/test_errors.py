"""Failure behaviour: mismatched collectives, stalls, dead ranks, shutdown with
ops pending, duplicate names. Each case runs as an SPMD script under mpiexec
(tests/spmd/check_*.py).

Most of a case's time is spent waiting (a mismatch's grace, a cached
request's re-send, a stall's warning, a peer timeout): the runs of one test
at its different rank counts start together, when the first of them needs
its run, and each test checks its own (Launch in mpi_harness.py)."""
import re

import pytest

from mpi_harness import HANG_S, Launch

TIMEOUT = 240  # generous: other test runs may share this machine's two cores

_started = {}  # (test, parameters) -> Launch, started but not yet collected


def _key(item):
    return item.nodeid.split("[")[0], tuple(sorted(item.callspec.params.items()))


@pytest.fixture(scope="module", autouse=True)
def _stop_uncollected():
    yield
    while _started:  # the session stopped before their tests ran
        _started.popitem()[1].stop()


def launched(request, make):
    """This test's run, `make(parameters)` (a Launch), started together with
    those of the same test's other selected parametrizations; its
    (returncode, stdout, stderr, seconds)."""
    mine = _key(request.node)
    if mine not in _started:
        for item in request.session.items:
            key = _key(item) if hasattr(item, "callspec") else None
            if key and key[0] == mine[0] and key not in _started:
                _started[key] = make(item.callspec.params)
    job = _started.pop(mine)
    return (*job.result(TIMEOUT), job.seconds)


def assert_passed(script, np, done):
    rc, out, err, _ = done
    passed = sorted(int(r) for r in re.findall(r"PASS (\d+)", out))
    assert rc == 0 and passed == list(range(np)), (
        f"{script} on {np} ranks: exit {rc}, passed ranks {passed}\n--- stdout\n{out}\n--- stderr\n{err}")
    return out, err


@pytest.mark.parametrize("np", [2, 3])
def test_mismatches_error_everywhere_and_library_recovers(np, request):
    """shape, dtype, operation, reduce op, pre/postscale, root rank, allgather
    trailing dims, one bad tensor of a 50-tensor group, a changed signature
    of a cached name, duplicate names in flight."""
    assert_passed("check_errors.py", np, launched(request, lambda p: Launch("check_errors.py", p["np"])))


@pytest.mark.parametrize("np", [2, 3])
def test_mistakes_fail_fast_with_default_settings(np, request):
    """Grouped calls of different sizes, allreduce against broadcast under one
    name (fresh and after caching), Sum against Average naming the ops: each
    fails on every rank within 30 s with the default stall settings; then
    broadcast_object of None on non-root ranks, allgather_object of mixed
    types, argument errors that are ValueError and MXNetError at once, and
    non-integer splits rejected."""
    assert_passed("check_mistakes.py", np, launched(request, lambda p: Launch("check_mistakes.py", p["np"])))


@pytest.mark.parametrize("np", [2, 3])
def test_stalled_names_warn_then_fail(np, request):
    env = {"MXPLUGIN_STALL_CHECK_TIME_SECONDS": 1, "MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS": 3}
    out, err = assert_passed("check_stall.py", np,
                             launched(request, lambda p: Launch("check_stall.py", p["np"], env=env)))
    missing_a = "rank 1" if np == 2 else "ranks 1, 2"
    for tensor, missing in (("allreduce.a", missing_a), ("allreduce.b", "rank 0")):
        pattern = (r"\[mxplugin rank 0\] WARNING: Stall: tensor '" + re.escape(tensor) +
                   r"' has waited \d+ s for " + re.escape(missing) + r"\.")
        assert re.search(pattern, err), (
            f"no stall warning for {tensor!r} (missing {missing}) from the coordinator on stderr:\n{err}")
    # Only the coordinator warns.
    assert not re.search(r"\[mxplugin rank [1-9]\d*\] WARNING: Stall", err), err


@pytest.mark.parametrize("np", [2, 3])
def test_shutdown_on_one_rank_fails_pending_ops(np, request):
    assert_passed("check_shutdown.py", np, launched(request, lambda p: Launch("check_shutdown.py", p["np"])))


@pytest.mark.parametrize("how", ["exit", "kill"])
@pytest.mark.parametrize("np", [2, 3])
def test_dead_rank_is_detected_by_survivors(np, how, request):
    """Rank 1 dies (os._exit(1) or SIGKILL); the survivors' pending allreduce
    fails with a lost-contact error, later ops fail promptly, and survivors
    exit 0 by themselves through the ordinary interpreter exit."""
    rc, out, err, elapsed = launched(request, lambda p: Launch(
        "check_rank_death.py", p["np"], [p["how"]], env={"MXPLUGIN_PEER_TIMEOUT_SECONDS": 5}, auto_cleanup=False))
    report = f"exit {rc} after {elapsed:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}"
    survivors = [k for k in range(np) if k != 1]
    passed = sorted(int(line.split()[1]) for line in out.splitlines() if line.startswith("PASS "))
    assert passed == survivors, report
    status = dict(line.split(" ", 2)[1:] for line in out.splitlines() if line.startswith("STATUS "))
    for k in survivors:
        assert status.get(str(k)) == "exit 0", report
    assert status.get("1") == ("exit 1" if how == "exit" else "signal 9"), report
    assert elapsed < HANG_S, report  # Note [Hang limits]
