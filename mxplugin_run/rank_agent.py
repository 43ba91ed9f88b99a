"""The process that stands beside each rank, in plain and elastic jobs
alike: python -m mxplugin_run.rank_agent [--prefix] [--elastic] -- CMD ...

Note [A rank's agent]: mpiexec starts the agent; the agent starts the rank
(CMD) as its child and stays its parent until it ends. It
- passes the rank's output on as whole lines (Note [Whole lines]);
- reads the phases the rank says before it enters them (phases.py: starting,
  running, leaving, done) from a pipe of its own;
- knows how the rank ended (its wait status: an exit code or a signal,
  never a guess) and writes one end record (process_end.py: rank, host,
  pid, time, the end, the last phase, the rank's last line on stderr) as
  one line to stderr, where the launcher reads it; an elastic rank's agent
  posts the end to the launcher's service as well;
- passes the launcher's stop (SIGINT, SIGTERM, SIGHUP) on to the rank.
It holds the rank's descriptor to MPICH's proxy (PMI_FD) as the rank does,
so the proxy hears of the end only when the agent exits, after the record
is written: the first end in time is always told, though the proxy then
stops the other ranks at once. The rank runs in a process group of its own
(a session, in an elastic job), so a signal to the agent's group is passed
on once, not twice.

How the agent ends is what mpiexec must see:
- plain job: as the rank (the same code, or the same signal, raised on
  itself): mpiexec ends the job when a rank dies, as users expect. The rank
  dies with the agent (PR_SET_PDEATHSIG), should mpiexec kill the agent.
- elastic job (--elastic): with a plain code (128 + the signal): a signal
  would make MPICH tear the whole world down, survivors included, though
  they hold the state to hand over. The rank outlives the agent (MPICH
  kills the other ranks' process groups when a whole host is lost; the
  rank must live to hand over). The agent also says hello to the service
  once the rank runs (Note [Hosts a world cannot start on] in
  elastic/start_failures.py) and starts the keeper of its MPICH segments
  (Note [Segments of a rank that ended] in elastic/segments.py).

Note [Whole lines]: MPICH's launcher forwards each rank's output in the
pieces the rank wrote it, as they arrive, so two ranks' pieces interleave
within a line ("STEP 45 rank=1STEP 45 rank=0", then an empty line): an
unbuffered Python print() writes its text and its newline separately, and
C's stdio or a full buffer cut lines anywhere. So the agent gives the rank
pipes as stdout and stderr and writes whole lines only, each batch of them
in one write() of at most PIPE_BUF bytes, which a pipe never splits. A line
longer than that may still be split by another rank's. A partial line (a
prompt, a progress bar redrawn with '\\r', which ends a piece like '\\n') is
written once the rank has printed nothing for PARTIAL_AFTER_SECONDS, so it
is seen late rather than never. Once the rank has ended, what it left in
the pipes is passed on; what a process it left behind prints later is not.
With --prefix, each line starts with the rank as horovodrun prints it:
"[1]<stdout>:" or "[1]<stderr>:".

It also answers, through the remote shell, whether a host reaches the
elastic launcher (Note [Hosts that cannot reach the launcher] in
elastic/driver.py): python -m mxplugin_run.rank_agent --reach ADDRESS PORT
SECONDS exits 0 when a TCP connection opens within SECONDS, else 1, saying
why. Standard library and the launcher's own modules only: no MXNet."""
import ctypes
import os
import resource
import select
import signal
import socket
import sys
import time

from mxplugin_run import phases
from mxplugin_run.process_end import EndRecord, ProcessEnd
from mxplugin_run.protocol import RELAYED

PARTIAL_AFTER_SECONDS = 0.2
PIPE_BUF = 4096  # POSIX's least guarantee: writes up to this size are never split
READ_BYTES = 65536
# Passed on to the rank: the launcher's stop.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Dispositions Python sets for itself, which an exec'd command would inherit
# (a C program ignoring SIGPIPE would not stop when its output goes away).
_PYTHON_IGNORES = ("SIGPIPE", "SIGXFSZ")
_PR_SET_PDEATHSIG = 1


