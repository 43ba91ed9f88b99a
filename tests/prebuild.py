"""Builds that tests need (the packaging test's wheel and fresh venv, the
Open MPI variant, the GPU executor's host programs, Intel MPI's runtime),
started as soon as the session's tests are collected (conftest.py), one
after another in a thread of their own, their processes at the lowest CPU
priority (nice 19, and their process session's scheduling group at nice 19
where the kernel groups sessions): they take what the tests before them
leave of the cores (ranks waiting for each other, for a mismatch's grace,
for a peer timeout, for a cut link), and the test that needs one waits only
for what is left of it. What a build does and checks is the same as when
its fixture ran it: only when it starts differs.

A build that no selected test needs is not started; one not yet started
when its fixture asks (a test needing it selected but never reached by the
queue) runs then, in the fixture's thread, as any fixture would.

The processes a build starts are its own: each in a process session of its
own, killed by id (its session) past its time limit or when the test
session ends while it runs; nothing else is touched. The limits are those
the builds always had, far above what a build takes, counted from when a
test begins to wait for the build (until then it may get no CPU at all on
a busy machine, and a test waits for nothing).

Without a test session (bench/ imports tests/mpi_variants.py), run() is a
plain subprocess run in a session of its own."""
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

_lock = threading.Lock()
_builds = []  # every Build made, in the order the modules were imported
_running = set()  # Popen objects of build processes still running
_local = threading.local()  # .background: this thread runs builds ahead of their tests
_worker = None
_stopped = False
AHEAD_POLL_S = 5  # how often a build running ahead looks whether a test has begun to wait for it
# What the suite's compiles of mxplugin add to Python's flags (which hold
# -g): no debug information, which no test reads; it halves a compile's CPU
# (a wheel of this tree on a 2-core machine: 249 CPU-s with it, 135 without).
NO_DEBUG_INFO = {"CFLAGS": "-g0", "CXXFLAGS": "-g0"}


class Build:
    """`make(workdir)` for the fixture `fixture` of the test module at
    `module_file`, in a temporary directory of its own; result() is what it
    returned (or raises what it raised: a failure, pytest.skip)."""

    def __init__(self, name, module_file, fixture, make):
        self.name, self.fixture, self.make = name, fixture, make
        self.module_file = os.path.realpath(module_file)
        self.state = "idle"  # idle -> queued -> running -> done
        self.done = threading.Event()
        self.value = self.error = self.workdir = None
        self.hurry = False  # a test waits for it: its processes at the usual priority from now on
        self.hurry_at = None  # since when
        with _lock:
            _builds.append(self)

    def _run(self):
        try:
            if _stopped:
                raise RuntimeError(f"{self.name}: the test session has ended")
            self.workdir = tempfile.mkdtemp(prefix=f"mxplugin-{self.name}-")
            self.value = self.make(self.workdir)
        except BaseException as exc:  # pytest's skip and fail outcomes are BaseExceptions
            self.error = exc
        finally:
            self.state = "done"
            self.done.set()

    def result(self):
        with _lock:
            mine = self.state in ("idle", "queued")
            if mine:
                self.state = "running"
        if mine:  # not started ahead: this thread builds it, at the usual priority
            self._run()
        elif not self.done.is_set():  # a test waits for it now: the rest at the usual priority
            with _lock:
                self.hurry, self.hurry_at = True, time.monotonic()
                for proc in _running:
                    raise_priority(proc.pid)
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


def needed_by(items):
    """The builds that `items` (pytest's selected tests) need, in the order
    of the first test needing each."""
    order = []
    for item in items:
        path = os.path.realpath(str(getattr(item, "path", getattr(item, "fspath", ""))))
        names = getattr(item, "fixturenames", ())
        for build in _builds:
            if build not in order and build.module_file == path and build.fixture in names:
                order.append(build)
    return order


def start(builds):
    """Queues `builds` for the background thread and starts it."""
    global _worker
    with _lock:
        queued = [b for b in builds if b.state == "idle"]
        for b in queued:
            b.state = "queued"
    if not queued:
        return

    def work():
        _local.background = True
        for build in queued:
            with _lock:
                if build.state != "queued" or _stopped:
                    continue
                build.state = "running"
            _local.build = build
            build._run()

    _worker = threading.Thread(target=work, name="prebuild", daemon=True)
    _worker.start()


def stop():
    """At the session's end: stops the build processes still running (by
    id, each with its own process session) and removes the builds' files."""
    global _stopped
    with _lock:
        _stopped = True
        procs = list(_running)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if _worker is not None:
        _worker.join(timeout=60)
    for build in _builds:
        if build.workdir:
            shutil.rmtree(build.workdir, ignore_errors=True)


def popen(argv, cwd=None, env=None):
    """subprocess.Popen(argv) with its output captured as text, in a process
    session of its own, at nice 19 when started by the background thread.
    Collect it with communicate()."""
    # Under the lock: stop() kills what runs now and nothing starts after
    # it, and a build a test starts waiting for (result()) gets the usual
    # priority for all its processes, those starting now included.
    with _lock:
        if _stopped and getattr(_local, "background", False):
            raise RuntimeError("the test session has ended")
        background = getattr(_local, "background", False) and not _local.build.hurry
        if background and shutil.which("nice"):
            argv = ["nice", "-n", "19", *argv]
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        proc.started = time.monotonic()
        proc.build = _local.build if getattr(_local, "background", False) else None
        _running.add(proc)
        if background:
            set_session_nice(proc.pid, 19)
    return proc


def set_session_nice(pid, nice):
    """With the kernel's autogroups (sched_autogroup_enabled), each process
    session is scheduled as one group, and a nice value counts only within
    its group: the group of `pid`'s session gets `nice` itself. Without
    them, nothing to do."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


def raise_priority(pid):
    """Back to nice 0 for the process group and session of `pid` (a build
    process popen() started, the leader of both), where allowed (root)."""
    try:
        os.setpriority(os.PRIO_PGRP, pid, 0)
    except OSError:
        pass
    set_session_nice(pid, 0)


def communicate(proc, timeout=None):
    """(stdout, stderr) of a process popen() started, once it has ended;
    past `timeout` its session is killed and subprocess.TimeoutExpired
    raised, as subprocess.run would. The limit runs from the process's
    start, or, for a build running ahead of its tests, from when a test
    began to wait for it: at nice 19 on a busy machine a build may get no
    CPU at all until then."""
    try:
        while True:
            since = _limit_start(proc)
            if since is None:  # ahead of its tests: look again in a while (has a test begun to wait?)
                wait = AHEAD_POLL_S
            elif timeout is None:
                wait = None
            else:
                wait = since + timeout - time.monotonic()
                if wait <= 0:
                    break
            try:
                return proc.communicate(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, out, err)
    finally:
        with _lock:
            _running.discard(proc)


def _limit_start(proc):
    """When the time limit of a process popen() started began, or None while
    its build runs ahead of its tests."""
    if proc.build is None:
        return proc.started
    if proc.build.hurry_at is None:
        return None
    return max(proc.started, proc.build.hurry_at)


def run(argv, cwd=None, env=None, timeout=None):
    """subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    through popen() and communicate()."""
    proc = popen(argv, cwd, env)
    out, err = communicate(proc, timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
