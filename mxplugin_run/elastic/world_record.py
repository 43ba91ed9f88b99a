"""What the ranks of one elastic world said to the launcher (registered,
left and why, lost, out of reach, said hello), which DriverService keeps
and judges."""
import time

from mxplugin_run.protocol import EXIT_RESET, EXIT_WORLD_CRASHED
from mxplugin_run.elastic.rank_ends import Phase, RankEnd
from mxplugin_run.placement import host_of_rank, slot_count

# Note [Ranks that never started]: MPI's start (MPI_Init, and the core's
# set-up after it) waits for every rank of the world. A rank lost before it
# gets there (killed while MXNet loads, say) leaves the others waiting
# inside it for good: they never register, so no watcher of theirs hears
# that the world is broken, and mpiexec, which keeps them, never ends. Such
# ranks leave by themselves as soon as the world is broken
# (Note [Leaving MPI's start] in start_guard.py: they watch the launcher
# from before MPI's start). As the backstop for a rank that cannot reach the
# launcher: once the world is broken, a rank that has not registered within
# START_GRACE_S is not waited for: it counts as having left, NOT_STARTED
# (not lost: its host did nothing wrong), and the world's end abandons
# mpiexec (Note [Partitions] in world_end.py), whose proxies' going ends
# those ranks' MPI start (MPICH 5.0.2's PMI client then crashes: exit 255
# through MXNet's handler, or SIGABRT). Their ends, whenever they come, are
# not errors of the training script.
NOT_STARTED = "not started"

class WorldRecord:
    """What the ranks of one world said."""

    def __init__(self, number, hosts):
        self.number = number
        self.hosts = list(hosts)  # [(host, slots)] in rank order
        self.began = time.monotonic()
        self.hello = {}           # rank -> when its agent said it runs (Note [Hosts a world cannot start on])
        self.registered = {}      # rank -> pid
        self.left = {}            # rank -> reason ("failure", "hosts", "done", NOT_STARTED)
        self.exits = {}           # rank -> ProcessEnd, from the agents, in the order they came
        self.phases = {}          # rank -> the phase its agent last heard of (phases.py), with its end
        self.crashed_when_broken = set()  # ranks whose crash came as the world ended (Note [One rule for a world's end])
        self.hosts_updated = False
        # Why the world cannot go on (a rank ended without leaving, a rank
        # lost contact with its peers, a host went away), once the launcher
        # learns it: the other ranks stop waiting for their peers.
        self.broken = None
        self.gone = {}            # host -> why: hosts discovery stopped listing while this world ran
        self.heard = {}           # rank -> when it last made a request (its watcher polls, Note [Partitions])
        self.out_of_reach = {}    # rank -> why it is not waited for any more (silent, or quiet at the end)
        self.not_started = {}     # host -> why the world could not start there (start_failures.py)
        # The user stopped the job and ranks still run after the grace
        # (stuck in a collective with an unreachable peer, Note [Partitions]
        # in world_end.py): they end at once, handing nothing over.
        self.stopping = False

    def ends(self):
        """One RankEnd per rank, in rank order (mxplugin_run/elastic/rank_ends.py)."""
        order = {rank: i for i, rank in enumerate(self.exits)}  # the order the ends came in
        return [self._end(rank, order.get(rank)) for rank in range(slot_count(self.hosts))]

    def _end(self, rank, order):
        end = self.exits.get(rank)
        code, signum = (end.code, end.signal) if end is not None else (None, None)
        left = self.left.get(rank)
        if left in ("failure", "hosts") or code == EXIT_RESET or self.phases.get(rank) == Phase.LEAVING.value:
            phase = Phase.LEAVING
        elif left == "done":
            phase = Phase.DONE
        elif left == NOT_STARTED or rank not in self.registered:
            phase = Phase.STARTING
        else:
            phase = Phase.RUNNING
        host = self.host_of(rank)
        unreachable = self.out_of_reach.get(rank) or (f"{host} is gone: {self.gone[host]}" if host in self.gone
                                                      else None)
        return RankEnd(rank, host, phase, code=code, signal=signum, order=order, left=left,
                       unreachable=unreachable, after_break=rank in self.crashed_when_broken,
                       mpi_crash=code == EXIT_WORLD_CRASHED)

    def ending(self, rank):
        """Whether this world is over for `rank`'s peers: broken, or
        another rank has left it for the launcher's new hosts."""
        return self.broken is not None or any(r != rank and why == "hosts" for r, why in self.left.items())

    def unaccounted(self):
        """Ranks that neither left nor were reported ended, in order."""
        size = slot_count(self.hosts)
        return [r for r in range(size) if r not in self.left and r not in self.exits]

    def waited_for(self, rank):
        """Whether the end of this world waits for `rank` to leave or end:
        not when it did, nor when it is out of reach."""
        return not (rank in self.left or rank in self.exits or self.unreachable(rank))

    def unreachable(self, rank):
        """Out of reach: silent, or on a host discovery dropped."""
        return rank in self.out_of_reach or self.host_of(rank) in self.gone

    def only_out_of_reach_run(self):
        """Whether every rank still running is out of reach: the others
        ended, or left to end at once (a rank whose training function
        returned may still work, and keeps mpiexec)."""
        size = slot_count(self.hosts)
        return all(r in self.exits or self.unreachable(r) or self.left.get(r, "done") != "done"
                   for r in range(size))

    def hosts_without_hello(self):
        """The hosts with a rank whose agent has not said hello, in order."""
        size = slot_count(self.hosts)
        return list(dict.fromkeys(self.host_of(r) for r in range(size) if r not in self.hello))

    def host_of(self, rank):
        """The host the launcher placed `rank` on."""
        # Where the launcher placed the rank, not the name the rank's machine
        # gives itself: that may differ from the name the hosts are listed by.
        return host_of_rank(self.hosts, rank)