def rank_from_environment():
    """This rank's number as the process manager gives it, or None."""
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(name, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return None


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
    """One output of the agent (its stdout or stderr): whole lines out,
    batched into writes of at most PIPE_BUF bytes."""

    def __init__(self, fd, prefix):
        self.fd, self.prefix, self.gone = fd, prefix, False
        self.last = b""  # the last non-empty line written (the rank's last words, on stderr)

    def write(self, data):
        if not data:
            return
        batch = b""
        for line in split_lines(data):
            if line.strip():
                self.last = line
            line = self.prefix + line
            if batch and len(batch) + len(line) > PIPE_BUF:
                self._write(batch)
                batch = b""
            batch += line
        self._write(batch)

    def _write(self, data):
        if self.gone:
            return
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            # The launcher's end is gone (its host lost): keep draining the
            # rank's pipe so that it never blocks on a full one.
            self.gone = True


class Output:
    """The rank's two pipes, read into their Sinks as whole lines."""

    def __init__(self, sinks):
        self.sinks = dict(sinks)  # read end -> Sink
        self.pending = {fd: b"" for fd in self.sinks}

    def read(self, fd):
        """Reads what `fd` holds; False at its end (it is closed then)."""
        try:
            chunk = os.read(fd, READ_BYTES)
        except BlockingIOError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            self.sinks.pop(fd).write(self.pending.pop(fd))
            os.close(fd)
            return False
        done, self.pending[fd] = whole_lines(self.pending[fd] + chunk)
        if len(self.pending[fd]) >= PIPE_BUF:  # a line this long is cut anyway
            done, self.pending[fd] = done + self.pending[fd], b""
        self.sinks[fd].write(done)
        return True

    def partial(self):
        return any(self.pending.values())

    def flush_partial(self):
        for fd, sink in self.sinks.items():
            sink.write(self.pending[fd])
            self.pending[fd] = b""

    def drain(self):
        """Everything the pipes hold now (the rank has ended), then the
        partial lines; a pipe still held by a process the rank left
        behind is left there."""
        for fd in list(self.sinks):
            os.set_blocking(fd, False)
            while fd in self.sinks and self.read(fd):
                try:
                    if not select.select([fd], [], [], 0)[0]:
                        break
                except OSError:
                    break
        self.flush_partial()


class Phases:
    """The phases the rank says, read from the agent's pipe."""

    def __init__(self, fd):
        self.fd, self.phase, self.pending = fd, phases.STARTING, b""

    def read(self):
        """Reads what the pipe holds; False at its end."""
        try:
            chunk = os.read(self.fd, 4096)
        except BlockingIOError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            return False
        *said, self.pending = (self.pending + chunk).split(b"\n")
        for word in said:
            word = word.decode("ascii", "replace").strip()
            if word in phases.PHASES:
                self.phase = word
        return True

    def drain(self):
        os.set_blocking(self.fd, False)
        while self.read():
            if not select.select([self.fd], [], [], 0)[0]:
                break


def _die_with_parent(parent):
    """The calling process gets SIGKILL when `parent` dies (Linux); ends at
    once if it has died already."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def start_rank(argv, elastic, out_write, err_write, phase_write, closed):
    """Forks and execs the rank; returns its pid (in the agent)."""
    agent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        if elastic:
            os.setsid()
        else:
            os.setpgid(0, 0)
            _die_with_parent(agent)
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        for name in _PYTHON_IGNORES:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.dup2(out_write, 1)
        os.dup2(err_write, 2)
        for fd in closed + [out_write, err_write]:
            os.close(fd)
        os.set_inheritable(phase_write, True)
        os.environ[phases.ENV_AGENT] = f"{phase_write}:{agent}"
        os.environ[RELAYED] = "1"
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc}\n".encode())
    os._exit(127)


def wait_for_end(pid, output, said):
    """Passes the rank's output on and reads its phases until it ends;
    (its wait status, when it ended)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # no pidfd here: asked every tenth of a second
    poller = select.poll()
    watched = list(output.sinks) + [said.fd] + ([pidfd] if pidfd is not None else [])
    for fd in watched:
        poller.register(fd, select.POLLIN)
    while True:
        if pidfd is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, time.time()
        timeout = PARTIAL_AFTER_SECONDS if output.partial() else None
        if pidfd is None:
            timeout = min(timeout or 0.1, 0.1)
        events = poller.poll(None if timeout is None else int(timeout * 1000))
        if not events and output.partial():
            output.flush_partial()
        for fd, _ in events:
            if fd == pidfd:
                ended = time.time()
                _, status = os.waitpid(pid, 0)
                os.close(pidfd)
                return status, ended
            if fd == said.fd:
                if not said.read():
                    poller.unregister(fd)
            elif not output.read(fd):
                poller.unregister(fd)


def end_as(end, elastic):
    """Ends the agent as mpiexec must see it (Note [A rank's agent])."""
    if end.signal is not None and not elastic:
        try:
            signal.signal(end.signal, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: theirs always
            pass
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the rank's own dump, if any, is the one
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), end.signal)
    os._exit(128 + end.signal if end.signal is not None else end.code)


