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


def test_a_peer_killed_mid_collective_leaves_each_survivor_with_the_clear_error():
    """tests/kill_loop.py, shortened (the soak: python tests/kill_loop.py
    --kills 100): a rank SIGKILLed at a random moment of a loop of one kind
    of collective, on the shared-memory and the MPI path, rank 0 (the
    coordinator) among the victims. Each survivor must end with the error
    naming the rank that ended: raised, or said by the watchdog when stuck
    inside MPI; never a crash, a hang or wrong numbers."""
    import random

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kill_loop

    seed = int(os.environ.get("MXPLUGIN_FUZZ_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"kill loop: seed {seed} (MXPLUGIN_FUZZ_SEED)")
    kills = kill_loop.plan(len(kill_loop.KINDS) * len(kill_loop.PATHS), seed)
    # One of each kind, on alternating paths, with rank 0 the victim of the first.
    tried = [kills[2 * i + i % 2] for i in range(len(kill_loop.KINDS))]
    tried[0] = (*tried[0][:2], 0, *tried[0][3:])
    for kind, path, victim, offset, case_seed in tried:
        record = kill_loop.kill_once(kind, path, victim, offset, case_seed)
        report = f"{kind} on {path}, rank {victim} killed {offset:.3f} s in:\n" + "\n".join(record.get("output", []))
        assert "error" not in record and set(record["survivors"].values()) <= kill_loop.CLEAN, \
            f"{record.get('error')} {record.get('survivors')}\n{report}"
        print(f"{kind} on {path}: rank {victim} killed; survivors {record['survivors']} in {record.get('end_s')} s")
