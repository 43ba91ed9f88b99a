"""The reference every communication benchmark is compared with: one plain
MPI_Allreduce (sum, in place) on a single buffer, run by mxplugin's
background thread (the only thread that may call MPI: Note [MPI thread
level] in src/backend/mpi/mpi_context.cc) in the same processes and the same
run, timed around the MPI call alone."""
import numpy as np

import mxplugin as hvd
from mxplugin._loader import core_module


class RawAllreduce:
    def __call__(self, buf: np.ndarray):
        """In-place sum over all ranks; returns the MPI call's seconds."""
        assert buf.flags.c_contiguous
        return hvd.basics._core().reference_allreduce(buf.ctypes.data, buf.size, core_module.DTYPES[buf.dtype.name])
