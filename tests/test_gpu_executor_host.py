"""The GPU executor's logic on host memory (tests/native/gpu_executor_host_test.cc):
fused and direct allreduce with scaling, every collective, round-robin lanes
that agree across ranks, asynchronous completion (each request finished
once), buffer growth with and without stream-ordered allocation, and the
failure paths (a failed launch is fatal; stuck work is aborted after the peer
timeout). Stand-ins replace the CUDA runtime and NCCL, so this runs on every
machine; tests/test_nccl.py covers the real thing on a GPU.

The C++ program is compiled here from the same sources the extension uses,
with the MPI compiler wrapper mxplugin was built with."""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from mpi_harness import REPO, run_program

SOURCES = ["tests/native/gpu_executor_host_test.cc", "src/core/gpu/gpu_executor.cc", "src/core/timeline.cc",
           "src/backend/mpi/mpi_communicator.cc", "src/backend/mpi/mpi_context.cc", "src/common/types.cc",
           "src/common/half_vector.cc", "src/common/logging.cc", "src/scale.cc"]


def mpicc():
    try:
        from mxplugin import _build_info

        if _build_info.MPICC and os.path.exists(_build_info.MPICC):
            return _build_info.MPICC
    except ImportError:
        pass
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    return beside if os.path.exists(beside) else shutil.which("mpicc")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    wrapper, cxx = mpicc(), shutil.which("c++") or shutil.which("g++")
    if not wrapper or not cxx:
        pytest.skip(f"needs mpicc ({wrapper}) and a C++ compiler ({cxx}) to build the test program")
    mpi_flags = shlex.split(subprocess.check_output([wrapper, "-show"], text=True))[1:]
    out = str(tmp_path_factory.mktemp("native") / "gpu_executor_host_test")
    cmd = [cxx, "-std=c++17", "-O1", "-pthread", "-Wall", "-Werror", "-Isrc", "-I.", *SOURCES, "-o", out, *mpi_flags]
    build = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"building the host test failed:\n{' '.join(cmd)}\n{build.stderr[-6000:]}"
    return out


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_gpu_executor_on_host(program, np_):
    rc, out, err = run_program([program], np_, timeout=120)
    passed = sorted(int(r) for r in re.findall(r"PASS (\d+)", out))
    assert rc == 0 and passed == list(range(np_)), f"exit {rc}, passed {passed}\n{out}\n{err}"
