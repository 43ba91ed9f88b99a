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

# Signals that stop the job: SIGHUP too, since in its own session the job
# would outlive a closed terminal.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Lines MPICH's launcher prints when a job is stopped by a signal.
_LAUNCHER_NOISE = ("[mpiexec@", "[proxy:", "=====", "=   ", "YOUR APPLICATION TERMINATED", "This typically refers",
                   "Please see the FAQ")


# The tag --prefix-output puts before each line of a rank.
_RANK_TAG = re.compile(r"^\[[0-9?]+\]<std(out|err)>:")


class _Pump(threading.Thread):
    """Copies one of the child's output pipes to ours as it comes; once the
    job is being stopped, line by line without the stop's noise."""

    def __init__(self, source, sink, stopping):
        super().__init__(daemon=True)
        self.source, self.sink, self.stopping = source, sink, stopping
        self.pending = b""
        self.sink_gone = False  # our output was closed (`| head`): keep draining, drop the rest

    def run(self):
        while True:
            chunk = os.read(self.source.fileno(), 65536)
            if not chunk:
                break
            if self.stopping.is_set() or self.pending:
                self.filter(chunk)
            else:
                self.write(chunk)
        self.filter(b"", final=True)

    def write(self, data):
        if data and not self.sink_gone:
            try:
                self.sink.write(data)
                self.sink.flush()
            except OSError:  # a closed pipe: mpiexec must not block on a full one
                self.sink_gone = True

    def filter(self, chunk, final=False):
        lines = (self.pending + chunk).split(b"\n")
        self.pending = b"" if final else lines.pop()
        for line in lines:
            self.line(line)

    def line(self, line):
        # Ranks' tracebacks arrive interleaved line by line (each line whole,
        # Note [Whole lines] in line_relay.py), so this works on lines, not
        # structure: a traceback printed while stopping is reduced to its
        # last line, and dropped whole when that is KeyboardInterrupt. A
        # rank's tag (--prefix-output) is not part of what is judged.
        text = _RANK_TAG.sub("", line.decode("utf-8", "replace"), count=1)
        rest = text.replace("Traceback (most recent call last):", "").replace("KeyboardInterrupt", "")
        if not rest.strip() or text.startswith(("  ",) + _LAUNCHER_NOISE):
            return
        self.write(line + b"\n")


def exit_code(returncode):
    # Popen reports death by signal S as -S; shells report it as 128+S.
    return 128 - returncode if returncode < 0 else returncode


def run_job(command, env, prog, num_proc, received=None, on_interrupt=None):
    """Runs mpiexec's command line; returns the exit code for the shell
    (128 + the signal after an interrupt). OSError if it cannot start.
    `received`: a list the interrupting signals are appended to;
    `on_interrupt`: called at the first one, before the job is asked to stop."""
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL if os.isatty(0) else None,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    stopping = threading.Event()
    received = [] if received is None else received
    pumps = [_Pump(child.stdout, sys.stdout.buffer, stopping), _Pump(child.stderr, sys.stderr.buffer, stopping)]

    def interrupt(signum, _frame):
        received.append(signum)
        if not stopping.is_set():
            stopping.set()
            if on_interrupt is not None:
                on_interrupt()
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            sys.stderr.write(f"{prog}: interrupted ({name}): stopping all {num_proc} ranks\n")
            sys.stderr.flush()
        child.send_signal(signal.SIGINT)  # the second time: mpiexec forces the stop

    previous = {sig: signal.signal(sig, interrupt) for sig in _STOP_SIGNALS}
    try:
        for pump in pumps:
            pump.start()
        returncode = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # Output still in the pipes comes through; a process that outlived
    # mpiexec and still holds them does not keep the launcher waiting.
    for pump in pumps:
        pump.join(timeout=10)
    code = exit_code(returncode)
    # After an interrupt: the ranks' own code when they chose one (they
    # caught it and exited 7, say); else the shell's 128 + signal. MPICH's
    # launcher reports ranks killed by signal N as exit code N.
    if received and code in {0, *_STOP_SIGNALS, *(128 + s for s in _STOP_SIGNALS)}:
        return 128 + received[0]
    return code
