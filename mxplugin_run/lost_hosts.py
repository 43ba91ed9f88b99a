"""When a plain (not elastic) job's mpiexec waits only for hosts it cannot
reach, so that the launcher gives up on it (Note [Lost hosts]).

Note [Lost hosts]: mpiexec ends when every host's proxy has said so; a proxy
on a host cut off from the launcher never can, so after a partition the
ranks everywhere else end (their collectives fail, naming the host: Note
[Who is unreachable] in src/backend/mpi/peer_probe.h) and mpiexec waits for
ever. Unlike an elastic launcher, a plain one hears nothing from the ranks
but their output, and sees nothing of the hosts but mpiexec's remote shells
(one per host: mxplugin_run/remote_shells.py). So it gives up on mpiexec
(Job.abandon) when
- the ranks name hosts they cannot reach (each rank behind the relay says
  whom it lost in a line of fields: Note [Lost peers as data] in
  src/core/lost_peer_report.h) and the remote shells of every other host
  have ended, for NAMED_GRACE_S; or
- every remote shell has ended and mpiexec has not, for ORPHANED_GRACE_S
  (with ssh a shell ends only after its proxy, which mpiexec hears at once
  where it can: so it waits for a connection that is dead).
A job whose ranks are alive somewhere keeps the shells of their hosts, and
is never given up on."""
import threading
import time

from mxplugin_run.protocol import LOST_PEERS_MARKER
from mxplugin_run.remote_shells import remote_shells
from mxplugin_run.timeouts import LOOK_EVERY_S, NAMED_GRACE_S, ORPHANED_GRACE_S


def _number(text):
    return text.isascii() and text.isdigit()


def lost_peers(line):
    """{"rank", "host", "unreachable", "ended"} of a rank's lost-peers line
    (LOST_PEERS_MARKER, then fields; a --prefix-output tag may come first),
    the last two lists of (rank, host); None for any other line."""
    _, marker, rest = line.partition(LOST_PEERS_MARKER + " ")
    fields = rest.split()
    if not marker or len(fields) != 4 or not _number(fields[0].lstrip("-")):
        return None
    report = {"rank": int(fields[0]), "host": fields[1]}
    for name, field in zip(("unreachable", "ended"), fields[2:]):
        key, _, peers = field.partition("=")
        if key != name:
            return None
        named = [peer.partition("@") for peer in peers.split(",") if peer]
        if not all(_number(rank) and host for rank, _, host in named):
            return None
        report[name] = [(int(rank), host) for rank, _, host in named]
    return report


class LostHostsWatch(threading.Thread):
    """Watches a plain job's mpiexec (a mxplugin_run.job.Job) and abandons it by
    Note [Lost hosts]."""

    def __init__(self, job):
        super().__init__(name="mxplugin-lost-hosts", daemon=True)
        self.job = job

    def run(self):
        job, seen, since = self.job, False, None
        while not job.wait(LOOK_EVERY_S):
            shells = set(remote_shells(job.child.pid, job.hosts, job.num_proc).values())
            seen = seen or bool(shells)
            reported = job.reported_unreachable()
            if reported and shells <= reported:
                grace, why = NAMED_GRACE_S, "the ranks cannot reach " + ", ".join(sorted(reported))
            elif seen and not shells:
                grace, why = ORPHANED_GRACE_S, "every host's remote shell has ended"
            else:
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= grace:
                job.abandon(f"{why}, and mpiexec still waits for them {grace:g} s later")
                return