def run(argv, prefix, elastic):
    """Runs rank command `argv` to its end; never returns."""
    children = []
    stops = []  # a stop that came before the rank existed

    def forward(signum, _frame):
        if not children:
            stops.append(signum)
            return
        try:
            os.kill(children[0], signum)
        except ProcessLookupError:
            pass

    # Handlers first: a stop between the start and them would end the agent alone.
    for sig in FORWARDED:
        signal.signal(sig, forward)
    if elastic:
        # With -disable-auto-cleanup MPICH's launcher sends SIGUSR1 to the
        # ranks still running when one ends; its default action would end
        # the agent, though the ranks find lost peers themselves. (The rank
        # inherits the disposition: ignoring it there is as right.)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    phase_read, phase_write = os.pipe()
    pid = start_rank(argv, elastic, out_write, err_write, phase_write, [out_read, err_read, phase_read])
    children.append(pid)
    for fd in (out_write, err_write, phase_write):
        os.close(fd)
    for signum in stops:
        forward(signum, None)
    rank = rank_from_environment()
    tag = (lambda stream: f"[{'?' if rank is None else rank}]<{stream}>:".encode()) if prefix else (lambda s: b"")
    errors = Sink(2, tag("stderr"))
    output = Output({out_read: Sink(1, tag("stdout")), err_read: errors})
    said = Phases(phase_read)
    if elastic:
        from mxplugin_run.elastic import agent_requests, segments

        segments.clean_up_after(pid)  # Note [Segments of a rank that ended]
        agent_requests.say_hello(rank)  # after the start: the rank loads meanwhile
    status, ended = wait_for_end(pid, output, said)
    said.drain()
    output.drain()
    end = ProcessEnd.of_wait_status(status)
    record = EndRecord(rank, socket.gethostname(), pid, ended, end, said.phase,
                       errors.last.decode("utf-8", "replace").strip())
    try:
        os.write(2, record.line().encode())
    except OSError:  # the launcher's end is gone
        pass
    if elastic:
        agent_requests.report_end(rank, end, said.phase)
    end_as(end, elastic)


def reach(address, port, seconds):
    """Exit code of the check whether ADDRESS:PORT opens within SECONDS."""
    try:
        socket.create_connection((address, int(port)), timeout=float(seconds)).close()
    except OSError as exc:
        why = exc.strerror or str(exc) or type(exc).__name__
        sys.stderr.write(f"cannot connect to the launcher at {address}:{port}: {why}\n")
        return 1
    return 0


USAGE = ("usage: python -m mxplugin_run.rank_agent [--prefix] [--elastic] -- CMD [ARGS...]\n"
         "       python -m mxplugin_run.rank_agent --reach ADDRESS PORT SECONDS")


def main(argv):
    if argv[:1] == ["--reach"] and len(argv) == 4:
        return reach(*argv[1:])
    prefix = elastic = False
    while argv and argv[0] in ("--prefix", "--elastic"):
        prefix, elastic = prefix or argv[0] == "--prefix", elastic or argv[0] == "--elastic"
        argv = argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0].startswith("--") and argv[0] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    run(argv, prefix, elastic)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
