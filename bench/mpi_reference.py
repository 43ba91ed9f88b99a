"""The reference every communication benchmark is compared with: one raw
MPI_Allreduce, called through ctypes on the same libmpi mxplugin uses, in the
same processes and the same run. mpi4py is used instead when installed."""
import ctypes

import numpy as np

from mxplugin import _loader

# MPICH ABI handle values (mpich, Intel MPI, MVAPICH, Cray MPICH).
_MPICH = {"comm_world": 0x44000000, "float": 0x4C00040A, "sum": 0x58000003, "in_place": -1}


class RawAllreduce:
    def __init__(self):
        try:
            from mpi4py import MPI

            self._mpi4py = MPI
        except ImportError:
            self._mpi4py = None
            lib = ctypes.CDLL(_loader.MPI_LIBRARY or "libmpi.so.12", mode=ctypes.RTLD_GLOBAL)
            self._fn = lib.MPI_Allreduce
            self._fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int]
            self._fn.restype = ctypes.c_int

    def __call__(self, buf: np.ndarray):
        """In-place sum of a float32 buffer over all ranks."""
        assert buf.dtype == np.float32 and buf.flags.c_contiguous
        if self._mpi4py is not None:
            self._mpi4py.COMM_WORLD.Allreduce(self._mpi4py.IN_PLACE, buf, op=self._mpi4py.SUM)
            return
        rc = self._fn(ctypes.c_void_p(_MPICH["in_place"]), buf.ctypes.data, buf.size, _MPICH["float"],
                      _MPICH["sum"], _MPICH["comm_world"])
        if rc != 0:
            raise RuntimeError(f"MPI_Allreduce failed with code {rc}")
