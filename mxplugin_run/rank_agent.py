"""The process that stands beside each rank, in plain and elastic jobs
alike: python -m mxplugin_run.rank_agent [--prefix] [--elastic] -- CMD ...

Note [A rank's agent]: mpiexec starts the agent; the agent starts the rank
(CMD) as its child and stays its parent until it ends. It
- passes the rank's output on as whole lines (Note [Whole lines] in
  whole_lines.py), through a reader of its own that outlives it (Note [The
  reader outlives the agent], the same file);
- reads the phases the rank says before it enters them (phases.py: starting,
  running, leaving, done) from a pipe of its own;
- knows how the rank ended (its wait status: an exit code or a signal,
  never a guess) and has one end record written (process_end.py: rank,
  host, pid, time, the end, the last phase, the rank's last line on
  stderr) as one line to stderr, after the rank's last lines, where the
  launcher reads it; an elastic rank's agent
  posts the end to the launcher's service as well;
- passes the launcher's stop on to the rank: SIGINT, SIGTERM and SIGHUP in
  a plain job, SIGINT only in an elastic one. There MPICH's proxy sends
  the agent SIGTERM right before its SIGKILL when mpiexec is gone (as when
  a host is lost), and a remote shell's end brings SIGHUP; passed on, either
  would end a rank that must live to hand its state over, whenever the
  agent ran between the two signals. So an elastic agent ignores them: the
  launcher stops elastic ranks through its service, and a SIGTERM meant
  for the rank (a scheduler's) is sent to the rank as well.
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
  elastic/start_failures.py); the rank's process starts the keeper of its
  MPICH segments before it execs the rank's command (Note [Segments of a
  rank that ended] in elastic/segments.py).

It also answers, through the remote shell, whether a host reaches the
elastic launcher (Note [Hosts that cannot reach the launcher] in
elastic/driver.py): python -m mxplugin_run.rank_agent --reach ADDRESS PORT
SECONDS exits 0 when a TCP connection opens within SECONDS, else 1, saying
why. Standard library and the launcher's own modules only: no MXNet."""
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time

from mxplugin_run import phases
from mxplugin_run.process_end import ProcessEnd
from mxplugin_run.protocol import RELAYED
from mxplugin_run.timeouts import AGENT_RECORD_S
from mxplugin_run.whole_lines import process_manager_number, start_reader

# Passed on to the rank: the launcher's stop; an elastic agent ignores the
# others (Note [A rank's agent]).
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ELASTIC_FORWARDED = (signal.SIGINT,)
# Dispositions Python sets for itself, which an exec'd command would inherit
# (a C program ignoring SIGPIPE would not stop when its output goes away).
_PYTHON_IGNORES = ("SIGPIPE", "SIGXFSZ")
_PR_SET_PDEATHSIG = 1


def rank_from_environment():
    """This rank's number as the process manager gives it, or None."""
    return process_manager_number(("PMI_RANK", "OMPI_COMM_WORLD_RANK"))


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


def start_rank(argv, elastic, out_write, err_write, phase_write, closed, before_exec=None):
    """Forks and execs the rank, calling `before_exec` in it first; returns
    its pid (in the agent)."""
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
        if before_exec is not None:
            before_exec()
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc}\n".encode())
    os._exit(127)


def wait_for_end(pid, said):
    """Reads the rank's phases until it ends; (its wait status, when it ended)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # no pidfd here: asked every tenth of a second
    poller = select.poll()
    for fd in [said.fd] + ([pidfd] if pidfd is not None else []):
        poller.register(fd, select.POLLIN)
    while True:
        if pidfd is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, time.time()
        for fd, _ in poller.poll(100 if pidfd is None else None):
            if fd == pidfd:
                ended = time.time()
                _, status = os.waitpid(pid, 0)
                os.close(pidfd)
                return status, ended
            if not said.read():
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


def run(argv, prefix, elastic, timestamp=False, output_dir=None):
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
    passed_on = ELASTIC_FORWARDED if elastic else FORWARDED
    for sig in FORWARDED:
        signal.signal(sig, forward if sig in passed_on else signal.SIG_IGN)
    if elastic:
        # With -disable-auto-cleanup MPICH's launcher sends SIGUSR1 to the
        # ranks still running when one ends; its default action would end
        # the agent, though the ranks find lost peers themselves. (The rank
        # inherits the disposition: ignoring it there is as right.)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if elastic:  # loaded before the rank starts: MPICH's proxy may kill the agent any moment after
        from mxplugin_run.elastic import agent_requests, segments
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    phase_read, phase_write = os.pipe()
    facts_read, facts_write = os.pipe()  # the agent tells the reader the rank's end
    done_read, done_write = os.pipe()    # the reader closes its end once the record is written
    pid = start_rank(argv, elastic, out_write, err_write, phase_write,
                     [out_read, err_read, phase_read, facts_read, facts_write, done_read, done_write],
                     # Note [Segments of a rank that ended]: watched before it can make any
                     segments.keep_before_exec if elastic else None)
    children.append(pid)
    for fd in (out_write, err_write, phase_write):
        os.close(fd)
    for signum in stops:
        forward(signum, None)
    rank = rank_from_environment()
    start_reader(out_read, err_read, facts_read, done_write, rank, prefix, timestamp, output_dir, append=elastic)
    for fd in (out_read, err_read, facts_read, done_write):
        os.close(fd)
    said = Phases(phase_read)
    if elastic:
        agent_requests.say_hello(rank)  # after the start: the rank loads meanwhile
    status, ended = wait_for_end(pid, said)
    said.drain()
    facts = json.dumps({"pid": pid, "time": ended, "status": status, "phase": said.phase})
    try:
        os.write(facts_write, (facts + "\n").encode())
        select.select([done_read], [], [], AGENT_RECORD_S)  # Note [The reader outlives the agent]
    except OSError:  # the reader is gone
        pass
    end = ProcessEnd.of_wait_status(status)
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


USAGE = ("usage: python -m mxplugin_run.rank_agent [--prefix] [--timestamp] [--output-dir DIR] [--elastic] -- "
         "CMD [ARGS...]\n"
         "       python -m mxplugin_run.rank_agent --reach ADDRESS PORT SECONDS")


def main(argv):
    if argv[:1] == ["--reach"] and len(argv) == 4:
        return reach(*argv[1:])
    flags, output_dir = set(), None
    while argv and argv[0] in ("--prefix", "--elastic", "--timestamp", "--output-dir"):
        if argv[0] == "--output-dir":
            if len(argv) < 2:
                break
            output_dir, argv = argv[1], argv[2:]
            continue
        flags.add(argv[0])
        argv = argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0].startswith("--"):
        print(USAGE, file=sys.stderr)
        return 2
    run(argv, "--prefix" in flags, "--elastic" in flags, "--timestamp" in flags, output_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
