"""Builds mxplugin._core from Cython and the C++17 core in src/.

MPI comes from `mpicc -show`: $MPICC if set (a cluster's MPI), else the
mpicc next to this Python (the PyPI `mpich` package), else the one on PATH.

Three optional parts, each switched by MXPLUGIN_WITH_<PART>: unset (or
"auto") builds it when what it needs is found, "1" requires it (the build
fails, saying why, without it), "0" leaves it out. build_support.py finds
them; mxplugin/_build_info.py records what was built.

MXNET: the adapter in src/mxnet/ against the installed mxnet==1.9.1 wheel
(headers, libmxnet.so, its old libstdc++ ABI). Without it the core is built
alone (a core-only build, for machines with no MXNet): `mxplugin._loader`
still gives the core module, `import mxplugin` the build queries.

CUDA: the kernels in cuda/, when nvcc is found ($NVCC, $CUDA_HOME/bin,
$CUDA_PATH/bin, PATH, /usr/local/cuda/bin). MXPLUGIN_CUDA_ARCHS (default
"80;90") lists the SM versions to emit machine code for; PTX of the last one
is added for newer GPUs. The CUDA runtime is linked statically, so the
extension imports and runs its CPU paths on machines with no GPU, driver or
CUDA installation.

NCCL (needs CUDA): the backend in src/backend/nccl/ (the CUDA runtime of the
GPU executor, src/core/gpu/, comes with CUDA), linked against NCCL >= 2.14 found in $MXPLUGIN_NCCL_HOME,
$NCCL_HOME, $NCCL_ROOT, the nvidia-nccl-cu12/-cu13 wheels, the CUDA toolkit,
/usr or /usr/local/nccl. Under pip's build isolation the wheel is found in
the site-packages of the Python running pip: install it before mxplugin.
"""
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)  # pip runs this file with its own directory first on sys.path

import build_support  # noqa: E402

# Compiled only with the part they belong to.
MXNET_SOURCES = ("src/mxnet",)
# CudaRuntime needs only the CUDA runtime: compiled in every CUDA build, so a
# machine with nvcc but no NCCL (CI) still compiles it.
CUDA_SOURCES = ("src/core/gpu",)
NCCL_SOURCES = ("src/backend/nccl",)


def sources(excluded_dirs):
    out = []
    for base, _, files in os.walk(os.path.join(ROOT, "src")):
        rel = os.path.relpath(base, ROOT)
        if any(rel == d or rel.startswith(d + os.sep) for d in excluded_dirs):
            continue
        out += [os.path.join(rel, f) for f in files if f.endswith(".cc")]
    return sorted(out)


def cuda_sources():
    cuda_dir = os.path.join(ROOT, "cuda")
    return sorted(os.path.relpath(os.path.join(cuda_dir, f), ROOT) for f in os.listdir(cuda_dir))


mpicc = build_support.find_mpicc(os.environ)
mpi_inc, mpi_libdirs, mpi_libs, mpi_rpaths = build_support.mpi_flags(mpicc)
MXNET = build_support.mxnet_config(os.environ)
CUDA = build_support.cuda_config(os.environ)
NCCL, nccl_not_built_reason = build_support.nccl_config(os.environ, CUDA)


def lasting(path):
    """`path`, or "" when it lies in pip's temporary build environment. At
    run time the same wheels (install requirements) sit beside the
    interpreter, where mxplugin looks when these paths are empty."""
    return "" if "pip-build-env" in os.path.realpath(path) else path


# Note [The user's MPI]: the PyPI `mpich` package is an install requirement
# only when the build used it (no MPICC named, and the mpicc found is the
# wheel's, beside this Python or in pip's isolated build environment).
# Built against another MPI ($MPICC, or an mpicc on PATH), installing mpich
# would put MPICH's mpicc, mpiexec and mpirun over that MPI's in the same
# environment, and mxplugin-run would start N one-rank jobs.
MPI_IS_THE_WHEEL = build_support.mpicc_is_the_wheel(mpicc, os.environ)

