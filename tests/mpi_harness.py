"""Runs SPMD scripts under the mpiexec that mxplugin was built with.

Each run gets its own process session, and on timeout only that session is
killed: tests start and stop only the processes they own."""
import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPMD_DIR = os.path.join(REPO, "tests", "spmd")
# Note [Hang limits]: no test bounds how fast something happens (DESIGN.md
# §5): on a loaded 2-core machine anything may take several times longer.
# Where a quick end is the feature (an error within seconds, a stop within
# 10 s), the test checks the behaviour that makes it quick (the message of
# the mismatch, the peer timeout or the stop, not the stall timeout's) and
# fails only past HANG_S, which only a hang reaches; what the time is, is
# measured in bench/ (bench/fault_timings.py).
HANG_S = 120


def mpiexec_path():
    try:
        from mxplugin import _build_info

        if os.path.exists(_build_info.MPIEXEC):
            return _build_info.MPIEXEC
    except ImportError:
        pass
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else "mpiexec"


# MXNet imports distutils.version at `import mxnet`. In a venv, setuptools'
# shim (distutils-precedence.pth) hands it setuptools' own distutils, which
# pulls in pkg_resources with setuptools 65 (Python 3.11's venv): 0.26 s of
# CPU per rank process here (2.54 -> 2.28 s for `import mxnet, mxplugin`),
# over hundreds of rank processes a suite. Python < 3.12 still has the
# standard library's distutils, which serves MXNet's version checks alike.
STDLIB_DISTUTILS = {"SETUPTOOLS_USE_DISTUTILS": "stdlib"} if sys.version_info < (3, 12) else {}


def rank_env(extra=None):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["MXNET_CPU_WORKER_NTHREADS"] = env.get("MXNET_CPU_WORKER_NTHREADS", "1")
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MXPLUGIN_PEER_TIMEOUT_SECONDS", "60")
    env.update(STDLIB_DISTUTILS)
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def run_spmd(script, np, args=(), env=None, timeout=240, auto_cleanup=True, launch=()):
    """Runs tests/spmd/<script> on `np` ranks; returns (returncode, stdout, stderr)."""
    return run_program([sys.executable, os.path.join(SPMD_DIR, script), *map(str, args)], np, env, timeout,
                       auto_cleanup, what=script, launch=launch)


def run_program(argv, np, env=None, timeout=240, auto_cleanup=True, what=None, launch=()):
    """Runs `argv` on `np` ranks under mpiexec, with the mpiexec options
    `launch` (e.g. fake_hosts.launch_options'); returns (returncode, stdout, stderr)."""
    cmd = [mpiexec_path(), *launch, "-n", str(np)]
    if not auto_cleanup:
        cmd.append("-disable-auto-cleanup")  # keep survivors running when a rank dies
    return run_command(cmd + list(argv), timeout, env, what=f"{what or os.path.basename(argv[0])} on {np} ranks")


def run_command(cmd, timeout, env=None, what=None):
    """Runs `cmd` (a launcher and its program) in a process session of its
    own, so that a timeout kills exactly what it started; returns
    (returncode, stdout, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=rank_env(env), cwd=REPO, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"{what or ' '.join(cmd)} timed out after {timeout}s\n--- stdout\n{out}\n--- stderr\n{err}")
    return proc.returncode, out, err


def assert_spmd_ok(script, np, args=(), env=None, timeout=240, launch=()):
    """Runs the script and checks that every rank printed 'PASS <rank>'."""
    rc, out, err = run_spmd(script, np, args, env, timeout, launch=launch)
    passed = sorted(int(r) for r in re.findall(r"PASS (\d+)", out))
    assert rc == 0 and passed == list(range(np)), (
        f"{script} on {np} ranks: exit {rc}, passed ranks {passed}\n--- stdout\n{out}\n--- stderr\n{err}")
    return out, err


@functools.lru_cache(maxsize=None)
def shared_spmd_run(script, np, args, timeout=240):
    """assert_spmd_ok's stdout for `script` on `np` ranks with the tuple
    `args`, launched once per test process: cases that run one script at one
    size share a launch, the script running their sections in turn (a rank
    start costs 2.5 s of CPU, docs/reliability.md). A module's tests run on
    one pytest worker (tests/conftest.py), so they share it there too."""
    out, _ = assert_spmd_ok(script, np, args=args, timeout=timeout)
    return out


def assert_section_passed(out, name, np):
    """Every rank printed "ok <name> <rank>" (a section of a shared launch)."""
    passed = sorted(int(r) for r in re.findall(rf"^ok {re.escape(name)} (\d+)$", out, re.M))
    assert passed == list(range(np)), f"section {name}: passed on ranks {passed} of {np}\n{out}"


class Launch:
    """A run of tests/spmd/<script> on `np` ranks started now and collected
    later (result()), so that runs that mostly wait (for a mismatch's grace,
    a peer timeout, a stall's warning) wait at the same time. Its own
    process session, as run_command's, its output read as it comes (a
    thread); result() past `timeout` kills the session and fails, as
    run_command does. `seconds` is how long it ran."""

    def __init__(self, script, np, args=(), env=None, auto_cleanup=True):
        cmd = [mpiexec_path(), "-n", str(np)]
        if not auto_cleanup:
            cmd.append("-disable-auto-cleanup")
        self.what = f"{script} on {np} ranks"
        self.seconds = None
        start = time.monotonic()
        self.proc = subprocess.Popen(cmd + [sys.executable, os.path.join(SPMD_DIR, script), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=rank_env(env),
                                     cwd=REPO, start_new_session=True)

        def collect():
            self._output = self.proc.communicate()
            self.seconds = time.monotonic() - start

        self._reader = threading.Thread(target=collect, daemon=True)
        self._reader.start()

    def result(self, timeout=240):
        """(returncode, stdout, stderr) once it has ended."""
        self._reader.join(timeout)
        if self._reader.is_alive():
            self.stop()
            self._reader.join()
            out, err = self._output
            raise AssertionError(f"{self.what} timed out after {timeout}s\n--- stdout\n{out}\n--- stderr\n{err}")
        return (self.proc.returncode, *self._output)

    def stop(self):
        """Kills the run's session while its launcher runs (a run no test collected)."""
        if self._reader.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
