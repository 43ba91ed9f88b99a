"""What setup.py builds against: finds MPI, MXNet, the CUDA toolkit and NCCL,
and decides from MXPLUGIN_WITH_MXNET / _CUDA / _NCCL which optional parts
are built. Discovery only: nothing here compiles, so tests/test_build.py
imports it without building anything.

Each MXPLUGIN_WITH_* switch reads the same way: unset or "auto" builds the
part when what it needs is found, "1" requires it (the build fails, saying
why, otherwise), "0" leaves it out. A failed requirement exits with a
message starting "mxplugin:".
"""
import glob
import importlib.util
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

# NCCL 2.14: nonblocking communicators (bounded setup and calls, and an abort
# from another thread that cannot catch a call in the middle), plus
# ncclRedOpCreatePreMulSum (2.11) and ncclGetLastError (2.13).
NCCL_MIN_VERSION_CODE = 21400
NCCL_LIBRARY_NAMES = ("libnccl.so.2", "libnccl.so")


def switch(name, env):
    """The value of an MXPLUGIN_WITH_* switch: "auto", "1" or "0"."""
    value = env.get(name, "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("0", "1"):
        return value
    sys.exit(f"mxplugin: {name}={value!r}: use 1 (require it), 0 (leave it out) or leave it unset "
             "(build it when it is found).")


# ------------------------------------------------------------------- MPI

def find_mpicc(env):
    if env.get("MPICC"):
        return env["MPICC"]
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if os.path.exists(beside_python):
        return beside_python
    found = shutil.which("mpicc")
    if found:
        return found
    sys.exit("mxplugin: no mpicc found. `pip install mpich`, or set MPICC to your MPI's mpicc.")


def mpi_beside_python(mpicc, env):
    """Whether `mpicc` is the PyPI `mpich` package's, next to this Python
    (not $MPICC, a cluster's MPI, nor one found on PATH)."""
    if env.get("MPICC"):
        return False
    return os.path.realpath(os.path.dirname(mpicc)) == os.path.realpath(os.path.dirname(sys.executable))


def mpicc_is_the_wheel(mpicc, env):
    """Whether `mpicc` is the PyPI `mpich` package's: no $MPICC, and it lies
    beside this Python or in pip's isolated build environment (where the
    build requirement put it). Note [The user's MPI] in setup.py."""
    if env.get("MPICC"):
        return False
    real = os.path.realpath(mpicc)
    return mpi_beside_python(mpicc, env) or "pip-build-env" in real


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
    """The launcher beside `mpicc`, of the same MPI: Debian names each MPI's
    programs with its suffix (mpicc.openmpi, mpiexec.openmpi) and points the
    plain names at whichever MPI is chosen system-wide."""
    name = os.path.basename(mpicc)  # not resolved: Debian's mpicc.openmpi links to opal_wrapper
    suffix = name[len("mpicc"):] if name.startswith("mpicc") else ""
    for directory in _unique([os.path.dirname(os.path.abspath(mpicc)), os.path.dirname(os.path.realpath(mpicc))]):
        for launcher in ([f"mpiexec{suffix}", f"mpirun{suffix}"] if suffix else []) + ["mpiexec", "mpirun"]:
            cand = os.path.join(directory, launcher)
            if os.path.exists(cand):
                return cand
    return shutil.which("mpiexec") or "mpiexec"


# ----------------------------------------------------------------- MXNet

def mxnet_config(env):
    """None for a core-only build, else {include_dirs, library_dir, version}
    of the installed mxnet. Auto mode builds the adapter when `import mxnet`
    works (pyproject.toml makes mxnet a build requirement)."""
    flag = switch("MXPLUGIN_WITH_MXNET", env)
    if flag == "0":
        return None
    try:
        import mxnet
        from mxnet import libinfo
    except Exception as exc:  # a broken install fails in many ways
        if flag == "1":
            sys.exit(f"mxplugin: MXPLUGIN_WITH_MXNET=1 but `import mxnet` fails ({type(exc).__name__}: {exc}). "
                     "pip install mxnet==1.9.1, or set MXPLUGIN_WITH_MXNET=0 for a core-only build.")
        print(f"mxplugin: `import mxnet` fails ({type(exc).__name__}: {exc}); building the core only, "
              "without the MXNet adapter.", file=sys.stderr)
        return None
    inc = libinfo.find_include_path()
    lib = libinfo.find_lib_path()[0]
    return {"include_dirs": [inc, os.path.join(inc, "mkldnn")], "library_dir": os.path.dirname(lib),
            "version": mxnet.__version__}


# ------------------------------------------------------------------ CUDA

def find_nvcc(env):
    if env.get("NVCC"):
        if not os.path.exists(env["NVCC"]):
            sys.exit(f"mxplugin: NVCC={env['NVCC']} does not exist.")
        return env["NVCC"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.path.exists(default) else None


def nvcc_dryrun(nvcc):
    """{name: value} of the `#$ NAME=value` lines nvcc's dry run prints (its
    TOP, INCLUDES, LIBRARIES), or {} when nvcc does not run. nvcc may be a
    wrapper script, so its own path says little about the toolkit's."""
    try:
        out = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    values = {}
    for line in (out.stdout + out.stderr).splitlines():
        name, sep, value = line[3:].partition("=")
        if line.startswith("#$ ") and sep and name.isidentifier():
            values.setdefault(name, value)
    return values


def _toolkit_top(nvcc, dryrun):
    return os.path.normpath(dryrun["TOP"]) if dryrun.get("TOP") else \
        os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))


