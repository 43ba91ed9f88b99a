"""MPICH's shared-memory segments of a rank, found and removed once the
rank is done with them (Note [Segments of a rank that ended]), by the rank
agent (mxplugin_run/rank_agent.py).

Note [Segments of a rank that ended]: MPICH keeps a shared-memory segment
per rank in /dev/shm (mpich_shm_<job>_<rank>, 1-3 MB), removed only by
MPI_Finalize. An elastic rank never gets there when its world ends (it
leaves with os._exit: a peer is gone, Note [Worlds] in runner.py) or when it
is killed, so left alone every reset would leave one segment per rank
behind, until /dev/shm fills. So the rank's process starts a keeper
beside it before it execs the rank's command (keep_before_exec), which
notes the segments the rank maps while it runs and removes those still there once it has ended, however it ended
(left, killed, crashed, or stuck in MPI's start until mpiexec was
abandoned): no rank of a later world attaches to them (a world's names are
its own), and a peer of the same world that still maps one keeps its memory.
The keeper is a process of its own, in a session of its own: MPICH's proxy
SIGKILLs the agent, its child, when mpiexec is abandoned, and the rank
may end after that. Only MPICH's names: a segment the training script shares
(a dataset in /dev/shm) is not the job's to remove."""
import os
import select
import signal

from mxplugin_run.timeouts import SEGMENT_SCAN_S

SHM_DIR = "/dev/shm/"
JOB_SEGMENT_PREFIXES = ("mpich_shm_",)


def mapped(pid="self"):
    """The names of MPICH's segments process `pid` maps now (none once it has ended)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if SHM_DIR in line}
    except OSError:
        return set()
    names = {path[len(SHM_DIR):] for path in paths if path.startswith(SHM_DIR) and not path.endswith(" (deleted)")}
    return {name for name in names if name.startswith(JOB_SEGMENT_PREFIXES)}


def remove(names):
    for name in names:
        try:
            os.unlink(SHM_DIR + name)
        except OSError:  # removed already (MPI_Finalize, a peer), or not ours to remove
            pass


def keep_before_exec():
    """Called in the rank's own process before it execs the rank's command:
    starts the keeper of its segments (a detached grandchild, so that none
    is left to reap) and returns once the keeper watches it. The rank has
    no segment yet, and no kill of the agent can come between the rank's
    start and its keeper's."""
    rank = os.getpid()
    watching_read, watching_write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(watching_read)
            if os.fork() == 0:
                os.setsid()
                _keep(rank)
        finally:
            os._exit(0)
    os.close(watching_write)
    os.waitpid(child, 0)
    os.read(watching_read, 1)  # its end: the keeper watches, or is gone
    os.close(watching_read)


def _keep(pid):
    # It holds none of the rank's descriptors: MPICH's proxy sees a rank
    # end by its PMI descriptor closing, once the rank and its agent have
    # ended (Note [A rank's agent] in mxplugin_run/rank_agent.py); closing
    # them also tells the rank that it is watched.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # ended already
        return
    os.closerange(3, pidfd)
    os.closerange(pidfd + 1, os.sysconf("SC_OPEN_MAX"))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    noted = set()
    while not select.select([pidfd], [], [], SEGMENT_SCAN_S)[0]:
        noted |= mapped(pid)
    remove(noted)
