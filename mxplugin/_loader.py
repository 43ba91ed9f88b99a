"""Loads the compiled core with its native dependencies in place.

libmxnet.so is loaded by `import mxnet`; libmpi is loaded here with
RTLD_GLOBAL from the MPI the package was built with (or MXPLUGIN_MPI_LIBRARY),
so the extension finds both by soname even when the build ran in an
isolated environment that no longer exists.
"""
import ctypes
import glob
import os
import sys

import mxnet  # noqa: F401  (loads libmxnet.so, which _core links against)


def _mpi_library_candidates():
    env = os.environ.get("MXPLUGIN_MPI_LIBRARY")
    if env:
        yield env
    try:
        from mxplugin import _build_info

        yield _build_info.MPI_LIBRARY
    except ImportError:
        pass
    for prefix in (sys.prefix, os.path.dirname(os.path.dirname(sys.executable))):
        yield from sorted(glob.glob(os.path.join(prefix, "lib", "libmpi.so.*")))


def _preload_mpi():
    for path in _mpi_library_candidates():
        if path and os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    return None  # rely on the dynamic linker's search path


MPI_LIBRARY = _preload_mpi()

from mxplugin import _core  # noqa: E402

core_module = _core
