"""Allreduce of resnet50_v1's gradient set (102,303,648 bytes) on one host and
across fake hosts (needs root: tests/fake_cluster.py):

    python bench/multi_host.py          # writes bench/results/multi_host.json

- 1 host x 2 ranks (this machine, MPI free to use shared memory): mxplugin's
  grouped_allreduce_ with the hierarchical (shared-memory) allreduce and with
  flat MPI (MXPLUGIN_HIERARCHICAL_ALLREDUCE=0), against the plain
  single-threaded MPI program bench/mpi_plain.c, in interleaved rounds. The
  same program also times the memory floor: both ranks at once making one
  read-and-write pass over their own buffer (--pass), the least memory
  traffic of any in-place allreduce.
- 2 hosts x 2 ranks, each host's link limited to 2 and 10 Gbit/s (tc tbf):
  the same three, plus the lower bound from the link rate. Every run here
  uses UCX_TLS=tcp,self (so traffic between fake hosts crosses the links:
  UCX would use shared memory between namespaces of one machine); each
  run's link byte counters are recorded.

Every figure is a median over interleaved iterations; ratios are against the
plain program measured in the same configuration in the same run.
"""
import os
import re
import statistics
import sys
import tempfile

from harness import HERE, REPO, arguments, interleave, medians, write_result
from jobs import check, run

# tests/, on the path through harness
from fake_cluster import ENV, FakeCluster
from mpi_harness import mpiexec_path, rank_env
from mpi_plain import RESNET50_GRADIENT_BYTES, build, parse

ALLREDUCE = os.path.join(HERE, "allreduce.py")
RUN_TIMEOUT_S = 300


def grouped_median(text):
    m = re.search(r"grouped_allreduce_\s+median\s+([0-9.]+) ms", text)
    if not m:
        raise SystemExit(f"no grouped_allreduce_ median in:\n{text[-3000:]}")
    return float(m.group(1)) / 1e3


def plain_median(text):
    times = parse(text).get(RESNET50_GRADIENT_BYTES)
    if not times:
        raise SystemExit(f"no plain MPI result in:\n{text[-3000:]}")
    return statistics.median(times)


def one_host(exe, iters, rounds):
    """Rounds of (plain with the memory pass, hierarchical, flat),
    interleaved: this machine's memory bandwidth and CPU time vary from
    minute to minute (other tenants), and noise only ever adds time. Each
    method's figure is its best round's median, the same rule for all; the
    medians of the round medians are recorded too."""
    mpiexec = [mpiexec_path(), "-n", "2"]

    def plain():
        """(plain MPI_Allreduce, memory pass) from one run of the program."""
        text = run(mpiexec + [exe, "--pass", str(iters), "3", str(RESNET50_GRADIENT_BYTES)], env=rank_env(),
                   timeout=900)
        passes = parse(text, "pass").get(RESNET50_GRADIENT_BYTES)
        if not passes:
            raise SystemExit(f"no memory pass result in:\n{text[-3000:]}")
        return plain_median(text), statistics.median(passes)

    def ours(flag):
        cmd = mpiexec + [sys.executable, ALLREDUCE, "--no-curve", "--iters", str(iters), "--output", os.devnull]
        return lambda: grouped_median(run(cmd, env=rank_env({"MXPLUGIN_HIERARCHICAL_ALLREDUCE": flag}), timeout=900))

    got = interleave({"plain": plain, "hierarchical": ours("1"), "flat": ours("0")}, rounds)
    rows = {"plain": [p for p, _ in got["plain"]], "memory_pass": [m for _, m in got["plain"]],
            "hierarchical": got["hierarchical"], "flat": got["flat"]}
    result = {"rounds_s": rows, "rule": "best round's median, for every method", "median_of_rounds_s": medians(rows)}
    result.update({f"{k}_s": min(v) for k, v in rows.items()})
    return result


def two_hosts(exe, rate_mbit, iters):
    with FakeCluster(2, rate_mbit=rate_mbit) as cluster:
        launcher = [mpiexec_path(), *cluster.mpiexec_args((2, 2)), "-n", "4"]

        def run(argv, env):
            before = [cluster.tx_bytes(i) for i in range(2)]
            try:
                done = cluster.run(0, launcher + argv, env=rank_env({**ENV, **env}), timeout=RUN_TIMEOUT_S, cwd=REPO)
            except AssertionError as exc:  # timed out; the cluster's processes are killed
                print(f"{' '.join(argv[:2])}: {str(exc)[:200]}", file=sys.stderr)
                return None, None
            return check(done, " ".join(argv)), [cluster.tx_bytes(i) - b for i, b in enumerate(before)]

        result = {"rate_mbit": rate_mbit,
                  "link_bound_s": RESNET50_GRADIENT_BYTES * 8 / (rate_mbit * 1e6),
                  "note": "each host's link must carry the whole buffer once (reduce-scatter + allgather "
                          "between 2 hosts), so S / rate bounds any allreduce"}
        # None where a run did not finish within RUN_TIMEOUT_S (seen once for the plain program at
        # 2 Gbit/s: 126 s per call, TCP stalling against the rate limit).
        text, sent = run([exe, str(iters), "2", str(RESNET50_GRADIENT_BYTES)], {})
        result["plain_s"], result["plain_tx_bytes"] = (plain_median(text) if text else None), sent
        for mode, flag in (("hierarchical", "1"), ("flat", "0")):
            text, sent = run([sys.executable, ALLREDUCE, "--no-curve", "--iters", str(iters), "--warmup", "2",
                              "--output", os.devnull], {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": flag})
            result[f"{mode}_s"], result[f"{mode}_tx_bytes"] = (grouped_median(text) if text else None), sent
        return result


def main():
    p = arguments(__doc__, iters=(8, "measured iterations per figure"), rounds=(7, "interleaved rounds on one host"),
                  output="multi_host.json")
    p.add_argument("--rates", default="2000,10000", help="link rates in Mbit/s (default 2000,10000)")
    args = p.parse_args()
    why_not = FakeCluster.unavailable()
    if why_not:
        raise SystemExit(f"bench/multi_host.py: fake-host cluster: {why_not}")
    with tempfile.TemporaryDirectory() as workdir:
        exe = build(workdir)
        result = {"bytes": RESNET50_GRADIENT_BYTES, "one_host_2_ranks": one_host(exe, args.iters, args.rounds),
                  "two_hosts_2_ranks": [two_hosts(exe, int(r), args.iters) for r in args.rates.split(",")]}
    one = result["one_host_2_ranks"]
    print(f"1 host x 2 ranks: plain MPI {one['plain_s'] * 1e3:.1f} ms, hierarchical {one['hierarchical_s'] * 1e3:.1f} "
          f"ms ({one['hierarchical_s'] / one['plain_s']:.2f}x), flat {one['flat_s'] * 1e3:.1f} ms "
          f"({one['flat_s'] / one['plain_s']:.2f}x), memory pass {one['memory_pass_s'] * 1e3:.1f} ms "
          f"({one['memory_pass_s'] / one['plain_s']:.2f}x)")
    ms = lambda v: "n/a" if v is None else f"{v * 1e3:.0f} ms"  # noqa: E731
    for row in result["two_hosts_2_ranks"]:
        print(f"2 hosts x 2 ranks at {row['rate_mbit'] / 1000:g} Gbit/s: bound {ms(row['link_bound_s'])}, "
              f"plain MPI {ms(row['plain_s'])}, hierarchical {ms(row['hierarchical_s'])}, flat {ms(row['flat_s'])}")
    write_result(args.output, result)


if __name__ == "__main__":
    main()
