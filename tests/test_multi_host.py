"""mxplugin across hosts: a cluster of fake hosts on this machine
(tests/fake_cluster.py: a network namespace per host on a bridge, a remote
shell into each), launched with mxplugin-run -H ... --rsh ... exactly as on
real machines. Skips, saying why, where namespaces cannot be made (not root,
no `ip`)."""
import os
import re
import sys
import time

import pytest

from fake_cluster import ENV, IFACE, FakeCluster
from mpi_harness import HANG_S, REPO, SPMD_DIR, mpiexec_path, rank_env

WHY_NOT = FakeCluster.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"fake-host cluster: {WHY_NOT}")
SLOTS = (2, 2)


@pytest.fixture(scope="module")
def cluster():
    with FakeCluster(len(SLOTS)) as c:
        yield c


def launch(cluster, command, np_=4, slots=SLOTS, extra=(), env=None, timeout=240):
    """mxplugin-run on the first fake host, ranks on all of them."""
    argv = [sys.executable, "-m", "mxplugin_run", "-np", str(np_), "-H", cluster.host_list(slots), "--rsh", cluster.rsh,
            "--network-interface", IFACE, *extra, *command]
    return cluster.run(0, argv, env=rank_env({**ENV, **(env or {})}), timeout=timeout, cwd=REPO)


def passed(out):
    return sorted(int(k) for k in re.findall(r"^PASS (\d+)", out, re.M))


def spmd(cluster, script, *args, np_=4, **kw):
    before = [cluster.tx_bytes(i) for i in range(len(cluster.hosts))]
    done = launch(cluster, [sys.executable, os.path.join(SPMD_DIR, script), *args], np_=np_, **kw)
    report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-6000:]}"
    assert done.returncode == 0 and passed(done.stdout) == list(range(np_)), report
    sent = [cluster.tx_bytes(i) - b for i, b in enumerate(before)]
    return done, sent


DEBUG = {"MXPLUGIN_LOG_LEVEL": "debug"}


def test_topology_and_traffic_cross_the_links(cluster):
    done, sent = spmd(cluster, "check_topology.py", ",".join(map(str, SLOTS)), env=DEBUG)
    # every host sent over its link (an allreduce across hosts cannot stay on one)
    assert all(s > 4000 for s in sent), f"bytes sent per host: {sent}"
    assert done.stderr.count("hierarchical allreduce (shared memory within hosts)") >= 4, done.stderr[-3000:]


def test_uneven_hosts_fall_back_to_flat_allreduce(cluster):
    done, _ = spmd(cluster, "check_topology.py", "2,1", np_=3, slots=(2, 1), env=DEBUG)
    assert "flat MPI allreduce (hosts run different numbers of ranks)" in done.stderr, done.stderr[-3000:]


def test_one_rank_per_host_is_flat(cluster):
    done, _ = spmd(cluster, "check_topology.py", "1,1", np_=2, slots=(1, 1), env=DEBUG)
    assert "flat MPI allreduce (one rank per host)" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("hierarchical", ["1", "0"])
def test_every_collective_and_dtype_across_hosts(cluster, hierarchical):
    spmd(cluster, "check_ops.py", env={"MXPLUGIN_HIERARCHICAL_ALLREDUCE": hierarchical})


def test_hierarchical_allreduce_boundaries_across_hosts(cluster):
    spmd(cluster, "check_hierarchical.py")


