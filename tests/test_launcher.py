"""End-to-end tests of mxplugin-run: each one starts the real launcher and mpiexec."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from mpi_harness import HANG_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = HANG_S

# A rank that reports its rank and the launcher-set variables. One os.write,
# so lines from different ranks cannot interleave in mpiexec's output.
SHOW_ENV = (
    "import os; os.write(1, ' '.join(['rank', os.environ['PMI_RANK']] + "
    "[os.environ.get(n, '-') for n in ('MXPLUGIN_TIMELINE', 'MXPLUGIN_LOG_LEVEL', "
    "'OMP_NUM_THREADS')]).encode() + b'\\n')"
)


def launcher_env(**overrides):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO
    env["OMP_NUM_THREADS"] = "1"
    env.pop("MXPLUGIN_TIMELINE", None)
    env.pop("MXPLUGIN_LOG_LEVEL", None)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def launcher(*args):
    return [sys.executable, "-m", "mxplugin_run", *args]


def run_launcher(*args, env=None):
    return subprocess.run(launcher(*args), cwd=REPO, env=env or launcher_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)


def rank_lines(stdout):
    return sorted(line.split() for line in stdout.splitlines() if line.startswith("rank "))


def test_help_exits_zero_and_documents_options():
    result = run_launcher("--help")
    assert result.returncode == 0
    for option in ("-np", "--num-proc", "-H", "--hosts", "--timeline-filename",
                   "--verbose", "--check-build", "examples:"):
        assert option in result.stdout


def test_check_build_reports_mpi_and_cuda():
    from mxplugin import _build_info

    result = run_launcher("--check-build")
    assert result.returncode == 0, result.stderr
    assert "MPI: MPICH Version: " in result.stdout and "launcher: " in result.stdout, result.stdout
    assert "MISMATCH" not in result.stdout, result.stdout
    assert f"\nCUDA: {'yes' if _build_info.CUDA_BUILT else 'no'}" in result.stdout
    assert "MXNet:" in result.stdout


def test_every_rank_runs_with_launcher_environment():
    env = launcher_env(OMP_NUM_THREADS=None)
    result = run_launcher("-np", "2", "--timeline-filename", "/tmp/mxp-timeline.json",
                          "--verbose", sys.executable, "-c", SHOW_ENV, env=env)
    assert result.returncode == 0, result.stderr
    threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert rank_lines(result.stdout) == [
        ["rank", rank, "/tmp/mxp-timeline.json", "debug", threads] for rank in ("0", "1")]
    assert "mpiexec -n 2 " in result.stderr
    assert f"OMP_NUM_THREADS={threads}" in result.stderr


def test_one_rank_gets_every_core_and_a_user_value_wins():
    cores = str(len(os.sched_getaffinity(0)))
    result = run_launcher("-np", "1", "--verbose", sys.executable, "-c", SHOW_ENV,
                          env=launcher_env(OMP_NUM_THREADS=None))
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == [["rank", "0", "-", "debug", cores]]
    assert f"setting I_MPI_WAIT_MODE=1 MXPLUGIN_LOG_LEVEL=debug OMP_NUM_THREADS={cores}" in result.stderr
    result = run_launcher("-np", "1", sys.executable, "-c", SHOW_ENV, env=launcher_env(OMP_NUM_THREADS="5"))
    assert rank_lines(result.stdout) == [["rank", "0", "-", "-", "5"]]


def test_threads_per_rank_follow_the_busiest_host():
    from mxplugin_run import hosts

    cores = hosts.usable_cores()
    assert hosts.ranks_per_host(4, []) == 4
    assert hosts.ranks_per_host(3, [("a", 2), ("b", 2)]) == 2
    assert hosts.ranks_per_host(5, [("a", 1), ("b", 4)]) == 4
    assert hosts.threads_per_rank(1, []) == cores
    assert hosts.threads_per_rank(4 * cores, []) == 1


def test_worst_rank_exit_code_is_returned():
    code = "import os, sys; sys.exit(3 if os.environ['PMI_RANK'] == '1' else 0)"
    result = run_launcher("-np", "2", sys.executable, "-c", code)
    assert result.returncode == 3


# Rank 1 says its pid and kills itself; rank 0 waits for mpiexec to end it.
DIES_BY = ("import os, signal, sys, time\n"
           "if os.environ['PMI_RANK'] == '1':\n"
           "    os.write(1, f'pid {os.getpid()}\\n'.encode()); os.kill(os.getpid(), signal.{sig})\n"
           "time.sleep(3600)\n")


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSEGV"])
def test_a_rank_killed_by_a_signal_is_named_in_one_line(sig):
    """Note [Naming the rank that died] in mxplugin_run/rank_deaths.py:
    MPICH's banner names only a pid; the launcher says which rank, in one
    line, and exits 128 + the signal."""
    result = run_launcher("-np", "2", sys.executable, "-c", DIES_BY.replace("{sig}", sig))
    number = getattr(signal, sig)
    pid = next(line.split()[1] for line in result.stdout.splitlines() if line.startswith("pid "))
    said = [line for line in result.stderr.splitlines() if line.strip()]
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 128 + number, report
    assert len(said) == 1 and said[0].startswith(f"mxplugin-run: rank 1 (pid {pid} on "), report
    assert f") ended first: the job was killed by signal {number} ({sig}); mpiexec stopped the other ranks" in said[0], report
    for noise in ("BAD TERMINATION", "=====", "mxplugin-rank-end", "YOUR APPLICATION"):
        assert noise not in result.stdout + result.stderr, report


def test_host_list_runs_ranks_and_keeps_user_settings():
    env = launcher_env(MXPLUGIN_LOG_LEVEL="info", OMP_NUM_THREADS="3")
    hosts = f"localhost:1,{socket.gethostname()}:1"
    result = run_launcher("-np", "2", "-H", hosts, "--verbose", sys.executable, "-c", SHOW_ENV,
                          env=env)
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout) == [["rank", rank, "-", "info", "3"] for rank in ("0", "1")]
    assert f"-hosts {hosts} " in result.stderr


@pytest.mark.parametrize("users", [None, "1"])
def test_elastic_ranks_run_without_mpichs_single_copy_unless_the_user_set_it(users):
    """Note [Single copy in elastic jobs] in mxplugin_run/protocol.py."""
    show = "import os; print('single copy', os.environ.get('MPIR_CVAR_CH4_CMA_ENABLE'))"
    result = run_launcher("--min-np", "1", "--max-np", "1", sys.executable, "-c", show,
                          env=launcher_env(MPIR_CVAR_CH4_CMA_ENABLE=users))
    assert result.returncode == 0, result.stderr
    assert f"single copy {users or '0'}" in result.stdout.splitlines(), result.stdout


def test_bad_host_list_exits_2_with_one_line():
    result = run_launcher("-np", "1", "-H", "a:x", sys.executable, "-c", "pass")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "mxplugin-run: error: bad host list 'a:x': slot count in 'a:x' must be an integer >= 1")


# The rest of the refusals run main() in this process: each launcher start
# pays for `import mxnet` (via the mxplugin package), which would make this
# matrix slow as subprocesses, and refusals happen before anything is launched.

def refuse(capsys, *args):
    assert run_main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def run_main(argv):
    from mxplugin_run.run import main
    return main(argv)


@pytest.mark.parametrize("hosts", ["a:x", "a:0", ":2", "a:1,,b:1", "a,,b", "a", "a:", "a:-1", ""])
def test_bad_host_list_is_refused(capsys, hosts):
    assert "bad host list" in refuse(capsys, "-np", "1", "-H", hosts, sys.executable)


@pytest.mark.parametrize("args, message", [
    (["-np", "3", "-H", "a:1,b:1", "true"], "slots"),
    (["-np", "2"], "no command"),
    (["-np", "2", "--"], "no command"),
    (["-np", "1", "no-such-program-mxplugin"], "not found"),
    (["-np", "1", "./no/such/program"], "not found"),
    (["true"], "-np"),
    (["-np", "0", "true"], "-np"),
    (["-np", "two", "true"], "-np"),
    (["--no-such-option", "-np", "1", "true"], "--no-such-option"),
])
def test_bad_request_is_refused(capsys, args, message):
    assert message in refuse(capsys, *args)


def wait_for_files(paths, timeout):
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_is_forwarded_to_ranks(tmp_path, sig):
    # Each rank marks itself ready, then exits 7 when the signal arrives.
    # Its sleep only bounds a rank that the signal never reaches: it outlasts
    # every wait of this test, so a slow forward cannot end it first.
    code = (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\n"
        f"open(os.path.join({str(tmp_path)!r}, 'ready' + os.environ['PMI_RANK']), 'w').close()\n"
        f"time.sleep({3 * TIMEOUT})\n"
    )
    child = subprocess.Popen(launcher("-np", "2", sys.executable, "-c", code), cwd=REPO,
                             env=launcher_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for_files([tmp_path / "ready0", tmp_path / "ready1"], TIMEOUT)
        child.send_signal(sig)
        child.communicate(timeout=TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 7


CTRL_C_JOB = """
import os, sys, time
import mxnet as mx
import mxplugin as hvd
hvd.init()
try:
    print("ready", hvd.rank(), flush=True)  # within the try: a Ctrl-C typed after it is caught below
    while True:
        hvd.allreduce(mx.nd.ones(4), name="x").wait_to_read()
        time.sleep(0.05)
