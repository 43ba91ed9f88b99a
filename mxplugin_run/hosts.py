"""Hosts for mxplugin-run: host lists (-H) and host files, the reachability
check of remote hosts before anything is launched, and the OpenMP threads
each rank gets."""
import os
import shlex
import signal
import socket
import subprocess
import time

from mxplugin_run.placement import place_ranks, slot_count


class UsageError(Exception):
    """A request that cannot be launched; the message is shown to the user."""


def parse_hosts(spec, default_slots=None):
    """'a:2,b:4' -> [('a', 2), ('b', 4)]; an entry without a count gets
    `default_slots` (--slots-per-host) where given; UsageError when malformed."""
    hosts = []
    for entry in spec.split(","):
        name, sep, slots = entry.strip().partition(":")
        if not name:
            raise UsageError(f"bad host list {spec!r}: empty host name in entry {entry!r}")
        if not sep and default_slots is not None:
            sep, slots = ":", str(default_slots)
        if not sep or not slots:
            raise UsageError(f"bad host list {spec!r}: {entry!r} needs a slot count, as in {name}:2")
        if not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"bad host list {spec!r}: slot count in {entry!r} must be an integer >= 1")
        hosts.append((name, int(slots)))
    return hosts


def parse_hostfile(path, default_slots=None):
    """Lines 'host slots=N', 'host:N' or 'host' (`default_slots`, else 1) -> [(host, slots)]."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise UsageError(f"--hostfile {path}: {exc.strerror}") from exc
    hosts = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        name, slots = fields[0], str(default_slots or 1)
        if ":" in name:
            name, _, slots = name.partition(":")
        for extra in fields[1:]:
            key, _, value = extra.partition("=")
            if key not in ("slots", "max_slots") or not value:
                raise UsageError(f"--hostfile {path}, line {number}: expected 'host slots=N' or 'host:N', "
                                 f"got {line.strip()!r}")
            if key == "slots":
                slots = value
        if not name or not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"--hostfile {path}, line {number}: bad host or slot count in {line.strip()!r}")
        hosts.append((name, int(slots)))
    if not hosts:
        raise UsageError(f"--hostfile {path} lists no hosts")
    return hosts


def is_local_host(name):
    """Hosts mpiexec starts ranks on without the remote shell."""
    if name in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return socket.gethostbyname(name) in socket.gethostbyname_ex(socket.gethostname())[2] + ["127.0.0.1"]
    except OSError:
        return False


def reach_command(rsh, host, timeout, command=("true",)):
    """The remote shell's command line that runs `command` on `host`."""
    cmd = shlex.split(rsh)
    if os.path.basename(cmd[0]) == "ssh":
        # BatchMode: fail instead of prompting for a password nobody will type.
        cmd += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(round(timeout)))}"]
    return cmd + [host, *command]


def check_hosts_reachable(hosts, rsh, timeout):
    """Every remote host must run `true` through the remote shell within
    `timeout` seconds (all tried at once); else a UsageError naming the hosts."""
    failures = unreachable_hosts(hosts, rsh, timeout)
    if failures:
        raise UsageError(f"cannot reach {', '.join(text for _, text in failures)} with {rsh!r}; -H needs "
                         "passwordless ssh to every host and the same Python and mxplugin paths there "
                         "(docs/guides/several-machines.md)")


def unreachable_hosts(hosts, rsh, timeout, command=("true",)):
    """[(host, why)] for the remote hosts that do not run `true` (or
    `command`, which must succeed there) through the remote shell
    within `timeout` seconds (all tried at once). Each try runs in a process
    session of its own, killed whole on timeout, so nothing is left running."""
    remote = [name for name, _ in hosts if not is_local_host(name)]
    tries = {}
    for host in remote:
        try:
            tries[host] = subprocess.Popen(reach_command(rsh, host, timeout, command), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                           start_new_session=True)
        except OSError as exc:
            raise UsageError(f"cannot run the remote shell {rsh!r}: {exc.strerror}") from exc
    deadline = time.monotonic() + timeout + 2  # ssh's own ConnectTimeout, plus a margin
    failures = []
    for host, proc in tries.items():
        try:
            _, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            if proc.returncode != 0:
                said = (err or "").strip().splitlines()
                failures.append((host, f"{host} ({said[-1] if said else f'exit {proc.returncode}'})"))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            failures.append((host, f"{host} (no answer within {timeout:g} s)"))
    return failures


def check_slots(hosts, num_proc):
    """UsageError when the hosts have fewer slots than `num_proc`."""
    total = slot_count(hosts)
    if total < num_proc:
        raise UsageError(f"-np {num_proc} asks for more ranks than the host list has slots ({total})")


def usable_cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ranks_per_host(num_proc, hosts):
    """The most ranks any one host gets (placement.py); all on this machine without -H."""
    if not hosts:
        return num_proc
    return max([ranks for _, ranks in place_ranks(hosts, num_proc)] + [1])


def threads_per_rank(num_proc, hosts):
    """This machine's cores divided by the ranks on the busiest host, at
    least 1 (hosts of a -H list are taken to have as many cores as this one)."""
    return max(1, usable_cores() // ranks_per_host(num_proc, hosts))
