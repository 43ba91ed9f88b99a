"""The GPU path's logic on host memory, with the stand-ins of
tests/native/host_gpu.h in place of the CUDA runtime and NCCL, so it runs on
every machine (tests/test_nccl.py covers the real thing on a GPU):

- gpu_executor_host_test.cc, the GPU executor alone: fused and direct
  allreduce with scaling, every collective, round-robin lanes that agree
  across ranks, asynchronous completion (each request finished once), buffer
  growth with and without stream-ordered allocation, a failed launch being
  fatal, stuck work aborted after the peer timeout.
- core_gpu_host_test.cc, the Core with that backend: GPU and CPU tensors in
  one grouped call, the response cache, 50 allreduces of distinct
  priorities fused into one lane call, CPU against GPU as a mismatch on
  every rank, a GPU failure stopping the Core with its cause; and, with
  asynchronous stand-ins, one rank's launch failing while its peers wait in
  their allreduce: every rank stops and the peers' stuck work is aborted.

The programs are compiled here from the extension's own sources, with the
MPI compiler wrapper mxplugin was built with."""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

import prebuild
from mpi_harness import REPO, run_program

# The MPI world (with its shared-memory allreduce) and what it needs.
COMMON = ["src/core/timeline.cc", "src/common/types.cc", "src/common/half_vector.cc", "src/common/logging.cc",
          "src/common/reduce.cc", "src/common/scale.cc", "src/common/crash_exit.cc"] + sorted(
    os.path.relpath(p, REPO) for d in ("", "mpi", "shm") for p in glob.glob(os.path.join(REPO, "src", "backend", d, "*.cc")))
PROGRAMS = {
    "gpu_executor_host_test": ["tests/native/gpu_executor_host_test.cc", "src/core/gpu_executor.cc",
                               "src/core/gpu_launch.cc"] + COMMON,
    # the whole core: every .cc of src/core (not src/core/gpu, the CUDA runtime) and src/common
    "core_gpu_host_test": ["tests/native/core_gpu_host_test.cc"] + sorted(
        set(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "src", "core", "*.cc")) +
            glob.glob(os.path.join(REPO, "src", "common", "*.cc"))) | set(COMMON)),
}


def mpicc():
    try:
        from mxplugin import _build_info

        if _build_info.MPICC and os.path.exists(_build_info.MPICC):
            return _build_info.MPICC
    except ImportError:
        pass
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    return beside if os.path.exists(beside) else shutil.which("mpicc")


def make_programs(out_dir):
    """The test programs, built under `out_dir` ahead of the tests (tests/prebuild.py)."""
    wrapper, cxx = mpicc(), shutil.which("c++") or shutil.which("g++")
    if not wrapper or not cxx:
        pytest.skip(f"needs mpicc ({wrapper}) and a C++ compiler ({cxx}) to build the test programs")
    mpi_flags = shlex.split(subprocess.check_output([wrapper, "-show"], text=True))[1:]
    # Each source compiled once (the programs share most of theirs), as many
    # at a time as there are cores, then both programs linked.
    sources = sorted({src for srcs in PROGRAMS.values() for src in srcs})
    objects = {src: os.path.join(out_dir, src.replace("/", "_") + ".o") for src in sources}
    compile_flags = [f for f in mpi_flags if not f.startswith(("-L", "-l", "-Wl"))]
    waiting = list(sources)
    running = []
    while waiting or running:
        while waiting and len(running) < (os.cpu_count() or 1):
            src = waiting.pop()
            cmd = [cxx, "-std=c++17", "-O1", "-pthread", "-Wall", "-Werror", "-Isrc", "-I.", "-c", src, "-o",
                   objects[src], *compile_flags]
            running.append((cmd, prebuild.popen(cmd, cwd=REPO)))
        cmd, proc = running.pop(0)
        _, err = prebuild.communicate(proc, timeout=600)
        assert proc.returncode == 0, f"compiling failed:\n{' '.join(cmd)}\n{err[-6000:]}"
    for name, srcs in PROGRAMS.items():
        cmd = [cxx, "-pthread", *[objects[src] for src in srcs], "-o", os.path.join(out_dir, name), *mpi_flags]
        done = prebuild.run(cmd, cwd=REPO, timeout=600)
        assert done.returncode == 0, f"linking {name} failed:\n{' '.join(cmd)}\n{done.stderr[-6000:]}"
    return {name: os.path.join(out_dir, name) for name in PROGRAMS}


PROGRAMS_BUILD = prebuild.Build("gpu-host-programs", __file__, "programs", make_programs)


@pytest.fixture(scope="module")
def programs():
    return PROGRAMS_BUILD.result()


def run_ok(program, np_, *args):
    rc, out, err = run_program([program, *args], np_, timeout=180)
    passed = sorted(int(r) for r in re.findall(r"PASS (\d+)", out))
    assert rc == 0 and passed == list(range(np_)), f"exit {rc}, passed {passed}\n{out}\n{err}"


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_gpu_executor_on_host(programs, np_):
    run_ok(programs["gpu_executor_host_test"], np_)


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_core_gpu_path_on_host(programs, np_):
    run_ok(programs["core_gpu_host_test"], np_)


@pytest.mark.parametrize("np_", [2, 3])
def test_one_rank_gpu_failure_stops_every_rank(programs, np_):
    run_ok(programs["core_gpu_host_test"], np_, "one-rank-fails")
