"""Builds mxplugin._core from Cython and the C++17 core in src/.

MPI comes from `mpicc -show`: $MPICC if set (a cluster's MPI), else the
mpicc next to this Python (the PyPI `mpich` package), else the one on PATH.
MXNet headers and libmxnet.so come from the installed mxnet==1.9.1 wheel.
CUDA is never needed for this build.
"""
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def find_mpicc():
    if os.environ.get("MPICC"):
        return os.environ["MPICC"]
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if os.path.exists(beside_python):
        return beside_python
    found = shutil.which("mpicc")
    if found:
        return found
    sys.exit("mxplugin: no mpicc found. `pip install mpich`, or set MPICC to your MPI's mpicc.")


def mpi_flags(mpicc):
    out = subprocess.check_output([mpicc, "-show"], text=True).strip()
    inc, libdirs, libs, rpaths = [], [], [], []
    for tok in shlex.split(out)[1:]:
        if tok.startswith("-I"):
            inc.append(tok[2:])
        elif tok.startswith("-L"):
            libdirs.append(tok[2:])
        elif tok.startswith("-l"):
            libs.append(tok[2:])
        elif tok.startswith("-Wl,-rpath,"):
            rpaths.append(tok[len("-Wl,-rpath,"):])
    # mpicc may add -Wl,-rpath -Wl,DIR as two tokens
    toks = shlex.split(out)
    for a, b in zip(toks, toks[1:]):
        if a == "-Wl,-rpath" and b.startswith("-Wl,"):
            rpaths.append(b[4:])
    return inc, libdirs, libs, rpaths


def find_mpi_library(libdirs):
    for d in libdirs:
        for name in ("libmpi.so.12", "libmpi.so.40", "libmpi.so"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                return os.path.realpath(path)
    return ""


def find_mpiexec(mpicc):
    cand = os.path.join(os.path.dirname(os.path.realpath(mpicc)), "mpiexec")
    if os.path.exists(cand):
        return cand
    return shutil.which("mpiexec") or "mpiexec"


def mxnet_paths():
    import mxnet
    from mxnet import libinfo

    inc = libinfo.find_include_path()
    lib = libinfo.find_lib_path()[0]
    return [inc, os.path.join(inc, "mkldnn")], os.path.dirname(lib), mxnet.__version__


def sources():
    out = []
    for base, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith(".cc"):
                out.append(os.path.relpath(os.path.join(base, f), ROOT))
    return sorted(out)


def cuda_requested():
    flag = os.environ.get("MXPLUGIN_WITH_CUDA", "")
    if flag == "1":
        sys.exit("mxplugin: MXPLUGIN_WITH_CUDA=1 but this version builds the CPU core only "
                 "(the CUDA kernels are not part of it yet).")
    return False


mpicc = find_mpicc()
mpi_inc, mpi_libdirs, mpi_libs, mpi_rpaths = mpi_flags(mpicc)
mx_inc, mx_libdir, mx_version = mxnet_paths()
cuda_requested()

# In an isolated pip build the mpich wheel lives in a temporary environment;
# at run time the same wheel (an install requirement) sits beside the
# interpreter, where mxplugin looks when these paths are empty.
ephemeral = "pip-build-env" in os.path.realpath(mpicc)
BUILD_INFO = {
    "MPICC": "" if ephemeral else os.path.realpath(mpicc),
    "MPIEXEC": "" if ephemeral else find_mpiexec(mpicc),
    "MPI_LIBRARY": "" if ephemeral else find_mpi_library(mpi_libdirs),
    "MXNET_VERSION": mx_version,
    "CUDA_BUILT": False,
    "NCCL_BUILT": 0,
}
with open(os.path.join(ROOT, "mxplugin", "_build_info.py"), "w") as f:
    f.write("# Written by setup.py: what this build of mxplugin was compiled against.\n")
    for k, v in BUILD_INFO.items():
        f.write(f"{k} = {v!r}\n")

CXXFLAGS = [
    "-std=c++17", "-O3", "-fvisibility=hidden", "-Wno-unused-function",
    # sqrt may skip setting errno: lets GCC vectorise the optimizer kernels
    # (src/optim/); results are unchanged
    "-fno-math-errno",
    # match the mxnet==1.9.1 wheel: old libstdc++ ABI, oneDNN layout in NDArray
    "-D_GLIBCXX_USE_CXX11_ABI=0", "-DMXNET_USE_MKLDNN=1", "-DDMLC_USE_CXX11=1",
    "-DMSHADOW_USE_CUDA=0", "-DMSHADOW_USE_MKL=0", "-DMSHADOW_USE_CBLAS=0",
    "-DMSHADOW_USE_F16C=0", "-DMXNET_USE_CUDA=0",
]

ext = Extension(
    "mxplugin._core",
    sources=["mxplugin/_core.pyx"] + sources(),
    language="c++",
    include_dirs=["src"] + mpi_inc + mx_inc,
    library_dirs=mpi_libdirs + [mx_libdir],
    libraries=mpi_libs,
    extra_compile_args=CXXFLAGS,
    extra_link_args=[f"-L{mx_libdir}", "-l:libmxnet.so", "-pthread"]
    + [f"-Wl,-rpath,{d}" for d in mpi_rpaths + mpi_libdirs + [mx_libdir]],
)


class ParallelBuildExt(build_ext):
    """Compiles the C++ files in parallel (setuptools does one at a time)."""

    def build_extensions(self):
        compiler = self.compiler
        original = compiler.compile

        def parallel_compile(srcs, *args, **kwargs):
            jobs = int(os.environ.get("MXPLUGIN_BUILD_JOBS", os.cpu_count() or 2))
            with ThreadPoolExecutor(jobs) as pool:
                results = list(pool.map(lambda s: original([s], *args, **kwargs), srcs))
            return [obj for r in results for obj in r]

        compiler.compile = parallel_compile
        for flag in ("-Wstrict-prototypes",):
            if flag in compiler.compiler_so:
                compiler.compiler_so.remove(flag)
        super().build_extensions()


def cythonize_ext():
    from Cython.Build import cythonize

    return cythonize([ext], language_level=3, compiler_directives={"embedsignature": True})


setup(
    name="mxplugin",
    version="0.1.0",
    description="Data-parallel distributed training for Apache MXNet Gluon (Horovod-compatible API)",
    packages=["mxplugin"],
    package_data={"mxplugin": ["*.pyi", "*.pxd"]},
    ext_modules=cythonize_ext(),
    cmdclass={"build_ext": ParallelBuildExt},
    python_requires=">=3.8",
    install_requires=["mxnet==1.9.1", "numpy<1.24", "mpich", "cloudpickle"],
    extras_require={"test": ["pytest", "scikit-learn"], "bench": ["matplotlib"]},
    entry_points={"console_scripts": ["mxplugin-run = mxplugin.run:main"]},
)
