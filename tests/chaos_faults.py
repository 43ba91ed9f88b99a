"""The faults of a chaos run (tests/chaos.py), each injected into a
ChaosJob (tests/chaos_job.py) at the moment it is about, once the world
running can take it (ChaosJob.ready_world). Each returns its record: kind,
the host hit, the world it hit, when (monotonic) and what happened, and
leaves the cluster as it found it (a link cut is restored, a host dropped
from discovery is listed again, a frozen rank is let go).

Faults that take a whole host (a cut link, every process killed, dropped by
discovery) spare the first host: the launcher runs there, and a job whose
launcher is lost is over, not elastic."""
import signal
import subprocess
import time

from chaos_job import ChaosError
from chaos_log import CANNOT_REACH_BACK, COMMITTING, RANK_RESUMES, WORLD, WORLD_NOT_STARTED, World

# A frozen rank stays stopped this long past the peer timeout, so that its
# peers give up on it for sure (a stop shorter than the timeout is no fault).
FROZEN_PAST_TIMEOUT_S = 5
# How long a frozen rank, let go after its world ended, may take to see
# that and leave: its watcher's next request is answered at once.
FROZEN_LEAVES_S = 60


def _record(kind, job, world, host, **detail):
    return {"kind": kind, "host": job.cluster.hosts[host], "world": world.number, "at": time.monotonic(), **detail}


def _spare_first(job, world):
    """The indexes of `world`'s hosts that a whole-host fault may take."""
    return [job.index(h) for h in world.hosts if job.index(h) != 0]


def kill_rank(job, rng):
    """SIGKILL of one rank, on any host (rank 0 too)."""
    world = job.ready_world()
    host = job.index(rng.choice(world.hosts))
    rank = job.rank_on(host)
    record = _record("kill_rank", job, world, host, pid=rank.pid)
    job.send(rank.pid, signal.SIGKILL)
    return record


def freeze_rank(job, rng):
    """SIGSTOP of one rank for longer than the peer timeout, then SIGCONT
    once its world is over: it must leave by itself, its state no longer
    wanted (never handed over, never trained on)."""
    world = job.ready_world()
    host = job.index(rng.choice(world.hosts))
    rank = job.rank_on(host)
    record = _record("freeze_rank", job, world, host, pid=rank.pid)
    job.send(rank.pid, signal.SIGSTOP)
    job.next_world(world, "a world without the frozen rank")
    # The stop's length is the fault itself: a sleep by design.
    time.sleep(max(0.0, record["at"] + job.peer_timeout_s + FROZEN_PAST_TIMEOUT_S - time.monotonic()))
    job.send(rank.pid, signal.SIGCONT)
    record["stopped_s"] = round(time.monotonic() - record["at"], 1)
    let_go = time.monotonic()
    if not job.ranks.wait_for(lambda: rank.how is not None, FROZEN_LEAVES_S):
        raise ChaosError(f"the frozen rank {rank.pid} still runs {FROZEN_LEAVES_S} s after SIGCONT")
    record["left_after_s"], record["left_how"] = round(rank.ended - let_go, 3), rank.how
    return record


def _set_link(job, host, state):
    subprocess.run(["ip", "link", "set", job.cluster.links[host], state], check=True, capture_output=True)


def cut_link(job, rng):
    """A host's link down (its processes live on, nothing reaches them),
    restored once the launcher has started a world without it."""
    world = job.ready_world()
    host = rng.choice(_spare_first(job, world))
    rank = job.rank_on(host)
    record = _record("cut_link", job, world, host, pid=rank.pid)
    _set_link(job, host, "down")
    try:
        job.next_world(world, "a world without the host cut off")
    finally:
        _set_link(job, host, "up")
    record["cut_s"] = round(time.monotonic() - record["at"], 1)
    return record


