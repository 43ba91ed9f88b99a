"""mxplugin.parallel under MXNet's NumPy interface (npx.set_np()): the same
numbers as on legacy NDArrays, results in the caller's array kind."""
import pytest

from mpi_harness import assert_spmd_ok


@pytest.mark.parametrize("np_", [2, 3])
def test_parallel_under_numpy_interface_matches_legacy(np_):
    # mesh 1 x np_: collectives, a tensor-parallel model trained with
    # DistributedTrainer(mesh=), mesh helpers, parallelize() and checkpoints
    assert_spmd_ok("check_numpy_parallel.py", np_, timeout=180)
