"""Uneven data: hvd.join() (Note [Joined ranks] in src/core/message_table.cc)
and join_when_done (Note [Shadow steps] in mxplugin/training/join.py), at
1-3 ranks with uneven batch counts (one rank with none at 3)."""
import pytest

from mpi_harness import assert_spmd_ok

TRAINER_CASES = ["plain", "hybrid_static", "sharded", "powersgd", "mesh", "kvstore", "distributed_optimizer",
                 "allreduce_grads"]


def other_cases(np_):
    return ["raw", "horovod", "sharded_join", "failed_join"] + (["process_set"] if np_ == 3 else [])


@pytest.fixture(scope="module", params=[2, 3])
def joined(request):
    """(np, output) of one launch at np ranks running every case of both
    tests below, the trainer modes first (each rank start costs 2.5 s of
    CPU, docs/reliability.md); the phrases each test counts are its own."""
    np_ = request.param
    out, _ = assert_spmd_ok("check_join.py", np_, args=TRAINER_CASES + ["local_sgd"] + other_cases(np_),
                            timeout=480)
    return np_, out


def test_join_when_done_gives_one_process_weights_in_every_trainer_mode(joined):
    """Every mode, both divisors (ranks still training, initial size): every
    rank's weights equal one process's on the batches each step had, and
    each rank took as many shadow steps as it had batches fewer."""
    np_, out = joined
    assert out.count("weights equal one process") == 2 * len(TRAINER_CASES) * np_, out
    assert out.count("local SGD refused") == np_, out


def test_join_stands_in_for_the_others_collectives_and_returns_the_last_rank(joined):
    """Raw collectives with a joined rank (zeros, no rows, a broadcast
    received), alltoall and a joined root failing at once naming it, names
    cached again after; Horovod's pattern (a trainer, then hvd.join()), and
    with sharded states, where it cannot work, a fast error naming
    join_when_done; a join that fails (save_states() on the others) ends."""
    np_, out = joined
    assert out.count("join() returned") == 2 * np_, out
    assert out.count("failed, naming join_when_done") == np_ - 1, out
    assert out.count("a failed join ends the join") == np_, out
    if np_ == 3:
        assert out.count("join on a process set") == np_, out


def test_join_alone():
    out, _ = assert_spmd_ok("check_join.py", 1, args=["plain", "horovod"])
    assert "horovod pattern: join() returned 0" in out, out
