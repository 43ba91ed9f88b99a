"""Running where users run: a Slurm allocation's hosts, Open MPI's launcher
arguments, and a rank that finds itself alone where its launcher started
several (Note [Lone ranks] in mxplugin/lone_rank.py), which must fail at
init() on every rank, naming both MPIs, rather than train alone."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from mpi_harness import HANG_S, REPO, rank_env, run_spmd
from mxplugin_run.hosts import UsageError
from mxplugin.lone_rank import launcher_count, lone_rank_message
from mxplugin_run.mpi_family import MPICH_FAMILY, OPEN_MPI, library_family, soname
from mxplugin_run.mpi_launcher import openmpi_arguments
from mxplugin_run.slurm import allocation_hosts, expand_counts, expand_hostlist


# -- Slurm's compressed lists ------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[08-11,15],gpu5", ["node08", "node09", "node10", "node11", "node15", "gpu5"]),
    ("rack[1-2]-n[3-4]", ["rack1-n3", "rack1-n4", "rack2-n3", "rack2-n4"]),
    ("a,b[1,3]", ["a", "b1", "b3"]),
])
def test_slurm_host_lists_expand_in_slurms_order(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, counts", [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1,2(x2)", [1, 2, 2])])
def test_slurm_task_counts_expand(text, counts):
    assert expand_counts(text) == counts


@pytest.mark.parametrize("bad", ["node[1-3", "node1-3]", "node[3-1]", "node[a-b]"])
def test_a_malformed_slurm_host_list_is_a_usage_error_naming_it(bad):
    with pytest.raises(UsageError, match=re.escape(repr(bad))):
        expand_hostlist(bad)


def test_an_allocation_gives_hosts_with_their_task_counts():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "mx[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert allocation_hosts(env) == [("mx1", 2), ("mx2", 2), ("mx3", 1)]
    # without -n, the CPUs Slurm gave each node
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "mx[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4(x2)"}
    assert allocation_hosts(env) == [("mx1", 4), ("mx2", 4)]
    assert allocation_hosts({"SLURM_JOB_NODELIST": "mx1"}) is None  # not inside a job
    with pytest.raises(UsageError, match="lists 2 nodes .* but 1 task counts"):
        allocation_hosts({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "mx[1-2]", "SLURM_TASKS_PER_NODE": "3"})


def test_mxplugin_run_inside_an_allocation_takes_its_hosts_and_says_so():
    """Without -H inside an allocation the hosts come from Slurm; --verbose
    says so and mpiexec gets them (here this machine, twice listed as the
    allocation's one node, so nothing remote is needed)."""
    import socket

    host = socket.gethostname()
    env = rank_env({"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": host, "SLURM_TASKS_PER_NODE": "2"})
    code = "import os; print('rank', os.environ.get('PMI_RANK', os.environ.get('OMPI_COMM_WORLD_RANK')))"
    done = subprocess.run([sys.executable, "-m", "mxplugin_run", "--verbose", "-np", "2", sys.executable, "-c", code],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    assert f"hosts from the Slurm allocation 42: {host}:2" in done.stderr, done.stderr
    assert sorted(done.stdout.split()) == ["0", "1", "rank", "rank"], done.stdout


# -- Open MPI's launcher -----------------------------------------------------------------------

def test_open_mpi_gets_the_slots_the_root_flag_no_binding_and_the_environment():
    """Note [Open MPI's defaults] in mxplugin_run/mpi_launcher.py."""
    env = {"MXPLUGIN_TIMELINE": "t.json", "NCCL_DEBUG": "INFO", "PYTHONPATH": "/x", "HOME": "/root"}
    args = openmpi_arguments(3, [], env, as_root=True)
    assert args[:4] == ["-np", "3", "-H", "localhost:3"]
    assert "--allow-run-as-root" in args and args[args.index("--bind-to") + 1] == "none"
    exported = [args[i + 1] for i, a in enumerate(args) if a == "-x"]
    assert exported == ["MXPLUGIN_TIMELINE", "NCCL_DEBUG", "PYTHONPATH"]
    args = openmpi_arguments(4, [("a", 2), ("b", 2)], {}, rsh="/bin/fake_rsh", iface="veth0", as_root=False)
    assert args[:4] == ["-np", "4", "-H", "a:2,b:2"] and "--allow-run-as-root" not in args
    assert "plm_rsh_agent" in args and args[args.index("btl_tcp_if_include") + 1] == "veth0"
    assert args[args.index("mpi_yield_when_idle") + 1] == "1"  # ranks yield while they wait
    assert "mpi_yield_when_idle" not in openmpi_arguments(2, [], {"OMPI_MCA_mpi_yield_when_idle": "0"})


def test_library_families_and_sonames():
    assert library_family("Open MPI v5.0.11, package: Open MPI ...") == OPEN_MPI
    assert library_family("MPICH Version:      5.0.2\nMPICH Release date: ...") == MPICH_FAMILY
    assert library_family("Intel(R) MPI Library 2021.14 for Linux* OS") == MPICH_FAMILY
    assert soname("/opt/x/lib/libmpi.so.40.30.1") == "libmpi.so.40"
    assert soname("/v/lib/libmpi.so.12") == "libmpi.so.12"


# -- a rank alone ------------------------------------------------------------------------------

def test_the_launchers_count_is_read_from_each_launchers_variables():
    assert launcher_count({}) == (1, None)
    assert launcher_count({"OMPI_COMM_WORLD_SIZE": "1"}) == (1, None)
    assert launcher_count({"OMPI_COMM_WORLD_SIZE": "4"})[0] == 4
    assert launcher_count({"PMI_SIZE": "3"})[0] == 3
    assert launcher_count({"SLURM_STEP_NUM_TASKS": "2"})[0] == 2
    assert lone_rank_message(2, {"OMPI_COMM_WORLD_SIZE": "2"}, "x") is None  # a real world of 2
    assert lone_rank_message(1, {"SLURM_JOB_ID": "3", "SLURM_NTASKS": "8"}, "x") is None  # python in sbatch


LONE = ("import mxplugin as hvd\n"
        "try:\n"
        "    hvd.init()\n"
        "except Exception as exc:\n"
        "    print('REFUSED', type(exc).__name__, exc)\n"
        "else:\n"
        "    print('TRAINED ALONE', hvd.size())\n")


@pytest.mark.parametrize("launcher, says", [
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "{rank}"}, "Open MPI's launcher"),
    ({"SLURM_JOB_ID": "9", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "{rank}"}, "add --mpi=pmi2 to srun"),
])
def test_ranks_alone_under_another_launcher_fail_at_init_naming_both(launcher, says):
    """What Open MPI's mpirun (or srun without PMI) gives two ranks of an
    MPICH build: each process starts as a world of one, with the launcher's
    variables set. Both processes must refuse, naming the launcher's count
    and this build's MPI library."""
    procs = []
    for rank in range(2):
        env = rank_env({k: v.format(rank=rank) for k, v in launcher.items()})
        for name in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"):
            env.pop(name, None)
        procs.append(subprocess.Popen([sys.executable, "-c", LONE], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    from mxplugin import _loader

    for proc in procs:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0 and out.startswith("REFUSED MXPluginError"), out + err
        assert "alone in its MPI world (size 1" in out and "started 2 processes" in out and says in out, out
        assert os.path.basename(_loader.MPI_LIBRARY or "libmpi") in out, out


# -- mpi4py in the same process ----------------------------------------------------------------

# Runs of each way (each run alternates init() and init(comm=...)); MXPLUGIN_TEST_REPEATS=20 for the
# issue's count (about 3 s a run).
REPEATS = int(os.environ.get("MXPLUGIN_TEST_REPEATS", "2"))
needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None,
                                  reason="needs mpi4py (pip install -e '.[test]' installs it)")


@needs_mpi4py
@pytest.mark.parametrize("first", ["mpi4py", "mxplugin"])
@pytest.mark.parametrize("finalize", ["default", "off", "neither"])
def test_mpi4py_beside_mxplugin_exits_0_every_time(first, finalize):
    """Whoever initialised MPI finalises it; either import order, with and
    without mpi4py.rc.finalize = False (and rc.initialize = False, as
    Sockeye's --horovod sets), init() and init(comm=MPI.COMM_WORLD):
    every run of 2 ranks passes and exits 0."""
    for run in range(REPEATS):
        how = "comm" if run % 2 else "plain"
        rc, out, err = run_spmd("check_mpi4py.py", 2, [first, finalize, how], timeout=HANG_S)
        report = f"run {run} ({how}): exit {rc}\n--- stdout\n{out}\n--- stderr\n{err[-3000:]}"
        assert rc == 0 and sorted(re.findall(r"PASS (\d)", out)) == ["0", "1"], report


@needs_mpi4py
@pytest.mark.parametrize("first", ["mpi4py", "mxplugin"])
@pytest.mark.parametrize("finalize", ["default", "neither"])
def test_mpi4py_goes_on_after_mxplugin_shut_down(first, finalize):
    """MPI outlives mxplugin's shutdown(), whoever started it: the program's
    mpi4py collectives after it still run, and every rank exits 0."""
    rc, out, err = run_spmd("check_mpi4py.py", 2, [first, finalize, "shutdown"], timeout=HANG_S)
    report = f"exit {rc}\n--- stdout\n{out}\n--- stderr\n{err[-3000:]}"
    assert rc == 0 and sorted(re.findall(r"PASS (\d)", out)) == ["0", "1"], report