BUILD_INFO = {
    "MPICC": lasting(os.path.realpath(mpicc)),
    "MPIEXEC": lasting(build_support.find_mpiexec(mpicc)),
    "MPI_LIBRARY": lasting(build_support.find_mpi_library(mpi_libdirs)),
    # The `mpich` wheel of the building Python's environment: an installed
    # wheel of mxplugin prefers the one in its own environment (an install
    # requirement) over this path, which belongs to wherever it was built.
    "MPI_FROM_WHEEL": build_support.mpi_beside_python(mpicc, os.environ),
    "MXNET_BUILT": MXNET is not None,
    "MXNET_VERSION": MXNET["version"] if MXNET else "",
    "CUDA_BUILT": CUDA is not None,
    "NVCC": CUDA["nvcc"] if CUDA else "",
    "CUDA_ARCHS": ";".join(CUDA["archs"]) if CUDA else "",
    "NCCL_BUILT": NCCL.version_code if NCCL else 0,
    "NCCL_VERSION": NCCL.version if NCCL else "",
    "NCCL_INCLUDE": lasting(NCCL.include_dir) if NCCL else "",
    "NCCL_LIBRARY": lasting(os.path.realpath(NCCL.library)) if NCCL else "",
    "NCCL_NOT_BUILT_REASON": nccl_not_built_reason,
}
BUILD_INFO_PATH = os.path.join(ROOT, "mxplugin", "_build_info.py")
build_info = "# Written by setup.py: what this build of mxplugin was compiled against.\n" + "".join(
    f"{k} = {v!r}\n" for k, v in BUILD_INFO.items())
# Rewritten only when it changes: the extension depends on it, so a change of
# configuration (MXNet, CUDA or NCCL on or off, another NCCL) relinks and an
# unchanged one rebuilds nothing.
if not os.path.exists(BUILD_INFO_PATH) or open(BUILD_INFO_PATH).read() != build_info:
    with open(BUILD_INFO_PATH, "w") as f:
        f.write(build_info)

# The mxnet==1.9.1 wheel uses the old libstdc++ ABI; the C++ and CUDA host
# code must agree with it (std::string crosses between them). A core-only
# build keeps the compiler's default.
ABI_FLAGS = ["-D_GLIBCXX_USE_CXX11_ABI=0"] if MXNET else []
PART_FLAGS = (["-DMXPLUGIN_WITH_MXNET=1"] if MXNET else []) + (["-DMXPLUGIN_WITH_CUDA=1"] if CUDA else []) + (
    ["-DMXPLUGIN_WITH_NCCL=1", f"-DMXPLUGIN_NCCL_VERSION_CODE={NCCL.version_code}"] if NCCL else [])

CXXFLAGS = [
    "-std=c++17", "-O3", "-fvisibility=hidden", "-Wno-unused-function",
    # sqrt may skip setting errno: lets GCC vectorise the optimizer kernels
    # (src/optim/); results are unchanged
    "-fno-math-errno",
    # mpi.h compiled as C++ pulls in the MPI C++ bindings where the MPI has
    # them (Debian's Open MPI 4.1), whose symbols live in a library mpicc
    # does not link (libmpi_cxx): the extension would not load. Only the C
    # API is used.
    "-DOMPI_SKIP_MPICXX=1", "-DMPICH_SKIP_MPICXX=1",
] + ABI_FLAGS + PART_FLAGS
if MXNET:
    # the wheel's oneDNN layout of NDArray, for the adapter's mxnet::NDArray
    CXXFLAGS += ["-DMXNET_USE_MKLDNN=1", "-DDMLC_USE_CXX11=1", "-DMSHADOW_USE_CUDA=0", "-DMSHADOW_USE_MKL=0",
                 "-DMSHADOW_USE_CBLAS=0", "-DMSHADOW_USE_F16C=0", "-DMXNET_USE_CUDA=0"]

# Host code of the .cu files gets the same ABI, visibility and switches as the C++ core.
NVCCFLAGS = ["-std=c++17", "-O3", "-Xcompiler=-fPIC,-fvisibility=hidden", "-Isrc"] + ABI_FLAGS + PART_FLAGS
if NCCL:
    NVCCFLAGS += [f"-I{NCCL.include_dir}"]
if CUDA:
    NVCCFLAGS += [f"-gencode=arch=compute_{a},code=sm_{a}" for a in CUDA["archs"]]
    NVCCFLAGS += [f"-gencode=arch=compute_{CUDA['archs'][-1]},code=compute_{CUDA['archs'][-1]}"]
    # Volta and newer take 32,764 bytes of kernel arguments (CUDA 12.1 on): Note [Descriptors per launch]
    if min(int(a) for a in CUDA["archs"]) >= 70:
        NVCCFLAGS += ["-DMXPLUGIN_CUDA_LARGE_KERNEL_ARGS=1"]
    if os.environ.get("CUDAHOSTCXX"):
        NVCCFLAGS += ["-ccbin", os.environ["CUDAHOSTCXX"]]

