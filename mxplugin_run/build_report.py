"""mxplugin-run --check-build: what this mxplugin was built with (MPI, CUDA,
NCCL, MXNet), as the ranks would really load it."""
import sys

from mxplugin_run.hosts import UsageError
from mxplugin_run.mpi_launcher import built_library, find_mpiexec, load_build_info
from mxplugin_run.mpi_family import launcher_family


def package_version():
    """mxplugin's installed version, from its metadata (not its import)."""
    from importlib import metadata

    try:
        return metadata.version("mxplugin")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def load_core():
    """(core module, None) or (None, reason it could not be loaded)."""
    try:
        from mxplugin._loader import core_module
    except Exception as exc:  # a missing .so, libmpi or mxnet all land here
        return None, f"{type(exc).__name__}: {exc}"
    return core_module, None


def mpi_line(info):
    """The MPI the ranks will really use: the libmpi they load (Note [Which
    libmpi]) and its version, and the launcher mxplugin-run starts, with
    its family; a launcher of another MPI than the library is flagged."""
    if info is None:
        return "MPI: unknown (no build info)"
    family, version, library = built_library()
    try:
        mpiexec = find_mpiexec()
    except UsageError as exc:
        return f"MPI: {version or family or 'unknown'} ({library or 'from the linker search path'}); launcher: not found ({exc})"
    launcher, said = launcher_family(mpiexec)
    line = (f"MPI: {version or family or 'version unknown'} ({library or 'from the linker search path'}); "
            f"launcher: {mpiexec} ({said or 'unknown'})")
    if launcher and family and launcher != family:
        line += f"; MISMATCH: the launcher is {launcher}'s, the library {family}'s (each rank would run alone)"
    return line


def cuda_line(info, core):
    built = core.cuda_built() if core is not None else getattr(info, "CUDA_BUILT", None)
    source = "" if core is not None else " (from build info)"
    if built is None:
        return "CUDA: unknown"
    if not built:
        return f"CUDA: no{source}"
    archs = getattr(info, "CUDA_ARCHS", "")
    return f"CUDA: yes (archs {archs.replace(';', ', ') or 'unknown'}){source}"


def nccl_line(info, core):
    """NCCL's version and the libnccl loaded (or recorded), or why not built."""
    recorded = getattr(info, "NCCL_BUILT", None)
    code = core.nccl_built() if core is not None else recorded
    source = "" if core is not None else " (from build info)"
    if code is None:
        return "NCCL: unknown"
    if not code:
        reason = getattr(info, "NCCL_NOT_BUILT_REASON", "")
        return f"NCCL: no ({reason}){source}" if reason else f"NCCL: no{source}"
    library = None
    if core is not None:
        from mxplugin._loader import NCCL_LIBRARY as library
    library = library or getattr(info, "NCCL_LIBRARY", "") or "from the linker search path"
    version = getattr(info, "NCCL_VERSION", "") if recorded == code else ""
    line = f"NCCL: yes ({version or f'version code {code}'}, {library}){source}"
    if recorded is not None and recorded != code:
        line += f"; the build info says {recorded or 'no NCCL'}: rebuild mxplugin"
    return line


def mxnet_line(info):
    if info is not None and not getattr(info, "MXNET_BUILT", True):
        return "MXNet: no (core-only build)"
    built = getattr(info, "MXNET_VERSION", None)
    # _loader imports mxnet; report a mismatch with what is installed now.
    running = getattr(sys.modules.get("mxnet"), "__version__", None)
    if built and running and built != running:
        return f"MXNet: yes (built against {built}, installed {running})"
    return f"MXNet: yes ({built or running or 'version unknown'})"


def check_build():
    info = load_build_info()
    core, core_error = load_core()
    lines = [
        f"mxplugin {package_version()}",
        mpi_line(info),
        cuda_line(info, core),
        nccl_line(info, core),
        mxnet_line(info),
    ]
    if core_error:
        lines.append(f"core: not loadable ({core_error})")
    print("\n".join(lines))
    return 0
