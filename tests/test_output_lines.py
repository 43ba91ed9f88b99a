"""What ranks print reaches mxplugin-run's output in whole lines (Note
[Whole lines], mxplugin_run/whole_lines.py), optionally tagged with the rank;
how the rank's agent ends and what it records (Note [A rank's agent])."""
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from test_launcher import REPO, TIMEOUT, launcher, launcher_env

LINES_PER_RANK = 2000
# Each line in two writes, with pauses, so that without the relay other
# ranks' pieces land inside it (seen here: "LINE 50 rank=1 LINE 50 rank=0 xx END").
PIECES = f"""
import os, sys, time
r = os.environ["PMI_RANK"]
for i in range({LINES_PER_RANK}):
    os.write(1, f"LINE {{i}} rank={{r}} ".encode())
    if i % 50 == 0:
        time.sleep(0.001)
    os.write(1, b"x" * (i % 97) + b" END\\n")
    if i % 400 == 0:
        os.write(2, f"ERR {{i}} rank={{r}}".encode())
        os.write(2, b" END\\n")
"""
WHOLE = re.compile(r"(LINE|ERR) (\d+) rank=(\d) x* ?END")


def run_pieces(*args):
    result = subprocess.run(launcher(*args, "-np", "3", sys.executable, "-c", PIECES), cwd=REPO,
                            env=launcher_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    return result


def test_lines_of_ranks_printing_at_once_stay_whole():
    result = run_pieces()
    for stream, kind, count in ((result.stdout, "LINE", LINES_PER_RANK), (result.stderr, "ERR", 5)):
        broken = [line for line in stream.splitlines() if not WHOLE.fullmatch(line)]
        assert not broken, f"{len(broken)} broken lines, e.g. {broken[:5]}"
        for rank in range(3):
            got = [int(m.group(2)) for m in map(WHOLE.fullmatch, stream.splitlines()) if m.group(3) == str(rank)]
            assert got == sorted(got) and len(got) == count, f"rank {rank}: {len(got)} {kind} lines"


def test_prefix_output_tags_every_line_with_its_rank_and_stream():
    result = run_pieces("--prefix-output")
    tagged = re.compile(r"\[(\d)\]<(stdout|stderr)>:" + WHOLE.pattern)
    for stream, name in ((result.stdout, "stdout"), (result.stderr, "stderr")):
        lines = stream.splitlines()
        assert lines
        for line in lines:
            m = tagged.fullmatch(line)
            assert m and m.group(2) == name and m.group(1) == m.group(5), f"not tagged right: {line!r}"


def test_a_partial_line_is_shown_while_the_rank_waits(tmp_path):
    """A prompt without a newline reaches the output while the rank still
    runs (here: until the test has seen it), not only when the rank ends."""
    seen = tmp_path / "seen"
    code = (f"import os, time\nos.write(1, b'prompt> ')\n"
            f"while not os.path.exists({str(seen)!r}):\n    time.sleep(0.05)\n"
            "os.write(1, b'answered\\n')\n")
    child = subprocess.Popen(launcher("-np", "1", sys.executable, "-c", code), cwd=REPO, env=launcher_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, deadline = b"", time.monotonic() + TIMEOUT
        while b"prompt> " not in out:
            assert time.monotonic() < deadline, f"the partial line never came: {out!r}"
            out += os.read(child.stdout.fileno(), 4096)
        seen.touch()
        rest, err = child.communicate(timeout=TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert out + rest == b"prompt> answered\n"


@pytest.mark.parametrize("prefix", [False, True])
def test_exit_code_and_stdin_are_the_commands_own(prefix):
    """The agent is the rank's parent: the rank's exit code comes back
    through it, and piped stdin reaches rank 0."""
    code = ("import os, sys\nprint('parent', os.getppid(), 'read', sys.stdin.readline().strip())\n"
            "sys.stdout.flush()\nsys.exit(5)")
    result = subprocess.run(launcher(*(["--prefix-output"] if prefix else []), "-np", "1", sys.executable, "-c",
                                     code), cwd=REPO, env=launcher_env(), input="hello\n", capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert result.returncode == 5, result.stderr
    assert re.search(r"parent (\d+) read hello", result.stdout), result.stdout
    assert "mxplugin-rank-end" not in result.stdout + result.stderr, result.stderr


def agent(*args, command, **kwargs):
    """Runs the agent with `command` (Python source) as its rank."""
    return subprocess.run([sys.executable, "-m", "mxplugin_run.rank_agent", *args, "--", sys.executable, "-c",
                           command], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


def record_of(stderr):
    from mxplugin_run.process_end import EndRecord

    records = [r for r in map(EndRecord.parse, stderr.splitlines()) if r is not None]
    assert len(records) == 1, stderr
    return records[0]


@pytest.mark.parametrize("elastic", [False, True], ids=["plain", "elastic"])
def test_the_agent_ends_as_mpiexec_must_see_it_and_records_the_end(elastic):
    """Note [A rank's agent]: a rank killed by a signal ends a plain job's
    agent by the same signal, an elastic one's with 128 + the signal; the
    record names the rank's pid, the signal, the phase it said last and its
    last line on stderr. A phase said by a process the rank started counts
    for nothing."""
    command = ("import os, signal, subprocess, sys\n"
               "from mxplugin_run import phases\n"
               "assert phases.tell('running')\n"
               "subprocess.run([sys.executable, '-c', 'from mxplugin_run import phases; "
               "assert not phases.tell(\"done\")'], check=True)\n"
               "phases.tell('leaving')\n"
               "print('pid', os.getpid(), flush=True)\n"
               "sys.stderr.write('last words\\n'); sys.stderr.flush()\n"
               "os.kill(os.getpid(), signal.SIGTERM)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PMI_RANK": "3"}
    result = agent(*(["--elastic"] if elastic else []), command=command, env=env)
    assert result.returncode == (128 + 15 if elastic else -15), result.stderr
    record = record_of(result.stderr)
    assert (record.rank, record.end.signal, record.end.code, record.phase, record.said) == (
        3, 15, None, "leaving", "last words"), record
    assert f"pid {record.pid}" in result.stdout, (record, result.stdout)


def test_the_agent_passes_an_exit_code_on_and_a_stop_to_the_rank():
    """An exit code comes back as it was; the launcher's SIGTERM to the
    agent reaches the rank once, which may handle it."""
    result = agent(command="import sys; sys.exit(7)", env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 7 and record_of(result.stderr).end.code == 7, result.stderr
    ready = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"agent-ready-{os.getpid()}")
    command = ("import os, signal, sys, time\n"
               "got = []\n"
               "signal.signal(signal.SIGTERM, lambda *a: got.append(1))\n"
               f"open({ready!r}, 'w').close()\n"
               "while not got:\n    time.sleep(0.01)\n"
               "time.sleep(0.2)\nsys.exit(40 + len(got))\n")
    child = subprocess.Popen([sys.executable, "-m", "mxplugin_run.rank_agent", "--", sys.executable, "-c", command],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(ready):
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.01)
        os.killpg(child.pid, signal.SIGTERM)  # the agent's group: the rank, in its own, hears it from the agent
        _, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 41, err
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if os.path.exists(ready):
            os.unlink(ready)


def test_an_elastic_agent_keeps_sigterm_and_sighup_from_its_rank(tmp_path):
    """Note [A rank's agent]: MPICH's proxy sends the agent SIGTERM right
    before SIGKILL, and a remote shell's end SIGHUP; an elastic rank must
    outlive both. The agent passes SIGINT on (the user's stop), so the rank
    reads the signals it got once SIGINT came after the other two: had the
    agent passed those on, they would have been sent before, or in the same
    round of the agent's handlers as, SIGINT."""
    release = tmp_path / "release"
    command = ("import os, signal, sys, time\n"
               "got = []\n"
               "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
               "    signal.signal(s, lambda n, f: got.append(signal.Signals(n).name))\n"
               "print('ready', flush=True)\n"
               "while 'SIGINT' not in got:\n    time.sleep(0.01)\n"
               "print('got SIGINT', flush=True)\n"
               f"while not os.path.exists({str(release)!r}):\n    time.sleep(0.01)\n"
               "print('signals', ' '.join(got), flush=True)\n")
    child = subprocess.Popen([sys.executable, "-m", "mxplugin_run.rank_agent", "--elastic", "--", sys.executable,
                              "-c", command], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        assert child.stdout.readline() == "ready\n", child.communicate(timeout=TIMEOUT)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            os.kill(child.pid, sig)
        assert child.stdout.readline() == "got SIGINT\n", child.communicate(timeout=TIMEOUT)
        release.touch()
        out, err = child.communicate(timeout=TIMEOUT)
        assert out == "signals SIGINT\n" and child.returncode == 0, (out, err, child.returncode)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def keeper_of(rank):
    """The pid of the process that holds a pidfd of `rank` (its segments' keeper), or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
                    with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                        if f"Pid:\t{rank}\n" in f.read():
                            return int(pid)
        except OSError:
            continue
    return None


def scans_waited(pid):
    """How often process `pid` has waited (its voluntary context switches):
    the keeper waits once a scan."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("voluntary_ctxt_switches")))


def test_an_elastic_ranks_segments_are_removed_once_it_ends_though_its_agent_was_killed_first():
    """Note [Segments of a rank that ended]: the rank's keeper is started
    by the rank's own process before it execs, so it is there whenever the
    agent is killed (MPICH's proxy does so when mpiexec is gone)."""
    name = f"mpich_shm_test{os.getpid()}_agent"
    command = ("import mmap, os, time\n"
               f"fd = os.open('/dev/shm/{name}', os.O_CREAT | os.O_RDWR, 0o600)\n"
               "os.ftruncate(fd, 4096)\n"
               "kept = mmap.mmap(fd, 4096)\n"
               "print('mapped', os.getpid(), flush=True)\n"
               "while True:\n    time.sleep(1)\n")
    child = subprocess.Popen([sys.executable, "-m", "mxplugin_run.rank_agent", "--elastic", "--", sys.executable,
                              "-c", command], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    rank = None
    try:
        said = child.stdout.readline().split()
        assert said[:1] == ["mapped"], (said, child.stderr.read() if child.poll() is not None else "")
        rank = int(said[1])
        child.kill()
        child.wait(timeout=TIMEOUT)
        keeper = keeper_of(rank)
        assert keeper is not None, "no process watches the rank"
        waits = scans_waited(keeper)
        while scans_waited(keeper) < waits + 2:  # a whole scan since the rank mapped the segment
            time.sleep(0.05)
        assert os.path.exists(f"/dev/shm/{name}")  # the rank lives on, and so does its segment
        os.kill(rank, signal.SIGKILL)
        rank = None
        deadline = time.monotonic() + TIMEOUT
        while os.path.exists(f"/dev/shm/{name}"):
            assert time.monotonic() < deadline, f"/dev/shm/{name} still there {TIMEOUT} s after the rank's end"
            time.sleep(0.05)
    finally:
        if rank is not None:
            os.kill(rank, signal.SIGKILL)
        if child.poll() is None:
            child.kill()
            child.wait()
        if os.path.exists(f"/dev/shm/{name}"):
            os.unlink(f"/dev/shm/{name}")


def test_a_process_the_rank_left_holding_its_output_does_not_keep_the_agent(tmp_path):
    """Note [A rank's agent]: the agent holds the rank's descriptors to
    MPICH's proxy, so it must end with the rank: a process the rank started
    that still holds the rank's output does not keep it (nor the descriptor
    the rank started with) past the rank's end."""
    done = tmp_path / "done"
    holder = f"import os, time\nwhile not os.path.exists({str(done)!r}):\n    time.sleep(0.05)\n"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {holder!r}])\n"
    read_end, write_end = os.pipe()
    child = subprocess.Popen([sys.executable, "-m", "mxplugin_run.rank_agent", "--", sys.executable, "-c", code],
                             pass_fds=(write_end,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    os.close(write_end)
    try:
        assert child.wait(timeout=TIMEOUT) == 0
        ready = select.select([read_end], [], [], TIMEOUT)[0]
        assert ready and os.read(read_end, 1) == b"", "the rank's descriptor outlived it and its agent"
    finally:
        done.touch()
        os.close(read_end)
        if child.poll() is None:
            child.kill()
            child.wait()
