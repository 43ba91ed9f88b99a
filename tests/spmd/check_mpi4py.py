"""mpi4py beside mxplugin in one process, as MXNet applications with a
`--horovod` mode use it: either imported first, with or without
`mpi4py.rc.finalize = False` (or, as Sockeye's `--horovod` does, with
neither `rc.initialize` nor `rc.finalize`, so that mxplugin initializes
MPI); both used for collectives; communicators of
mpi4py's own left alive to the interpreter's end; the process ends by the
ordinary exit path (no explicit shutdown), which must exit 0 on every rank.

argv: first (mpi4py or mxplugin), finalize (default, off, or neither: no
rc.initialize either), init (plain, comm, or shutdown: plain, and after
the checks hvd.shutdown() and mpi4py collectives after it).
"""
import os
import sys

first, finalize, how = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

if finalize in ("off", "neither"):
    import mpi4py

    mpi4py.rc.finalize = False
    mpi4py.rc.initialize = finalize == "off"
if first == "mpi4py":
    from mpi4py import MPI

    import mxplugin as hvd
else:
    import mxplugin as hvd

    hvd.init()
    from mpi4py import MPI

import mxnet as mx  # noqa: E402

if not MPI.Is_initialized():
    hvd.init()  # rc.initialize = False: MPI is mxplugin's to start (Sockeye's order)
if how == "comm":
    hvd.init(comm=MPI.COMM_WORLD)  # horovod.mxnet's form; a no-op when already initialised
else:
    hvd.init()

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
assert (rank, size) == (hvd.rank(), hvd.size()), ((rank, size), (hvd.rank(), hvd.size()))
kept = [world.Dup(), world.Split(rank % 2, rank)]  # alive until the interpreter ends
ours = hvd.allreduce(mx.nd.ones(3) * (rank + 1), name="ours", op=hvd.Sum).asnumpy()
theirs = kept[0].allreduce(rank + 1, op=MPI.SUM)
assert ours.tolist() == [size * (size + 1) / 2] * 3 and theirs == size * (size + 1) / 2, (ours, theirs)
if how == "shutdown":  # mxplugin done, the program's own MPI goes on (Note [MPI ends with the process])
    hvd.shutdown()
    after = world.allreduce(rank + 1, op=MPI.SUM)
    assert after == size * (size + 1) / 2 and MPI.COMM_SELF.bcast(rank, root=0) == rank, after
    world.Split(0, rank).Free()
sys.stdout.write(f"PASS {rank}\n")
sys.stdout.flush()
