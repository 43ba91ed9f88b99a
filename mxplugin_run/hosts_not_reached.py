"""The hosts mpiexec (MPICH's Hydra) says it could not reach as it started a
job, read from its output as it passes through the launcher: an elastic
launcher leaves them out and starts the world on the others (Note [Hosts a
world cannot start on] in mxplugin_run/elastic/start_failures.py).

Hydra starts one proxy per host through the remote shell (remote_shells.py);
the proxy connects back to mpiexec. One that cannot says so, numbered by its
place among the hosts that get ranks, then mpiexec gives up on the job:

    [proxy:2@vm] HYDU_sock_connect (.../sock.c:140): unable to connect from "vm" to "10.79.0.11" (No route to host)
    [mpiexec@vm] ui_cmd_cb (.../pmiserv_pmci.c:51): Launch proxy failed.

The name after '@' is what the host calls itself (every fake host of
tests/fake_cluster.py says "vm"), so the number names the host. ssh that
cannot reach a host names it as the host list does:
"ssh: connect to host b port 22: No route to host"."""
import re
import threading

_PROXY_FAILED = re.compile(rb"^\[proxy:(\d+)@[^\]]*\] .*\bunable to connect\b")
_SSH_FAILED = re.compile(rb"^ssh: (?:connect to host (\S+) port \d+|Could not resolve hostname (\S+)): (.*?)\s*$")
_CAUSE = re.compile(rb"\(([^()]*)\)\s*$")  # the last parenthesis of a line: Hydra's strerror
# Only lines holding one of these are read line by line; the rest of the
# ranks' output passes unread.
_MARKERS = (b"[proxy:", b"ssh: ")
_LONGEST_LINE = 4096  # a partial line kept for the next chunk is cut here


def proxy_failure(line, placed):
    """(host, why) when `line` says that the proxy of a host in `placed`
    (the hosts that get ranks, in mpiexec's order) could not connect back;
    else None."""
    m = _PROXY_FAILED.match(line)
    if not m or int(m.group(1)) >= len(placed):
        return None
    cause = _CAUSE.search(line)
    said = f": {cause.group(1).decode(errors='replace')}" if cause else ""
    return placed[int(m.group(1))], f"its MPI proxy could not connect back to mpiexec{said}"


def ssh_failure(line, placed):
    """(host, why) when `line` is ssh saying it cannot reach a host in `placed`; else None."""
    m = _SSH_FAILED.match(line)
    if not m:
        return None
    host = (m.group(1) or m.group(2)).decode(errors="replace")
    return (host, f"ssh could not reach it: {m.group(3).decode(errors='replace')}") if host in placed else None


class HostsNotReached:
    """What mpiexec's output says of hosts it could not reach: one reader()
    per output stream feeds it; hosts() is {host: why}, the first reason
    said of each."""

    def __init__(self, placed):
        self.placed = list(placed)
        self.lock = threading.Lock()
        self.found = {}

    def reader(self):
        return _StreamReader(self)

    def hosts(self):
        with self.lock:
            return dict(self.found)

    def line(self, line):
        failed = proxy_failure(line, self.placed) or ssh_failure(line, self.placed)
        if failed:
            with self.lock:
                self.found.setdefault(*failed)


class _StreamReader:
    """One stream's chunks, as they come: a line may be split between two."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.pending = b""  # a partial line that holds a marker

    def __call__(self, chunk):
        data, self.pending = self.pending + chunk, b""
        if not any(marker in data for marker in _MARKERS):
            return
        *lines, last = data.split(b"\n")
        for line in lines:
            if any(marker in line for marker in _MARKERS):
                self.hosts.line(line)
        if any(marker in last for marker in _MARKERS):
            self.pending = last[-_LONGEST_LINE:]

    def flush(self):
        """The stream has ended: a last line without its newline counts too."""
        if self.pending:
            self.hosts.line(self.pending)
            self.pending = b""
