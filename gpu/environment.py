"""What the GPU results were measured on, as JSON on stdout:

    python3 gpu/environment.py [OUTPUT]   # OUTPUT: a file to write instead of stdout

GPUs and driver (nvidia-smi), CUDA (nvcc, and CuPy's runtime and driver
API versions), NCCL (the wheel, the version mxplugin was built against, the
library it loads, CuPy's), MPI, the packages the suite uses, mxplugin's
build and the git commit. Run by gpu/run_gpu_suite.py in a process of its
own (loading CUDA and NCCL must not take the suite down); every part that
fails is recorded as its error, not raised."""
import ctypes
import importlib.metadata
import json
import os
import platform
import runpy
import shutil
import socket
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

SMI_FIELDS = ["index", "name", "driver_version", "memory.total", "compute_cap", "pci.bus_id"]
PACKAGES = ["cupy-cuda13x", "cupy-cuda12x", "nvidia-nccl-cu13", "nvidia-nccl-cu12", "numpy", "cython", "pytest",
            "mpich"]


def command_output(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def attempt(fn):
    """fn()'s value, or {'error': why} if it raised."""
    try:
        return fn()
    except Exception as exc:  # recorded in the results: any failure here is information
        return {"error": f"{type(exc).__name__}: {exc}"}


def gpus():
    if not shutil.which("nvidia-smi"):
        return []
    rows = command_output(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"])
    return [dict(zip(SMI_FIELDS, (v.strip() for v in row.split(",")))) for row in rows.splitlines() if row.strip()]


def version_text(code):
    """CUDA's 13000 -> '13.0'."""
    return f"{code // 1000}.{code % 1000 // 10}"


def nvcc_release(nvcc):
    """'13.0, V13.0.88': what follows 'release' in `nvcc --version`."""
    lines = command_output([nvcc, "--version"]).splitlines()
    return next((line.split("release", 1)[1].strip() for line in lines if "release" in line), lines[-1])


def cupy_cuda():
    import cupy

    runtime = cupy.cuda.runtime
    return {"runtime": version_text(runtime.runtimeGetVersion()),
            "driver_api": version_text(runtime.driverGetVersion()),
            "device_count": runtime.getDeviceCount()}


def cuda():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    return {"nvcc": attempt(lambda: nvcc_release(nvcc)) if nvcc else "not found", "cupy": attempt(cupy_cuda)}


def build_info():
    path = os.path.join(REPO, "mxplugin", "_build_info.py")
    if not os.path.exists(path):
        return {"error": "not built (no mxplugin/_build_info.py)"}
    return {k: v for k, v in runpy.run_path(path).items() if k.isupper()}


def nccl_loaded():
    """The libnccl mxplugin loads, and its version."""
    from build_support import nccl_version_string
    from mxplugin._loader import NCCL_LIBRARY

    if not NCCL_LIBRARY:
        return {"library": None}
    code = ctypes.c_int(0)
    ctypes.CDLL(NCCL_LIBRARY).ncclGetVersion(ctypes.byref(code))
    return {"library": NCCL_LIBRARY, "version": nccl_version_string(code.value)}


def nccl_of_cupy():
    from build_support import nccl_version_string
    from cupy.cuda import nccl as cupy_nccl

    return nccl_version_string(cupy_nccl.get_version())


def nccl():
    info = build_info()
    return {"built_against": info.get("NCCL_VERSION") or info.get("NCCL_NOT_BUILT_REASON") or info.get("error"),
            "loaded": attempt(nccl_loaded), "cupy": attempt(nccl_of_cupy)}


def mpi():
    mpiexec = build_info().get("MPIEXEC") or shutil.which("mpiexec")
    if not mpiexec:
        return {"mpiexec": None}
    lines = attempt(lambda: command_output([mpiexec, "--version"]).splitlines())
    return {"mpiexec": mpiexec, "version": lines[:3] if isinstance(lines, list) else lines}


def packages():
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def git():
    head = command_output(["git", "-C", REPO, "rev-parse", "HEAD"])
    changed = command_output(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"]).splitlines()
    return {"commit": head, "changed_files": len(changed)}


def main():
    from gpu_probe import no_gpu_reason

    found = {
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
                 "cpus": os.cpu_count()},
        "no_gpu_reason": no_gpu_reason(),
        "gpus": attempt(gpus),
        "cuda": attempt(cuda),
        "nccl": attempt(nccl),
        "mpi": attempt(mpi),
        "packages": packages(),
        "mxplugin_build": attempt(build_info),
        "git": attempt(git),
    }
    smi = found["gpus"] if isinstance(found["gpus"], list) else []
    cupy_cuda = found["cuda"].get("cupy", {})
    loaded = found["nccl"].get("loaded", {})
    found["gpu_count"] = cupy_cuda.get("device_count", len(smi))
    found["summary"] = {"gpu": smi[0]["name"] if smi else None, "driver": smi[0]["driver_version"] if smi else None,
                        "cuda_toolkit": found["cuda"].get("nvcc"), "cuda_runtime": cupy_cuda.get("runtime"),
                        "nccl": loaded.get("version") or found["nccl"].get("built_against")}
    text = json.dumps(found, indent=1) + "\n"
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
