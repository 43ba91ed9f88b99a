"""DistributedTrainer / DistributedOptimizer / kvstore plug-in, at 2 and 3 ranks."""
import os
import subprocess
import sys

import pytest

from mpi_harness import REPO, assert_section_passed, assert_spmd_ok, rank_env, shared_spmd_run


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


# What one launch per size runs of check_trainer_features.py, in order
# (mpi_harness.shared_spmd_run).
FEATURE_SECTIONS = {1: ("clipping",), 2: ("features", "clipping"), 3: ("features", "clipping")}


def feature_section(np_, name):
    out = shared_spmd_run("check_trainer_features.py", np_, FEATURE_SECTIONS[np_], timeout=480)
    assert_section_passed(out, name, np_)


@pytest.mark.parametrize("np_", [2, 3])
def test_trainer_features(np_):
    feature_section(np_, "features")


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_clipping_between_allreduce_grads_and_update_matches_one_process(np_):
    """allreduce_grads() leaves one process's gradient sums (Note [Reduced
    gradients are sums]): clipping at one process's threshold gives its
    weights, SGD-momentum and Adam, hybridized and not."""
    feature_section(np_, "clipping")


@pytest.mark.parametrize("np_, cases", [(2, ["plain", "static_shape", "sharded"]), (3, ["sharded"])])
def test_autotune_agrees_logs_and_leaves_the_weights_as_untuned(np_, cases, tmp_path):
    """Note [Autotune]: plain SGD-momentum, Adam hybridized with
    static_shape, sharded Adam; each tries at least 3 bucket cuts, every
    rank keeps the same, the weights equal an untuned trainer's on the same
    batches, and rank 0 logs every candidate with one chosen."""
    log = tmp_path / "autotune.csv"
    out, err = assert_spmd_ok("check_autotune.py", np_, args=cases, env={
        "MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "1", "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE": "2",
        "MXPLUGIN_AUTOTUNE_LOG": str(log)})
    assert out.count("weights equal untuned") == len(cases) * np_, out
    # the line a user reads, once per tuned trainer (rank 0)
    assert (out + err).count("mxplugin autotune (") == len(cases), out + err


def test_ranks_asking_for_different_tuning_fail_at_the_first_step():
    out, _ = assert_spmd_ok("check_autotune.py", 2, args=["mismatch"])
    assert out.count("mismatch raised") == 2, out


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


def test_autotune_settings_come_from_the_environment_unless_given(monkeypatch):
    from mxplugin.errors import ArgumentError
    from mxplugin.training.autotune import Settings, cut_runs

    monkeypatch.setenv("MXPLUGIN_AUTOTUNE", "1")
    monkeypatch.setenv("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "3")  # Horovod's name is an alias
    on = Settings(None)
    assert (on.enabled, on.warmup, on.steps) == (True, 5, 3)
    assert not Settings(False).enabled  # the argument wins
    monkeypatch.setenv("MXPLUGIN_AUTOTUNE_WARMUP_STEPS", "many")
    with pytest.raises(ArgumentError, match="MXPLUGIN_AUTOTUNE_WARMUP_STEPS must be an integer"):
        Settings(None)
    with pytest.raises(TypeError):
        Settings("yes")
    # Layout's cut: runs of members within the bytes, a larger member alone
    assert cut_runs([4, 4, 4, 16, 4], 8) == [2, 1, 1, 1]
    assert cut_runs([4, 4, 4], 1 << 20) == [3]


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_backward_passes_per_step_equals_one_process_on_the_combined_passes(np_):
    """Note [Accumulated passes]: K = 1, 2, 4 (SGD-momentum, hybridized;
    Adam at K = 2), DistributedOptimizer at K = 2 and a grad_req='add' loop,
    each equal to one process's gluon.Trainer on the K passes' combined
    batch, with one reduction per K passes; local SGD, allreduce_grads()
    and grad_req='add' refused with backward_passes_per_step."""
    assert_spmd_ok("check_accumulation.py", np_)


@pytest.mark.parametrize("np_", [2, 3])
def test_sync_batchnorm_equals_batchnorm_on_the_combined_batch(np_):
    """Note [Statistics of the combined batch]: SyncBatchNorm's outputs,
    input and parameter gradients and running statistics over 3 steps equal
    one process's BatchNorm on the combined batch (hybridized and not,
    legacy and NumPy arrays, a batch of its own size on each rank), and a
    model-zoo ResNet-18 converted by convert_sync_batchnorm trains to one
    process's weights within that process's own float noise."""
    assert_spmd_ok("check_sync_batchnorm.py", np_)
