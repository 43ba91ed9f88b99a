"""DistributedTrainer(shard_optimizer_states=True): ZeRO stage 1 (Note
[Sharded optimizer states] in mxplugin/training/sharding.py), at 1, 2 and 3 ranks."""
import pytest

from mpi_harness import assert_spmd_ok


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_sharded_states_match_gluon_trainer(np_):
    """Every shardable optimizer (lamb included) with odd bucket sizes, every
    hybridize mode, state bytes per rank, refusals, float16 weights with
    multi_precision, a process set (at 3 ranks)."""
    out, _ = assert_spmd_ok("check_sharded.py", np_)
    assert out.count("ok ") == 6, out


def test_sharded_states_over_flat_mpi():
    """The same at 3 ranks with the shared-memory data plane off: the
    reduce-scatters and allgathers go over MPI alone."""
    out, _ = assert_spmd_ok("check_sharded.py", 3, args=["optimizers", "float16", "process_set"],
                            env={"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0"})
    assert out.count("ok ") == 3, out


def test_sharded_checkpoint_resumes_at_any_size_sharded_or_not(tmp_path):
    """Saved at 2 ranks sharded (the file equals an unsharded trainer's);
    resumed at 1, 2 and 3 ranks, sharded and not, matching one process."""
    assert_spmd_ok("check_sharded_checkpoint.py", 2, args=["save", tmp_path])
    for np_, modes in ((3, ["sharded", "unsharded"]), (1, ["sharded"]), (2, ["unsharded"])):
        assert_spmd_ok("check_sharded_checkpoint.py", np_, args=["resume", tmp_path, *modes])


def test_save_states_on_one_rank_fails_at_once_on_every_rank(tmp_path):
    """Sharded and PowerSGD trainers gather their states in save_states():
    called on rank 0 only, it stalled until the stall shutdown. (3 ranks: two
    go on without it; 2 ranks pass the same way, checked by hand.)"""
    out, _ = assert_spmd_ok("check_sharded_checkpoint.py", 3, args=["save_on_rank_0_only", tmp_path])
    assert out.count("raised in") == 2 * 3, out
    assert out.count("diverged pushes failed with the fence") == 3, out  # Note [Diverged pushes]
