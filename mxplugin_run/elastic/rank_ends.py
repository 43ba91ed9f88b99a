"""How the ranks of one elastic world ended, as typed records, and the one
rule that decides what comes next (classify). Pure: it reads records and
returns an Outcome; the driver applies it (cool-downs, the next world) and
words it.

Note [One rule for a world's end]: a world ends with one record per rank
(RankEnd): how its process ended (an exit code, a signal, or nothing the
launcher heard of), the phase it was in (starting MPI, running, leaving,
done: the rank tells its agent before it enters each, and the agent sends
the last one with the end, Note [A rank's agent] in mxplugin_run/rank_agent.py),
and whether the launcher already knew the world was over when the end
came. From those alone:
- a rank that said it leaves, or is done, or never started, is no fault:
  it counts against nobody; so is a rank that crashed in the phase
  starting (MPI's start torn down under it as its world was) or leaving
  (MPI crashing under it as its peers leave too): the service counts it
  as not started, or as left; one that ended as it left without saying so
  (the reset exit code) is lost;
- the root cause is the first rank in the order the launcher learned of
  the ends that ended by a signal, or went out of reach; a crash (a crash
  signal, MXNet's SIGSEGV exit 255, or MPI crashing under the core's
  thread) that came after a root cause, or after the world was over, is
  collateral: MPI is not fault tolerant, and a survivor's MPI may crash
  as a peer ends or leaves. A crash inside MPI on the core's thread is
  collateral whenever any other rank is a fault, whichever was heard of
  first: MPI crashes so only as a peer ends, and its report may arrive
  before the peer's. A collateral crash keeps its host;
- any other end with a nonzero code is an error of the training script:
  the job stops, since a new world would fail the same way;
- the hosts of the other lost ranks are left out for a cool-down, unless
  discovery already dropped them.
"""
import enum
from dataclasses import dataclass, field
from typing import Optional

from mxplugin_run import phases
from mxplugin_run.process_end import CRASH_SIGNALS, EXIT_MXNET_CRASH, ProcessEnd  # noqa: F401  (ProcessEnd: its users')


class Phase(enum.Enum):
    """Where a rank was in its life when it ended."""
    STARTING = phases.STARTING  # not registered: inside MPI's start, or before it
    RUNNING = phases.RUNNING
    LEAVING = phases.LEAVING    # said it leaves its world (a failure, new hosts)
    DONE = phases.DONE          # its training function returned


class Next(enum.Enum):
    """What comes after a world."""
    DONE = "done"
    NEW_WORLD = "new world"
    STOP = "stop"


class Cause(enum.Enum):
    """Why a new world starts, or the job stops."""
    LOST = "ranks lost"                        # new world without the lost ranks' hosts
    EVERY_RANK_LOST = "every rank lost"        # new world from the newest committed state
    HOSTS_CHANGED = "hosts changed"            # the ranks left at a commit
    CUT_OFF = "lost contact, none ended"       # ranks left, none ended
    SCRIPT_ERROR = "an error in the script"    # stop
    NOTHING_STARTED = "no rank started"        # stop
    NOTHING_TO_RESUME = "nothing to resume"    # stop: every rank lost, no committed state
    UNEXPLAINED = "mpiexec failed, no rank says why"  # stop


@dataclass(frozen=True)
class RankEnd:
    """One rank's end, as the launcher knows it."""
    rank: int
    host: str
    phase: Phase
    code: Optional[int] = None        # its exit code, when it exited
    signal: Optional[int] = None      # the signal that ended it
    order: Optional[int] = None       # its place among the ends the launcher heard of (0 first)
    left: Optional[str] = None        # why it left its world: "failure", "hosts", "done", "not started"
    unreachable: Optional[str] = None  # why it is not waited for (cut off, its host gone)
    after_break: bool = False         # its end came when its world was already over
    mpi_crash: bool = False           # MPI crashed under its core's thread

    @property
    def how(self):
        """'signal N', 'code N', or None when no end of its process was heard of."""
        if self.signal is not None:
            return f"signal {self.signal}"
        if self.code is not None:
            return f"code {self.code}"
        return None

    @property
    def crashed(self):
        """A crash signal, MXNet's crash exit, or MPI crashing under the core's thread."""
        return self.signal in CRASH_SIGNALS or self.code == EXIT_MXNET_CRASH or self.mpi_crash

    @property
    def fault(self):
        """Ended by a signal, or out of reach: what can be a root cause."""
        return self.signal is not None or self.unreachable is not None


