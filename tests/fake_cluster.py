"""A multi-host cluster on this machine: one network namespace per fake
host, each with an `eth0` on a bridge of its own, an address of its own and
optionally a bandwidth limit (tc tbf), and a remote shell (`nsrsh`) that
runs a command inside a host's namespace, given to the launcher in place of
ssh. Needs root and `ip`; FakeCluster.unavailable() says why not otherwise.

Every name carries this cluster's own id (namespaces mxh<id>h<i>, bridge
mxb<id>, links mxv<id>h<i>) and only those are ever removed; processes
started in the namespaces are killed by namespace (`ip netns pids`) before
the namespaces go. Traffic between fake hosts crosses the links only over
TCP (UCX_TLS=tcp,self; UCX would use shared memory between namespaces of one
machine), so ENV must be in the ranks' environment; interface byte counters
(`tx_bytes`) prove where traffic went.

Note [Links that are ready]: the cluster is ready when every host's link
is, and a link change (set_link, limit_rate) returns once it is done, not
when `ip` returns: on some kernels the bridge port starts forwarding only
once the kernel's link watch (a work item, late on a busy machine) has seen
the carrier, and a world started on a host whose link does not forward yet
fails there ("No route to host" from MPICH's proxy). (This machine's kernel,
6.18, forwards before `ip` returns, loaded or not.) The host's own eth0 is
the same: its carrier shows at once, but it sends nothing until that work
item has run for it too (its queues are started there, and its
operational state turns UP then): a partition test, the link restored and
the next test's world started at once on a busy machine, had its proxy
there fail "No route to host" (3 s of unanswered ARP). So the cluster
waits until the host's eth0 is there, up with carrier, operationally up
and with its address, and its bridge port forwards (or, cut, eth0 without
carrier), and then until a connection from the host to another one gets
an answer (a refusal counts): loaded fresh-clone runs still had the first
world after a restored link fail there with "No route to host" once all
of the above held, for a cause not found yet; a change that fails
says why, with what the kernel shows of the host's link (a CI run had `tc`
exit 1 on a host's eth0 and said no more). Processes are killed until none
is left, so that nothing of one test runs into the next."""
import fcntl
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ENV = {"UCX_TLS": "tcp,self"}
IFACE = "eth0"  # the fake hosts' interface: the same name on every host, as on a real cluster

NSRSH = """#!/bin/sh
# A remote shell into a fake host (a network namespace): nsrsh [options] HOST COMMAND...
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"; shift
exec ip netns exec "$host" sh -c "$*"
"""


# The same, but the command also gets the host's name as its host name (a
# UTS namespace of its own), as on a real host. Open MPI names its
# shared-memory files and session directories by host name: fake hosts that
# all carry this machine's name share them, and its daemons and ranks crash.
NSRSH_OWN_HOSTNAME = """#!/bin/sh
# nsrsh-hostname [options] HOST COMMAND...: nsrsh, with HOST as the host name
for a in "$@"; do case "$a" in -*) ;; *) host="$a"; break ;; esac; done
exec unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$(dirname "$0")/nsrsh" "$@"
"""


_cluster_numbers = itertools.count()
# How long a link may take to be as asked (Note [Links that are ready]), and
# processes to be gone once killed.
READY_S = 30
FORWARDING = "3"  # a bridge port's state in sysfs (BR_STATE_FORWARDING)


# Connects to port 9 (discard: nothing listens) of the address given; exit 0
# on an answer, a refusal included.
_PATH_CHECK = """import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=1).close()
except ConnectionRefusedError:
    pass
except OSError:
    sys.exit(1)
"""


def _ip(*args, check=True):
    """`ip ARGS`; RuntimeError with what it said when it fails and `check`."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def _wait_for(condition, timeout, what):
    """Polls condition() until it is true; RuntimeError after `timeout`
    seconds, with what(), which says what is there instead."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout:g} s: {what()}")
        time.sleep(0.05)


