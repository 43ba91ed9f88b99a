"""The standalone MPI reference: builds bench/mpi_plain.c with the mpicc of
the MPI mxplugin was built with and runs it under that MPI's mpiexec, in a
process of its own (no mxplugin, no MXNet, single-threaded MPI).

    python bench/mpi_plain.py --ranks 2 --tag before    # writes bench/results/mpi_plain_before.json

Sizes: resnet50_v1's gradient set (102,303,648 bytes) and the message-size
curve of bench/allreduce.py (4 KB .. 256 MB, x4).
"""
import os
import statistics
import subprocess
import tempfile

from harness import HERE, arguments, write_result
from mpi_harness import mpiexec_path, rank_env

RESNET50_GRADIENT_BYTES = 25575912 * 4


def curve_sizes(max_bytes=256 << 20):
    size, out = 4 << 10, []
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out


def build(workdir):
    mpicc = os.path.join(os.path.dirname(mpiexec_path()), "mpicc")
    if not os.path.exists(mpicc):
        mpicc = "mpicc"
    exe = os.path.join(workdir, "mpi_plain")
    subprocess.run([mpicc, "-O2", "-o", exe, os.path.join(HERE, "mpi_plain.c")], check=True)
    return exe


def measure(ranks, iters, warmup, sizes):
    """{bytes: [seconds per call, ...]} from one run of the plain program."""
    with tempfile.TemporaryDirectory() as workdir:
        exe = build(workdir)
        cmd = [mpiexec_path(), "-n", str(ranks), exe, str(iters), str(warmup)] + [str(s) for s in sizes]
        out = subprocess.run(cmd, capture_output=True, text=True, env=rank_env(), timeout=1200, check=True).stdout
    return parse(out)


def parse(out, tag="bytes"):
    """{bytes: [seconds, ...]} from the program's output: per call from its
    "bytes <n> reps <r> seconds ..." lines, or per pass from the "pass <n>
    seconds ..." lines of a --pass run (tag "pass")."""
    first = {"bytes": 5, "pass": 3}[tag]
    rows = {}
    for line in out.splitlines():
        fields = line.split()
        if fields[:1] == [tag]:
            rows[int(fields[1])] = [float(v) for v in fields[first:]]
    return rows


def main():
    p = arguments(__doc__, iters=(10, "measured calls per size"), warmup=(3, "warm-up calls per size"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--tag", default="before", help="result file suffix (default 'before')")
    p.add_argument("--no-curve", action="store_true", help="only the resnet50 gradient-set size")
    p.add_argument("--runs", type=int, default=3, help="runs of the program; the best median per size counts "
                                                      "(default 3)")
    args = p.parse_args()
    sizes = [RESNET50_GRADIENT_BYTES] + ([] if args.no_curve else curve_sizes())
    # Several runs, the best median per size counting: on this machine one
    # run of the program sometimes takes twice as long throughout (36 against
    # 72 ms for the resnet50 set), which must not count for mxplugin.
    runs = [measure(args.ranks, args.iters, args.warmup, sizes) for _ in range(args.runs)]
    best = {b: min((r[b] for r in runs), key=statistics.median) for b in runs[0]}
    result = {"ranks": args.ranks, "program": "bench/mpi_plain.c (MPI_Init, single-threaded, in-place float32 sum)",
              "runs": args.runs, "run_medians_s": {str(b): [statistics.median(r[b]) for r in runs] for b in runs[0]},
              "sizes": [{"bytes": b, "times_s": t, "median_s": statistics.median(t)} for b, t in best.items()]}
    for row in result["sizes"]:
        print(f"  plain MPI_Allreduce {row['bytes']:>11d} B  median {row['median_s'] * 1e3:9.3f} ms")
    write_result(f"mpi_plain_{args.tag}.json", result)


if __name__ == "__main__":
    main()
