"""Which tests and benchmarks are the GPU ones, found rather than listed, so
that a GPU test added later is run without editing the suite:

- test files: tests/test_*.py that mark tests `gpu`, ask gpu_probe, or check
  what the build has (call cuda_built() or nccl_built()), or have gpu, cuda
  or nccl in the name;
- GPU programs they drive: tests/spmd/check_gpu_*.py, check_nccl*.py and
  tests/native/*.cc; each must be named by one of those test files, or it
  runs nowhere, and the suite reports it;
- benchmarks: bench/gpu_*.py."""
import glob
import os

GPU_SIGNS = ("pytest.mark.gpu", "gpu_probe", "cuda_built()", "nccl_built()")
GPU_NAME_PARTS = ("gpu", "cuda", "nccl")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def gpu_test_files(repo):
    """Repository-relative paths of the GPU test files, sorted."""
    found = []
    for path in sorted(glob.glob(os.path.join(repo, "tests", "test_*.py"))):
        name = os.path.basename(path)
        if any(part in name for part in GPU_NAME_PARTS) or any(sign in _read(path) for sign in GPU_SIGNS):
            found.append(os.path.relpath(path, repo))
    return found


def gpu_programs(repo):
    patterns = [("tests", "spmd", "check_gpu_*.py"), ("tests", "spmd", "check_nccl*.py"), ("tests", "native", "*.cc")]
    return sorted(os.path.relpath(p, repo) for parts in patterns for p in glob.glob(os.path.join(repo, *parts)))


def programs_no_test_runs(repo, test_files):
    """GPU programs that no GPU test file names."""
    texts = [_read(os.path.join(repo, path)) for path in test_files]
    return [path for path in gpu_programs(repo) if not any(os.path.basename(path) in text for text in texts)]


def gpu_benchmarks(repo):
    return sorted(os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, "bench", "gpu_*.py")))