class FakeCluster:
    @staticmethod
    def unavailable():
        """Why no cluster can be built here, or None."""
        if os.geteuid() != 0:
            return "needs root (network namespaces and veth links)"
        if not shutil.which("ip"):
            return "needs the `ip` command (iproute2)"
        probe = f"mxprobe{os.getpid() % 100000}"
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if made.returncode != 0:
            return f"cannot create network namespaces: {made.stderr.strip()}"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        return None

    def __init__(self, num_hosts, rate_mbit=None):
        self.num_hosts = num_hosts
        self._name(next(_cluster_numbers))
        self.subnet = None  # chosen by build(), with the bridge's address
        self.rate_mbit = rate_mbit
        self.dir = tempfile.mkdtemp(prefix=f"mxcluster{self.id}.")
        self.rsh = os.path.join(self.dir, "nsrsh")
        self.rsh_own_hostname = os.path.join(self.dir, "nsrsh-hostname")  # NSRSH_OWN_HOSTNAME
        self._made_bridge = False
        self._made_hosts = []

    def _name(self, number):
        # pid and a count of this process's clusters, 7 digits at most: an
        # interface's name holds 15 characters (mxv<id>h<i>). A CI run had two
        # clusters of one process named alike when the id held the clock's
        # milliseconds; the count cannot repeat, and build() moves on to the
        # next number if an earlier process of the same pid left one behind.
        self.id = f"{os.getpid() % 100000}{number % 100:02d}"
        self.hosts = [f"mxh{self.id}h{i + 1}" for i in range(self.num_hosts)]
        self.bridge = f"mxb{self.id}"
        self.links = [f"mxv{self.id}h{i + 1}" for i in range(self.num_hosts)]

    def _free_subnet(self):
        used = _ip("-4", "addr", "show").stdout
        for third in [int(self.id) % 250 + 1] + list(range(1, 255)):
            if f"10.78.{third}." not in used:
                return f"10.78.{third}"
        raise RuntimeError("no free 10.78.x.0/24 subnet")

    def address(self, i):
        return f"{self.subnet}.{10 + i + 1}"

    def __enter__(self):
        try:
            self.build()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc):
        self.destroy()

    def build(self):
        for path, text in ((self.rsh, NSRSH), (self.rsh_own_hostname, NSRSH_OWN_HOSTNAME)):
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        for _ in range(100):
            made = _ip("link", "add", self.bridge, "type", "bridge", check=False)
            if made.returncode == 0 or "exists" not in made.stderr:
                break
            self._name(next(_cluster_numbers))
        if made.returncode != 0:
            raise RuntimeError(f"cannot make the bridge {self.bridge}: {made.stderr.strip()}")
        self._made_bridge = True
        # Clusters built at the same time (a benchmark beside the tests) would
        # otherwise both see a subnet free and take it: chosen and taken under
        # one lock shared by every cluster of this machine.
        with open(os.path.join(tempfile.gettempdir(), "mxplugin-fake-cluster.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = self._free_subnet()
            _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, link) in enumerate(zip(self.hosts, self.links)):
            _ip("netns", "add", ns)
            self._made_hosts.append(i)
            _ip("link", "add", link, "type", "veth", "peer", "name", IFACE, "netns", ns)
            _ip("link", "set", link, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", IFACE)
            _ip("-n", ns, "link", "set", IFACE, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if self.rate_mbit:
                self.limit_rate(i, f"{self.rate_mbit}mbit")
        for i in range(self.num_hosts):  # Note [Links that are ready]
            self.wait_for_link(i, "up")

    # -- links (Note [Links that are ready]) --------------------------------------------------
    def link_view(self, i):
        """What the kernel shows of host i's link: (its eth0's `ip -o link`
        line, "" when there is none; its IPv4 addresses; its bridge port's
        state, "" when it is no port)."""
        line = _ip("-n", self.hosts[i], "-o", "link", "show", "dev", IFACE, check=False).stdout.strip()
        addresses = _ip("-n", self.hosts[i], "-o", "-4", "addr", "show", "dev", IFACE, check=False).stdout
        try:
            with open(f"/sys/class/net/{self.links[i]}/brport/state") as f:
                port = f.read().strip()
        except OSError:
            port = ""
        return line, addresses, port

    def link_is(self, i, state):
        """Whether host i's link is `state`: "up" (eth0 up with carrier,
        operationally up and its address, its bridge port forwarding) or
        "down" (eth0 there, without carrier)."""
        line, addresses, port = self.link_view(i)
        flags = line.partition("<")[2].partition(">")[0].split(",")
        if state == "down":
            return bool(line) and "LOWER_UP" not in flags
        return ({"UP", "LOWER_UP"} <= set(flags) and " state UP " in line and f" {self.address(i)}/" in addresses
                and port == FORWARDING)

    def wait_for_link(self, i, state):
        _wait_for(lambda: self.link_is(i, state), READY_S,
                  lambda: f"{self.hosts[i]}'s link is not {state}: {self.link_view(i)}")
        if state == "up" and len(self.hosts) > 1:
            peer = 1 if i == 0 else 0
            _wait_for(lambda: self.path_works(i, peer), READY_S,
                      lambda: f"{self.hosts[i]} cannot reach {self.hosts[peer]}: {self.link_view(i)}; "
                              f"{_ip('-n', self.hosts[i], 'neigh', check=False).stdout.strip()}")

    def path_works(self, i, j):
        """Whether a TCP connection from host i gets an answer from host j: a
        refusal counts (the path carried it both ways); "No route to host"
        (ARP unanswered) does not."""
        done = subprocess.run(["ip", "netns", "exec", self.hosts[i], sys.executable, "-c", _PATH_CHECK,
                               self.address(j)], capture_output=True, timeout=READY_S)
        return done.returncode == 0

    def set_link(self, i, state):
        """The host side of host i's link "up" or "down", as a switch port
        would go; returns time.monotonic() once traffic sees it."""
        _ip("link", "set", self.links[i], state)
        self.wait_for_link(i, state)
        return time.monotonic()

    def limit_rate(self, i, rate):
        """A bandwidth limit (tc tbf, e.g. "100mbit") on host i's eth0; None
        removes it (none there is fine)."""
        _wait_for(lambda: self.link_view(i)[0], READY_S, lambda: f"{self.hosts[i]} has no {IFACE}")
        tc = ["ip", "netns", "exec", self.hosts[i], "tc", "qdisc"]
        if rate is None:
            subprocess.run(tc + ["del", "dev", IFACE, "root"], capture_output=True)
            return
        done = subprocess.run(tc + ["replace", "dev", IFACE, "root", "tbf", "rate", rate, "burst", "256kb",
                                    "latency", "100ms"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"tc on {self.hosts[i]}: exit {done.returncode}: {done.stderr.strip()}; its link: "
                               f"{self.link_view(i)}")

    def host_list(self, slots):
        """'host1:2,host2:2' for `slots` ranks per host, in host order."""
        return ",".join(f"{h}:{n}" for h, n in zip(self.hosts, slots))

    def mpiexec_args(self, slots):
        """MPICH mpiexec's options that start ranks on these hosts, `slots` per
        host, through the namespace shell, talking over the hosts' interface."""
        return ["-launcher", "ssh", "-launcher-exec", self.rsh, "-iface", IFACE, "-hosts", self.host_list(slots)]

    def tx_bytes(self, i):
        """Bytes host i sent on its link so far."""
        out = subprocess.run(["ip", "netns", "exec", self.hosts[i], "cat",
                              f"/sys/class/net/{IFACE}/statistics/tx_bytes"], capture_output=True, text=True)
        return int(out.stdout.strip() or 0)

    def run(self, host_index, argv, env=None, timeout=300, cwd=None, spare=()):
        """Runs argv inside fake host `host_index`; returns the CompletedProcess.
        On timeout everything in the cluster's namespaces is killed but the
        pids in `spare` (daemons that serve every test, such as Slurm's)."""
        try:
            return subprocess.run(["ip", "netns", "exec", self.hosts[host_index], *argv], capture_output=True,
                                  text=True, env=env, timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            self.kill_processes(spare)
            raise AssertionError(f"timed out after {timeout} s:\n{exc.stdout}\n{exc.stderr}") from exc

    def start(self, host_index, argv, env=None, cwd=None):
        """Starts argv inside fake host `host_index`, its output (stdout and
        stderr together) read line by line into a LineLog."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host_index], *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
        return proc, LineLog(proc.stdout)

    def pids(self, host_index, contains, lacks=()):
        """Processes in host `host_index` whose command line contains `contains`
        and none of `lacks`."""
        out = subprocess.run(["ip", "netns", "pids", self.hosts[host_index]], capture_output=True, text=True)
        found = []
        for pid in out.stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if contains in cmdline and not any(text in cmdline for text in lacks):
                found.append(int(pid))
        return found

    def namespace_pids(self):
        """Pids of every process in the cluster's namespaces."""
        found = []
        for ns in self.hosts:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
            found += [int(pid) for pid in out.split() if pid.isdigit()]
        return found

    def kill_processes(self, spare=()):
        """SIGKILLs everything in the cluster's namespaces but `spare`, again
        until none is left (one may have started another meanwhile: an
        mpiexec proxy, a rank): nothing of one test runs into the next."""
        def killed_all():
            pids = [pid for pid in self.namespace_pids() if pid not in spare]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return not pids

        _wait_for(killed_all, READY_S, lambda: f"still running in {self.hosts}: {self.namespace_pids()}")

    def destroy(self):
        try:
            self.kill_processes()
        except RuntimeError:  # a process that outlives SIGKILL (stuck in the kernel) keeps only its namespace
            pass
        for i in self._made_hosts:
            _ip("link", "del", self.links[i], check=False)
            _ip("netns", "del", self.hosts[i], check=False)
        if self._made_bridge:
            _ip("link", "del", self.bridge, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class LineLog:
    """The lines a process prints, collected by a thread as they come, with
    the time each arrived."""

    def __init__(self, stream):
        self.lines = []  # (time.monotonic(), line)
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def text(self):
        with self.cond:
            return "\n".join(line for _, line in self.lines)

    def wait_for(self, predicate, timeout):
        """The first line (index, time, text) matching predicate(text), waiting
        up to `timeout` seconds; None if the output ends or time runs out."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self.cond:
            while True:
                for i in range(seen, len(self.lines)):
                    if predicate(self.lines[i][1]):
                        return i, self.lines[i][0], self.lines[i][1]
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    return None
                self.cond.wait(left)
