"""The MPI launcher mxplugin-run starts: which one (the build's, or
$MXPLUGIN_MPIEXEC), whether it belongs to the same MPI as the library the
ranks load, and its arguments for a job (MPICH's Hydra, Open MPI's
mpirun/prterun). Imports nothing of MXNet: the launcher's process never does."""
import importlib.util
import os
import shutil
import sys

from mxplugin_run.hosts import UsageError
from mxplugin_run.mpi_family import (MPICH_FAMILY, OPEN_MPI, chosen_library, first_line, launcher_family,
                                     library_family, library_version)


def load_build_info():
    """mxplugin/_build_info.py (written by setup.py: what the build used), or
    None where there is none (a source checkout never built). Read from its
    file: importing mxplugin's package would load MXNet into the launcher."""
    package = importlib.util.find_spec("mxplugin")
    if package is None or not package.submodule_search_locations:
        return None
    for folder in package.submodule_search_locations:
        path = os.path.join(folder, "_build_info.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("mxplugin_build_info", path)
            info = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(info)
            return info
    return None


def is_executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_mpiexec():
    """The mpiexec of the MPI mxplugin was built with ($MXPLUGIN_MPIEXEC names
    another), else the likeliest match."""
    if os.environ.get("MXPLUGIN_MPIEXEC"):
        named = os.environ["MXPLUGIN_MPIEXEC"]
        found = named if "/" in named else shutil.which(named)
        if not is_executable(found):
            raise UsageError(f"MXPLUGIN_MPIEXEC={named} is not an executable file")
        return found
    info = load_build_info()
    # an MPI installed into the same environment (e.g. the `mpich` wheel)
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    candidates = [getattr(info, "MPIEXEC", None), beside_python, shutil.which("mpiexec")]
    if getattr(info, "MPI_FROM_WHEEL", False):
        # built against the `mpich` wheel: this environment's own, which the
        # loader also takes its libmpi from (the build's may be another's)
        candidates.insert(0, beside_python)
    for path in candidates:
        if is_executable(path):
            return path
    raise UsageError("cannot find mpiexec; install an MPI or put its bin directory on PATH")


def built_library():
    """(family, version line, path) of the libmpi the ranks will load: the
    loader's choice (Note [Which libmpi] in mxplugin_run/mpi_family.py), made
    here without importing MXNet."""
    path = chosen_library(os.environ, load_build_info(),
                          (sys.prefix, os.path.dirname(os.path.dirname(sys.executable))))
    text = library_version(path)
    return library_family(text), first_line(text), path


def mpi_flavour(mpiexec):
    """'openmpi' or 'mpich' (MPICH, Intel MPI and other Hydra-based launchers):
    the launcher's family. A launcher of the other family than the library
    the ranks load would start N one-rank jobs (Note [Lone ranks] in
    mxplugin/lone_rank.py): refused here, naming both."""
    family, said = launcher_family(mpiexec)
    lib_family, lib_said, lib_path = built_library()
    if family and lib_family and family != lib_family:
        raise UsageError(
            f"{mpiexec} is {family}'s launcher ({said}) but mxplugin loads {lib_family}'s library ({lib_said}, "
            f"{lib_path}): each rank would run alone. Put the launcher of the MPI mxplugin was built with first "
            f"(`mxplugin-run --check-build` shows both), set MXPLUGIN_MPIEXEC to it, or rebuild mxplugin with "
            f"MPICC=<that MPI's mpicc>")
    if family is None:
        family = lib_family or MPICH_FAMILY
        print(f"mxplugin-run: warning: could not tell which MPI {mpiexec} belongs to; using {family}-style "
              "arguments", file=sys.stderr)
    return "openmpi" if family == OPEN_MPI else "mpich"


# Variables Open MPI's launcher passes to the ranks (-x): it forwards only
# those named to remote hosts. Hydra passes the whole environment.
_EXPORTED_PREFIXES = ("MXPLUGIN_", "UCX_", "MXNET_", "NCCL_", "HOROVOD_")
_EXPORTED_NAMES = ("OMP_NUM_THREADS", "PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "VIRTUAL_ENV")


def names_to_export(env):
    return sorted(name for name in env if name.startswith(_EXPORTED_PREFIXES) or name in _EXPORTED_NAMES)


def mpich_arguments(num_proc, hosts, rsh="ssh", iface=None):
    # Hydra passes the launcher's whole environment to every rank by default.
    args = ["-n", str(num_proc)]
    if iface:
        args += ["-iface", iface]
    if hosts:
        args += ["-hosts", ",".join(f"{name}:{slots}" for name, slots in hosts)]
        if rsh != "ssh":
            args += ["-launcher", "ssh", "-launcher-exec", rsh]
    return args


def openmpi_arguments(num_proc, hosts, env, rsh="ssh", iface=None, as_root=None):
    """Open MPI's mpirun (4.x) or prterun (5.x) for the same job as
    mpich_arguments(). Note [Open MPI's defaults]: as root (containers,
    Kubernetes pods) it refuses to start unless told, so it is told, as
    horovodrun does; without a host list it allows one rank per core and
    fails beyond that, so this machine is listed with -np slots (Hydra runs
    any number); it binds each rank to one core when there are 2 ranks or
    fewer, which would put a rank's MXNet, OpenMP and mxplugin threads on one
    core, so ranks are not bound (OMP_NUM_THREADS already divides the cores);
    and a rank waiting in MPI spins without yielding unless it sees more
    ranks than cores, while each rank here runs more busy threads than that
    count shows (MXNet's, ours): on 2 cores, 2 hosts x 2 ranks reduced
    resnet50's gradients in 537 ms spinning and in 102 ms yielding
    (bench/each_mpi.py's setting), so ranks yield (mpi_yield_when_idle),
    unless the user set it (OMPI_MCA_mpi_yield_when_idle), as MPICH's
    threads do (Note [MPI thread level] in src/backend/mpi/mpi_world.cc)."""
    slots = hosts or [("localhost", num_proc)]
    args = ["-np", str(num_proc), "-H", ",".join(f"{name}:{n}" for name, n in slots), "--bind-to", "none",
            "--map-by", "slot"]
    if as_root is None:
        as_root = os.geteuid() == 0
    if as_root:
        args += ["--allow-run-as-root"]
    if hosts and rsh != "ssh":
        args += ["--mca", "plm_rsh_agent", rsh]
    if iface:
        args += ["--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface]
    if "OMPI_MCA_mpi_yield_when_idle" not in env:
        args += ["--mca", "mpi_yield_when_idle", "1"]
    for name in names_to_export(env):
        args += ["-x", name]
    return args
