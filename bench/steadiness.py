"""Is the shared-memory allreduce steady? resnet50_v1's gradient set at 2
ranks, many runs spread over time, quiet and beside a busy process.

    python bench/steadiness.py [--runs 10] [--gap 10]
    mxplugin-run -np 2 python bench/steadiness.py rank --out FILE   # one job (what the above starts)

Each run is a pair of fresh jobs under the same condition:
  1. bench/mpi_plain.c --pass: the memory floor (both ranks making one read
     and write pass over their own buffer of the set's size at once) and the
     plain single-threaded MPI_Allreduce of that buffer, in a program of its
     own;
  2. mxplugin: grouped_allreduce_ of the 193 gradients with Sum, Average and
     Sum with prescale 0.5, each timed from the call to the data being
     ready (waitall), medians of ITERS after WARMUP.
Odd runs have a third process spinning on one core for the whole pair (the
machine has 2 cores: the ranks then share them with it). Runs are GAP
seconds apart. Every figure is against the floor of its own run.
Results: bench/results/steadiness.json.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from harness import arguments, interleave, medians, write_result
from jobs import mpi_command, run, this_script

ITERS = 10
WARMUP = 3
OPS = ("sum", "average", "prescale")


def rank_main(out):
    import mxnet as mx

    import mxplugin as hvd
    from allreduce import after_barrier, resnet50_gradients

    hvd.init()
    grads = resnet50_gradients()
    mx.nd.waitall()
    calls = {"sum": dict(op=hvd.Sum), "average": dict(op=hvd.Average),
             "prescale": dict(op=hvd.Sum, prescale_factor=0.5)}

    def call(op):
        def reduce():
            hvd.grouped_allreduce_(grads, name=f"resnet50.{op}", **calls[op])
            mx.nd.waitall()
        return after_barrier(reduce)

    # interleaved, so that a slow spell falls on all three
    times = interleave({op: call(op) for op in OPS}, ITERS, WARMUP)
    if hvd.rank() == 0:
        with open(out, "w") as f:
            json.dump({"times_s": times, "bytes": int(sum(g.size for g in grads) * 4)}, f)


def spinner():
    """A third process keeping one core busy until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def one_run(exe, busy, workdir):
    from mpi_harness import rank_env
    from mpi_plain import RESNET50_GRADIENT_BYTES, parse

    spin = spinner() if busy else None
    try:
        plain = run(mpi_command(2, [exe, "--pass", ITERS, WARMUP, RESNET50_GRADIENT_BYTES]), env=rank_env())
        out = os.path.join(workdir, "ours.json")
        run(mpi_command(2, this_script(__file__, "rank", "--out", out)), env=rank_env())
    finally:
        if spin is not None:
            spin.kill()
            spin.wait()
    with open(out) as f:
        ours = json.load(f)
    floor = statistics.median(parse(plain, "pass")[RESNET50_GRADIENT_BYTES])
    mpi = statistics.median(parse(plain)[RESNET50_GRADIENT_BYTES])
    record = {"busy": busy, "floor_s": floor, "plain_mpi_s": mpi, "plain_vs_floor": mpi / floor,
              "median_s": medians(ours["times_s"]), "times_s": ours["times_s"]}
    record["vs_floor"] = {op: s / floor for op, s in record["median_s"].items()}
    record["vs_plain_mpi"] = {op: s / mpi for op, s in record["median_s"].items()}
    return record


def report_section(r):
    """The docs/benchmarks.md section, from bench/results/steadiness.json."""
    if not r:
        return []
    lines = ["## Steadiness of the shared-memory allreduce (`bench/steadiness.py`)", "",
             f"resnet50_v1's gradient set, 2 ranks, `grouped_allreduce_`, {len(r['runs'])} runs spread over time, "
             "odd runs beside a third process spinning on one core. Each run: medians of "
             f"{r['iters']} calls after {r['warmup']}, against that run's memory floor (both ranks making one "
             "read-and-write pass over their own buffer at once, `bench/mpi_plain.c --pass`).", "",
             "| run | condition | floor | plain MPI / floor | Sum / floor | Average / floor | prescale / floor |",
             "|---|---|---|---|---|---|---|"]
    for i, one in enumerate(r["runs"]):
        v = one["vs_floor"]
        lines.append(f"| {i} | {'busy' if one['busy'] else 'quiet'} | {one['floor_s'] * 1e3:.1f} ms | "
                     f"{one['plain_vs_floor']:.2f} | {v['sum']:.2f} | {v['average']:.2f} | {v['prescale']:.2f} |")
    for cond, v in r["summary"].items():
        worst = max(v["worst_vs_floor"].values())
        lines += ["", f"{cond.capitalize()} runs: the worst call took **{worst:.2f}x** the floor "
                  f"(target <= 1.5x); the worst against the plain MPI program "
                  f"{max(v['worst_vs_plain_mpi'].values()):.2f}x."]
    return lines + [""]


def main():
    p = arguments(__doc__)
    p.add_argument("mode", nargs="?", default="all", choices=["all", "rank"])
    p.add_argument("--out")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--gap", type=float, default=10.0, help="seconds between runs")
    args = p.parse_args()
    if args.mode == "rank":
        rank_main(args.out)
        return
    from mpi_plain import build

    runs = []
    with tempfile.TemporaryDirectory() as workdir:
        exe = build(workdir)
        for r in range(args.runs):
            if r:
                time.sleep(args.gap)  # spread over time: not a wait for anything
            record = one_run(exe, busy=r % 2 == 1, workdir=workdir)
            record["ended_at_s"] = time.time()
            runs.append(record)
            print(f"run {r} {'busy' if record['busy'] else 'quiet'}: floor {record['floor_s'] * 1e3:.1f} ms, "
                  f"plain MPI {record['plain_vs_floor']:.2f}x, "
                  + ", ".join(f"{op} {x:.2f}x" for op, x in record["vs_floor"].items()), flush=True)
    summary = {}
    for busy in (False, True):
        rs = [r for r in runs if r["busy"] == busy]
        summary["busy" if busy else "quiet"] = {
            "runs": len(rs),
            "worst_vs_floor": {op: max(r["vs_floor"][op] for r in rs) for op in OPS},
            "median_vs_floor": {op: statistics.median(r["vs_floor"][op] for r in rs) for op in OPS},
            "worst_vs_plain_mpi": {op: max(r["vs_plain_mpi"][op] for r in rs) for op in OPS},
            "plain_mpi_vs_floor": [r["plain_vs_floor"] for r in rs]}
    write_result("steadiness.json", {"iters": ITERS, "warmup": WARMUP, "runs": runs, "summary": summary})
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
