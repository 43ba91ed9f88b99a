"""The machine a benchmark runs on: what it is (`facts`, written beside
every result by harness.write_result) and what else it is doing while it
measures (`load_span`, `OtherWork`, `quiet_only`), so that a figure taken on
a busy machine can be told apart or left out."""
import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- what it is ----------------------------------------------------------------------------

def facts():
    """The CPU, cores, load, Python, MXNet, MPI and checkout a result was
    measured with, and when."""
    return {"cpu_model": _cpu_model(), "cores": os.cpu_count(), "arch": platform.machine(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "python": platform.python_version(), "mxnet": _package_version("mxnet"), "mpi": _mpi_version(),
            "git_commit": _git("rev-parse", "HEAD"),
            "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _package_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _mpi_version():
    """The first line of the MPI library's version text, where this process
    has loaded mxplugin (loading it only for this would import MXNet, and
    load an MPI library into a driver that otherwise never does)."""
    if "mxplugin" not in sys.modules:
        return None
    try:
        from mxplugin import _build_info
        from mxplugin_run import mpi_family

        return mpi_family.first_line(mpi_family.library_version(_build_info.MPI_LIBRARY)) or None
    except (ImportError, AttributeError):
        return None


def _git(*args):
    try:
        done = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


# -- what else it is doing -----------------------------------------------------------------

@contextlib.contextmanager
def load_span():
    """[1-minute load average before, after] the block: other work on the
    machine, reported beside the figures measured in it."""
    span = [os.getloadavg()[0]]
    yield span
    span.append(os.getloadavg()[0])


def busy_jiffies():
    """CPU jiffies all CPUs spent so far in user and system mode (interrupts
    left out: a fake host link's packet processing is the job's own)."""
    with open("/proc/stat") as f:
        user, nice, system = (int(v) for v in f.readline().split()[1:4])
    return user + nice + system


def jiffies_by_process(namespaces):
    """{pid: CPU jiffies used so far (user + system, all threads)} of the
    processes in the network namespaces `namespaces`."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{pid}/ns/net") not in namespaces:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone, or a kernel thread
            continue
        found[int(pid)] = int(fields[11]) + int(fields[12])
    return found


class OtherWork:
    """Cores kept busy during a timed interval by work other than the job's
    own (whose processes all live in the network namespaces
    `own_namespaces`, e.g. its fake hosts'): the machine's busy time less
    the job's processes' own. begin() before the interval, cores() after."""

    def __init__(self, own_namespaces):
        self.own = set(own_namespaces)
        self.hz = os.sysconf("SC_CLK_TCK")
        self.before = None

    def begin(self):
        self.before = (busy_jiffies(), jiffies_by_process(self.own), time.perf_counter())

    def cores(self):
        busy, own, start = self.before
        wall = time.perf_counter() - start
        mine = sum(j - own.get(pid, 0) for pid, j in jiffies_by_process(self.own).items())
        return max(0, busy_jiffies() - busy - mine) / self.hz / wall


def quiet_only(samples, other_cores, limit):
    """The samples during which other work kept fewer than `limit` cores
    busy (other_cores: OtherWork.cores() of each sample)."""
    return [s for s, c in zip(samples, other_cores) if c < limit]
