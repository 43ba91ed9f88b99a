"""Uneven data: hvd.join() (Note [Joined ranks] in src/core/message_table.cc)
and join_when_done (Note [Shadow steps] in mxplugin/training/join.py), at
1-3 ranks with uneven batch counts (one rank with none at 3)."""
import pytest

from mpi_harness import assert_spmd_ok, shared_spmd_run

TRAINER_CASES = ["plain", "hybrid_static", "sharded", "powersgd", "mesh", "kvstore", "distributed_optimizer",
                 "allreduce_grads"]


def joined(np_):
    """The output of one launch at np_ ranks running every case of both tests
    below, the trainer modes first (mpi_harness.shared_spmd_run); the phrases
    each test counts are its own."""
    cases = TRAINER_CASES + ["local_sgd", "raw", "horovod", "sharded_join", "failed_join"] + (
        ["process_set"] if np_ == 3 else [])
    return shared_spmd_run("check_join.py", np_, tuple(cases), timeout=480)


@pytest.mark.parametrize("np_", [2, 3])
def test_join_when_done_gives_one_process_weights_in_every_trainer_mode(np_):
    """Every mode, both divisors (ranks still training, initial size): every
    rank's weights equal one process's on the batches each step had, and
    each rank took as many shadow steps as it had batches fewer."""
    out = joined(np_)
    assert out.count("weights equal one process") == 2 * len(TRAINER_CASES) * np_, out
    assert out.count("local SGD refused") == np_, out


@pytest.mark.parametrize("np_", [2, 3])
def test_join_stands_in_for_the_others_collectives_and_returns_the_last_rank(np_):
    """Raw collectives with a joined rank (zeros, no rows, a broadcast
    received), alltoall and a joined root failing at once naming it, names
    cached again after; Horovod's pattern (a trainer, then hvd.join()), and
    with sharded states, where it cannot work, a fast error naming
    join_when_done; a join that fails (save_states() on the others) ends."""
    out = joined(np_)
    assert out.count("join() returned") == 2 * np_, out
    assert out.count("failed, naming join_when_done") == np_ - 1, out
    assert out.count("a failed join ends the join") == np_, out
    if np_ == 3:
        assert out.count("join on a process set") == np_, out


def test_join_alone():
    out, _ = assert_spmd_ok("check_join.py", 1, args=["plain", "horovod"])
    assert "horovod pattern: join() returned 0" in out, out
