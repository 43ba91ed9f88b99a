"""DistributedTrainer(shard_optimizer_states=True): ZeRO stage 1 (Note
[Sharded optimizer states] in mxplugin/sharding.py), at 1, 2 and 3 ranks."""
import pytest

from mpi_harness import assert_spmd_ok


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_sharded_states_match_gluon_trainer(np_):
    """Every shardable optimizer with odd bucket sizes, every hybridize mode,
    state bytes per rank, refusals."""
    out, _ = assert_spmd_ok("check_sharded.py", np_)
    assert out.count("ok ") == 4, out