def cuda_library_dirs(nvcc, dryrun=None):
    """The library directories nvcc itself links with, then the usual places
    in its toolkit; stub libraries excluded."""
    dryrun = nvcc_dryrun(nvcc) if dryrun is None else dryrun
    dirs = [t[2:] for t in shlex.split(dryrun.get("LIBRARIES", "")) if t.startswith("-L")]
    top = _toolkit_top(nvcc, dryrun)
    dirs += [os.path.join(top, d) for d in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib"))]
    return _unique(os.path.normpath(d) for d in dirs if not d.rstrip("/").endswith("stubs"))


def cuda_include_dirs(nvcc, dryrun=None):
    """Where cuda_runtime.h is, for the C++ (not nvcc-compiled) sources."""
    dryrun = nvcc_dryrun(nvcc) if dryrun is None else dryrun
    dirs = [t[2:] for t in shlex.split(dryrun.get("INCLUDES", "")) if t.startswith("-I")]
    top = _toolkit_top(nvcc, dryrun)
    dirs += [os.path.join(top, "include"), os.path.join(top, "targets", "x86_64-linux", "include")]
    return [d for d in _unique(os.path.normpath(d) for d in dirs)
            if os.path.exists(os.path.join(d, "cuda_runtime.h"))][:1]


def cuda_config(env):
    """None for a CPU-only build, else {nvcc, cudart, archs, include_dirs}."""
    flag = switch("MXPLUGIN_WITH_CUDA", env)
    if flag == "0":
        return None
    nvcc = find_nvcc(env)
    if nvcc is None:
        if flag == "1":
            sys.exit("mxplugin: MXPLUGIN_WITH_CUDA=1 but no nvcc was found (looked at $NVCC, $CUDA_HOME/bin, "
                     "$CUDA_PATH/bin, PATH and /usr/local/cuda/bin). Install the CUDA toolkit or point "
                     "CUDA_HOME at it, or set MXPLUGIN_WITH_CUDA=0 for a CPU-only build.")
        return None
    dryrun = nvcc_dryrun(nvcc)
    library_dirs = cuda_library_dirs(nvcc, dryrun)
    cudart = next((os.path.join(d, "libcudart_static.a") for d in library_dirs
                   if os.path.exists(os.path.join(d, "libcudart_static.a"))), None)
    if cudart is None:
        message = (f"mxplugin: found {nvcc} but no libcudart_static.a beside it (searched "
                   f"{', '.join(library_dirs)}); the CUDA runtime is linked statically so that the "
                   "extension loads on machines without CUDA.")
        if flag == "1":
            sys.exit(message)
        print(message + " Building without CUDA.", file=sys.stderr)
        return None
    include_dirs = cuda_include_dirs(nvcc, dryrun)
    if not include_dirs:
        message = f"mxplugin: found {nvcc} but not its cuda_runtime.h."
        if flag == "1":
            sys.exit(message)
        print(message + " Building without CUDA.", file=sys.stderr)
        return None
    archs = [a.strip() for a in env.get("MXPLUGIN_CUDA_ARCHS", "80;90").replace(",", ";").split(";")
             if a.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        sys.exit(f"mxplugin: MXPLUGIN_CUDA_ARCHS={env.get('MXPLUGIN_CUDA_ARCHS')!r}: "
                 "give SM versions such as 80;90")
    return {"nvcc": nvcc, "cudart": cudart, "archs": archs, "include_dirs": include_dirs}


# ------------------------------------------------------------------ NCCL

@dataclass
class Nccl:
    """An NCCL installation: nccl.h's version and the library beside it."""
    version_code: int  # NCCL_VERSION_CODE, e.g. 23203 for 2.32.3
    include_dir: str   # holds nccl.h
    library: str       # libnccl.so.2 (or libnccl.so)
    origin: str        # where it was found, for messages: "$NCCL_HOME", "the nvidia-nccl wheel in ..."

    @property
    def version(self):
        return nccl_version_string(self.version_code)


def nccl_version_string(code):
    """23203 -> "2.32.3"; NCCL before 2.9 coded X.Y.Z as X*1000 + Y*100 + Z."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def nccl_header_version(header):
    """NCCL_VERSION_CODE of an nccl.h (from its NCCL_MAJOR/MINOR/PATCH when the
    code is not a plain number), or None when neither is there."""
    with open(header, errors="replace") as f:
        text = f.read()
    defines = dict(re.findall(r"^\s*#\s*define\s+(NCCL_(?:VERSION_CODE|MAJOR|MINOR|PATCH))\s+(\d+)\b", text, re.M))
    if "NCCL_VERSION_CODE" in defines:
        return int(defines["NCCL_VERSION_CODE"])
    if all(k in defines for k in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")):
        x, y, z = (int(defines[k]) for k in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"))
        return x * 1000 + y * 100 + z if x <= 2 and y <= 8 else x * 10000 + y * 100 + z
    return None


def python_package_dirs():
    """Directories that may hold the `nvidia` namespace package of the
    nvidia-nccl-cu12/-cu13 wheels, in order: where this interpreter imports
    it from, its sys.path, then its site-packages as sysconfig and site name
    them. The last matter under pip's build isolation, which hides the
    environment pip runs in from sys.path but not from sysconfig."""
    dirs = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        dirs += [os.path.dirname(p) for p in spec.submodule_search_locations]
    dirs += [p for p in sys.path if p]
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return _unique(dirs)


def nccl_search_roots(env, cuda_includes=(), package_dirs=None, system=True):
    """(origin, include dir, library dirs) in the order they are tried:
    $MXPLUGIN_NCCL_HOME, $NCCL_HOME, $NCCL_ROOT, the nvidia-nccl wheels in
    `package_dirs` (default python_package_dirs()), the CUDA toolkit, then
    (with `system`) /usr and /usr/local/nccl."""
    roots = []
    for var in ("MXPLUGIN_NCCL_HOME", "NCCL_HOME", "NCCL_ROOT"):
        home = env.get(var)
        if home:
            roots.append((f"${var}", os.path.join(home, "include"),
                          [os.path.join(home, "lib"), os.path.join(home, "lib64")]))
    for d in python_package_dirs() if package_dirs is None else package_dirs:
        nccl = os.path.join(d, "nvidia", "nccl")
        roots.append((f"the nvidia-nccl wheel in {d}", os.path.join(nccl, "include"), [os.path.join(nccl, "lib")]))
    for inc in cuda_includes:
        top = os.path.dirname(inc)
        roots.append((f"the CUDA toolkit at {top}", inc, [os.path.join(top, "lib64"), os.path.join(top, "lib")]))
    if system:
        multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
        roots.append(("/usr", "/usr/include", [f"/usr/lib/{multiarch}", "/usr/lib64", "/usr/lib"]))
        roots.append(("/usr/local/nccl", "/usr/local/nccl/include", ["/usr/local/nccl/lib", "/usr/local/nccl/lib64"]))
    return roots


def nccl_library_in(library_dirs):
    for d in library_dirs:
        for name in NCCL_LIBRARY_NAMES:
            if os.path.exists(os.path.join(d, name)):
                return os.path.join(d, name)
        versioned = sorted(glob.glob(os.path.join(d, "libnccl.so.2.*")))
        if versioned:
            return versioned[-1]
    return None


def find_nccl(roots):
    """The first root with both nccl.h (of a readable version) and libnccl,
    or None. A root with only one of them is passed over."""
    for origin, include_dir, library_dirs in roots:
        header = os.path.join(include_dir, "nccl.h")
        library = nccl_library_in(library_dirs)
        if not os.path.exists(header) or library is None:
            continue
        code = nccl_header_version(header)
        if code is not None:
            return Nccl(code, os.path.normpath(include_dir), os.path.normpath(library), origin)
    return None


def nccl_config(env, cuda, package_dirs=None, system=True):
    """(Nccl, "") when the NCCL backend is built, else (None, why not)."""
    flag = switch("MXPLUGIN_WITH_NCCL", env)
    if flag == "0":
        return None, "MXPLUGIN_WITH_NCCL=0"

    def skip(reason, hint):
        if flag == "1":
            sys.exit(f"mxplugin: MXPLUGIN_WITH_NCCL=1 but {reason}. {hint}")
        print(f"mxplugin: building without NCCL: {reason}.", file=sys.stderr)
        return None, reason

    if cuda is None:
        return skip("CUDA is not built", "NCCL needs the CUDA build: install the CUDA toolkit (nvcc), and do "
                    "not set MXPLUGIN_WITH_CUDA=0.")
    home = env.get("MXPLUGIN_NCCL_HOME")
    if home:
        explicit = nccl_search_roots({"MXPLUGIN_NCCL_HOME": home}, package_dirs=[], system=False)
        if find_nccl(explicit) is None:
            sys.exit(f"mxplugin: MXPLUGIN_NCCL_HOME={home} has no include/nccl.h with lib/ or lib64/libnccl.so*.")
    nccl = find_nccl(nccl_search_roots(env, cuda["include_dirs"], package_dirs, system))
    if nccl is None:
        return skip("NCCL not found", "pip install nvidia-nccl-cu12 (or -cu13, matching your CUDA) before "
                    "building, or set MXPLUGIN_NCCL_HOME to an NCCL installation.")
    if nccl.version_code < NCCL_MIN_VERSION_CODE:
        return skip(f"NCCL {nccl.version} from {nccl.origin} is older than 2.14",
                    "Point MXPLUGIN_NCCL_HOME at NCCL 2.14 or newer.")
    return nccl, ""


def _unique(items):
    seen, out = set(), []
    for item in items:
        key = os.path.realpath(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
