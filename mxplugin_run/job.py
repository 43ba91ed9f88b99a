"""Running mpiexec for mxplugin-run: in a session of its own, its output
passed through, and an interrupt (Ctrl-C, SIGTERM) turned into one orderly
stop with one line of explanation (SIGHUP too: a closed terminal).

Note [Quiet interrupts]: a Ctrl-C typed at the terminal goes to the whole
foreground process group. If mpiexec and the ranks were in it, every rank
would print a KeyboardInterrupt traceback, and MPICH's launcher its
"Sending Ctrl-C" lines, a BAD TERMINATION banner and, from its proxies,
`assert (!upstream_sock_closed) failed`: a correct stop that looks like a
crash. So mpiexec runs in its own session (the terminal's Ctrl-C reaches
only this launcher), this launcher asks it to stop the job once (SIGINT:
it stops every rank, on every host; a second interrupt forces it), says so
in one line, and from then on drops the stop's own noise from the job's
output: KeyboardInterrupt tracebacks and the launcher's banner (other
tracebacks printed while stopping keep their last line, the error). Anything
else the ranks print while stopping (a checkpoint saved in an `except
KeyboardInterrupt`) still comes through. A process in another
session cannot read the terminal, so when stdin is a terminal the job gets
no stdin."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

from mxplugin_run.timeouts import DRAIN_ABANDONED_S, DRAIN_S, FORCE_AFTER_S, GIVE_UP_AFTER_S
from mxplugin_run.hosts_not_reached import HostsNotReached
from mxplugin_run.process_end import END_MARKER
from mxplugin_run.protocol import LOST_PEERS_MARKER
from mxplugin_run.lost_hosts import LostHostsWatch, lost_peers
from mxplugin_run.rank_deaths import RankDeaths
from mxplugin_run.remote_shells import end, placed_hosts, remote_shells
from mxplugin_run.signal_wait import wait_for_exit

# Signals that stop the job: SIGHUP too, since in its own session the job
# would outlive a closed terminal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Lines MPICH's launcher prints when a job is stopped by a signal.
_LAUNCHER_NOISE = ("[mpiexec@", "[proxy:", "=====", "=   ", "YOUR APPLICATION TERMINATED", "This typically refers",
                   "Please see the FAQ", "Ctrl-C caught")


_REPORT_MARKERS = (END_MARKER.encode(), LOST_PEERS_MARKER.encode())
# The tag --prefix-output puts before each line of a rank.
_RANK_TAG = re.compile(r"^\[[0-9?]+\]<std(out|err)>:")


class _Pump(threading.Thread):
    """Copies one of the child's output pipes to ours as it comes; line by
    line, without the stop's noise, once the job is being stopped, and
    without the agents' end records and MPICH's banner (Note [Naming the
    rank that died] in rank_deaths.py)."""

    def __init__(self, source, sink, stream, stopping, deaths, on_unreachable=None, not_reached=None):
        super().__init__(daemon=True)
        self.source, self.sink, self.stream, self.stopping = source, sink, stream, stopping
        self.deaths = deaths
        self.on_unreachable = on_unreachable  # called with the hosts a rank's line says it cannot reach
        self.not_reached = not_reached  # reads what mpiexec says of hosts it cannot reach (hosts_not_reached.py)
        self.pending = b""
        self.sink_gone = False  # our output was closed (`| head`): keep draining, drop the rest

    def run(self):
        """Copies the pipe until mpiexec's end closes it."""
        while True:
            chunk = os.read(self.source.fileno(), 65536)
            if not chunk:
                break
            if self.not_reached is not None:
                self.not_reached(chunk)
            if self.stopping.is_set() or self.pending or self._may_hold_a_report(chunk):
                self.filter(chunk)
            else:
                self.write(chunk)
        self.filter(b"", final=True)
        if self.not_reached is not None:
            self.not_reached.flush()
        for text in self.deaths.flush(self.stream):
            self.write_line(text)

    def _may_hold_a_report(self, chunk):
        """Whether `chunk` must be read line by line: an agent's end record
        or a rank's lost-peers line or a banner may be in it (most output passes as it comes)."""
        return (any(marker in chunk for marker in _REPORT_MARKERS) or chunk.startswith(b"=") or b"\n=" in chunk
                or self.deaths.reading(self.stream))

    def write(self, data):
        """Copies bytes to our stream; after it is closed, drops them."""
        if data and not self.sink_gone:
            try:
                self.sink.write(data)
                self.sink.flush()
            except OSError:  # a closed pipe: mpiexec must not block on a full one
                self.sink_gone = True

    def filter(self, chunk, final=False):
        """Passes `chunk` on line by line (`final`: the output ended)."""
        lines = (self.pending + chunk).split(b"\n")
        last = lines.pop()
        self.pending = b"" if final else last
        for line in lines:
            self.line(line + b"\n")
        if final and last:  # the output ended within a line
            self.line(last + b"\n")

    def line(self, line):
        """One whole line (bytes): what RankDeaths keeps of it is written;
        a rank's lost-peers line is read, not written (Note [Lost hosts])."""
        text = line.decode("utf-8", "replace")
        report = lost_peers(text) if LOST_PEERS_MARKER in text else None
        if report is not None:
            if self.on_unreachable is not None and report["unreachable"]:
                self.on_unreachable({host for _, host in report["unreachable"]})
            before = text[:text.index(LOST_PEERS_MARKER)]  # a partial line of the rank's, joined to it
            if _RANK_TAG.sub("", before, count=1):
                self.write_line(before + "\n")
            return
        for kept in self.deaths.lines(self.stream, text):
            self.write_line(kept, line if kept is text else None)

    def write_line(self, text, raw=None):
        """Writes one line (its bytes `raw` when known), unless it is the stop's noise."""
        if not self.stopping.is_set() or not _stop_noise(text):
            self.write(raw if raw is not None else text.encode("utf-8", "replace"))