def cut_past_cooldown(job, rng):
    """A host's link down past its cool-down: when that ends the launcher
    finds it still cut off (Note [Hosts that cannot reach the launcher]) or,
    failing that, a world cannot start there (Note [Hosts a world cannot
    start on]), and the job goes on without it; the link comes back then
    (once a world trains without it), and the host rejoins later."""
    world = job.ready_world()
    host = rng.choice(_spare_first(job, world))
    rank = job.rank_on(host)
    name = job.cluster.hosts[host]
    record = _record("cut_past_cooldown", job, world, host, pid=rank.pid)
    _set_link(job, host, "down")
    try:
        new = job.next_world(world, "a world without the host cut off")
        i, when, text = job.wait_line(
            lambda t: (WORLD_NOT_STARTED.match(t) is not None or CANNOT_REACH_BACK.match(t) is not None) and name in t,
            new.index, f"{name} left out again after its cool-down")
        record["refused_s"] = round(when - record["at"], 1)
        refused = WORLD_NOT_STARTED.match(text)
        record["refused_by"] = "mpiexec" if refused else "the launcher's reach-back check"
        if refused:
            job.first_step_after(World(int(refused.group(1)), [], i, when), without=name)
    finally:
        _set_link(job, host, "up")
    record["cut_s"] = round(time.monotonic() - record["at"], 1)
    return record


def kill_host(job, rng):
    """SIGKILL of every process of one host at once (rank, its agent,
    relay, MPICH's proxy), as when a machine fails."""
    world = job.ready_world()
    host = rng.choice(_spare_first(job, world))
    job.rank_on(host)
    pids = job.cluster.pids(host, "")
    record = _record("kill_host", job, world, host, processes=len(pids))
    job.killed_with_host.update(pids)
    for pid in pids:
        job.send(pid, signal.SIGKILL)
    return record


def readd_host(job, rng):
    """A host dropped from discovery (the world ends at once, back to the
    last commit), then, once a world trains without it, listed again: it
    joins at a commit of that world."""
    world = job.ready_world()
    host = rng.choice(_spare_first(job, world))
    listed = [i for i in range(len(job.cluster.hosts)) if i != host]
    record = _record("readd_host", job, world, host)
    job.write_discovery(listed)
    job.first_step_after(world, without=job.cluster.hosts[host])
    job.write_discovery(range(len(job.cluster.hosts)))
    record["readded_s"] = round(time.monotonic() - record["at"], 1)
    return record


def kill_in_commit(job, rng):
    """SIGKILL of one rank as rank 0 says it is committing (the commit's
    snapshot and host check under way on the ranks)."""
    while True:
        world = job.ready_world()
        i, _, text = job.wait_line(lambda t: COMMITTING.match(t) is not None or WORLD.match(t) is not None,
                                   len(job.lines()), f"a commit in world {world.number}")
        if COMMITTING.match(text):
            break
    host = job.index(rng.choice(world.hosts))
    rank = job.rank_on(host)
    record = _record("kill_in_commit", job, world, host, pid=rank.pid, commit=int(COMMITTING.match(text).group(1)))
    job.send(rank.pid, signal.SIGKILL)
    return record


def kill_in_reset(job, rng):
    """SIGKILL of a rank of a world being started: as its process starts
    (MXNet loading, registering, rank 0 fetching the state) or as it has
    the state (the ranks' "resumes at step" lines, before the first step).
    The reset is the next one coming (a host back from its cool-down);
    when every host is in the world already, one is made by dropping a
    host from discovery (listed again once the kill is done)."""
    world = job.ready_world()
    dropped = None
    if len(world.hosts) == len(job.cluster.hosts):
        dropped = rng.choice(_spare_first(job, world))
        job.write_discovery([i for i in range(len(job.cluster.hosts)) if i != dropped])
    moment = rng.choice(("starting", "resuming"))
    try:
        new = job.next_world(world, "a reset to hit")
        while moment == "resuming":
            _, _, text = job.wait_line(lambda t: RANK_RESUMES.search(t) is not None or WORLD.match(t) is not None,
                                       new.index + 1, f"world {new.number}'s ranks resuming")
            if not WORLD.match(text):
                break
            new = job.next_world(new)
        host = job.index(rng.choice(new.hosts))
        rank = job.rank_on(host, since=new.when - 1)
        record = _record("kill_in_reset", job, new, host, pid=rank.pid, moment=moment,
                         made_by_dropping=job.cluster.hosts[dropped] if dropped is not None else None)
        job.send(rank.pid, signal.SIGKILL)
    finally:
        if dropped is not None:
            job.write_discovery(range(len(job.cluster.hosts)))
    return record


KINDS = {f.__name__: f for f in (kill_rank, freeze_rank, cut_link, cut_past_cooldown, kill_host, readd_host,
                                 kill_in_commit, kill_in_reset)}
