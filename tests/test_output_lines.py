"""What ranks print reaches mxplugin-run's output in whole lines (Note
[Whole lines], mxplugin_run/line_relay.py), optionally tagged with the rank."""
import os
import re
import select
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
def test_exit_code_pid_and_stdin_are_the_commands_own(prefix):
    """The relay execs the command in its place: mpiexec's pid is the
    command's, its exit code comes back, and piped stdin reaches rank 0."""
    code = ("import os, sys\nprint('pid', os.getpid(), 'parent', os.getppid(), 'read', sys.stdin.readline().strip())\n"
            "sys.exit(5)")
    result = subprocess.run(launcher(*(["--prefix-output"] if prefix else []), "-np", "1", sys.executable, "-c",
                                     code), cwd=REPO, env=launcher_env(), input="hello\n", capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert result.returncode == 5, result.stderr
    m = re.search(r"pid (\d+) parent (\d+) read hello", result.stdout)
    assert m, result.stdout
    with open(f"/proc/{m.group(2)}/cmdline", "rb") if os.path.exists(f"/proc/{m.group(2)}") else open(os.devnull,
                                                                                                       "rb") as f:
        parent = f.read()
    # The parent is MPICH's proxy (or gone already), never the relay.
    assert b"line_relay" not in parent, parent


def test_the_relay_keeps_none_of_the_commands_other_descriptors(tmp_path):
    """Note [The relay holds only the output] (line_relay.py): a descriptor
    the command starts with (MPICH's PMI socket, say) closes when the command
    ends, though a process it started still holds its output, and so keeps
    the relay's reader running."""
    done = tmp_path / "done"
    holder = f"import os, time\nwhile not os.path.exists({str(done)!r}):\n    time.sleep(0.05)\n"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {holder!r}])\n"
    read_end, write_end = os.pipe()
    child = subprocess.Popen([sys.executable, "-m", "mxplugin_run.line_relay", "--", sys.executable, "-c", code], pass_fds=(write_end,),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write_end)
    try:
        assert child.wait(timeout=TIMEOUT) == 0
        ready = select.select([read_end], [], [], 5)[0]
        assert ready and os.read(read_end, 1) == b"", "the command's descriptor outlived it (held by the relay)"
    finally:
        done.touch()
        os.close(read_end)
        if child.poll() is None:
            child.kill()
            child.wait()
