"""A rank's output passed on as whole lines, by its agent (rank_agent.py).

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
"[1]<stdout>:" or "[1]<stderr>:"; with --timestamp, with the time the agent
passed it on; with --output-dir DIR, the lines also go to
DIR/rank.<rank>/stdout and stderr (the rank zero-padded to the width of the
largest, as horovodrun's --output-filename writes them; in an elastic job
each world adds to the files, so the later worlds keep the earlier ones' lines).

Note [The reader outlives the agent]: the rank's pipes are read by a
process of their own, in a session of its own, deaf to the stop signals
(start_reader), not by the agent: when MPICH's proxy goes (mpiexec
abandoned, or crashed, as a host is lost) it SIGKILLs the agent, while an
elastic rank lives on to hand its state over. Its output must still have a
reader, or its next print() would fail on a broken pipe. The reader holds
nothing but the two pipes, its own output and the two descriptors it
shares with the agent: the agent sends it the rank's end (facts), and it
closes `done` once it has passed on what the rank left in the pipes and
written the end record, so the record comes after the rank's last lines,
and before the agent exits and MPICH hears of the end. It reads on until
every writer of the pipes is gone."""
import json
import os
import select
import signal
import socket
import time

from mxplugin_run.process_end import EndRecord, ProcessEnd

PARTIAL_AFTER_SECONDS = 0.2
PIPE_BUF = 4096  # POSIX's least guarantee: writes up to this size are never split
READ_BYTES = 65536


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
    batched into writes of at most PIPE_BUF bytes; `prefix()` gives what
    starts each line; `copy`, a file that gets each line too."""

    def __init__(self, fd, prefix, copy=None):
        self.fd, self.prefix, self.copy, self.gone = fd, prefix, copy, False
        self.last = b""  # the last non-empty line written (the rank's last words, on stderr)

    def write(self, data):
        if not data:
            return
        if self.copy is not None:
            try:
                self.copy.write(data)
                self.copy.flush()
            except OSError:
                self.copy = None
        batch = b""
        for line in split_lines(data):
            if line.strip():
                self.last = line
            line = self.prefix() + line
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


def process_manager_number(names):
    """The first of the variables `names` that holds a number, or None."""
    for name in names:
        value = os.environ.get(name, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def output_files(directory, rank, append=False):
    """DIR/rank.<rank>/stdout and stderr, opened (horovodrun's layout); an
    elastic job's later worlds add to what the earlier ones wrote."""
    size = process_manager_number(("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")) or (rank or 0) + 1
    width = len(str(max(size - 1, 0)))
    folder = os.path.join(directory, f"rank.{str('x' if rank is None else rank).zfill(width)}")
    os.makedirs(folder, exist_ok=True)
    return [open(os.path.join(folder, stream), "ab" if append else "wb") for stream in ("stdout", "stderr")]


def line_start(rank, stream, prefix, timestamp):
    """What starts each line of `stream` (Note [Whole lines])."""
    tag = f"[{'?' if rank is None else rank}]<{stream}>:".encode() if prefix else b""
    if not timestamp:
        return lambda: tag
    return lambda: time.strftime("%a %b %d %H:%M:%S %Y ").encode() + tag


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


def start_reader(out_read, err_read, facts_read, done_write, rank, prefix, timestamp, output_dir, append=False):
    """Starts the reader of the rank's pipes (Note [The reader outlives the
    agent]) as a detached grandchild, and returns."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        if os.fork() == 0:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_IGN)
            os.setsid()
            keep_only({1, 2, out_read, err_read, facts_read, done_write})
            copies = output_files(output_dir, rank, append) if output_dir else [None, None]
            errors = Sink(2, line_start(rank, "stderr", prefix, timestamp), copies[1])
            output = Output({out_read: Sink(1, line_start(rank, "stdout", prefix, timestamp), copies[0]),
                             err_read: errors})
            read(output, errors, facts_read, done_write, rank)
    finally:
        os._exit(0)


def read(output, errors, facts_read, done_write, rank):
    """The reader's life: the rank's lines until the agent sends its end,
    then the rest it left and the end record, then whatever still writes."""
    poller = select.poll()
    for fd in list(output.sinks) + [facts_read]:
        poller.register(fd, select.POLLIN)
    facts = b""
    while facts_read is not None or output.sinks:
        events = poller.poll(int(PARTIAL_AFTER_SECONDS * 1000) if output.partial() else None)
        if not events and output.partial():
            output.flush_partial()
        for fd, _ in events:
            if fd != facts_read:
                if not output.read(fd):
                    poller.unregister(fd)
                continue
            chunk = os.read(fd, 4096)
            facts += chunk
            if chunk and not facts.endswith(b"\n"):
                continue
            poller.unregister(fd)
            os.close(fd)
            facts_read = None
            output.drain()
            if facts.strip():  # the agent told the end (else it was killed first: no record)
                write_record(json.loads(facts), errors, rank)
            os.close(done_write)


def write_record(facts, errors, rank):
    end = ProcessEnd.of_wait_status(facts["status"])
    record = EndRecord(rank, socket.gethostname(), facts["pid"], facts["time"], end, facts["phase"],
                       errors.last.decode("utf-8", "replace").strip())
    try:
        os.write(2, record.line().encode())
    except OSError:  # the launcher's end is gone
        pass
