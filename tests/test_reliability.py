"""Faults and long jobs in numbers (docs/reliability.md): resources stay
flat over many collectives and over many elastic resets."""
import os
import re
import subprocess
import sys

from mpi_harness import HANG_S, REPO, assert_spmd_ok, rank_env

# Sizes a user can raise for a soak (MXPLUGIN_SOAK_SMALL=2000000 ...).
SMALL = int(os.environ.get("MXPLUGIN_SOAK_SMALL", "200000"))
GROUPED = int(os.environ.get("MXPLUGIN_SOAK_GROUPED", "2000"))
RESETS = int(os.environ.get("MXPLUGIN_SOAK_RESETS", "30"))


def test_many_small_and_grouped_collectives_leave_memory_descriptors_and_threads_flat():
    # A hang bound only (Note [Hang limits]): the loops take ~15 s on a quiet 2-core machine.
    out, _ = assert_spmd_ok("check_flat_resources.py", 2, args=(SMALL, GROUPED), timeout=10 * HANG_S)
    for line in re.findall(r"^resources: .*$", out, re.M):
        print(line)


def test_the_elastic_launcher_stays_flat_over_many_resets():
    done = subprocess.run([sys.executable, os.path.join(REPO, "tests", "elastic_resets.py"), str(RESETS + 1)],
                          capture_output=True, text=True, env=rank_env(), cwd=REPO, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-4000:]
    print(next(line for line in done.stdout.splitlines() if line.startswith("resets:")))