def _stop_noise(text):
    """Whether a line printed while the job stops is the stop's own noise.
    Ranks' tracebacks arrive interleaved line by line (each line whole,
    Note [Whole lines] in whole_lines.py), so this works on lines, not
    structure: a traceback printed while stopping is reduced to its last
    line, and dropped whole when that is KeyboardInterrupt. A rank's tag
    (--prefix-output) is not part of what is judged."""
    text = _RANK_TAG.sub("", text, count=1)
    rest = text.replace("Traceback (most recent call last):", "").replace("KeyboardInterrupt", "")
    return not rest.strip() or text.startswith(("  ",) + _LAUNCHER_NOISE)


def exit_code(returncode):
    """The shell's exit code for a Popen return code."""
    # Popen reports death by signal S as -S; shells report it as 128+S.
    return 128 - returncode if returncode < 0 else returncode


# Note [Bounded stops]: mpiexec ends only when every host's proxy has told
# it so, and a proxy on a host cut off from this machine never can: waiting
# for it would keep the launcher forever. So after an interrupt mpiexec gets
# FORCE_AFTER_S to stop the job; then the stop is forced: on_stop_overdue
# runs when given (an elastic launcher tells its ranks to end at once, which
# they do whatever they wait for), else mpiexec is asked again (it kills
# the ranks on the hosts it reaches; ranks stuck inside MPI do not see an
# interrupt until the call returns). After GIVE_UP_AFTER_S mpiexec is
# abandoned: killed with the remote shells it started (the launcher's end of
# each host's connection; what runs on a host cut off cannot be reached),
# naming the hosts left behind. The launcher exits within STOP_BOUND_S
# (the four: mxplugin_run/timeouts.py).
# The launcher's exit code when it gave up on mpiexec (not after an
# interrupt): the job failed, and mpiexec cannot say how.
EXIT_ABANDONED = 1
# Output still in the pipes after mpiexec ended is waited for DRAIN_S, and
# after mpiexec was abandoned (something left behind may hold them)
# DRAIN_ABANDONED_S.


