"""Loads the compiled core with its native dependencies in place.

libmxnet.so is loaded by `import mxnet` (not in a core-only build, which
does not link it); libmpi, and libnccl in an NCCL build, are loaded here
with RTLD_GLOBAL from where the package was built against (or
MXPLUGIN_MPI_LIBRARY / MXPLUGIN_NCCL_LIBRARY), so the extension finds them
by soname even when the build ran in an isolated environment that no longer
exists.
"""
import ctypes
import importlib.util
import os
import sys

from mxplugin_run.mpi_family import library_candidates, library_version

try:
    from mxplugin import _build_info
except ImportError:  # a checkout that was never built: importing _core below says so
    _build_info = None

if getattr(_build_info, "MXNET_BUILT", True):
    import mxnet  # noqa: F401  (loads libmxnet.so, which _core links against)


def _prefixes():
    return (sys.prefix, os.path.dirname(os.path.dirname(sys.executable)))


def _nccl_library_candidates():
    env = os.environ.get("MXPLUGIN_NCCL_LIBRARY")
    if env:
        yield env
    yield getattr(_build_info, "NCCL_LIBRARY", "")
    # the nvidia-nccl-cu12/-cu13 wheel installed with mxplugin
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for entry in (spec.submodule_search_locations or []) if spec else []:
        yield os.path.join(entry, "nccl", "lib", "libnccl.so.2")


def _preload(candidates):
    for path in candidates:
        if path and os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    return None  # rely on the dynamic linker's search path


MPI_LIBRARY = _preload(library_candidates(os.environ, _build_info, _prefixes()))  # Note [Which libmpi]


def mpi_library_version():
    """MPI_Get_library_version's text for the libmpi this process loaded."""
    return library_version(MPI_LIBRARY)


NCCL_LIBRARY = _preload(_nccl_library_candidates()) if getattr(_build_info, "NCCL_BUILT", 0) else None

try:
    from mxplugin import _core  # noqa: E402
except ImportError as exc:
    if NCCL_LIBRARY is None and "libnccl" in str(exc):
        raise ImportError(
            f"mxplugin was built with NCCL {_build_info.NCCL_VERSION} ({_build_info.NCCL_LIBRARY or 'from a wheel'}) "
            "and cannot find libnccl.so.2 now: pip install nvidia-nccl-cu12 (or -cu13, matching your CUDA), or "
            "set MXPLUGIN_NCCL_LIBRARY to its path.") from exc
    raise

core_module = _core