def test_reductions_across_hosts_are_the_same_bits_whatever_the_fusion(cluster):
    """2 x 2 ranks: each launch checks its sums against the inputs added in
    its plane's order (tests/spmd/check_same_bits.py: each host's ranks,
    then the hosts; or rank order over flat MPI) in 20 scrambled rounds;
    other fusion and cycle times give the same bits."""
    digests = {}
    for plane, extra in (("hierarchical", {}), ("hierarchical", {"MXPLUGIN_FUSION_THRESHOLD": "4096"}),
                         ("flat", {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0", "MXPLUGIN_CYCLE_TIME": "10"})):
        done, _ = spmd(cluster, "check_same_bits.py", plane, env=extra)
        digests.setdefault(plane, set()).update(re.findall(r"^digest (\S+)$", done.stdout, re.M))
    assert [len(d) for d in digests.values()] == [1, 1], digests


def test_process_sets_spanning_hosts(cluster):
    spmd(cluster, "check_process_sets.py")


def test_trainer_matches_gluon_across_hosts(cluster):
    spmd(cluster, "check_trainer.py")


def test_digits_example_converges_across_hosts(cluster):
    done = launch(cluster, [sys.executable, os.path.join(REPO, "examples", "mxnet_digits.py"), "--epochs", "8",
                            "--min-accuracy", "0.95"])
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    assert re.search(r"test accuracy", done.stdout + done.stderr), done.stdout


def test_unreachable_host_fails_fast_naming_it(cluster):
    t0 = time.monotonic()
    hosts = f"{cluster.hosts[0]}:2,mxnosuchhost{cluster.id}:2"
    argv = [sys.executable, "-m", "mxplugin_run", "-np", "4", "-H", hosts, "--rsh", cluster.rsh,
            "--ssh-connect-timeout", "3", sys.executable, "-c", "pass"]
    done = cluster.run(0, argv, env=rank_env(ENV), timeout=60, cwd=REPO)
    took = time.monotonic() - t0
    assert done.returncode != 0 and f"mxnosuchhost{cluster.id}" in done.stderr, done.stderr
    assert took < HANG_S, f"took {took:.1f} s"  # Note [Hang limits]


def test_killed_rank_fails_every_rank_on_every_host(cluster):
    """Rank 1 (first host) SIGKILLs itself; the survivors on both hosts fail
    their pending allreduce within the peer timeout and exit by themselves.
    mpiexec directly: -disable-auto-cleanup keeps Hydra from killing the
    survivors first, which would hide what the core does."""
    argv = [mpiexec_path(), *cluster.mpiexec_args(SLOTS), "-n", "4", "-disable-auto-cleanup", sys.executable,
            os.path.join(SPMD_DIR, "check_rank_death.py"), "kill"]
    t0 = time.monotonic()
    done = cluster.run(0, argv, env=rank_env({**ENV, "MXPLUGIN_PEER_TIMEOUT_SECONDS": "5"}), timeout=120, cwd=REPO)
    took = time.monotonic() - t0
    report = f"exit {done.returncode} after {took:.1f} s\n{done.stdout}\n{done.stderr[-4000:]}"
    assert passed(done.stdout) == [0, 2, 3], report
    assert took < HANG_S, report


@pytest.mark.parametrize("style", ["mpich", "openmpi"])
def test_the_mpi_operators_launch_path_a_launcher_outside_the_hostfile(style):
    """Kubeflow's MPI Operator (examples/kubernetes_mpijob.yaml): a launcher
    pod that runs no ranks, a hostfile of the worker pods at /etc/mpi/hostfile
    in the MPI's own format ("host:2" for MPICH, "host slots=2" for Open
    MPI), and a remote shell into each worker. Here the first fake host is
    the launcher, the other two the workers."""
    with FakeCluster(3) as c:
        workers = c.hosts[1:]
        hostfile = os.path.join(c.dir, "hostfile")
        with open(hostfile, "w") as f:
            f.write("".join(f"{h}:2\n" if style == "mpich" else f"{h} slots=2\n" for h in workers))
        # each rank says which network namespace (fake host) it runs in
        rank = f"echo NETNS $(readlink /proc/self/ns/net) && exec {sys.executable} " \
               f"{os.path.join(SPMD_DIR, 'check_topology.py')} 2,2"
        argv = [sys.executable, "-m", "mxplugin_run", "-np", "4", "--hostfile", hostfile, "--rsh", c.rsh,
                "--network-interface", IFACE, "sh", "-c", rank]
        done = c.run(0, argv, env=rank_env({**ENV, **DEBUG}), timeout=HANG_S * 2, cwd=REPO)
        report = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-6000:]}"
        assert done.returncode == 0 and passed(done.stdout) == [0, 1, 2, 3], report
        namespaces = {i: c.run(i, ["readlink", "/proc/self/ns/net"]).stdout.strip() for i in range(3)}
        ran_in = sorted(re.findall(r"^NETNS (\S+)", done.stdout, re.M))
        assert ran_in == sorted([namespaces[1]] * 2 + [namespaces[2]] * 2), (ran_in, namespaces, report)
        assert done.stderr.count("hierarchical allreduce (shared memory within hosts)") >= 4, report