except KeyboardInterrupt:
    if hvd.rank() == 0 and len(sys.argv) > 1:
        print("rank 0 saved its checkpoint", flush=True)
        sys.exit(0)
    raise
"""
# Rank 1 still has clean-up to do (an atexit handler of its own, which runs
# after mxplugin's shutdown) when rank 0 has ended.
CTRL_C_SLOW_CLEANUP_JOB = CTRL_C_JOB.replace("hvd.init()\n", """import atexit
def clean_up():
    time.sleep(1)
    print("rank 1 finished its clean-up", flush=True)
if os.environ["PMI_RANK"] == "1":
    atexit.register(clean_up)  # before init: runs after mxplugin's own
hvd.init()
""", 1)


def ctrl_c_at_a_terminal(*job_args, job=None):
    """Runs the launcher as the foreground job of a new terminal (a pty),
    types Ctrl-C once both ranks are training; returns (exit code, output, seconds
    from the Ctrl-C to the end). `job`: the ranks' code, CTRL_C_JOB by default."""
    import pty
    import select

    try:
        pid, fd = pty.fork()
    except OSError as exc:
        pytest.skip(f"no pseudo-terminal here: {exc}")
    if pid == 0:  # the child: the pty is its controlling terminal
        os.chdir(REPO)
        os.execvpe(sys.executable, launcher("-np", "2", sys.executable, "-c", job or CTRL_C_JOB, *job_args),
                   launcher_env())
    out, typed, deadline = b"", None, time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    data = os.read(fd, 4096)
                except OSError:  # the other side is gone
                    break
                if not data:
                    break
                out += data
            if typed is None and out.count(b"ready") >= 2:
                os.write(fd, b"\x03")
                typed = time.monotonic()
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert typed is not None, out.decode(errors="replace")
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace"), time.monotonic() - typed


