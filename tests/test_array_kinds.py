"""Every kind of MXNet array users train with (Note [Array kinds] in
mxplugin/array_kinds.py): the NumPy interface (mx.np.ndarray under
npx.set_np()) beside legacy NDArrays, and row-sparse gradients."""
import os
import re
import sys

import mxnet as mx
import numpy as np
import pytest

from mpi_harness import REPO, assert_spmd_ok, rank_env, run_command


def _oks(out, what):
    """How many ranks printed "ok <what> <rank>"."""
    return len(re.findall(rf"^ok {re.escape(what)} \d+$", out, re.M))


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
        assert _oks(out, what) == np_, (what, out)


@pytest.mark.parametrize("np_", [2, 3])
def test_sparse_gradients_travel_as_rows_and_match_one_process(np_):
    """Note [Sparse gradients travel as rows]: SGD momentum (lazy and
    lazy_update=False), Adam, AdaGrad, FTRL with ranks touching different
    and overlapping rows and the last rank touching none in two steps;
    sparse_as_dense=True; hybridized; DistributedOptimizer and
    kvstore='mxplugin': each equals gluon.Trainer in one process."""
    out, _ = assert_spmd_ok("check_sparse.py", np_)
    for what in ("sparse sgd", "sparse sgd lazy_update=False", "sparse adam", "sparse adagrad", "sparse ftrl",
                 "refused", "sparse_as_dense", "sparse with sharded states", "sparse hybridized",
                 "sparse DistributedOptimizer", "sparse kvstore=mxplugin"):
        assert _oks(out, what) == np_, (what, out)


def _train_example(script, ranks, saved, args):
    """examples/<script> under the launcher, as a user runs it; its log."""
    cmd = [sys.executable, "-m", "mxplugin_run", "-np", str(ranks), sys.executable,
           os.path.join(REPO, "examples", script), "--save", str(saved), *args]
    rc, out, err = run_command(cmd, 300, env=rank_env())
    assert rc == 0, f"exit {rc}: {' '.join(cmd)}\n{out}\n{err}"
    return out + err


@pytest.mark.parametrize("script, args, tolerance", [
    ("mxnet_numpy_d2l.py", ["--epochs", "3", "--min-accuracy", "0.75"], 1e-5),
    ("mxnet_sparse_embedding.py", ["--epochs", "2", "--min-accuracy", "0.85"], 2e-5)])
def test_examples_train_to_one_process_weights_at_two_ranks(script, args, tolerance, tmp_path):
    """The d2l-style NumPy-interface example and the sparse-embedding one,
    unchanged under `mxplugin-run -np 2` and `-np 1`: the same weights
    (each rank trains on its half of every global batch), and they learn."""
    logs = {n: _train_example(script, n, tmp_path / f"{n}.params", args) for n in (1, 2)}
    assert "(2 ranks" in logs[2] and "final test accuracy" in logs[2], logs[2]
    with mx.util.np_shape(script == "mxnet_numpy_d2l.py"):  # NumPy-interface parameters are saved so
        one, two = (mx.nd.load(str(tmp_path / f"{n}.params")) for n in (1, 2))
    assert sorted(one) == sorted(two)
    for name in one:
        np.testing.assert_allclose(two[name].asnumpy(), one[name].asnumpy(), rtol=1e-4, atol=tolerance,
                                   err_msg=f"{script}: {name} at 2 ranks vs 1")
