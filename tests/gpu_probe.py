"""Whether this machine has an NVIDIA GPU at all, asked before anything
about CuPy or the build, so that a GPU test's skip reason on a machine
without one says so (not that some package is missing)."""
import glob
import shutil


def no_gpu_reason():
    """'' when an NVIDIA GPU looks present, else why the GPU tests skip."""
    if glob.glob("/dev/nvidia[0-9]*") or shutil.which("nvidia-smi"):
        return ""
    return "this machine has no NVIDIA GPU (no /dev/nvidia* device, no nvidia-smi)"