def test_ctrl_c_stops_every_rank_quietly_with_one_line():
    code, out, took = ctrl_c_at_a_terminal()
    assert code == 130, out
    assert "mxplugin-run: interrupted (Ctrl-C): stopping all 2 ranks" in out, out
    for noise in ("Traceback", "KeyboardInterrupt", "BAD TERMINATION", "assert", "Sending Ctrl-C", "[mpiexec@"):
        assert noise not in out, f"{noise!r} in:\n{out}"
    assert took < HANG_S, out  # Note [Hang limits]


def test_ctrl_c_lets_every_rank_finish_its_clean_up():
    """Note [Interrupted ranks end with a code] (mxplugin/basics.py): a rank
    that ended by the signal made MPICH kill the ranks still cleaning up,
    and mpiexec then exited 2 | 9 = 11, a "Segmentation fault"."""
    code, out, _ = ctrl_c_at_a_terminal(job=CTRL_C_SLOW_CLEANUP_JOB)
    assert "rank 1 finished its clean-up" in out, out
    assert code == 130, out
    for noise in ("Traceback", "KeyboardInterrupt", "BAD TERMINATION", "[mpiexec@"):
        assert noise not in out, f"{noise!r} in:\n{out}"


def test_an_interrupt_with_a_collective_pending_ends_quietly():
    """A KeyboardInterrupt that comes after an allreduce was pushed and before
    it was read: the stop fails it, and MXNet's atexit hook no longer prints
    that failure ("Exception ignored in atexit callback: _notify_shutdown")."""
    code = ("import time\nimport mxnet as mx, mxplugin as hvd\nhvd.init()\n"
            "hvd.allreduce(mx.nd.ones(4), name='both').wait_to_read()\n"
            "if hvd.rank() == 0:\n    y = hvd.allreduce(mx.nd.ones(4), name='only_rank_0')\n    raise KeyboardInterrupt\n"
            "time.sleep(1)  # rank 1 stays until rank 0 has pushed it\n")
    result = run_launcher("-np", "2", sys.executable, "-c", code)
    assert result.returncode == 130, result.stderr
    for noise in ("Exception ignored", "_notify_shutdown", "MXNetError", "BAD TERMINATION"):
        assert noise not in result.stderr, f"{noise!r} in:\n{result.stderr}"


