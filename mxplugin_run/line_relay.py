"""Runs one rank's command so that every line it prints reaches the
launcher's output whole: python -m mxplugin_run.line_relay [--prefix] -- CMD ...

Note [Whole lines]: MPICH's launcher forwards each rank's output in the
pieces the rank wrote it, as they arrive, so two ranks' pieces interleave
within a line ("STEP 45 rank=1STEP 45 rank=0", then an empty line): an
unbuffered Python print() writes its text and its newline separately, and
C's stdio or a full buffer cut lines anywhere. So every rank starts behind
this relay. It gives the command pipes as stdout and stderr and execs it in
its own place, so the command keeps the pid, the signals and the exit code
mpiexec knows, and stdin untouched; a detached grandchild reads the pipes
and writes whole lines only, each batch of them in one write() of at most
PIPE_BUF bytes, which a pipe never splits. A line longer than that may
still be split by another rank's. A partial line (a prompt, a progress bar
redrawn with '\\r', which ends a piece like '\\n') is written once the
command has printed nothing for PARTIAL_AFTER_SECONDS, so it is seen late
rather than never.

The grandchild keeps none of the command's other descriptors (Note [The
relay holds only the output]).

Note [The relay holds only the output]: forked before the exec, the
grandchild would inherit everything the command is started with, MPICH's
PMI socket (PMI_FD) among them. MPICH's proxy learns that a rank ended
without finalising (a crash: it then stops the job) from that socket's
closing; held by the relay, it would close only when the relay ends, which
is after the command and after whatever still holds the command's output (a
process it started). So the grandchild closes all but its own stdout and
stderr and the two pipes, and reads stdin from /dev/null.

With --prefix, each line starts with the rank as horovodrun prints it:
"[1]<stdout>:" or "[1]<stderr>:".

Run by path with -S, not as a module: it needs only the standard library,
and importing mxplugin's package would load MXNet, seconds per rank."""
import os
import select
import signal
import socket
import sys
import time

from mxplugin_run.protocol import RANK_MARKER, RELAYED

PARTIAL_AFTER_SECONDS = 0.2
PIPE_BUF = 4096  # POSIX's least guarantee: writes up to this size are never split
READ_BYTES = 65536
# Dispositions Python sets for itself, which an exec'd command would inherit
# (a C program ignoring SIGPIPE would not stop when its output goes away).
_PYTHON_IGNORES = ("SIGPIPE", "SIGXFSZ")


def rank_from_environment():
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        if name in os.environ:
            return os.environ[name]
    return "?"


def whole_lines(data):
    """(the complete lines in `data`, the partial one left over)."""
    end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    return data[:end], data[end:]


def split_lines(data):
    """Lines of `data`, each with its '\\n' or '\\r'."""
    lines, start = [], 0
    for i, byte in enumerate(data):
        if byte in (10, 13):
            lines.append(data[start:i + 1])
            start = i + 1
    if start < len(data):
        lines.append(data[start:])
    return lines


class Sink:
    """One output of the relay (its stdout or stderr): whole lines out,
    batched into writes of at most PIPE_BUF bytes."""

    def __init__(self, fd, prefix):
        self.fd, self.prefix, self.gone = fd, prefix, False

    def write(self, data):
        if not data or self.gone:
            return
        batch = b""
        for line in split_lines(data):
            line = self.prefix + line
            if batch and len(batch) + len(line) > PIPE_BUF:
                self._write(batch)
                batch = b""
            batch += line
        self._write(batch)

    def _write(self, data):
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            # The launcher's end is gone (its host lost): keep draining the
            # command's pipe so that it never blocks on a full one.
            self.gone = True


