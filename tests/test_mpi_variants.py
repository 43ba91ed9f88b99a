"""Other MPIs than the default. mxplugin built against Open MPI 4.1 (Debian's openmpi-bin and
libopenmpi-dev, what most clusters have) and installed as a user would
(`MPICC=mpicc.openmpi pip install .`; tests/mpi_variants.py): nothing of
MPICH comes with it, `--check-build` names Open MPI's library and launcher,
and the collectives, trainer equivalence, the hierarchical path and 2 fake
hosts x 2 ranks run under Open MPI's launcher through the installed
mxplugin-run. A representative subset: the default build (MPICH) runs the
whole suite. And the default build on Intel MPI's runtime (impi-rt from
PyPI), the MPICH ABI family. Skips, saying why, where Open MPI cannot be had
(not root, no apt-get) or impi-rt cannot be installed."""
import os
import re
import subprocess
import sys

import pytest

import prebuild
from fake_cluster import ENV, IFACE, FakeCluster
from mpi_harness import HANG_S, REPO, SPMD_DIR, rank_env
from mpi_variants import Variant, debian_openmpi_mpicc, intel_mpi_runtime, pypi_openmpi


def make_openmpi(work):
    mpicc, why_not = debian_openmpi_mpicc()
    if mpicc is None:
        pytest.skip(f"Open MPI 4.1: {why_not}")
    return Variant(work, mpicc).build()


# Built ahead of the tests (tests/prebuild.py).
OPENMPI = prebuild.Build("openmpi41", __file__, "openmpi", make_openmpi)


@pytest.fixture(scope="module")
def openmpi():
    variant = OPENMPI.result()
    print(f"built against Open MPI 4.1 in {variant.build_seconds:.0f} s")
    return variant


def launch(variant, argv, env=None, cwd=None, timeout=HANG_S * 2):
    done = subprocess.run([os.path.join(variant.bin, "mxplugin-run"), *argv], env=variant.env(env),
                          cwd=cwd or variant.root, capture_output=True, text=True, timeout=timeout)
    return done, f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"


def spmd(variant, script, np, *options, args=(), env=None):
    done, report = launch(variant, [*options, "-np", str(np), variant.python, os.path.join(SPMD_DIR, script),
                                    *map(str, args)], env)
    assert done.returncode == 0 and sorted(map(int, re.findall(r"PASS (\d+)", done.stdout))) == list(range(np)), \
        report
    return done


def test_the_install_brings_no_other_mpi_and_check_build_names_open_mpi(openmpi):
    for program in ("mpicc", "mpiexec", "mpirun"):
        assert not os.path.exists(os.path.join(openmpi.bin, program)), f"{program} was installed beside mxplugin"
    meta = subprocess.run([openmpi.python, "-c", "from importlib.metadata import requires; "
                                                 "print(requires('mxplugin'))"],
                          env=openmpi.env(), cwd=openmpi.root, capture_output=True, text=True, check=True).stdout
    assert "mpich" not in meta, meta
    done, report = launch(openmpi, ["--check-build"])
    assert done.returncode == 0, report
    assert re.search(r"^MPI: Open MPI v4\.1\.\d+ \(\S*libmpi\.so\.40\S*\); launcher: \S*mpiexec\.openmpi "
                     r"\(mpiexec\S* \(OpenRTE\) 4\.1", done.stdout, re.M), report
    assert "MISMATCH" not in done.stdout and "core: not loadable" not in done.stdout, report


def test_collectives_under_open_mpi_at_3_ranks(openmpi):
    spmd(openmpi, "check_ops.py", 3, args=["--skip=fp16"])


def test_trainer_matches_gluon_under_open_mpi(openmpi):
    spmd(openmpi, "check_trainer.py", 2)


def test_the_hierarchical_path_under_open_mpi(openmpi):
    done = spmd(openmpi, "check_hierarchical.py", 2, env={"MXPLUGIN_LOG_LEVEL": "debug"})
    assert "hierarchical allreduce (shared memory within hosts)" in done.stderr, done.stderr[-3000:]


SPIN = ("import time, mxplugin as hvd, mxnet as mx\n"
        "hvd.init()\n"
        "print('ready', hvd.rank(), flush=True)\n"
        "while True:\n"
        "    hvd.allreduce(mx.nd.ones(4), name='spin').wait_to_read()\n"
        "    time.sleep(0.05)\n")


def test_open_mpi_jobs_stop_and_exit_as_mpich_jobs_do(openmpi, tmp_path):
    """SIGTERM to mxplugin-run: one line, every rank stopped, exit 143; a
    rank's own exit code comes through, with --prefix-output's tags; an
    elastic job is refused, saying it needs MPICH's launcher."""
    import signal
    import time

    script = tmp_path / "spin.py"
    script.write_text(SPIN)
    proc = subprocess.Popen([os.path.join(openmpi.bin, "mxplugin-run"), "-np", "2", openmpi.python, str(script)],
                            env=openmpi.env(), cwd=openmpi.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen, deadline = [], time.monotonic() + HANG_S
    while sum(line.startswith("ready") for line in seen) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=HANG_S)
    text = "".join(seen) + rest
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "mxplugin-run: interrupted (SIGTERM): stopping all 2 ranks" in text, text
    def running():
        listed = subprocess.run(["pgrep", "-af", str(script)], capture_output=True, text=True).stdout
        return [line for line in listed.splitlines() if line.strip()]

    # The ranks end before the launcher; each rank's agent (its parent: Note
    # [A rank's agent]) a moment after its rank.
    assert not [line for line in running() if "mxplugin_run.rank_agent" not in line], running()
    deadline = time.monotonic() + HANG_S
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(), f"left running: {running()}"
    code = "import sys, mxplugin as hvd; hvd.init(); print('hello', hvd.rank()); sys.exit(3 if hvd.rank() else 0)"
    done, report = launch(openmpi, ["-np", "2", "--prefix-output", openmpi.python, "-c", code])
    assert done.returncode == 3, report
    assert "[0]<stdout>:hello 0" in done.stdout and "[1]<stdout>:hello 1" in done.stdout, report
    # elastic jobs need Hydra's launcher: said before anything starts
    done, report = launch(openmpi, ["--min-np", "1", "-np", "2", openmpi.python, "-c", "pass"])
    assert done.returncode == 2 and "elastic training needs an MPICH-family launcher" in done.stderr, report


