"""Row-sparse gradients across ranks: a 1M-row x 64 float32 embedding whose
gradient holds 1 % of the rows on every rank (distinct random rows per
rank), reduced as rows (Note [Sparse gradients travel as rows]: what
DistributedTrainer does) against the densified allreduce (what
sparse_as_dense=True, and every tool without a sparse path, does: tostype
and a 256 MB allreduce), in one job, interleaved.

    python bench/sparse_rows.py              # 2 and 3 ranks; writes bench/results/sparse_rows.json

A sample is the slower rank's time from a barrier to the reduced gradient
being readable; medians over rounds x iterations. Bytes are what each rank
puts on the wire for the call: its rows (int64 index + 64 float32 values
each) against the whole dense gradient.
"""
import argparse

from harness import arguments, interleave, medians, spread, timed, write_result
from jobs import mpi_command, print_result, run_job, this_script
from machine import load_span

ROWS, WIDTH, TOUCHED = 1_000_000, 64, 0.01


def worker(args):
    import mxnet as mx
    import numpy as np

    import mxplugin as hvd
    from mxplugin.training import sparse_rows

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    rng = np.random.RandomState(rank)
    touched = int(ROWS * TOUCHED)
    rows = np.sort(rng.choice(ROWS, touched, replace=False))
    grad = mx.nd.sparse.row_sparse_array((rng.standard_normal((touched, WIDTH)).astype("float32"), rows),
                                         shape=(ROWS, WIDTH))
    results = {}

    def as_rows():
        results["rows"] = sparse_rows.summed_rows(grad, "bench.rows", hvd.global_process_set)
        results["rows"].data.wait_to_read()

    def densified():
        dense = grad.tostype("default")
        hvd.allreduce_(dense, op=hvd.Sum, name="bench.dense")
        dense.wait_to_read()
        results["dense"] = dense

    ways = {"rows": timed(as_rows, before=hvd.barrier), "dense": timed(densified, before=hvd.barrier)}
    samples = interleave(ways, args.iters, args.warmup, rotate=True)
    # Both ways give the same sums (the check is the benchmark's, not the test suite's)
    difference = float(mx.nd.max(mx.nd.abs(results["rows"].tostype("default") - results["dense"])).asscalar())
    slowest = {name: hvd.allreduce(mx.nd.array(values, dtype="float64"), op=hvd.Max, name=f"bench.{name}.times")
               .asnumpy().tolist() for name, values in samples.items()}
    union = int(results["rows"].indices.shape[0])
    if rank == 0:
        print_result({"times_s": slowest, "union_rows": union, "max_difference": difference,
                      "bytes_rows": touched * (8 + 4 * WIDTH), "bytes_dense": ROWS * WIDTH * 4})


def driver(args):
    from mpi_harness import rank_env

    by_ranks = {}
    with load_span() as load:
        for ranks in args.ranks:
            cmd = mpi_command(ranks, this_script(__file__, "--worker", "--iters", args.iters, "--warmup",
                                                 args.warmup))
            got = {"times_s": {"rows": [], "dense": []}}
            for _ in range(args.rounds):
                record = run_job(cmd, env=rank_env(), timeout=1200)
                for name in got["times_s"]:
                    got["times_s"][name] += record["times_s"][name]
                got.update({k: v for k, v in record.items() if k != "times_s"})
            med = medians(got["times_s"])
            got.update({"median_s": med, "spread_s": spread(got["times_s"]), "ratio_time": med["rows"] / med["dense"],
                        "ratio_bytes": got["bytes_rows"] / got["bytes_dense"]})
            by_ranks[str(ranks)] = got
            print(f"{ranks} ranks: rows {med['rows'] * 1e3:.1f} ms, dense {med['dense'] * 1e3:.1f} ms "
                  f"(ratio {got['ratio_time']:.3f}); bytes ratio {got['ratio_bytes']:.4f}; "
                  f"max difference {got['max_difference']:.2e}", flush=True)
    result = {"rows": ROWS, "width": WIDTH, "touched": TOUCHED, "rounds": args.rounds, "iters": args.iters,
              "by_ranks": by_ranks, "load_average_1min": load}
    write_result("sparse_rows.json", result)
    print("\n".join(report_section(result)))


def report_section(r):
    if not r:
        return []
    lines = ["## Row-sparse gradients (`bench/sparse_rows.py`)", "",
             f"A {r['rows']:,}-row x {r['width']} float32 embedding gradient holding {r['touched']:.0%} of the "
             "rows on every rank (distinct random rows), reduced as rows (gathered, duplicates summed: "
             "`DistributedTrainer`'s way) against densifying it and allreducing the dense array "
             f"(`sparse_as_dense=True`), interleaved in one job; medians of {r['rounds']} jobs x {r['iters']} calls, "
             "the slower rank's time from a barrier to the result being readable.", "",
             "| ranks | as rows | densified allreduce | time ratio | bytes a rank sends (ratio) | rows after the sum |",
             "|---|---|---|---|---|---|"]
    for ranks, g in sorted(r["by_ranks"].items()):
        ms = g["median_s"]
        lines.append(f"| {ranks} | {ms['rows'] * 1e3:.1f} ms | {ms['dense'] * 1e3:.1f} ms | {g['ratio_time']:.3f} | "
                     f"{g['bytes_rows'] / 1e6:.2f} MB vs {g['bytes_dense'] / 1e6:.0f} MB ({g['ratio_bytes']:.4f}) | "
                     f"{g['union_rows']:,} |")
    return lines + [""]


def main():
    p = arguments(__doc__, rounds=3, iters=(8, "measured calls per way per job"), warmup=(2, "warm-up calls"))
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 3], help="job sizes (default 2 3)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
