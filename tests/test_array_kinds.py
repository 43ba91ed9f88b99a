"""Every kind of MXNet array users train with (Note [Array kinds] in
mxplugin/array_kinds.py): the NumPy interface (mx.np.ndarray under
npx.set_np()) beside legacy NDArrays, and row-sparse gradients."""
import pytest

from mpi_harness import assert_spmd_ok


@pytest.mark.parametrize("np_", [2, 3])
def test_every_collective_takes_both_kinds_and_returns_the_callers(np_):
    """allreduce(_), grouped, allgather (both paths), broadcast(_),
    alltoall (even and with splits), reducescatter, grouped ones x legacy
    and NumPy-interface arrays x 7 dtypes; mixed kinds in one grouped call;
    a process set; objects; broadcast_parameters with deferred init."""
    out, _ = assert_spmd_ok("check_array_kinds.py", np_)
    assert out.count("collectives numpy ok") == np_, out
    assert out.count("deferred broadcast ok") == np_, out


@pytest.mark.parametrize("np_", [2, 3])
def test_numpy_interface_trainer_matches_gluon_trainer_in_every_mode(np_):
    """Under npx.set_np(): every hybridize flag, fused and per-parameter
    updates, sharded states, allreduce_grads + update, autotune, join_when_done,
    DistributedOptimizer and kvstore='mxplugin' equal gluon.Trainer on the
    combined batch; compression and local SGD equal the legacy path; an
    elastic GluonState restores NumPy-interface parameters."""
    out, _ = assert_spmd_ok("check_numpy_trainer.py", np_, env={
        "MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "1", "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE": "1"})
    for what in ("sgd static_shape", "adam sharded states static_shape", "powersgd numpy == legacy",
                 "local sgd numpy == legacy", "sgd autotune", "DistributedOptimizer legacy",
                 "kvstore=mxplugin numpy", "join_when_done", "elastic restore"):
        assert out.count(f"ok {what} ") == np_, (what, out)