@pytest.mark.skipif(FakeCluster.unavailable() is not None, reason=f"fake hosts: {FakeCluster.unavailable()}")
def test_two_fake_hosts_of_two_ranks_under_open_mpi(openmpi):
    """mxplugin-run -H a:2,b:2 with a remote shell into the fake hosts, Open
    MPI's daemons started through it: the topology, and the traffic on the
    hosts' links."""
    with FakeCluster(2) as cluster:
        sent = cluster.tx_bytes(1)
        # each fake host with a host name of its own (fake_cluster.NSRSH_OWN_HOSTNAME)
        argv = [os.path.join(openmpi.bin, "mxplugin-run"), "--rsh", cluster.rsh_own_hostname,
                "--network-interface", IFACE,
                "-np", "4", "-H", cluster.host_list((2, 2)), openmpi.python,
                os.path.join(SPMD_DIR, "check_topology.py"), "2,2"]
        done = cluster.run(0, argv, env=openmpi.env(ENV), timeout=HANG_S * 2, cwd=openmpi.root)
        report = f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        assert done.returncode == 0 and sorted(re.findall(r"PASS (\d)", done.stdout)) == ["0", "1", "2", "3"], report
        assert cluster.tx_bytes(1) - sent > 4000, "nothing crossed the second host's link"


def make_openmpi5(work):
    prefix, why_not = pypi_openmpi(work)
    if prefix is None:
        pytest.skip(why_not)
    return prefix


OPENMPI5 = prebuild.Build("openmpi5", __file__, "openmpi5", make_openmpi5)


@pytest.fixture(scope="module")
def openmpi5():
    """PyPI's Open MPI 5.0, installed ahead of the tests (tests/prebuild.py)."""
    return OPENMPI5.result()


def test_the_open_mpi_4_1_build_runs_on_open_mpi_5(openmpi, openmpi5):
    """PyPI's Open MPI 5.0 (same ABI, libmpi.so.40) as the runtime and launcher
    of the 4.1 build, pointed at as any MPI program would be: LD_LIBRARY_PATH
    (Note [Which libmpi]) and MXPLUGIN_MPIEXEC. bench/each_mpi.py also
    builds against 5.0 itself."""
    prefix = openmpi5
    env = {"LD_LIBRARY_PATH": os.path.join(prefix, "lib"), "MXPLUGIN_MPIEXEC": os.path.join(prefix, "bin", "mpiexec")}
    done, report = launch(openmpi, ["--check-build"], env)
    assert re.search(r"^MPI: Open MPI v5\.0\.\d+ \(\S*openmpi5/lib/libmpi\.so\.40\); launcher: \S*mpiexec "
                     r"\(mpiexec \(Open MPI\) 5\.0", done.stdout, re.M), report
    spmd(openmpi, "check_ops.py", 2, args=["--skip=fp16"], env=env)


# -- the default build (MPICH) with Intel MPI's runtime -----------------------------------------

def make_intel_mpi(work):
    prefix, why_not = intel_mpi_runtime(work)
    if prefix is None:
        pytest.skip(why_not)
    return prefix


INTEL_MPI = prebuild.Build("intel-mpi", __file__, "intel_mpi", make_intel_mpi)


@pytest.fixture(scope="module")
def intel_mpi():
    return INTEL_MPI.result()


@pytest.mark.parametrize("np_, script, args", [(2, "check_topology.py", ["2"]), (3, "check_ops.py", ["--skip=fp16"])])
def test_the_mpich_build_runs_on_intel_mpis_runtime(intel_mpi, np_, script, args):
    """README, "The MPICH ABI family at run time": the library from
    LD_LIBRARY_PATH (Note [Which libmpi]), the launcher from MXPLUGIN_MPIEXEC."""
    env = rank_env({"LD_LIBRARY_PATH": os.path.join(intel_mpi, "lib"),
                    "MXPLUGIN_MPIEXEC": os.path.join(intel_mpi, "bin", "mpiexec.hydra")})
    check = subprocess.run([sys.executable, "-m", "mxplugin_run", "--check-build"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=HANG_S)
    assert re.search(r"^MPI: Intel\(R\) MPI Library .*impi/lib/libmpi\.so\.12\); launcher: \S*mpiexec\.hydra ",
                     check.stdout, re.M) and "MISMATCH" not in check.stdout, check.stdout + check.stderr
    done = subprocess.run([sys.executable, "-m", "mxplugin_run", "-np", str(np_), sys.executable,
                           os.path.join(SPMD_DIR, script), *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_S * 2)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode == 0 and sorted(map(int, re.findall(r"PASS (\d+)", done.stdout))) == list(range(np_)), \
        report