include_dirs = ["src"] + mpi_inc
library_dirs = list(mpi_libdirs)
rpaths = mpi_rpaths + mpi_libdirs
link_args = ["-pthread"]
if MXNET:
    include_dirs += MXNET["include_dirs"]
    library_dirs.append(MXNET["library_dir"])
    rpaths.append(MXNET["library_dir"])
    link_args += [f"-L{MXNET['library_dir']}", "-l:libmxnet.so"]
if CUDA:
    # cuda_runtime.h for the C++ sources. Static cudart (it loads
    # libcuda.so.1 itself, at the first CUDA call), with its symbols kept out
    # of the extension's exports.
    include_dirs += CUDA["include_dirs"]
    link_args += [CUDA["cudart"], "-ldl", "-lrt", "-Wl,--exclude-libs,libcudart_static.a"]
if NCCL:
    nccl_dir, nccl_name = os.path.split(NCCL.library)
    include_dirs.append(NCCL.include_dir)
    library_dirs.append(nccl_dir)
    rpaths.append(nccl_dir)
    link_args += [f"-L{nccl_dir}", f"-l:{nccl_name}"]
# ROOT last: `#include "cuda/scale_kernels.h"` from src/
include_dirs.append(ROOT)

ext = Extension(
    "mxplugin._core",
    sources=["mxplugin/_core.pyx"] + sources(([] if MXNET else list(MXNET_SOURCES))
                                             + ([] if CUDA else list(CUDA_SOURCES))
                                             + ([] if NCCL else list(NCCL_SOURCES))),
    language="c++",
    include_dirs=include_dirs,
    library_dirs=library_dirs,
    libraries=mpi_libs,
    extra_compile_args=CXXFLAGS,
    extra_link_args=link_args + [f"-Wl,-rpath,{d}" for d in rpaths],
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


# Note [Objects kept between builds]: pip builds in a temporary directory
# each time, so every `pip install -e .` (the README's test command repeats
# the install's) would compile every source again, minutes on 2 cores. So the
# objects live in build/objects/ of the checkout, keyed by Python and
# configuration, and a source is compiled again only when it, a header it
# includes (the compiler's own list, -MMD) or its command line changed. pip's
# isolated build environment has a new name each time: it is left out of
# the command compared, and its headers (MXNet's, of the pinned version) out
# of the headers checked.
OBJECTS = os.path.join(ROOT, "build", "objects", f"{sys.implementation.cache_tag}-{sysconfig.get_platform()}")


BUILD_ENV = re.compile(r"[^\s'\"]*pip-build-env-[^/\s'\"]+")


def objects_up_to_date(obj, command):
    """Whether `obj` was compiled by `command` from sources and headers none
    of which changed since (its .d and .cmd files beside it)."""
    base = os.path.splitext(obj)[0]
    try:
        with open(base + ".cmd") as f:
            if f.read() != command:
                return False
        with open(base + ".d") as f:
            deps = f.read().replace("\\\n", " ").split(":", 1)[1].split()
        built = os.path.getmtime(obj)
        return all(os.path.getmtime(os.path.join(ROOT, d)) <= built for d in deps if not BUILD_ENV.search(d))
    except (OSError, IndexError):
        return False


class ParallelBuildExt(build_ext):
    """Compiles the C++ files in parallel (setuptools does one at a time),
    each only when it changed (Note [Objects kept between builds])."""

    def build_extensions(self):
        compiler = self.compiler
        original = compiler.compile
        jobs = int(os.environ.get("MXPLUGIN_BUILD_JOBS", os.cpu_count() or 2))
        if CUDA:
            print(f"mxplugin: building the CUDA kernels with {CUDA['nvcc']} (archs {', '.join(CUDA['archs'])}); "
                  "MXPLUGIN_WITH_CUDA=0 builds without them", flush=True)
        else:
            print("mxplugin: no CUDA kernels (no nvcc found, or MXPLUGIN_WITH_CUDA=0)", flush=True)
        if CUDA:
            cuda_objects = compile_cuda(OBJECTS, jobs)
            for e in self.extensions:
                e.extra_objects = [o for o in e.extra_objects or [] if o not in cuda_objects] + cuda_objects
        counts = {"compiled": 0, "kept": 0}

        def compile_one(src, *args, **kwargs):
            kwargs = dict(kwargs, output_dir=OBJECTS)
            obj = compiler.object_filenames([src], output_dir=OBJECTS)[0]
            command = BUILD_ENV.sub("<pip's build environment>", repr((src, args, sorted(kwargs.items()),
                                                                      compiler.compiler_so)))
            if objects_up_to_date(obj, command):
                counts["kept"] += 1
                return [obj]
            kwargs["extra_postargs"] = list(kwargs.get("extra_postargs") or []) + ["-MMD"]
            built = original([src], *args, **kwargs)
            with open(os.path.splitext(obj)[0] + ".cmd", "w") as f:
                f.write(command)
            counts["compiled"] += 1
            return built

        def parallel_compile(srcs, *args, **kwargs):
            with ThreadPoolExecutor(jobs) as pool:
                results = list(pool.map(lambda s: compile_one(s, *args, **kwargs), srcs))
            print(f"mxplugin: {counts['compiled']} sources compiled, {counts['kept']} unchanged since the last "
                  f"build ({os.path.relpath(OBJECTS, ROOT)})", flush=True)
            return [obj for r in results for obj in r]

        compiler.compile = parallel_compile
        for flag in ("-Wstrict-prototypes",):
            if flag in compiler.compiler_so:
                compiler.compiler_so.remove(flag)
        super().build_extensions()


GLUONTS_PINS = ["gluonts==0.17.0", "numpy<1.24", "pandas<2.2", "pydantic<2.10"]
# The documentation site (docs/conf.py); in the test extras, as the suite builds it (tests/test_docs.py)
DOCS = ["sphinx>=8,<10", "myst-parser>=4,<6", "furo>=2024.1"]


def cythonize_ext():
    from Cython.Build import cythonize

    return cythonize([ext], language_level=3, compiler_directives={"embedsignature": True})


setup(
    name="mxplugin",
    version="0.1.0",
    description="Data-parallel distributed training for Apache MXNet Gluon (Horovod-compatible API)",
    license="Apache-2.0",
    # Every subpackage, found rather than listed: a listed set once left out
    # mxplugin.elastic, and an installed (non-editable) package then failed
    # at `import mxplugin`.
    packages=find_packages(include=["mxplugin", "mxplugin.*", "mxplugin_run", "mxplugin_run.*"]),
    package_data={"mxplugin": ["*.pyi", "*.pxd", "*.pxi"]},
    ext_modules=cythonize_ext(),
    cmdclass={"build_ext": ParallelBuildExt},
    python_requires=">=3.8",
    install_requires=(["mxnet==1.9.1", "numpy<1.24"] if MXNET else ["numpy"]) + (["mpich"] if MPI_IS_THE_WHEEL else [])
    + ["cloudpickle"],
    # The NCCL wheel matching the CUDA toolkit; install it before building
    # too, so that the build finds it (README, "Building with CUDA and NCCL").
    # No scikit-learn or scipy in the test extra: MXNet 1.9.1 imports them at
    # `import mxnet` whenever they are installed, about 1.8 s of CPU in every
    # rank process (examples/digits_data.py); the examples' digits ship in
    # examples/data/.
    # The build's own requirements are in the test extra too: the packaging
    # test builds an sdist and a wheel without an isolated environment.
    # GluonTS (mxplugin.gluonts) pinned to versions that install and run
    # together with MXNet 1.9.1 (numpy < 1.24 is MXNet's own limit). The
    # test extra includes it so that CI runs tests/test_gluonts.py (about
    # 20 MB of wheels more).
    # mpi4py (its wheels load whichever libmpi is there) for the tests of
    # mpi4py beside mxplugin in one process.
    # pytest-xdist: the README's test command runs two workers (-n 2).
    extras_require={"test": ["pytest", "pytest-xdist>=3.6", "build", "cython>=3.0", "setuptools>=64", "wheel",
                             "mpi4py>=4"] + GLUONTS_PINS + DOCS,
                    "docs": DOCS,
                    "gluonts": GLUONTS_PINS,
                    # matplotlib 3.8 and newer pull numpy 2, under which MXNet 1.9.1 fails to import.
                    "bench": ["matplotlib<3.8", "numpy<1.24"],
                    "nccl-cu12": ["nvidia-nccl-cu12>=2.14"], "nccl-cu13": ["nvidia-nccl-cu13"]},
    entry_points={"console_scripts": ["mxplugin-run = mxplugin_run.run:main"]},
)
