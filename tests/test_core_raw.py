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
