"""Tier 1: the C++ core through the raw Cython entry (Core.enqueue with NumPy
buffers), without MXNet ops or mxplugin.init()."""
import pytest

from mpi_harness import assert_spmd_ok


@pytest.mark.parametrize("np_", [1, 2])
def test_raw_core(np_):
    assert_spmd_ok("check_raw_core.py", np_, timeout=300)


@pytest.mark.parametrize("np_", [1, 2])
def test_float16_scaling_and_sums_match_numpy(np_):
    assert_spmd_ok("check_half.py", np_)


def test_ranks_with_different_fusion_settings_agree():
    """MPMD launch: rank 1 asks for no fusion at all, rank 0 for the default."""
    import os
    import subprocess
    import sys

    from mpi_harness import REPO, SPMD_DIR, mpiexec_path, rank_env

    script = os.path.join(SPMD_DIR, "check_config_agreement.py")
    cmd = [mpiexec_path(), "-n", "1", sys.executable, script, ":",
           "-n", "1", "-env", "MXPLUGIN_DIRECT_THRESHOLD", "1", "-env", "MXPLUGIN_FUSION_THRESHOLD", "64",
           sys.executable, script]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=rank_env(), cwd=REPO)
    assert out.returncode == 0 and "PASS 0" in out.stdout and "PASS 1" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("hierarchical,path", [("1", "where they lie"), ("0", "fused")])
def test_a_round_of_distinct_priorities_is_one_call(tmp_path, hierarchical, path):
    """2 ranks on one host: the shared-memory data plane batches the small
    tensors where they lie, flat MPI fuses them; one call either way."""
    out, _ = assert_spmd_ok("check_fusion_priorities.py", 2, [tmp_path],
                            env={"MXPLUGIN_HIERARCHICAL_ALLREDUCE": hierarchical})
    assert out.count(f"in 1 data-plane call(s), {path}") == 2, out
