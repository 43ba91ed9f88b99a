"""MPI for the GPU machine, which has none and no network (GPU.md): the
`mpich` wheel, carried along, installed with `pip --prefix` (`--target`
drops the wheel's lib/). An MPI already there is used as it is."""
import glob
import os
import shutil
import sys


def find_wheel(given, repo):
    """The wheel named by --mpich-wheel (a file, or a folder holding one),
    else the newest mpich-*.whl in the repository's .whl/ folder; None if none."""
    if given and os.path.isfile(given):
        return os.path.abspath(given)
    folder = given or os.path.join(repo, ".whl")
    wheels = sorted(glob.glob(os.path.join(folder, "mpich-*.whl")))
    return os.path.abspath(wheels[-1]) if wheels else None


def install_command(wheel, prefix):
    # --ignore-installed: an mpich already in this Python's environment would
    # otherwise make pip skip the prefix
    return [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--prefix", prefix,
            wheel]


def other_mpicc(env):
    """An mpicc the build would find without the prefix: $MPICC, the one beside
    this Python (the wheel installed into its environment), or one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    for path in (env.get("MPICC"), beside if os.path.exists(beside) else None, shutil.which("mpicc")):
        if path:
            return path
    return None


def prefix_environment(prefix, env):
    """The variables that make the build and the tests use the MPI under `prefix`."""
    return {"PATH": os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", ""),
            "MPICC": os.path.join(prefix, "bin", "mpicc")}