def watch_command(pid):
    """A descriptor readable once process `pid` has ended (None where the
    kernel has no pidfd: its output's end stands in)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_status(pid):
    """The raw wait status of process `pid` if it has ended and its parent
    (mpiexec's proxy) has not reaped it yet (field 52 of /proc/PID/stat),
    else None: known for a rank killed by a signal, often not for one that
    exits, which the proxy reaps within microseconds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if fields[0] != b"Z" or len(fields) < 50:  # fields[0] is field 3 (the state)
        return None
    return int(fields[49])


def say_ended(pid):
    # With the time it was seen: lines of several relays may reach the
    # launcher in another order than their commands ended.
    status = wait_status(pid)
    os.write(2, f"{RANK_MARKER} {rank_from_environment()} {pid} {socket.gethostname()} {time.time():.6f} "
                f"{'?' if status is None else status}\n".encode())


# Note [Seeing a rank end]: the launcher names the rank that ended first by
# the times the relays saw their commands end (rank_deaths.py), and mpiexec
# stops the others within milliseconds of the first end. The reader of the
# output would see it late whenever the end comes right after output, as a
# crash often does: busy writing the last lines, it would take the time only
# after mpiexec had stopped another rank and that rank's relay had taken its
# own. So a process of its own, doing nothing else, waits for the end and
# says it. Woken, it may still wait for a CPU longer than mpiexec takes to
# kill another rank and that rank's watcher to run, so where it may, it runs
# at real-time priority (_run_first).
def _run_first():
    """Real-time priority for the watcher where allowed (root, or
    CAP_SYS_NICE): woken by the end, it runs at once instead of waiting for
    a CPU behind busy processes. It blocks all its life but for the one line
    it writes, so it takes nothing from the ranks."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (AttributeError, OSError):
        pass


def watch_end(command_pid):
    """Starts the process that says when the command ends; whether it
    could (no pidfd: the reader says it when the output ends)."""
    pidfd = watch_command(command_pid)
    if pidfd is None:
        return False
    if os.fork() == 0:
        keep_only({2, pidfd})
        _run_first()
        waiting = select.poll()
        waiting.register(pidfd, select.POLLIN)
        while not waiting.poll():
            pass
        say_ended(command_pid)
        os._exit(0)
    os.close(pidfd)
    return True


def relay(sources, command_pid, end_watched):
    """Copies each source pipe to its Sink as whole lines until every source
    is closed (the command and whatever inherited its output have ended);
    says then that the command ended, unless `end_watched` (watch_end)."""
    pending = {fd: b"" for fd in sources}
    poller = select.poll()
    for fd in sources:
        poller.register(fd, select.POLLIN)
    while sources:
        partial = any(pending[fd] for fd in sources)
        events = poller.poll(int(PARTIAL_AFTER_SECONDS * 1000) if partial else None)
        if not events:  # quiet for a while: what is there is seen now
            for fd in sources:
                sources[fd].write(pending[fd])
                pending[fd] = b""
            continue
        for fd, _ in events:
            try:
                chunk = os.read(fd, READ_BYTES)
            except OSError:
                chunk = b""
            if not chunk:
                sources.pop(fd).write(pending.pop(fd))
                poller.unregister(fd)
                os.close(fd)
                continue
            done, pending[fd] = whole_lines(pending[fd] + chunk)
            if len(pending[fd]) >= PIPE_BUF:  # a line this long is cut anyway
                done, pending[fd] = done + pending[fd], b""
            sources[fd].write(done)
    if not end_watched:  # the command has ended, or soon will
        say_ended(command_pid)


def keep_only(keep):
    """Closes every descriptor of this process but those in `keep`; stdin
    becomes /dev/null."""
    low = 0
    for fd in sorted(keep) + [os.sysconf("SC_OPEN_MAX")]:
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    if 0 not in keep:
        os.open(os.devnull, os.O_RDONLY)  # the lowest free descriptor: 0


def start_relay(prefix):
    """Pipes for stdout and stderr, read by a detached grandchild (so the
    command, which takes this pid, has no child it did not start); returns
    the write ends."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    command_pid = os.getpid()  # the command's after the exec
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            # The stop of a job (Ctrl-C, SIGTERM to the process group) is the
            # command's to handle; the relay ends when its output does.
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):
                signal.signal(getattr(signal, name), signal.SIG_IGN)
            # A session of its own: when mpiexec kills the rank's process
            # group after a rank died, this one must live to say so (it ends
            # when its pipes do).
            os.setsid()
            keep_only({1, 2, out_read, err_read})  # Note [The relay holds only the output]
            rank = rank_from_environment()
            tag = (lambda stream: f"[{rank}]<{stream}>:".encode()) if prefix else (lambda stream: b"")
            end_watched = watch_end(command_pid)  # Note [Seeing a rank end]
            relay({out_read: Sink(1, tag("stdout")), err_read: Sink(2, tag("stderr"))}, command_pid, end_watched)
            os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    os.close(out_read)
    os.close(err_read)
    return out_write, err_write


def main(argv):
    prefix = argv[:1] == ["--prefix"]
    argv = argv[1:] if prefix else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.exit("line_relay.py: no command given")
    out_write, err_write = start_relay(prefix)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out_write, 1)
    os.dup2(err_write, 2)
    os.close(out_write)
    os.close(err_write)
    os.environ[RELAYED] = "1"
    for name in _PYTHON_IGNORES:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