@dataclass(frozen=True)
class Lost:
    """A lost rank: why it counts as lost, and whether its end was collateral (its host kept)."""
    rank: int
    host: str
    why: str
    collateral: bool


@dataclass(frozen=True)
class Outcome:
    """What classify decided for a world: what comes next, why, and for whom."""
    next: Next
    cause: Optional[Cause] = None
    lost: tuple = ()             # Lost, in rank order
    errors: tuple = ()           # RankEnd of the ranks whose script failed
    blamed: tuple = ()           # hosts to leave out for a cool-down, in rank order
    kept: tuple = ()             # hosts of collateral crashes only, sorted
    dropped: tuple = ()          # hosts of lost ranks that discovery dropped, sorted
    lost_after_done: tuple = field(default=())  # Lost, once training had finished


@dataclass(frozen=True)
class WorldSeen:
    """What the launcher itself saw of the world."""
    size: int
    gone: dict                   # host -> why discovery dropped it
    mpiexec_code: int
    resumable: bool              # a committed state (held or on disk) to start a new world from
    started: bool                # some rank registered or ended


def collateral(ends):
    """The ranks whose crash is collateral (Note [One rule for a world's end])."""
    faults = [e for e in ends if e.fault]
    out = set()
    for e in ends:
        if not e.crashed:
            continue
        earlier = any(f.rank != e.rank and f.signal is not None and f.order is not None and e.order is not None
                      and f.order < e.order for f in faults)
        if e.after_break or earlier or (e.mpi_crash and any(f.rank != e.rank for f in faults)):
            out.add(e.rank)
    return out


def classify(ends, seen):
    """The Outcome of a world whose ranks ended as `ends` (one RankEnd per
    rank, in rank order)."""
    if not seen.started:
        return Outcome(Next.STOP, Cause.NOTHING_STARTED)
    kept_crashes = collateral(ends)
    leavers = [e for e in ends if e.left in ("failure", "hosts")]
    lost, errors = [], []
    for e in ends:
        if e.left is not None:
            continue
        if e.how is None:
            why = (f"{e.host} is gone: {seen.gone[e.host]}" if e.host in seen.gone else
                   e.unreachable or "gone without a word: its host was probably lost")
            lost.append(Lost(e.rank, e.host, why, False))
        elif e.signal is not None or e.phase is Phase.LEAVING or e.mpi_crash or e.rank in kept_crashes:
            lost.append(Lost(e.rank, e.host, e.how, e.rank in kept_crashes))
        elif e.code != 0:
            errors.append(e)
    if errors:
        return Outcome(Next.STOP, Cause.SCRIPT_ERROR, errors=tuple(errors))
    if any(e.left == "done" for e in ends) and not leavers:
        # The training function returned (on every rank, since its last
        # collective completed); mpiexec's code may still count a rank lost afterwards.
        return Outcome(Next.DONE, lost_after_done=tuple(lost))
    if not lost and not leavers:
        return Outcome(Next.DONE) if seen.mpiexec_code == 0 else Outcome(Next.STOP, Cause.UNEXPLAINED)
    if lost and len(lost) == seen.size:
        if not seen.resumable:
            return Outcome(Next.STOP, Cause.NOTHING_TO_RESUME, lost=tuple(lost))
        return Outcome(Next.NEW_WORLD, Cause.EVERY_RANK_LOST, lost=tuple(lost))
    if lost:
        blamed = tuple(dict.fromkeys(x.host for x in lost if x.host not in seen.gone and not x.collateral))
        kept = {x.host for x in lost if x.collateral} - {x.host for x in lost if not x.collateral}
        dropped = sorted({x.host for x in lost if x.host in seen.gone})
        return Outcome(Next.NEW_WORLD, Cause.LOST, lost=tuple(lost), blamed=blamed, kept=tuple(sorted(kept)),
                       dropped=tuple(dropped))
    if any(e.left == "hosts" for e in leavers):
        return Outcome(Next.NEW_WORLD, Cause.HOSTS_CHANGED)
    return Outcome(Next.NEW_WORLD, Cause.CUT_OFF)