class Job:
    """mpiexec running a job: started by run(), which returns the exit code
    for the shell (128 + the signal after an interrupt); OSError if it
    cannot start. `hosts` (in mpiexec's order) name the hosts left behind;
    `received` gets the interrupting signals; `on_interrupt` runs at the
    first, before the job is asked to stop; `on_stop_overdue` forces the
    stop when the job has not stopped FORCE_AFTER_S later (default: mpiexec
    is asked again); `unreached()`, if given, describes what is left
    running when mpiexec is abandoned (default: the hosts of its remote
    shells still running); `say_ends`: a line for each rank's end as its
    agent told it (--verbose). Note [Bounded stops]."""

    def __init__(self, command, env, prog, num_proc, hosts=(), received=None, on_interrupt=None,
                 on_stop_overdue=None, unreached=None, say_ends=False):
        self.command, self.env, self.prog, self.num_proc, self.hosts = command, env, prog, num_proc, list(hosts)
        self.received = [] if received is None else received
        self.on_interrupt, self.on_stop_overdue, self.unreached = on_interrupt, on_stop_overdue, unreached
        self.child = None
        self.started = threading.Event()
        self.ended = threading.Event()
        self.stopping = threading.Event()
        self.abandoned = False
        self.unreachable = set()  # hosts the ranks say they cannot reach (Note [Lost hosts])
        self.not_reached = HostsNotReached(placed_hosts(self.hosts, num_proc))  # what mpiexec says it cannot reach
        self.deaths = RankDeaths(self._say_end if say_ends else None)  # Note [Naming the rank that died]
        self.lock = threading.Lock()

    def _say_end(self, record):
        said = f" (its last line: {record.said})" if record.said and not record.end.clean else ""
        rank = "?" if record.rank is None else record.rank
        sys.stderr.write(f"{self.prog}: rank {rank} (pid {record.pid} on {record.host}) ended: {record.end}, "
                         f"phase {record.phase}{said}\n")
        sys.stderr.flush()

    def wait(self, timeout=None):
        """True once mpiexec has ended (or was abandoned), waiting up to `timeout`."""
        return self.ended.wait(timeout)

    def reported_unreachable(self):
        """The hosts the ranks said they cannot reach (Note [Lost hosts])."""
        with self.lock:
            return set(self.unreachable)

    def hosts_not_reached(self):
        """{host: why} of the hosts mpiexec said it could not reach (hosts_not_reached.py)."""
        return self.not_reached.hosts()

    def _add_unreachable(self, hosts):
        with self.lock:
            self.unreachable |= hosts

    def left_behind(self):
        """What an abandon leaves running: unreached(), else the hosts whose
        remote shells still run and those the ranks cannot reach."""
        if self.unreached is not None:
            return self.unreached()
        shells = remote_shells(self.child.pid, self.hosts, self.num_proc)
        return sorted(set(shells.values()) | self.unreachable)

    def abandon(self, why):
        """Kills mpiexec and its remote shells unless it has ended; says
        `why` and what is left behind. True if it did."""
        with self.lock:
            if not self.started.is_set() or self.ended.is_set() or self.abandoned:
                return False
            self.abandoned = True
            child = self.child
            left = self.left_behind()
            try:
                # Stopped first: its remote shells cannot end and be reaped
                # (their pids reused) between being found and being killed.
                os.kill(child.pid, signal.SIGSTOP)
                end(remote_shells(child.pid, self.hosts, self.num_proc))
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        said = f"; left behind: {', '.join(left)}" if left else ""
        sys.stderr.write(f"{self.prog}: {why}: abandoning mpiexec{said}\n")
        sys.stderr.flush()
        return True

    def _interrupt(self, signum, _frame):
        self.received.append(signum)
        if not self.stopping.is_set():
            self.stopping.set()
            if self.on_interrupt is not None:
                self.on_interrupt()
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            sys.stderr.write(f"{self.prog}: interrupted ({name}): stopping all {self.num_proc} ranks\n")
            sys.stderr.flush()
            threading.Thread(target=self._stop_in_time, daemon=True).start()
        self._tell_mpiexec()  # the second time: mpiexec forces the stop

    def _tell_mpiexec(self):
        try:
            self.child.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass

    def _stop_in_time(self):
        """Note [Bounded stops]."""
        if self.ended.wait(FORCE_AFTER_S):
            return
        if self.on_stop_overdue is not None:
            self.on_stop_overdue()
        else:
            self._tell_mpiexec()
        if not self.ended.wait(GIVE_UP_AFTER_S - FORCE_AFTER_S):
            self.abandon(f"the job has not stopped {GIVE_UP_AFTER_S:g} s after the interrupt")

    def run(self):
        """Runs mpiexec to its end; the exit code for the shell."""
        child = self.child = subprocess.Popen(
            self.command, env=self.env, stdin=subprocess.DEVNULL if os.isatty(0) else None,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.started.set()
        # A plain launch learns of lost hosts only from the ranks' lines; an
        # elastic one hears from its ranks (unreached) and needs no watch.
        plain = self.unreached is None
        watch = self._add_unreachable if plain else None
        pumps = [_Pump(child.stdout, sys.stdout.buffer, "out", self.stopping, self.deaths, watch,
                       self.not_reached.reader()),
                 _Pump(child.stderr, sys.stderr.buffer, "err", self.stopping, self.deaths, watch,
                       self.not_reached.reader())]
        previous = {sig: signal.signal(sig, self._interrupt) for sig in _STOP_SIGNALS}
        try:
            for pump in pumps:
                pump.start()
            if plain:
                LostHostsWatch(self).start()
            returncode = wait_for_exit(child)  # Note [Signals on other threads]
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            with self.lock:
                self.ended.set()
        # Output still in the pipes comes through; a process that outlived
        # mpiexec and still holds them does not keep the launcher waiting.
        deadline = time.monotonic() + (DRAIN_ABANDONED_S if self.abandoned else DRAIN_S)
        for pump in pumps:
            pump.join(timeout=max(0.0, deadline - time.monotonic()))
        code = exit_code(returncode)
        if self.abandoned and not self.received:
            return EXIT_ABANDONED
        said, died = self.deaths.summary(self.num_proc, code)
        if said and plain and not self.received:  # an elastic launcher says what it lost itself
            for line in said:
                sys.stderr.write(f"{self.prog}: {line}\n")
            sys.stderr.flush()
            return died
        # After an interrupt: the ranks' own code when they chose one (they
        # caught it and exited 7, say); else the shell's 128 + signal. MPICH's
        # launcher reports ranks killed by signal N as exit code N.
        if self.received and code in {0, *_STOP_SIGNALS, *(128 + s for s in _STOP_SIGNALS), 128 + signal.SIGKILL}:
            return 128 + self.received[0]
        return code


def run_job(command, env, prog, num_proc, received=None, on_interrupt=None, hosts=(), say_ends=False):
    """Runs mpiexec's command line (Job); returns the exit code for the shell."""
    return Job(command, env, prog, num_proc, hosts=hosts, received=received, on_interrupt=on_interrupt,
               say_ends=say_ends).run()
