"""DistributedTrainer / DistributedOptimizer / kvstore plug-in, at 2 and 3 ranks."""
import os
import subprocess
import sys

import pytest

from mpi_harness import REPO, assert_spmd_ok, rank_env


@pytest.mark.parametrize("np_", [2, 3])
def test_every_optimizer_matches_gluon_trainer(np_):
    assert_spmd_ok("check_trainer.py", np_)


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_every_hybridize_mode_matches_gluon_trainer(np_):
    """Not hybridized, hybridize(), static_alloc, static_alloc + static_shape
    x SGD-momentum, Adam, LAMB; re-hybridizing mid-training, hybridizing after
    the first steps, buckets rebuilt mid-training, and the per-step copy path
    on its own (Note [Static graphs keep their gradients]); and the GPU
    buckets' update path (MXNet's multi-tensor optimizer ops) on CPU."""
    out, _ = assert_spmd_ok("check_hybridize.py", np_)
    assert out.count("ok ") == 17, out


@pytest.mark.parametrize("np_", [2, 3])
def test_trainer_features(np_):
    assert_spmd_ok("check_trainer_features.py", np_)


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_clipping_between_allreduce_grads_and_update_matches_one_process(np_):
    """allreduce_grads() leaves one process's gradient sums (Note [Reduced
    gradients are sums]): clipping at one process's threshold gives its
    weights, SGD-momentum and Adam, hybridized and not."""
    assert_spmd_ok("check_trainer_features.py", np_, args=["clipping"])


def test_save_and_load_states_across_restart(tmp_path):
    assert_spmd_ok("check_trainer_features.py", 2, args=["save", tmp_path])
    assert os.path.exists(tmp_path / "trainer.states")
    assert_spmd_ok("check_trainer_features.py", 2, args=["resume", tmp_path])


def test_optimizer_wrapper_and_module_api():
    assert_spmd_ok("check_optimizer_wrapper.py", 2)


def test_digits_converges_at_two_ranks():
    from mpi_harness import mpiexec_path

    cmd = [mpiexec_path(), "-n", "2", sys.executable, os.path.join(REPO, "examples", "mxnet_digits.py"),
           "--min-accuracy", "0.97"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=rank_env(), cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "final test accuracy" in result.stderr + result.stdout


def test_local_sgd_converges_with_k_times_fewer_reductions():
    out, _ = assert_spmd_ok("check_local_sgd.py", 2)
    assert "local SGD accuracy" in out


@pytest.mark.parametrize("np_", [1, 2])
def test_review_regressions(np_):
    assert_spmd_ok("check_regressions.py", np_)
