"""mxplugin-run --check-build: what this mxplugin was built with (MPI, CUDA,
NCCL, MXNet), as the ranks would really load it: a child process loads the
core as a rank does and says what loaded, as data (the launcher itself
never imports mxplugin nor MXNet)."""
import json
import subprocess
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


# Run by the child, with the launcher's own sys.path (argv[1], so that the
# mxplugin beside this launcher is the one loaded, whatever the directory):
# the core loaded as a rank loads it, then what loaded, as one JSON line.
_LOAD_THE_CORE = """
import json, sys
sys.path[:] = json.loads(sys.argv[1])
try:
    from mxplugin._loader import NCCL_LIBRARY, core_module
except Exception as exc:  # a missing .so, libmpi or mxnet all land here
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
else:
    print(json.dumps({"cuda_built": bool(core_module.cuda_built()), "nccl_built": int(core_module.nccl_built()),
                      "nccl_library": NCCL_LIBRARY,
                      "mxnet_version": getattr(sys.modules.get("mxnet"), "__version__", None)}))
"""


def load_core():
    """({cuda_built, nccl_built, nccl_library, mxnet_version}, None) of the
    core as a child process loads it, or (None, why it could not)."""
    try:
        done = subprocess.run([sys.executable, "-c", _LOAD_THE_CORE, json.dumps(sys.path)], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    lines = done.stdout.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else {}
    except ValueError:
        said = {}
    if "error" in said:
        return None, said["error"]
    if done.returncode != 0 or "cuda_built" not in said:
        return None, f"loading it ended with exit code {done.returncode}: {done.stderr.strip()[-500:]}"
    return said, None


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
    built = core["cuda_built"] if core is not None else getattr(info, "CUDA_BUILT", None)
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
    code = core["nccl_built"] if core is not None else recorded
    source = "" if core is not None else " (from build info)"
    if code is None:
        return "NCCL: unknown"
    if not code:
        reason = getattr(info, "NCCL_NOT_BUILT_REASON", "")
        return f"NCCL: no ({reason}){source}" if reason else f"NCCL: no{source}"
    library = (core or {}).get("nccl_library") or getattr(info, "NCCL_LIBRARY", "") or "from the linker search path"
    version = getattr(info, "NCCL_VERSION", "") if recorded == code else ""
    line = f"NCCL: yes ({version or f'version code {code}'}, {library}){source}"
    if recorded is not None and recorded != code:
        line += f"; the build info says {recorded or 'no NCCL'}: rebuild mxplugin"
    return line


def mxnet_line(info, core):
    if info is not None and not getattr(info, "MXNET_BUILT", True):
        return "MXNet: no (core-only build)"
    built = getattr(info, "MXNET_VERSION", None)
    # The child's _loader imported mxnet: a mismatch with what is installed now is reported.
    running = (core or {}).get("mxnet_version")
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
        mxnet_line(info, core),
    ]
    if core_error:
        lines.append(f"core: not loadable ({core_error})")
    print("\n".join(lines))
    return 0
