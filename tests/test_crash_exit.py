"""Note [Crashes while leaving] and [Crashes in MPI's start]
(src/common/crash_exit.h): once armed, a crash signal (SIGSEGV, SIGBUS,
SIGABRT) ends the process with the given code and one line; unarmed, it
stays a crash."""
import signal
import subprocess
import sys

import pytest

from mpi_harness import REPO, rank_env


def _crash(sig, armed):
    code = ("import os, signal\nfrom mxplugin._loader import core_module\n"
            + ("core_module.arm_crash_exit(75)\n" if armed else "")
            + f"os.kill(os.getpid(), {int(sig)})\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=rank_env())


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS])
def test_an_armed_crash_ends_with_the_code_and_its_line(sig):
    done = _crash(sig, armed=True)
    assert done.returncode == 75, (done.returncode, done.stderr)
    assert "mxplugin: elastic: a crash inside MPI while this rank was leaving its world" in done.stderr, done.stderr


def test_unarmed_a_crash_stays_a_crash():
    done = _crash(signal.SIGSEGV, armed=False)
    assert done.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV, 255), (done.returncode, done.stderr)
