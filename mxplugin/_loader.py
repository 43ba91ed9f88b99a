"""Loads the compiled core with its native dependencies in place.

libmxnet.so is loaded by `import mxnet` (not in a core-only build, which
does not link it); libmpi, and libnccl in an NCCL build, are loaded here
with RTLD_GLOBAL from where the package was built against (or
MXPLUGIN_MPI_LIBRARY / MXPLUGIN_NCCL_LIBRARY), so the extension finds them
by soname even when the build ran in an isolated environment that no longer
exists.
"""
import ctypes
import glob
import importlib.util
import os
import sys

try:
    from mxplugin import _build_info
except ImportError:  # a checkout that was never built: importing _core below says so
    _build_info = None

if getattr(_build_info, "MXNET_BUILT", True):
    import mxnet  # noqa: F401  (loads libmxnet.so, which _core links against)


def _mpi_library_candidates():
    env = os.environ.get("MXPLUGIN_MPI_LIBRARY")
    if env:
        yield env
    # Built against the `mpich` wheel: this environment's own copy (an install
    # requirement) first, since the build's may be another environment's.
    beside = [path for prefix in (sys.prefix, os.path.dirname(os.path.dirname(sys.executable)))
              for path in sorted(glob.glob(os.path.join(prefix, "lib", "libmpi.so.*")))]
    if getattr(_build_info, "MPI_FROM_WHEEL", False):
        yield from beside
    yield getattr(_build_info, "MPI_LIBRARY", "")
    yield from beside


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


MPI_LIBRARY = _preload(_mpi_library_candidates())


def mpi_library_version():
    """MPI_Get_library_version's text (callable before MPI_Init), or "" when
    it cannot be read: names the MPI this process really loaded."""
    try:
        lib = ctypes.CDLL(MPI_LIBRARY or "libmpi.so", mode=ctypes.RTLD_GLOBAL)
        text, length = ctypes.create_string_buffer(8192), ctypes.c_int(0)  # MPICH's maximum; Open MPI's is 256
        if lib.MPI_Get_library_version(text, ctypes.byref(length)) != 0:
            return ""
        return text.value.decode("utf-8", "replace")
    except (OSError, AttributeError):
        return ""
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
