"""The suite's log and its subprocesses: one progress line per step on the
console, everything (every command and all its output) in the log file, and
commands run with a time limit that stops exactly what they started."""
import os
import signal
import subprocess
import time

TAIL_CHARS = 4000  # of a step's output kept in the results and shown on failure


class SuiteLog:
    def __init__(self, path):
        self.path = path
        open(path, "w").close()
        # Append mode: the commands write through the same file, and every
        # write, theirs and ours, then lands at the end.
        self.file = open(path, "a", buffering=1)

    def note(self, text):
        """A line in the log only."""
        self.file.write(text + "\n")

    def say(self, text):
        """A line on the console and in the log."""
        print(text, flush=True)
        self.note(text)

    def run(self, cmd, env, timeout, cwd):
        """Runs `cmd` with its output appended to the log; returns
        (returncode or None on timeout, seconds, the output's tail)."""
        self.note(f"$ {' '.join(cmd)}  (cwd {cwd}, time limit {timeout:.0f} s)")
        self.file.flush()
        start_offset = os.path.getsize(self.path)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, stdout=self.file, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                    start_new_session=True)
        except OSError as exc:
            self.note(f"could not start: {exc}")
            return 127, 0.0, str(exc)
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            stop_tree(proc.pid)
            proc.wait()
            rc = None
        seconds = time.monotonic() - start
        tail = self._read_from(start_offset)
        self.note(f"[exit {rc if rc is not None else 'none: stopped at the time limit'}, {seconds:.1f} s]")
        return rc, seconds, tail

    def _read_from(self, offset):
        with open(self.path, "rb") as f:
            f.seek(max(offset, os.path.getsize(self.path) - TAIL_CHARS * 4))
            return f.read().decode(errors="replace")[-TAIL_CHARS:]

    def close(self):
        self.file.close()


def children_of(pid):
    """Every process whose parent chain leads to `pid` (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # the command name (field 2) may hold spaces: the parent follows its closing ')'
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def signal_each(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_tree(pid):
    """Kills `pid` and everything it started, by id. Its session alone is not
    enough: the test harness starts every mpiexec in a session of its own.
    The tree is frozen first (a stopped process neither forks nor exits, so
    no child is handed to init before it is found), then killed."""
    frozen = set()
    while True:
        found = ({pid} | children_of(pid)) - frozen
        if not found:
            break
        signal_each(found, signal.SIGSTOP)
        frozen |= found
    signal_each(frozen, signal.SIGKILL)
