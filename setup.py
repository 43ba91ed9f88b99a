"""Builds mxplugin._core from Cython and the C++17 core in src/.

MPI comes from `mpicc -show`: $MPICC if set (a cluster's MPI), else the
mpicc next to this Python (the PyPI `mpich` package), else the one on PATH.
MXNet headers and libmxnet.so come from the installed mxnet==1.9.1 wheel.

CUDA is optional. MXPLUGIN_WITH_CUDA unset (or "auto"): the kernels in cuda/
are compiled when nvcc is found ($NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, PATH,
/usr/local/cuda/bin); "1": they must be (the build fails without nvcc);
"0": never. MXPLUGIN_CUDA_ARCHS (default "80;90") lists the SM versions to
emit machine code for; PTX of the last one is added for newer GPUs. The
CUDA runtime is linked statically, so the extension imports and runs its CPU
paths on machines with no GPU, driver or CUDA installation.
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


def find_nvcc():
    if os.environ.get("NVCC"):
        if not os.path.exists(os.environ["NVCC"]):
            sys.exit(f"mxplugin: NVCC={os.environ['NVCC']} does not exist.")
        return os.environ["NVCC"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.path.exists(default) else None


def cuda_library_dirs(nvcc):
    """The library directories nvcc itself links with (its dry run prints
    them), then the usual places beside nvcc's toolkit."""
    dirs = []
    try:
        out = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
        for line in (out.stdout + out.stderr).splitlines():
            if line.startswith("#$ LIBRARIES="):
                dirs += [t[2:] for t in shlex.split(line.split("=", 1)[1]) if t.startswith("-L")]
    except (OSError, subprocess.SubprocessError):
        pass
    top = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    dirs += [os.path.join(top, d) for d in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"))]
    return [os.path.normpath(d) for d in dirs if not d.rstrip("/").endswith("stubs")]


def find_static_cudart(nvcc):
    for d in cuda_library_dirs(nvcc):
        path = os.path.join(d, "libcudart_static.a")
        if os.path.exists(path):
            return path
    return None


def cuda_config():
    """None for a CPU-only build, else {nvcc, cudart, archs}. Exits with the
    reason when MXPLUGIN_WITH_CUDA=1 cannot be honoured."""
    flag = os.environ.get("MXPLUGIN_WITH_CUDA", "").strip().lower()
    if flag not in ("", "auto", "0", "1"):
        sys.exit(f"mxplugin: MXPLUGIN_WITH_CUDA={flag!r}: use 1 (require CUDA), 0 (skip it) or leave it unset "
                 "(build the CUDA kernels when nvcc is found).")
    if flag == "0":
        return None
    nvcc = find_nvcc()
    if nvcc is None:
        if flag == "1":
            sys.exit("mxplugin: MXPLUGIN_WITH_CUDA=1 but no nvcc was found (looked at $NVCC, $CUDA_HOME/bin, "
                     "$CUDA_PATH/bin, PATH and /usr/local/cuda/bin). Install the CUDA toolkit or point "
                     "CUDA_HOME at it, or set MXPLUGIN_WITH_CUDA=0 for a CPU-only build.")
        return None
    cudart = find_static_cudart(nvcc)
    if cudart is None:
        message = (f"mxplugin: found {nvcc} but no libcudart_static.a beside it (searched "
                   f"{', '.join(cuda_library_dirs(nvcc))}); the CUDA runtime is linked statically so that the "
                   "extension loads on machines without CUDA.")
        if flag == "1":
            sys.exit(message)
        print(message + " Building without CUDA.", file=sys.stderr)
        return None
    archs = [a.strip() for a in os.environ.get("MXPLUGIN_CUDA_ARCHS", "80;90").replace(",", ";").split(";")
             if a.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        sys.exit(f"mxplugin: MXPLUGIN_CUDA_ARCHS={os.environ.get('MXPLUGIN_CUDA_ARCHS')!r}: "
                 "give SM versions such as 80;90")
    return {"nvcc": nvcc, "cudart": cudart, "archs": archs}


def cuda_sources():
    cuda_dir = os.path.join(ROOT, "cuda")
    return sorted(os.path.relpath(os.path.join(cuda_dir, f), ROOT) for f in os.listdir(cuda_dir))


mpicc = find_mpicc()
mpi_inc, mpi_libdirs, mpi_libs, mpi_rpaths = mpi_flags(mpicc)
mx_inc, mx_libdir, mx_version = mxnet_paths()
CUDA = cuda_config()

# In an isolated pip build the mpich wheel lives in a temporary environment;
# at run time the same wheel (an install requirement) sits beside the
# interpreter, where mxplugin looks when these paths are empty.
ephemeral = "pip-build-env" in os.path.realpath(mpicc)
BUILD_INFO = {
    "MPICC": "" if ephemeral else os.path.realpath(mpicc),
    "MPIEXEC": "" if ephemeral else find_mpiexec(mpicc),
    "MPI_LIBRARY": "" if ephemeral else find_mpi_library(mpi_libdirs),
    "MXNET_VERSION": mx_version,
    "CUDA_BUILT": CUDA is not None,
    "NVCC": CUDA["nvcc"] if CUDA else "",
    "CUDA_ARCHS": ";".join(CUDA["archs"]) if CUDA else "",
    "NCCL_BUILT": 0,
}
BUILD_INFO_PATH = os.path.join(ROOT, "mxplugin", "_build_info.py")
build_info = "# Written by setup.py: what this build of mxplugin was compiled against.\n" + "".join(
    f"{k} = {v!r}\n" for k, v in BUILD_INFO.items())
# Rewritten only when it changes: the extension depends on it, so a change of
# configuration (CUDA on or off) relinks and an unchanged one rebuilds nothing.
if not os.path.exists(BUILD_INFO_PATH) or open(BUILD_INFO_PATH).read() != build_info:
    with open(BUILD_INFO_PATH, "w") as f:
        f.write(build_info)

CXXFLAGS = [
    "-std=c++17", "-O3", "-fvisibility=hidden", "-Wno-unused-function",
    # sqrt may skip setting errno: lets GCC vectorise the optimizer kernels
    # (src/optim/); results are unchanged
    "-fno-math-errno",
    # match the mxnet==1.9.1 wheel: old libstdc++ ABI, oneDNN layout in NDArray
    "-D_GLIBCXX_USE_CXX11_ABI=0", "-DMXNET_USE_MKLDNN=1", "-DDMLC_USE_CXX11=1",
    "-DMSHADOW_USE_CUDA=0", "-DMSHADOW_USE_MKL=0", "-DMSHADOW_USE_CBLAS=0",
    "-DMSHADOW_USE_F16C=0", "-DMXNET_USE_CUDA=0",
] + (["-DMXPLUGIN_WITH_CUDA=1"] if CUDA else [])

# Host code of the .cu files gets the same ABI and visibility as the C++ core.
NVCCFLAGS = [
    "-std=c++17", "-O3", "-DMXPLUGIN_WITH_CUDA=1", "-D_GLIBCXX_USE_CXX11_ABI=0",
    "-Xcompiler=-fPIC,-fvisibility=hidden", "-Isrc",
]
if CUDA:
    NVCCFLAGS += [f"-gencode=arch=compute_{a},code=sm_{a}" for a in CUDA["archs"]]
    NVCCFLAGS += [f"-gencode=arch=compute_{CUDA['archs'][-1]},code=compute_{CUDA['archs'][-1]}"]
    if os.environ.get("CUDAHOSTCXX"):
        NVCCFLAGS += ["-ccbin", os.environ["CUDAHOSTCXX"]]

# Static cudart (it loads libcuda.so.1 itself, at the first CUDA call), with
# its symbols kept out of the extension's exports.
CUDA_LINK_ARGS = [CUDA["cudart"], "-ldl", "-lrt", "-Wl,--exclude-libs,libcudart_static.a"] if CUDA else []

ext = Extension(
    "mxplugin._core",
    sources=["mxplugin/_core.pyx"] + sources(),
    language="c++",
    # ROOT last: `#include "cuda/scale_kernels.h"` from src/
    include_dirs=["src"] + mpi_inc + mx_inc + [ROOT],
    library_dirs=mpi_libdirs + [mx_libdir],
    libraries=mpi_libs,
    extra_compile_args=CXXFLAGS,
    extra_link_args=[f"-L{mx_libdir}", "-l:libmxnet.so", "-pthread"]
    + [f"-Wl,-rpath,{d}" for d in mpi_rpaths + mpi_libdirs + [mx_libdir]] + CUDA_LINK_ARGS,
    depends=["mxplugin/_build_info.py"] + (cuda_sources() if CUDA else []),
)


def compile_cuda(build_temp, jobs):
    """Compiles cuda/*.cu with nvcc into build_temp/cuda/ (only those older
    than a source or header they may include); returns the objects."""
    out_dir = os.path.join(build_temp, "cuda")
    os.makedirs(out_dir, exist_ok=True)
    headers = [os.path.join(ROOT, f) for f in cuda_sources() if not f.endswith(".cu")]
    headers += [os.path.join(ROOT, "src", "common", f) for f in os.listdir(os.path.join(ROOT, "src", "common"))
                if f.endswith(".h")]
    newest_header = max(os.path.getmtime(h) for h in headers)

    def one(source):
        obj = os.path.join(out_dir, os.path.splitext(os.path.basename(source))[0] + ".o")
        src = os.path.join(ROOT, source)
        if os.path.exists(obj) and os.path.getmtime(obj) >= max(os.path.getmtime(src), newest_header):
            return obj
        cmd = [CUDA["nvcc"]] + NVCCFLAGS + ["-c", source, "-o", obj]
        print(" ".join(shlex.quote(c) for c in cmd))
        result = subprocess.run(cmd, cwd=ROOT)
        if result.returncode != 0:
            raise SystemExit(f"mxplugin: nvcc failed on {source} (exit {result.returncode}). Set "
                             "MXPLUGIN_WITH_CUDA=0 to build without the CUDA kernels.")
        return obj

    sources_cu = [f for f in cuda_sources() if f.endswith(".cu")]
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, sources_cu))


class ParallelBuildExt(build_ext):
    """Compiles the C++ files in parallel (setuptools does one at a time)."""

    def build_extensions(self):
        compiler = self.compiler
        original = compiler.compile
        jobs = int(os.environ.get("MXPLUGIN_BUILD_JOBS", os.cpu_count() or 2))
        if CUDA:
            cuda_objects = compile_cuda(self.build_temp, jobs)
            for e in self.extensions:
                e.extra_objects = [o for o in e.extra_objects or [] if o not in cuda_objects] + cuda_objects

        def parallel_compile(srcs, *args, **kwargs):
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
    packages=["mxplugin", "mxplugin.parallel"],
    package_data={"mxplugin": ["*.pyi", "*.pxd", "*.pxi"]},
    ext_modules=cythonize_ext(),
    cmdclass={"build_ext": ParallelBuildExt},
    python_requires=">=3.8",
    install_requires=["mxnet==1.9.1", "numpy<1.24", "mpich", "cloudpickle"],
    extras_require={"test": ["pytest", "scikit-learn"], "bench": ["matplotlib"]},
    entry_points={"console_scripts": ["mxplugin-run = mxplugin.run:main"]},
)
