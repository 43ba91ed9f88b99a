"""Which MPI a library or a launcher belongs to, for the launcher (which
never imports MXNet) and the loader alike.

Two families matter, because their launchers and libraries do not mix: Open
MPI (mpirun/prterun, libmpi.so.40) and the MPICH ABI family (MPICH, Intel
MPI, Cray MPICH, MVAPICH: Hydra's mpiexec, libmpi.so.12), whose libraries a
build against MPICH may load in place of its own (docs/guides/clusters.md)."""
import ctypes
import glob
import os
import re
import subprocess

OPEN_MPI = "Open MPI"
MPICH_FAMILY = "MPICH"


def library_version(path):
    """MPI_Get_library_version's text for the libmpi at `path` (or the one
    the dynamic linker finds, for ""), "" when it cannot be read. Callable
    before MPI_Init and without initialising anything."""
    try:
        lib = ctypes.CDLL(path or "libmpi.so.12", mode=ctypes.RTLD_GLOBAL)
        text, length = ctypes.create_string_buffer(8192), ctypes.c_int(0)  # MPICH's maximum; Open MPI's is 256
        if lib.MPI_Get_library_version(text, ctypes.byref(length)) != 0:
            return ""
        return text.value.decode("utf-8", "replace")
    except (OSError, AttributeError):
        return ""


def first_line(version_text):
    """The version text's first line, spaces collapsed and cut before Open
    MPI's package details ("MPICH Version: 5.0.2", "Open MPI v5.0.11")."""
    lines = (version_text or "").strip().splitlines()
    return " ".join(lines[0].split()).split(", package:")[0] if lines else ""


def library_family(version_text):
    """OPEN_MPI, MPICH_FAMILY, or None when the text says neither."""
    if "Open MPI" in version_text:
        return OPEN_MPI
    if any(word in version_text for word in ("MPICH", "Intel(R) MPI", "CRAY MPICH", "MVAPICH")):
        return MPICH_FAMILY
    return None


def launcher_family(mpiexec):
    """(family or None, what `mpiexec --version` said, first line) of a launcher."""
    try:
        probe = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
        text = probe.stdout + probe.stderr
    except (OSError, subprocess.SubprocessError):
        return None, ""
    said = first_line(text)
    hydra = re.search(r"HYDRA build details:\s*Version:\s*(\S+)", text)
    if hydra:  # MPICH's and Intel MPI's mpiexec
        said = f"Hydra {hydra.group(1)}"
    if "Open MPI" in text or "OpenRTE" in text or "open-mpi" in text or "PRRTE" in text or "prterun" in text:
        return OPEN_MPI, said
    if "HYDRA" in text.upper() or "MPICH" in text.upper() or "Intel(R) MPI" in text:
        return MPICH_FAMILY, said
    return None, said


def soname(path):
    """"libmpi.so.12" of ".../libmpi.so.12.5.0": the name the extension links by."""
    match = re.match(r"^(lib[\w+-]+\.so\.\d+)", os.path.basename(path or ""))
    return match.group(1) if match else "libmpi.so.12"


def library_candidates(env, info, prefixes):
    """The libmpi paths to try, in order (the first that exists is loaded).

    Note [Which libmpi]: MXPLUGIN_MPI_LIBRARY when set; then a library of
    the build's soname in a directory of LD_LIBRARY_PATH, where a user (or
    an MPI's environment script, as Intel MPI's vars.sh) points any MPI
    program at another runtime of the same ABI; then, for a build against
    the `mpich` wheel, this environment's own copy (an install requirement:
    the build's may be another environment's); then the build's library.
    `info` is mxplugin._build_info (or None); `prefixes` the environment's
    prefixes (sys.prefix, the interpreter's)."""
    if env.get("MXPLUGIN_MPI_LIBRARY"):
        yield env["MXPLUGIN_MPI_LIBRARY"]
    name = soname(getattr(info, "MPI_LIBRARY", ""))
    for directory in env.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if directory:
            yield os.path.join(directory, name)
    beside = [path for prefix in prefixes for path in sorted(glob.glob(os.path.join(prefix, "lib", "libmpi.so.*")))]
    if getattr(info, "MPI_FROM_WHEEL", False):
        yield from beside
    yield getattr(info, "MPI_LIBRARY", "")
    yield from beside


def chosen_library(env, info, prefixes):
    """The libmpi the loader takes, or "" (the dynamic linker's search path)."""
    return next((path for path in library_candidates(env, info, prefixes) if path and os.path.exists(path)), "")
