"""Fuzz of the public collectives (issue 38, tests/spmd/check_fuzz.py):
random calls, valid and bad, the same on every rank or off on one. Each
works, with NumPy's numbers, or raises on every rank that made it, saying
what was wrong; the library works after each. MXPLUGIN_FUZZ_SEED (or
"random") and MXPLUGIN_FUZZ_CASES choose others, for a soak:

    MXPLUGIN_FUZZ_SEED=random MXPLUGIN_FUZZ_CASES=5000 pytest tests/test_fuzz.py
"""
import math
import os
import re

import pytest

from mpi_harness import HANG_S, assert_spmd_ok

CASES = int(os.environ.get("MXPLUGIN_FUZZ_CASES", "300"))


def fuzz_env(np):
    return {
        "MXPLUGIN_FUZZ_SEED": os.environ.get("MXPLUGIN_FUZZ_SEED", str(38 + np)),
        "MXPLUGIN_FUZZ_CASES": CASES,
        # Note [Hang limits]: the stall shutdown is far beyond HANG_S, so an
        # error that only it would give shows as a hang, not as a refusal;
        # the refusals' messages (checked per case) say where they came from.
        "MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS": 600,
        # The fuzz's ranks never submit calls under one name in different
        # orders, which is what the grace waits for; a short one saves time.
        "MXPLUGIN_MISMATCH_GRACE_SECONDS": 0.1,
    }


@pytest.mark.parametrize("np", [2, 3])
def test_fuzzed_calls_work_or_fail_on_every_rank(np):
    out, _ = assert_spmd_ok("check_fuzz.py", np, env=fuzz_env(np), timeout=HANG_S * math.ceil(CASES / 300))
    summary = re.search(r"fuzz: seed (\d+), (\d+) cases: (\d+) worked, (\d+) refused on every rank, "
                        r"(\d+) refused on the outsider only", out)
    assert summary, out[-3000:]
    print(f"fuzz: {np} ranks: {summary.group(0).replace('fuzz: ', '', 1)}")  # bench/soak.py --parts api reads it
    seed, cases, worked, refused, outsider = map(int, summary.groups())
    assert cases == CASES and worked + refused + outsider == cases, summary.group(0)
    assert worked > cases // 5 and refused > cases // 5, f"too few of each kind: {summary.group(0)}"
