"""How long fault handling takes, where the time is the feature (the tests
check the behaviour and fail only at a hang: Note [Hang limits] in
tests/mpi_harness.py). Runs the fake-host scenarios of
tests/test_elastic_partition.py (needs root) several times and collects the
times they print:

- a host cut off, discovery dropping it: cut to the first step of the
  2-rank world (the issue's bound was 15 s);
- a host cut off, nobody telling the launcher: cut to the first step at 2
  ranks (bound: the elastic peer timeout, 30 s, plus 15 s);
- SIGTERM to the launcher while a host is cut: to the launcher's exit
  (README: within 10 s);
- a plain job's host cut mid-allreduce: to each reachable rank's error
  naming the host (bound: the peer timeout, 10 s there, plus 2 s for the
  line's way through mpiexec).

    python bench/fault_timings.py [--rounds 3]   # writes bench/results/fault_timings.json

Each figure is given with its bound (the reference: the timeout or promise
it answers to) and the ratio to it; medians over the rounds.
"""
import os
import re
import statistics
import subprocess
import sys

from harness import REPO, arguments, interleave, write_result

SCENARIOS = {
    "discovery_drops_host_s": ("test_a_host_cut_off_that_discovery_drops",
                               r"cut to first step at 2 ranks \(discovery drops the host\): ([0-9.]+) s", 15.0),
    "launcher_not_told_s": ("test_a_host_cut_off_that_the_launcher_is_not_told_of",
                            r"cut to first step at 2 ranks \(nobody tells the launcher\): ([0-9.]+) s", 45.0),
    "sigterm_to_exit_s": ("test_sigterm_ends_the_launcher",
                          r"SIGTERM to the launcher's exit with a host cut: ([0-9.]+) s", 10.0),
    "plain_job_rank_error_s": ("test_a_plain_job_ends_every_reachable_rank",
                               r"cut to each reachable rank's error naming the host: ([0-9.]+) s, ([0-9.]+) s", 12.0),
}


def one_round():
    """{scenario: [seconds]} from one run of every scenario."""
    selection = " or ".join(test for test, _, _ in SCENARIOS.values())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           os.path.join(REPO, "tests", "test_elastic_partition.py"), "-k", selection],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0 or " skipped" in done.stdout.splitlines()[-1]:
        raise SystemExit(f"the scenarios did not all pass:\n{done.stdout[-4000:]}")
    times = {}
    for name, (_, pattern, _) in SCENARIOS.items():
        found = re.findall(pattern, done.stdout)
        if not found:
            raise SystemExit(f"no figure for {name} in:\n{done.stdout[-3000:]}")
        times[name] = [float(v) for group in found for v in (group if isinstance(group, tuple) else (group,))]
    return times


def main():
    p = arguments(__doc__, rounds=(3, "runs of every scenario"), output="fault_timings.json")
    args = p.parse_args()
    times = {name: [] for name in SCENARIOS}

    def gather(r, got):
        for name, seconds in got["scenarios"].items():
            times[name] += seconds
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in times.items()), flush=True)

    interleave({"scenarios": one_round}, args.rounds, after_round=gather)
    result = {"rounds": args.rounds, "times_s": times,
              "summary": {name: {"median_s": statistics.median(v), "bound_s": SCENARIOS[name][2],
                                 "median_vs_bound": statistics.median(v) / SCENARIOS[name][2], "max_s": max(v)}
                          for name, v in times.items()}}
    for name, s in result["summary"].items():
        print(f"{name:26s} median {s['median_s']:5.1f} s, max {s['max_s']:5.1f} s, bound {s['bound_s']:4.0f} s "
              f"({s['median_vs_bound']:.2f} of it)")
    write_result(args.output, result)


if __name__ == "__main__":
    main()
