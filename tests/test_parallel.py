"""mxplugin.parallel: differentiable collectives, ProcessMesh, tensor-parallel
layers, the sharded loss and the tensor-parallel example."""
import os
import subprocess
import sys

import pytest

from mpi_harness import REPO, assert_section_passed, assert_spmd_ok, mpiexec_path, rank_env, shared_spmd_run


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_differentiable_collectives_match_serial(np_):
    assert_spmd_ok("check_parallel_collectives.py", np_)


@pytest.mark.parametrize("np_", [2, 4])
def test_tensor_parallel_layers_match_unsplit_model(np_):
    # np 2: meshes 1x2 and 2x1; np 4: 1x4, 2x2 and 4x1
    assert_spmd_ok("check_parallel_layers.py", np_)


def test_plain_distributed_trainer_updates_shards_without_averaging():
    assert_spmd_ok("check_parallel_layers.py", 2, args=["plain-trainer"])


@pytest.mark.parametrize("np_", [2, 4])
def test_tensor_parallel_example_learns_100k_classes(np_):
    cmd = [mpiexec_path(), "-n", str(np_), sys.executable, os.path.join(REPO, "examples", "mxnet_tensor_parallel.py"),
           "--steps", "40", "--check"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=rank_env(), cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "100000 classes, 50000 classes per rank" in result.stdout, result.stdout


# What one launch per size runs of check_parallel_partition.py, in order
# (mpi_harness.shared_spmd_run): np 2 on the mesh 1 x 2, np 4 on 2 x 2.
PARTITION_SECTIONS = {2: ("mlp", "transformer", "errors"), 4: ("mlp", "transformer")}


def partition_section(np_, name):
    out = shared_spmd_run("check_parallel_partition.py", np_, PARTITION_SECTIONS[np_], timeout=480)
    assert_section_passed(out, name, np_)
    return out


@pytest.mark.parametrize("np_", [2, 4])
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_partitioned_model_matches_serial(model, np_):
    # Forward, training with the sharded loss and DistributedTrainer(mesh=),
    # serial checkpoints both ways.
    print(partition_section(np_, model))


def test_partition_refuses_what_cannot_be_split():
    partition_section(2, "errors")