def test_a_rank_whose_interrupt_a_destructor_swallowed_ends_as_interrupted():
    """Note [Interrupted ranks end with a code]: a KeyboardInterrupt raised
    inside a destructor is lost; that rank fails at its next collective,
    which the others' stop ended, and it too exits 130 (not 1: mpiexec ORs
    the codes, and 130 | 1 made 131)."""
    code = ("import os, signal, time\nimport mxnet as mx, mxplugin as hvd\nhvd.init()\n"
            "hvd.allreduce(mx.nd.ones(4), name='both').wait_to_read()\n"
            "if hvd.rank() == 0:\n    raise KeyboardInterrupt\n"
            "class Swallows:\n"
            "    def __del__(self):\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "        time.sleep(1)  # the KeyboardInterrupt comes here, and is lost\n"
            "Swallows()\n"
            "hvd.allreduce(mx.nd.ones(4), name='only_rank_1').wait_to_read()\n")
    result = run_launcher("-np", "2", sys.executable, "-c", code)
    assert "Exception ignored in" in result.stderr, result.stderr
    assert result.returncode == 130, result.stderr


def test_ctrl_c_keeps_what_the_ranks_print_while_stopping():
    code, out, _ = ctrl_c_at_a_terminal("save")
    assert "rank 0 saved its checkpoint" in out and "interrupted (Ctrl-C)" in out, out
    assert "Traceback" not in out, out


