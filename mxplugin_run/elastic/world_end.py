"""How the launcher ends an elastic world that a network partition has cut
in two: WorldEnd watches each world while its mpiexec runs.

Note [Partitions]: a host cut off from the network (its link down, a switch
failing) keeps its processes, but nothing reaches them, and nothing ends by
itself: a collective with a peer there waits (negotiation for the peer
timeout, a transfer inside MPI's data plane for ever), and mpiexec waits for
its proxy there, which can never say that it ended. So:
- The launcher learns of the cut in one of three ways, whichever comes
  first, and each breaks the world at once (the survivors go back to their
  last commit): discovery stops listing the host (ElasticDriver.watch); the
  host's ranks fall silent (every rank's watcher asks the launcher again at
  least every LONG_POLL_S, and RANK_SILENT_S without a request from a rank
  counts); a rank's collectives time out (MXPLUGIN_PEER_TIMEOUT_SECONDS,
  ELASTIC_PEER_TIMEOUT_S in elastic jobs) and it leaves with "failure",
  which also frees peers stuck in a transfer that no timeout bounds.
- The survivors hear it from their watcher thread (runner.py), which hands
  over the last commit and ends the process with os._exit, whatever the
  training thread is doing (inside MPI, say). That is safe: the committed
  snapshot is swapped in whole under the state's lock (state.py), so it is
  never half-made, and a process that ends needs no MPI clean-up.
- The launcher does not wait for what it cannot reach: ranks on hosts that
  discovery dropped, and silent ranks, are not waited for. Once every other
  rank has left or ended, mpiexec gets MPIEXEC_GRACE_S to end, and is then
  abandoned (Job.abandon: killed with the remote shells it started), naming
  the hosts left behind; the next world starts without them.
- The rank cut off hears nothing from the launcher for LAUNCHER_GONE_S and
  ends itself, handing nothing over: by the time its link is back a newer
  world may run (the service takes state only from the current world's
  ranks anyway). What else runs there (its agent, MPICH's proxy)
  ends with it, or when the link returns and the proxy finds mpiexec gone.
- A host that discovery dropped is not left out for good: listed again, it
  joins at the next commit. A host whose rank was lost while discovery still
  listed it (or with a fixed host list) is left out for a cool-down, as for
  a crashed rank (Note [Cool-downs] in cooldown.py); tried again while still
  cut off, it is one a world cannot start on (Note [Hosts a world cannot
  start on] in start_failures.py).
- The user's stop: Note [Bounded stops] in mxplugin_run/job.py; an elastic
  launcher also tells the ranks still running to end (their watchers do).
From the cut to the new world's first step: the discovery interval, the
grace and a world's start (seconds) when discovery drops the host; else
RANK_SILENT_S (or the peer timeout, if less) more."""
import sys
import threading

from mxplugin_run.timeouts import (MPIEXEC_GRACE_S, RANK_SILENT_S, SETTLE_QUIET_S, SETTLE_S, START_GRACE_S,
                                      START_HELLO_S)

# Its timeouts (timeouts.py): mpiexec ends in well under a second once it
# reaches every host's proxy (MPIEXEC_GRACE_S); ranks cut off never say
# anything (SETTLE_QUIET_S); a rank given up on in MPI's start too soon
# (START_GRACE_S) still leaves at once when it registers: its watcher hears
# that the world is over; with ELASTIC_PEER_TIMEOUT_S a collective that
# times out costs only the steps since the last commit, and a partition
# between ranks' hosts that the launcher does not see (it reaches every
# host) is found only this way.


class WorldEnd(threading.Thread):
    """Watches a world while its mpiexec (`job`, a mxplugin_run.job.Job) runs:
    breaks the world when a rank falls silent, and abandons mpiexec when it
    does not end once the ranks the launcher can hear from are done."""

    def __init__(self, service, job, number):
        super().__init__(name=f"mxplugin-elastic-world-{number}", daemon=True)
        self.service, self.job, self.number = service, job, number

    def run(self):
        while not self.job.wait(1.0):
            self.service.break_if_silent(RANK_SILENT_S)
            self.service.break_if_not_started(START_HELLO_S)  # Note [Hosts a world cannot start on]
            if self.service.ending():
                break
        else:
            return
        self.service.wait_settled(SETTLE_S, SETTLE_QUIET_S)
        unstarted = self.service.give_up_on_unstarted(START_GRACE_S)
        if unstarted:
            sys.stderr.write(f"{self.job.prog}: elastic: world {self.number}: rank{'s' if len(unstarted) > 1 else ''} "
                             f"{', '.join(map(str, unstarted))} never started (MPI's start waits for every rank, "
                             "and one was lost): not waited for\n")
            sys.stderr.flush()
            self.service.wait_settled(SETTLE_S, SETTLE_QUIET_S)  # those that registered meanwhile leave
        # A rank whose training function returned may still work (an
        # export, say): mpiexec is never given up on before it has ended.
        while not self.service.only_out_of_reach_run():
            if self.job.wait(1.0):
                return
        if not self.job.wait(MPIEXEC_GRACE_S):
            self.job.abandon(f"elastic: world {self.number}: mpiexec has not ended {MPIEXEC_GRACE_S:g} s after "
                             "the last rank it could reach")


def left_behind(service):
    """What an abandoned mpiexec leaves running: the hosts of the current
    world's ranks that neither left nor ended."""
    ranks = {}
    for rank, host in service.unaccounted():
        ranks.setdefault(host, []).append(str(rank))
    return [f"{host} (rank{'s' if len(r) > 1 else ''} {', '.join(r)})" for host, r in ranks.items()]
