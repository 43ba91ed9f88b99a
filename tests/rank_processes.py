"""The rank processes of a job on fake hosts as the kernel sees them: which
started on which host, how each ended (exit code or signal), and which
shared-memory segments (/dev/shm) each had mapped.

Note [Watching ranks from the kernel]: the launcher cannot always say how
a rank ended: a rank frozen or cut off past its world's end tells a
service that no longer listens, through an mpiexec that was abandoned.
The kernel's process events (the netlink process connector, root only)
say it for every process: an exec event names a new process (its command
line and network namespace tell a rank of this cluster from anything
else on the machine, another test's job included), an exit event carries
its wait status. Events are read by a thread of their own into a large
socket buffer; if the kernel still drops some, `lost_events` says so and
the record is incomplete (the caller must not pass it as clean)."""
import errno
import os
import socket
import struct
import threading
import time

NETLINK_CONNECTOR = 11
CN_IDX_PROC = CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE = 1, 2
PROC_EVENT_EXEC, PROC_EVENT_EXIT = 0x2, 0x80000000
NLMSG_HEADER = struct.Struct("IHHII")    # nlmsghdr: length, type, flags, seq, pid
CN_HEADER = struct.Struct("IIIIHH")      # cn_msg: idx, val, seq, ack, data length, flags
EVENT_HEADER = struct.Struct("IIQ")      # proc_event: what, cpu, timestamp
NLMSG_DONE = 3
RECEIVE_BUFFER = 16 << 20  # events of the whole machine pass through (a test suite forking beside us)
SEGMENT_SCAN_S = 0.25      # how often the live ranks' mappings are read for shared-memory segments
SHM_DIR = "/dev/shm/"


def unavailable():
    """Why process events cannot be read here, or None."""
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR) as s:
            s.bind((0, CN_IDX_PROC))
    except OSError as exc:
        return f"no kernel process events (netlink connector): {exc.strerror}"
    return None


def _control(sock, op):
    data = struct.pack("I", op)
    message = CN_HEADER.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(data), 0) + data
    sock.send(NLMSG_HEADER.pack(NLMSG_HEADER.size + len(message), NLMSG_DONE, 0, 0, 0) + message)


def _namespace_inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def describe_status(status):
    """A wait status as the launcher writes it: "code N" or "signal N"."""
    return f"signal {status & 0x7f}" if status & 0x7f else f"code {(status >> 8) & 0xff}"


class Rank:
    """One rank process: its pid, host (index), command line, when it
    started and ended, how ("code 75", "signal 9"; None while it runs),
    and the /dev/shm segments it was seen to map."""

    def __init__(self, pid, host, argv):
        self.pid, self.host, self.argv = pid, host, argv
        self.started = time.monotonic()
        self.ended, self.how = None, None
        self.segments = set()


class RankProcesses:
    """Watches, from start() to stop(), the processes of the network
    namespaces `namespaces` (names under /run/netns, in host order) whose
    command line is `python <program> ...`."""

    def __init__(self, namespaces, program):
        self.program = program
        self.hosts = {}  # namespace inode -> host index
        for i, ns in enumerate(namespaces):
            inode = _namespace_inode(f"/run/netns/{ns}")
            if inode is not None:
                self.hosts[inode] = i
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.ranks = {}       # pid -> Rank (the newest of that pid)
        self.all_ranks = []   # every Rank, in order of start
        self.lost_events = 0  # kernel messages dropped (ENOBUFS): the record is incomplete
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, RECEIVE_BUFFER)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.sock.bind((0, CN_IDX_PROC))
        self.sock.settimeout(0.5)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._read_events, name="rank-events", daemon=True),
                        threading.Thread(target=self._scan_segments, name="rank-segments", daemon=True)]

    def start(self):
        _control(self.sock, PROC_CN_MCAST_LISTEN)
        for thread in self.threads:
            thread.start()
        return self

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        try:
            _control(self.sock, PROC_CN_MCAST_IGNORE)
        finally:
            self.sock.close()

    # -- reading ------------------------------------------------------------------------------
    def _read_events(self):
        offset = NLMSG_HEADER.size + CN_HEADER.size
        while not self.stopping.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    with self.lock:
                        self.lost_events += 1
                    continue
                raise
            if len(data) < offset + EVENT_HEADER.size:
                continue
            what = EVENT_HEADER.unpack_from(data, offset)[0]
            body = offset + EVENT_HEADER.size
            if what == PROC_EVENT_EXEC:
                pid, tgid = struct.unpack_from("ii", data, body)
                if pid == tgid:
                    self._exec(pid)
            elif what == PROC_EVENT_EXIT:
                pid, tgid, status, _ = struct.unpack_from("iiII", data, body)
                if pid == tgid:
                    self._exit(pid, status)

    def _exec(self, pid):
        host = self.hosts.get(_namespace_inode(f"/proc/{pid}/ns/net"))
        if host is None:
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            return
        if len(argv) < 2 or argv[1] != self.program:  # the supervisor and relay only name it later
            return
        with self.lock:
            rank = self.ranks[pid] = Rank(pid, host, argv)
            self.all_ranks.append(rank)
            self.changed.notify_all()

    def _exit(self, pid, status):
        with self.lock:
            rank = self.ranks.get(pid)
            if rank is None or rank.how is not None:
                return
            rank.ended, rank.how = time.monotonic(), describe_status(status)
            self.changed.notify_all()

    def _scan_segments(self):
        while not self.stopping.wait(SEGMENT_SCAN_S):
            for rank in self.running():
                try:
                    with open(f"/proc/{rank.pid}/maps") as f:
                        found = {line.split(SHM_DIR, 1)[1].split()[0] for line in f if SHM_DIR in line}
                except OSError:
                    continue
                with self.lock:
                    rank.segments |= found

    # -- what was seen ------------------------------------------------------------------------
    def running(self, host=None):
        """The ranks running now (on host `host`), oldest first."""
        with self.lock:
            return [r for r in self.all_ranks if r.how is None and (host is None or r.host == host)]

    def wait_for(self, predicate, timeout):
        """Waits up to `timeout` seconds for predicate() (called under the
        lock, after every event); its last value."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)
