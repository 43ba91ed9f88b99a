"""Small-message latency end to end, against the plain MPI program:

    python bench/latency.py              # 2 and 3 ranks, ~6 minutes; writes bench/results/latency.json
    python bench/latency.py --report     # print the table from the results

mxplugin, in a job of its own (this file's `worker` mode under mpiexec), each
call blocking from the Python call to the data being readable on the host:
  allreduce_        one 4 KB float32 NDArray, then wait_to_read
  grouped 50        grouped_allreduce_ of 50 such arrays, then waitall
  broadcast_        4 KB from rank 0, then wait_to_read
  allgather         4 KB from every rank, then wait_to_read of the result
The reference: bench/mpi_plain.c (a plain single-threaded MPI program, no
MXNet, no Python, no background thread) timing MPI_Allreduce, MPI_Bcast and
MPI_Allgather of the same 4 KB, in a separate process.
Each figure is rank 0's median over CALLS back-to-back calls after warm-up;
the two kinds of job alternate for ROUNDS rounds, and the report gives the
median over rounds. OMP_NUM_THREADS=1 and MXNET_CPU_WORKER_NTHREADS=1 per rank.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, HERE)

BYTES = 4096
CALLS = 2000
GROUP = 50
ROUNDS = 3
RANKS = (2, 3)
TARGETS_US = {("allreduce_", 2): 15.0, ("allreduce_", 3): 25.0, ("grouped 50", 2): 100.0}
PLAIN_OPS = {"allreduce_": "allreduce", "grouped 50": None, "broadcast_": "bcast", "allgather": "allgather"}


def worker():
    """One job's medians, printed by rank 0 as one JSON line."""
    sys.path.insert(0, REPO)
    import mxnet as mx

    import mxplugin as hvd

    hvd.init()
    count = BYTES // 4
    x = mx.nd.ones((count,))
    xs = [mx.nd.ones((count,)) for _ in range(GROUP)]

    def allreduce():
        hvd.allreduce_(x, name="lat.allreduce", op=hvd.Sum)
        x.wait_to_read()

    def grouped():
        hvd.grouped_allreduce_(xs, name="lat.grouped", op=hvd.Sum)
        mx.nd.waitall()

    def broadcast():
        hvd.broadcast_(x, root_rank=0, name="lat.broadcast")
        x.wait_to_read()

    def allgather():
        hvd.allgather(x, name="lat.allgather").wait_to_read()

    medians = {}
    for label, call, calls in (("allreduce_", allreduce, CALLS), ("grouped 50", grouped, CALLS // 10),
                               ("broadcast_", broadcast, CALLS), ("allgather", allgather, CALLS)):
        for _ in range(calls // 10):  # warm-up: names cached, buffers made
            call()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        medians[label] = statistics.median(times)
        # Sums of ones grow: keep them small and finite.
        x[:] = 1
        for a in xs:
            a[:] = 1
    if hvd.rank() == 0:
        print("RESULT " + json.dumps(medians), flush=True)
    hvd.shutdown()


def env():
    from mpi_harness import rank_env

    e = rank_env()
    e.update(OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1",
             PYTHONPATH=REPO + os.pathsep + e.get("PYTHONPATH", ""))
    return e


def run_ours(ranks):
    from mpi_harness import mpiexec_path

    out = subprocess.run([mpiexec_path(), "-n", str(ranks), sys.executable, os.path.abspath(__file__), "worker"],
                         capture_output=True, text=True, env=env(), timeout=600, cwd=REPO)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"the mxplugin job at {ranks} ranks failed")
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def run_plain(exe, ranks):
    """{label: median seconds per call} of the plain program."""
    from mpi_harness import mpiexec_path
    from mpi_plain import parse

    out = {}
    for label, op in PLAIN_OPS.items():
        if op is None:
            continue
        text = subprocess.run([mpiexec_path(), "-n", str(ranks), exe, "--op", op, "20", "5", str(BYTES)],
                              capture_output=True, text=True, env=env(), timeout=600, check=True).stdout
        out[label] = statistics.median(parse(text)[BYTES])
    return out


def measure(num_rounds=ROUNDS):
    from mpi_plain import build

    result = {"bytes": BYTES, "calls": CALLS, "group": GROUP, "rounds": num_rounds, "ranks": {}}
    with tempfile.TemporaryDirectory() as workdir:
        exe = build(workdir)
        for ranks in RANKS:
            rounds = []
            for r in range(num_rounds):
                plain = run_plain(exe, ranks)
                ours = run_ours(ranks)
                rounds.append({"plain_s": plain, "mxplugin_s": ours, "load_average_1min": os.getloadavg()[0]})
                print(f"{ranks} ranks, round {r + 1}: " + ", ".join(
                    f"{k} {v * 1e6:.1f} us" + (f" (MPI {plain[k] * 1e6:.1f})" if k in plain else "")
                    for k, v in ours.items()), flush=True)
            result["ranks"][str(ranks)] = rounds
    return result


def summary(result):
    """{ranks: {label: (median us, plain median us or None)}} over rounds."""
    out = {}
    for ranks, rounds in result["ranks"].items():
        out[int(ranks)] = {}
        for label in PLAIN_OPS:
            ours = statistics.median(r["mxplugin_s"][label] for r in rounds) * 1e6
            plain = (statistics.median(r["plain_s"][label] for r in rounds) * 1e6
                     if label in rounds[0]["plain_s"] else None)
            out[int(ranks)][label] = (ours, plain)
    return out


def report_section(result):
    if not result:
        return []
    s = summary(result)
    lines = ["## Small-message latency (`bench/latency.py`)", "",
             f"One {result['bytes']} B float32 message per call, end to end (the Python call until the data is "
             "readable), median over "
             f"{result['calls']} back-to-back calls ({result['calls'] // 10} for the group of {result['group']}), "
             f"median over {result['rounds']} rounds alternating with the plain MPI program (bench/mpi_plain.c, "
             "single-threaded, its own process) timing the same MPI collective.", "",
             "| ranks | call | mxplugin | plain MPI | target |", "|---|---|---|---|---|"]
    for ranks, rows in s.items():
        for label, (ours, plain) in rows.items():
            target = TARGETS_US.get((label, ranks))
            lines.append(f"| {ranks} | {label} | {ours:.1f} us | "
                         f"{f'{plain:.1f} us' if plain is not None else '-'} | "
                         f"{f'<= {target:.0f} us' if target else ''} |")
    lines += ["", f"This machine has {os.cpu_count()} cores: at 3 ranks they are oversubscribed (each rank has its "
              "Python thread and mxplugin's thread; the plain program's ranks busy-poll), and every figure, the "
              "plain program's included, is set by the scheduler's time slices rather than by the path.", ""]
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", nargs="?", default="all", choices=["all", "worker"])
    p.add_argument("--report", action="store_true", help="print the section from the committed results")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per world size (default {ROUNDS})")
    args = p.parse_args()
    if args.mode == "worker":
        return worker()
    path = os.path.join(RESULTS, "latency.json")
    if not args.report:
        result = measure(args.rounds)
        os.makedirs(RESULTS, exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    with open(path) as f:
        print("\n".join(report_section(json.load(f))))


if __name__ == "__main__":
    main()
