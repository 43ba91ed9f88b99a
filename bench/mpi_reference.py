"""An in-process figure next to each communication benchmark: one plain
allreduce (sum, in place) of a single buffer by the world's data plane
(MPI_Allreduce, or the hierarchical shared-memory allreduce where ranks share
a host), run by mxplugin's background thread (the only thread that may call
MPI: Note [MPI thread level] in src/backend/mpi/mpi_world.cc) in the same
processes and run, timed around the call alone. The fair reference is the
standalone program of bench/mpi_plain.py."""
import numpy as np

import mxplugin as hvd
from mxplugin._loader import core_module


class RawAllreduce:
    def __call__(self, buf: np.ndarray):
        """In-place sum over all ranks; returns the MPI call's seconds."""
        assert buf.flags.c_contiguous
        return hvd.basics._core().reference_allreduce(buf.ctypes.data, buf.size, core_module.DTYPES[buf.dtype.name])
