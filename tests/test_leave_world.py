"""Note [Leaving a broken world] (src/backend/leaving.h): a rank that
leaves its world stops calling MPI at once, even with a negotiation round
in flight that a peer never joins."""
import re

from mpi_harness import HANG_S, run_spmd


def test_a_rank_that_leaves_parks_its_core_and_fails_its_ops(tmp_path):
    rc, out, err = run_spmd("check_leave_world.py", 2, [str(tmp_path)],
                            env={"MXPLUGIN_PEER_TIMEOUT_SECONDS": 120}, timeout=HANG_S, auto_cleanup=False)
    report = f"exit {rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert rc == 0, report
    assert "PARKED True" in out, report
    assert "FAIL" not in out and "RANK1 DONE" in out, report
    # Parked within 60 s: the round being polled stopped at the flag, not at
    # its deadline (the peer timeout, 120 s), which it would have waited out.
    assert re.search(r"ERROR pending: MXNetError: .*this rank has left its world", out), report
    assert re.search(r"ERROR later: PeerFailureError: this rank has left its world", out), report
