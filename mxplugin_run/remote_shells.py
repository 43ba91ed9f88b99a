"""The remote shells that MPICH's mpiexec (Hydra) started: one child per
host with ranks (`ssh HOST ... hydra_pmi_proxy ... --proxy-id N`, or the
proxy itself on this machine), each in a session of its own. A shell that
still runs after its ranks should have ended names a host the launcher
could not reach; ending one ends only the launcher's end of the
connection. Linux (/proc); elsewhere none are found."""
import os
import re
import signal

from mxplugin_run.placement import place_ranks

_PROXY_ID = re.compile(r"--proxy-id[ =](\d+)")


def children(pid):
    """Pids of the live processes whose parent is `pid`: from the kernel's
    list of each of its threads' children where it keeps one, else by
    reading every process's parent."""
    try:
        found = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
        return found
    except FileNotFoundError as exc:
        if not exc.filename or not exc.filename.endswith("/children"):
            return []  # the process itself is gone
    except OSError:
        return []
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the name: state, ppid. A zombie has ended already.
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def placed_hosts(hosts, num_proc):
    """The hosts that get ranks, in order: Hydra numbers its proxies in this order."""
    return [host for host, _ in place_ranks(hosts, num_proc)]


def remote_shells(mpiexec_pid, hosts, num_proc):
    """{pid: host} of mpiexec's remote shells still running."""
    placed = placed_hosts(hosts, num_proc) or ["localhost"]
    shells = {}
    for pid in children(mpiexec_pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # ended, not yet reaped
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        m = _PROXY_ID.search(cmdline)
        if m and int(m.group(1)) < len(placed):
            shells[pid] = placed[int(m.group(1))]
    return shells


def end(pids):
    """SIGKILLs each of `pids` (taken while their parent is stopped, so no
    pid can have been reused)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
