"""Note [Crashes under a running world] (src/common/crash_exit.h): in a
world started with MXPLUGIN_WORLD_CRASH_EXIT_CODE, a crash on the core's
thread ends the process with that code, its line and the thread's stack; a
crash on another thread stays a crash. (Crashes in MPI's start and while a
rank leaves carry no code: the phase the rank told its agent tells them,
tests/test_output_lines.py.)"""
import signal
import subprocess
import sys

import pytest

from mpi_harness import REPO, rank_env


# A world of one rank (MPI started as a singleton); then the signal goes to
# the thread named `thread` ("mxplugin-core"), or to the main thread ("main").
_CRASH_A_THREAD = """import ctypes, os, signal, sys, threading
import mxplugin as hvd
hvd.init()
assert hvd.size() == 1
thread = sys.argv[1]
task = "/proc/self/task"
tids = ([threading.get_native_id()] if thread == "main" else
        [int(t) for t in os.listdir(task) if open(f"{task}/{t}/comm").read().strip() == thread])
assert len(tids) == 1, (thread, tids)
libc = ctypes.CDLL(None, use_errno=True)
SYS_TGKILL = 234  # x86-64
assert libc.syscall(SYS_TGKILL, os.getpid(), tids[0], int(signal.SIGSEGV)) == 0
signal.pause()
"""


def _crash_thread(thread, exit_code):
    extra = {"MXPLUGIN_WORLD_CRASH_EXIT_CODE": exit_code} if exit_code else {}
    return subprocess.run([sys.executable, "-c", _CRASH_A_THREAD, thread], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=rank_env(extra))


def test_a_crash_on_the_core_thread_of_a_running_world_ends_with_the_code_its_line_and_stack():
    done = _crash_thread("mxplugin-core", 78)
    assert done.returncode == 78, (done.returncode, done.stderr)
    after = done.stderr.split("mxplugin: elastic: MPI crashed under this rank's core thread", 1)
    assert len(after) == 2, done.stderr
    frames = [line for line in after[1].splitlines()[1:] if "[0x" in line]
    assert len(frames) >= 3, done.stderr  # the handler, the signal's return, where the thread was


def test_a_crash_on_another_thread_stays_a_crash_though_armed():
    done = _crash_thread("main", 78)
    assert done.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV, 255), (done.returncode, done.stderr)
    assert "MPI crashed under" not in done.stderr, done.stderr


def test_unarmed_a_crash_on_the_core_thread_stays_a_crash():
    done = _crash_thread("mxplugin-core", 0)
    assert done.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV, 255), (done.returncode, done.stderr)
    assert "MPI crashed under" not in done.stderr, done.stderr