def test_stdin_that_is_not_a_terminal_reaches_rank_0():
    # One write per line: print() writes its pieces separately, and the two
    # ranks' pieces can interleave ("gotgot 0 hello").
    result = subprocess.run(launcher("-np", "2", sys.executable, "-c",
                                     "import os, sys; r = os.environ['PMI_RANK']; "
                                     "sys.stdout.write(f'got {r} ' + (input() if r == '0' else '-') + '\\n')"),
                            cwd=REPO, env=launcher_env(), input="hello\n", capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert "got 0 hello" in result.stdout and "got 1 -" in result.stdout, result.stdout


def test_hostfile_gives_the_hosts(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# two local slots\nlocalhost slots=1\n{socket.gethostname()}:1  # same machine\n")
    result = run_launcher("-np", "2", "--hostfile", str(hostfile), "--verbose", sys.executable, "-c", SHOW_ENV)
    assert result.returncode == 0, result.stderr
    assert len(rank_lines(result.stdout)) == 2
    assert f"-hosts localhost:1,{socket.gethostname()}:1 " in result.stderr
    bad = tmp_path / "bad"
    bad.write_text("a cores=4\n")
    result = run_launcher("-np", "1", "--hostfile", str(bad), sys.executable, "-c", "pass")
    assert result.returncode == 2
    assert "line 1: expected 'host slots=N' or 'host:N'" in result.stderr


def test_unresolvable_host_fails_fast_naming_it():
    start = time.time()
    result = run_launcher("-np", "2", "-H", "localhost:1,nosuchhost.invalid:1", sys.executable, "-c", "pass")
    assert result.returncode == 2, result.stderr
    assert "cannot reach nosuchhost.invalid" in result.stderr
    assert time.time() - start < HANG_S


def test_unanswering_host_times_out_and_leaves_nothing_running(tmp_path):
    """A remote shell that never answers (as ssh to a host that drops
    packets): the launch fails after --ssh-connect-timeout, naming the host,
    and the remote shell it started is gone."""
    marker = f"sleep 300.{os.getpid()}"  # a duration no other process uses, to find it by
    rsh = tmp_path / "silent_rsh"
    rsh.write_text(f"#!/bin/sh\nexec {marker}\n")
    rsh.chmod(0o755)
    start = time.time()
    result = run_launcher("-np", "1", "-H", "faraway.invalid:1", "--rsh", str(rsh), "--ssh-connect-timeout", "1",
                          sys.executable, "-c", "pass")
    elapsed = time.time() - start
    assert result.returncode == 2, result.stderr
    assert "cannot reach faraway.invalid (no answer within 1 s)" in result.stderr
    assert elapsed < HANG_S
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"left running: {left.stdout}"


BANNER = """
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 700 RUNNING AT node1
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)
This typically refers to a problem with your application.
Please see the FAQ page for debugging suggestions
"""


def end_line(rank, pid, host, when, code=None, signal=None, phase="running", said=""):
    """An agent's end record line (mxplugin_run/process_end.py)."""
    from mxplugin_run.process_end import EndRecord, ProcessEnd

    return EndRecord(rank, host, pid, when, ProcessEnd(code=code, signal=signal), phase, said).line()


def test_the_banner_is_dropped_and_a_users_rules_pass():
    """RankDeaths on its own: the banner's pid is not the rank that died
    (Note [Naming the rank that died]); the agent's record of the first end
    in time is. Blank lines and rules of the ranks' own output still come
    through, in order."""
    from mxplugin_run.rank_deaths import RankDeaths

    deaths = RankDeaths()
    out = []
    # Rank 0's record arrives first, but rank 3 ended first.
    records = [end_line(0, 700, "node1", 20.5, signal=9), end_line(3, 812, "node2", 20.25, signal=11)]
    for text in ["step 1\n", "\n", "=====\n", "step 2\n", *records,
                 *[line + "\n" for line in BANNER.splitlines()], "=====\n"]:
        out += deaths.lines("out", text)
    out += deaths.flush("out")
    assert out == ["step 1\n", "\n", "=====\n", "step 2\n", "=====\n"]
    said, code = deaths.summary()
    assert code == 139 and said == ["rank 3 (pid 812 on node2) ended first: the job was killed by signal 11 "
                                    "(SIGSEGV); mpiexec stopped the other ranks"], said
    assert RankDeaths().summary() == (None, None)  # no banner, no record: nothing to say


def test_without_records_the_banner_tells_the_signal():
    """An agent killed with its rank writes no record: the banner's own
    word (its signal, its host) is what is left."""
    from mxplugin_run.rank_deaths import RankDeaths

    deaths = RankDeaths()
    for text in [line + "\n" for line in BANNER.splitlines()]:
        assert deaths.lines("err", text) == []
    said, code = deaths.summary(2, 11)
    assert code == 139 and said[0].startswith("a rank on node1 ended: the job was killed by signal 11"), said


def test_a_record_after_a_partial_line_keeps_the_line():
    """The agent writes a partial last line of its rank before the record:
    that line stays in the output, the record does not."""
    from mxplugin_run.rank_deaths import RankDeaths

    deaths = RankDeaths()
    assert deaths.lines("err", "50% done" + end_line(1, 5, "h", 1.0, code=0)) == ["50% done\n"]
    assert [r.pid for r in deaths.records] == [5]
    assert deaths.lines("err", "mxplugin-rank-end {broken\n") == ["mxplugin-rank-end {broken\n"]


def test_a_ranks_lost_peers_line_is_read_and_kept_out_of_the_output():
    """Note [Lost peers as data]: the launcher's pump hands the unreachable
    hosts of a rank's lost-peers line on (Note [Lost hosts]) and passes the
    rest, the error's prose included, as it came."""
    import io
    import threading

    from mxplugin_run.job import _Pump
    from mxplugin_run.rank_deaths import RankDeaths

    read_end, write_end = os.pipe()
    lines = [b"step 1\n", b"[1]<stderr>:mxplugin-peers-lost 1 a unreachable=2@b,3@b ended=\n",
             b"mxplugin: rank 1: mxplugin lost contact with its peers: ranks 2, 3 on b cannot be reached from a\n",
             b"mxplugin-peers-lost 0 a unreachable= ended=4@c\n", b"step 2\n",
             b"loss 0.5 mxplugin-peers-lost 0 a unreachable=5@d ended=\n"]
    os.write(write_end, b"".join(lines))
    os.close(write_end)
    told, sink = [], io.BytesIO()
    with os.fdopen(read_end, "rb") as source:
        pump = _Pump(source, sink, "err", threading.Event(), RankDeaths(), on_unreachable=told.append)
        pump.run()
    assert told == [{"b"}, {"d"}]
    assert sink.getvalue() == lines[0] + lines[2] + lines[4] + b"loss 0.5 \n"  # a partial line joined to one


def summary_of(lines, ranks=None, returncode=0, banner=True):
    from mxplugin_run.rank_deaths import RankDeaths

    deaths = RankDeaths()
    out = []
    banner_lines = BANNER.replace("Segmentation fault (signal 11)", "Killed (signal 9)").splitlines() if banner else []
    for text in [*lines, *[line + "\n" for line in banner_lines]]:
        out += deaths.lines("err", text)
    assert out + deaths.flush("err") == []  # every record is kept out of the output
    return deaths.summary(ranks, returncode)


def test_a_rank_that_exited_is_told_from_the_ranks_mpiexec_killed():
    """Note [Naming the rank that died]: the banner says SIGKILL (an exit
    code 1 ORed with the 9 of a rank mpiexec killed); the records say rank 0
    exited 1 first."""
    said, code = summary_of([end_line(1, 812, "node1", 20.15, signal=9), end_line(0, 700, "node1", 20.1, code=1)])
    assert code == 1 and said == ["rank 0 (pid 700 on node1) ended first: it exited with code 1 without finishing "
                                  "MPI; mpiexec stopped the other ranks"], said
    # A rank that finished (exit 0) ended nothing; the one killed after it is named with its own signal.
    said, code = summary_of([end_line(0, 700, "node1", 20.1, code=0, phase="done"),
                             end_line(1, 812, "node1", 20.3, signal=11)])
    assert code == 128 + 11 and said[0].startswith("rank 1 (pid 812 on node1) ended first: the job was killed by "
                                                   "signal 11 (SIGSEGV)"), said


def test_a_rank_that_exited_is_named_when_mpiexec_printed_no_banner():
    """Note [Naming the rank that died]: MPICH may print no banner after a
    rank exits 1 without finishing MPI and the others are killed; the
    records still tell it. Every rank exiting with a code (they finished
    MPI, then exit(3)) is no such end."""
    exits = [end_line(1, 812, "node1", 20.3, code=1), end_line(0, 700, "node1", 20.1, code=1)]

    def summary(lines, ranks=3, returncode=1):
        return summary_of(lines, ranks, returncode, banner=False)

    said, code = summary(exits)
    assert code == 1 and said == ["rank 0 (pid 700 on node1) ended first: it exited with code 1 without finishing "
                                  "MPI; mpiexec stopped the other ranks"], said
    assert summary(exits, ranks=2) == (None, None)  # every rank exited: nobody was stopped
    assert summary(exits, returncode=0) == (None, None)
    assert summary([end_line(0, 700, "node1", 20.1, code=0)]) == (None, None)  # a clean exit ended nothing
    # Rank 2 was killed first (before the others exited on the peer timeout): rank 2.
    said, code = summary([*exits, end_line(2, 900, "node2", 19.5, signal=9)])
    assert code == 137 and said[0].startswith("rank 2 (pid 900 on node2) ended first: the job was killed by "
                                              "signal 9 (SIGKILL)"), said
    # Every rank's record a plain exit: mpiexec's code stands alone.
    assert summary([*exits, end_line(2, 900, "node2", 20.5, code=3)]) == (None, None)


# Rank 2 stops itself; ranks 0 and 1 fail on the peer timeout and exit(1)
# without finishing MPI, so mpiexec kills the others (rank 2, and a rank
# still in its exit): the banner says SIGKILL.
PEER_STOPPED = ("import os, signal, sys, mxnet as mx, mxplugin as hvd\n"
                "hvd.init()\n"
                "if hvd.rank() == 2:\n"
                "    os.kill(os.getpid(), signal.SIGSTOP)\n"
                "try:\n"
                "    hvd.allreduce(mx.nd.ones((4,)), name='x').wait_to_read()\n"
                "except mx.base.MXNetError as exc:\n"
                "    print(f'rank {hvd.rank()} failed', flush=True)\n"
                "    sys.exit(1)\n")


def test_ranks_that_fail_and_exit_are_not_reported_as_killed():
    """A CI run's job whose ranks failed (exit 1) ended 137, "rank 1 ...
    killed by signal 9": Note [Naming the rank that died]."""
    result = run_launcher("-np", "3", sys.executable, "-c", PEER_STOPPED,
                          env=launcher_env(MXPLUGIN_PEER_TIMEOUT_SECONDS="2"))
    report = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 1, report
    assert re.search(r"^mxplugin-run: rank [01] \(pid \d+ on \S+\) ended first: it exited with code 1 without "
                     r"finishing MPI; mpiexec stopped the other ranks$", result.stderr, re.M), report
    for noise in ("mxplugin-rank-end", "BAD TERMINATION"):
        assert noise not in result.stdout + result.stderr, report


# The stop signal is delivered to a thread other than the main one (the
# kernel's choice when the main thread has a signal pending already).
STOP_ON_ANOTHER_THREAD = """
import signal, sys, threading, time
from mxplugin_run.job import Job
job = Job([sys.executable, "-c", "import time; time.sleep(3600)"], None, "mxplugin-run", 1)

def interrupt_from_another_thread():
    while getattr(signal.getsignal(signal.SIGINT), "__func__", None) is not Job._interrupt:
        time.sleep(0.01)  # until the job's handler is in place
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

threading.Thread(target=interrupt_from_another_thread, daemon=True).start()
sys.exit(job.run())
"""


def test_a_stop_taken_by_another_thread_stops_the_job():
    """Note [Signals on other threads] (mxplugin_run/signal_wait.py): the
    main thread blocked in waitpid() ran the handler only when the job ended
    by itself (here after an hour)."""
    done = subprocess.run([sys.executable, "-c", STOP_ON_ANOTHER_THREAD], capture_output=True, text=True,
                          timeout=HANG_S, env=launcher_env())
    assert done.returncode == 130, done.stderr
    assert "mxplugin-run: interrupted (Ctrl-C): stopping all 1 ranks" in done.stderr, done.stderr
