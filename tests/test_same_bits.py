"""Same inputs, same bits (Note [Fixed reduction order] in
src/backend/mpi/ordered_reduce.cc): reductions whose bits never depend on
which rank arrived first or on what was fused with what, and training
whose weights are the same bits in every run. Across fake hosts:
tests/test_multi_host.py."""
import re

import pytest

from mpi_harness import assert_spmd_ok

# Fusion and timing unlike the defaults' (64 MiB, 1 ms): every tensor in a
# buffer of its own or fused with its neighbours, cycles that gather many
# requests or few; and the flat MPI data plane in place of shared memory.
FUSIONS = [
    {},
    {"MXPLUGIN_FUSION_THRESHOLD": "4096", "MXPLUGIN_CYCLE_TIME": "0.2"},
    {"MXPLUGIN_FUSION_THRESHOLD": "1000000", "MXPLUGIN_CYCLE_TIME": "15", "MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0"},
]


def digests(out, what):
    found = re.findall(rf"^{what} (\S+)$", out, re.M)
    assert found, out
    return found


@pytest.mark.parametrize("np_", [3, 4])
def test_reductions_are_the_same_bits_whatever_the_timing_and_fusion(np_):
    """Each launch checks its sums against NumPy adding the ranks' inputs in
    rank order, and every call's bits in 20 scrambled rounds against round
    0's; on one host the flat and shared-memory planes add in the same
    order, so every launch's results are the same bits."""
    seen = []
    for env in FUSIONS:
        order = "flat" if env.get("MXPLUGIN_HIERARCHICAL_ALLREDUCE") == "0" else "hierarchical"
        out, _ = assert_spmd_ok("check_same_bits.py", np_, args=(order,), env=env)
        seen.append((env, digests(out, "digest")[0]))
    assert len({d for _, d in seen}) == 1, f"results differ between launches: {seen}"


def test_training_twice_gives_the_same_weights_in_every_mode():
    """Two launches of 3 ranks, the second under other cycle times and
    fusion, with autotune trying bucket sizes from its first step: every
    mode's weights (and each rank's BatchNorm statistics) are the same bits."""
    runs = []
    for env in ({}, {"MXPLUGIN_CYCLE_TIME": "7", "MXPLUGIN_FUSION_THRESHOLD": "65536",
                     "MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "1", "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE": "1"}):
        out, _ = assert_spmd_ok("check_same_weights.py", 3, env=env)
        runs.append(dict(re.findall(r"^weights (\S+) (\S+)$", out, re.M)))
    assert len(runs[0]) == 11 and runs[0] == runs[1], runs
