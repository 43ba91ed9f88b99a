"""MPICH's shared-memory segments of a rank, found and removed once the
rank is done with them (Note [Segments of a rank that ended]). Imports
nothing of mxplugin, so that the rank supervisor (run by path) can load it.

Note [Segments of a rank that ended]: MPICH keeps a shared-memory segment
per rank in /dev/shm (mpich_shm_<job>_<rank>, 1-3 MB), removed only by
MPI_Finalize. An elastic rank never gets there when its world ends (it
leaves with os._exit: a peer is gone, Note [Worlds] in runner.py) or when
it is killed, so every reset left one per rank behind (the chaos run of
issue 38: 48 segments after 14 resets), until /dev/shm fills. So a rank
that leaves removes those it maps as it ends, and its supervisor, which
notes them while the rank runs, removes what is left once the rank has
ended (a rank killed, or crashed): no rank of a later world attaches to
them (a world's names are its own), and a peer of the same world that
still maps one keeps its memory. Only MPICH's names: a segment the training
script shares (a dataset in /dev/shm) is not the job's to remove."""
import os

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
