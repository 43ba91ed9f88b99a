"""How the suite runs each GPU benchmark (bench/gpu_*.py): on how many ranks,
with which arguments, and how long it may take on the GPU machine. Each run
writes its figures to the JSON file named by its --output, which the suite
copies into the results. A bench/gpu_*.py missing here is reported as a
failure, so a new benchmark is not silently left out."""
from dataclasses import dataclass, field


@dataclass
class BenchmarkRun:
    name: str  # the key of its figures in the results
    script: str  # repository-relative
    ranks: int  # 0: a plain process, no MPI; else under mpiexec
    args: list = field(default_factory=list)
    time_limit: float = 180


RUNS = {
    # a single process: the kernels against cudaMemcpy, in the same run
    "bench/gpu_kernels.py": [BenchmarkRun("gpu_kernels", "bench/gpu_kernels.py", 0, time_limit=240)],
    # the core against one raw ncclAllReduce of the same bytes, on the same
    # transport (loopback sockets between fake hosts when they share one GPU)
    "bench/gpu_allreduce.py": [BenchmarkRun(f"gpu_allreduce_{n}ranks", "bench/gpu_allreduce.py", n)
                               for n in (1, 2, 3)],
}


def runs_for(scripts):
    """(the runs of the given bench/gpu_*.py scripts, the scripts with none)."""
    runs = [run for script in scripts for run in RUNS.get(script, [])]
    return runs, [script for script in scripts if script not in RUNS]
