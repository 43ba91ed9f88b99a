"""Small-message latency end to end, against the plain MPI program:

    python bench/latency.py              # 2 and 3 ranks, ~10 minutes; writes bench/results/latency.json
    python bench/latency.py --report     # print the table from the results

mxplugin, in a job of its own (this file's `worker` mode under mpiexec), each
call blocking from the Python call to the data being readable on the host:
  allreduce_        one 4 KB float32 NDArray, then wait_to_read
  grouped 50        grouped_allreduce_ of 50 such arrays, then waitall
  broadcast_        4 KB from rank 0, then wait_to_read
  allgather         4 KB from every rank, then wait_to_read of the result
  alltoall          4 KB from every rank (an equal block to each), then wait_to_read
  reducescatter     a sum of 4 KB (an equal block to each rank), then wait_to_read
and the last four again at 64 KB ("broadcast_ 64 KB", ...); alltoall,
reducescatter and the 64 KB figures at 2 ranks only (4 KB does not split
evenly in 3).
The reference: bench/mpi_plain.c (a plain single-threaded MPI program, no
MXNet, no Python, no background thread) timing MPI_Allreduce, MPI_Bcast,
MPI_Allgather, MPI_Alltoall and MPI_Reduce_scatter_block of the same bytes,
in a separate process; for the group, one
MPI_Allreduce of the group's 50 x 4 KB together (the data's own floor). A
second reference, in the mxplugin job itself: one trivial MXNet op
(`y += 1` on a 4 KB NDArray, then wait_to_read), what any call pushed
through MXNet's engine from Python costs before it moves a byte.
Each figure is rank 0's median over CALLS back-to-back calls after warm-up;
the two kinds of job alternate for ROUNDS rounds, and the report gives the
median over rounds. OMP_NUM_THREADS=1 and MXNET_CPU_WORKER_NTHREADS=1 per rank.
Where there are no more ranks than cores, each round runs both programs
with every rank bound to a core, the figures the targets read, and then
both unbound, shown beside them (Note [Ranks bound to cores]).

    python bench/latency.py --calls 200 --rounds 1 --output /tmp/latency.json   # a quick look
"""
import os
import statistics
import tempfile

from harness import arguments, interleave, medians, read_result, timed, write_result
from jobs import mpi_command, print_result, run, run_job, this_script

BYTES = 4096
LARGE = 64 << 10  # the second size of broadcast_, allgather, alltoall and reducescatter
CALLS = 2000
GROUP = 50
ROUNDS = 3
RANKS = (2, 3)
# Issue 37's targets (2 ranks: against the plain program; 3 ranks, oversubscribed: no slower than it)
TARGETS = {("allreduce_", 2): "<= 2x", ("grouped 50", 2): "<= 50 us", ("broadcast_", 2): "<= 4x or <= 3 us",
           ("allgather", 2): "<= 4x or <= 8 us", ("allreduce_", 3): "<= 1x", ("grouped 50", 3): "",
           ("broadcast_", 3): "<= 1x", ("allgather", 3): "<= 1x"}
# Issue 52's (2 ranks): the engine op's time (ENGINE_OP) plus at most twice the plain program's
TARGETS.update({(label + size, 2): "<= op + 2x" for label in ("broadcast_", "allgather", "alltoall", "reducescatter")
                for size in ("", " 64 KB")})
# label -> (the plain program's op, bytes per call)
PLAIN_OPS = {"allreduce_": ("allreduce", BYTES), "grouped 50": ("allreduce", BYTES * GROUP),
             "broadcast_": ("bcast", BYTES), "allgather": ("allgather", BYTES)}
# At CURVE_RANKS only: alltoall, reducescatter, and the 64 KB calls.
SIZED_OPS = {"alltoall": ("alltoall", BYTES), "reducescatter": ("reducescatter", BYTES),
             **{f"{label} 64 KB": (op, LARGE) for label, op in (("broadcast_", "bcast"), ("allgather", "allgather"),
                                                                  ("alltoall", "alltoall"),
                                                                  ("reducescatter", "reducescatter"))}}
ENGINE_OP = "MXNet op y += 1"
# The curves (2 ranks): grouped_allreduce_ of N tensors of BYTES, and one allreduce_ of each size.
GROUP_SIZES = (1, 10, 50, 200)
SINGLE_BYTES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
CURVE_RANKS = 2


def worker(num_calls=CALLS):
    """One job's medians, printed by rank 0 as its RESULT."""
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

    y = mx.nd.zeros((count,))
    ways = [("allreduce_", allreduce, num_calls), ("grouped 50", grouped, num_calls // 10)]
    ways += sized_ways(hvd, mx, "", x, num_calls)
    if hvd.size() == CURVE_RANKS:
        ways += sized_ways(hvd, mx, " 64 KB", mx.nd.ones((LARGE // 4,)), num_calls)
    else:
        ways = [w for w in ways if w[0] in PLAIN_OPS]

    def engine_op():
        y.__iadd__(1)
        y.wait_to_read()

    per_call = {}
    if hvd.size() == CURVE_RANKS:
        per_call.update(curves(hvd, mx, num_calls))
    for label, call, calls in ways:
        # back to back in blocks, beside the engine op; the warm-up caches names and makes buffers
        per_call.update(beside_op(label, call, engine_op, calls))
        # Sums of ones grow: keep them small and finite.
        x[:] = 1
        for a in xs:
            a[:] = 1
    per_call.update(medians(interleave({ENGINE_OP: timed(engine_op)}, num_calls, warmup=num_calls // 10)))
    if hvd.rank() == 0:
        print_result(per_call)
    hvd.shutdown()


# Note [The op beside each call]: the budget of a call is the engine op's
# time plus twice the plain program's. Measured once per job, after every
# call, the op met whatever the machine was doing then, not what it did
# during the call: on this machine both change by 2x from one stretch of
# seconds to the next. So each call runs in BLOCKS blocks of back-to-back
# calls that alternate with as many blocks of the op, and its budget reads
# the op's median from those blocks.
BLOCKS = 10


def beside(label):
    """The key of the engine op measured beside `label`'s call."""
    return f"{ENGINE_OP} beside {label}"


def beside_op(label, call, engine_op, calls):
    """{label: median seconds, beside(label): median seconds}: `calls` calls
    and as many engine ops in BLOCKS alternating blocks of back-to-back
    calls, after a warm-up block of each (Note [The op beside each call])."""
    per_block = max(1, calls // BLOCKS)

    def block(fn):
        one = timed(fn)
        return lambda: [one() for _ in range(per_block)]
    got = interleave({label: block(call), beside(label): block(engine_op)}, BLOCKS, warmup=1)
    return {name: statistics.median(t for each in blocks for t in each) for name, blocks in got.items()}


def sized_ways(hvd, mx, suffix, x, calls):
    """(label, call, calls) of broadcast_, allgather, alltoall and reducescatter of `x`."""
    def broadcast():
        hvd.broadcast_(x, root_rank=0, name=f"lat.broadcast{suffix}")
        x.wait_to_read()

    def allgather():
        hvd.allgather(x, name=f"lat.allgather{suffix}").wait_to_read()

    def alltoall():
        hvd.alltoall(x, name=f"lat.alltoall{suffix}").wait_to_read()

    def reducescatter():
        hvd.reducescatter(x, op=hvd.Sum, name=f"lat.reducescatter{suffix}").wait_to_read()
    return [(label + suffix, call, calls) for label, call in (("broadcast_", broadcast), ("allgather", allgather),
                                                              ("alltoall", alltoall),
                                                              ("reducescatter", reducescatter))]


def curves(hvd, mx, num_calls=CALLS):
    """{"group N": s, "single B": s}: medians of back-to-back calls, fewer for the bigger ones."""
    out = {}
    for n in GROUP_SIZES:
        xs = [mx.nd.ones((BYTES // 4,)) for _ in range(n)]

        def grouped():
            hvd.grouped_allreduce_(xs, name=f"lat.curve.group{n}", op=hvd.Max)  # Max: ones stay ones
            mx.nd.waitall()
        calls = max(50, num_calls // n)
        out.update(medians(interleave({f"group {n}": timed(grouped)}, calls, warmup=calls // 10)))
    for size in SINGLE_BYTES:
        x = mx.nd.ones((size // 4,))

        def single():
            hvd.allreduce_(x, name=f"lat.curve.single{size}", op=hvd.Max)
            x.wait_to_read()
        calls = max(50, num_calls * BYTES // size)
        out.update(medians(interleave({f"single {size}": timed(single)}, calls, warmup=calls // 10)))
    return out


def curve_plain_ops():
    """label -> the plain program's (op, bytes) for the curves: the group's bytes in one MPI_Allreduce."""
    return {**{f"group {n}": ("allreduce", n * BYTES) for n in GROUP_SIZES},
            **{f"single {size}": ("allreduce", size) for size in SINGLE_BYTES}}


def env():
    from mpi_harness import rank_env

    return rank_env({"MXNET_CPU_WORKER_NTHREADS": 1})


def run_ours(ranks, num_calls=CALLS, bind="none"):
    return run_job(mpi_command(ranks, this_script(__file__, "worker", "--calls", num_calls), bind=bind), env=env(),
                   what=f"the mxplugin job at {ranks} ranks")


def run_plain(exe, ranks, bind="none"):
    """{label: median seconds per call} of the plain program."""
    from mpi_plain import parse

    out = {}
    plain_ops = {**PLAIN_OPS, **({**SIZED_OPS, **curve_plain_ops()} if ranks == CURVE_RANKS else {})}
    for label, (op, size) in plain_ops.items():
        text = run(mpi_command(ranks, [exe, "--op", op, "20", "5", str(size)], bind=bind), env=env())
        out[label] = statistics.median(parse(text)[size])
    return out


# Note [Ranks bound to cores]: a rank's call hands work between three
# threads (Python's, the engine worker's, the core's), and 2 ranks run six
# on this machine's 2 cores. Unbound, where the scheduler puts them changes
# from stretch to stretch within one job: a 4 KB broadcast_ took 18-20 us
# in some stretches and 45-55 us in others, while the engine op, one hand-off
# that overlaps Python's return, stayed at 19 us. Bound one core per rank
# (mpiexec -bind-to core; with mxplugin-run, --binding-args "-bind-to core")
# the same calls read 17.4-18.1 us in three runs of 3 rounds, each within 1 %.
# So where the cores allow it, each round runs both programs bound, whose
# figures the targets read, and then both unbound (told so: Open MPI binds
# 2 ranks by default), which the report shows beside them.
def binds(ranks):
    """Whether the jobs of `ranks` ranks bind each to a core of its own (Note [Ranks bound to cores])."""
    return ranks <= (os.cpu_count() or 1)


def measure(num_rounds=ROUNDS, num_calls=CALLS, ranks_list=RANKS):
    from mpi_plain import build

    result = {"bytes": BYTES, "calls": num_calls, "group": GROUP, "rounds": num_rounds, "ranks": {},
              "bound": [ranks for ranks in ranks_list if binds(ranks)]}
    with tempfile.TemporaryDirectory() as workdir:
        exe = build(workdir)
        for ranks in ranks_list:
            rounds = []

            def record(r, got):
                rounds.append({**got, "load_average_1min": os.getloadavg()[0]})
                plain = got["plain_s"]
                print(f"{ranks} ranks, round {r + 1}: " + ", ".join(
                    f"{k} {v * 1e6:.1f} us" + (f" (MPI {plain[k] * 1e6:.1f})" if k in plain else "")
                    for k, v in got["mxplugin_s"].items()), flush=True)

            bind = "core" if binds(ranks) else "none"
            jobs = {"plain_s": lambda: run_plain(exe, ranks, bind),
                    "mxplugin_s": lambda: run_ours(ranks, num_calls, bind)}
            if bind == "core":  # the same jobs unbound, in the same rounds (Note [Ranks bound to cores])
                jobs.update({"plain_unbound_s": lambda: run_plain(exe, ranks),
                             "mxplugin_unbound_s": lambda: run_ours(ranks, num_calls)})
            interleave(jobs, num_rounds, after_round=record)
            result["ranks"][str(ranks)] = rounds
    return result


def summary(result):
    """{ranks: {label: (median us, plain median us or None)}} over rounds."""
    out = {}
    for ranks, rounds in result["ranks"].items():
        out[int(ranks)] = {}
        for label in list(PLAIN_OPS) + list(SIZED_OPS) + [ENGINE_OP]:
            if label not in rounds[0]["mxplugin_s"]:  # results from before the engine-op reference
                continue
            each = [r["mxplugin_s"][label] * 1e6 for r in rounds]
            plain = (statistics.median(r["plain_s"][label] for r in rounds) * 1e6
                     if label in rounds[0]["plain_s"] else None)
            out[int(ranks)][label] = (statistics.median(each), plain, min(each), max(each))
    return out


def budget_ratios(result, ranks=CURVE_RANKS, placement=""):
    """{label: median over rounds of call / (engine op + 2 x plain MPI)}, in
    each round its own figures, for the calls whose target is that budget;
    placement "_unbound": of the unbound jobs (Note [Ranks bound to cores])."""
    rounds = result["ranks"].get(str(ranks), [])
    ours, plain = f"mxplugin{placement}_s", f"plain{placement}_s"
    out = {}
    for (label, at), target in TARGETS.items():
        if at != ranks or target != "<= op + 2x" or not rounds or label not in rounds[0].get(ours, {}):
            continue
        out[label] = statistics.median(r[ours][label] / (r[ours].get(beside(label), r[ours][ENGINE_OP]) +
                                                         2 * r[plain][label]) for r in rounds)
    return out


def budget_target(result):
    """The Targets table's row (measure, target, measured): the worst call against its budget."""
    ratios = budget_ratios(result) if result else {}
    if not ratios:
        return []
    worst = max(ratios, key=ratios.get)
    return [(f"small collectives ({', '.join(ratios)}; 2 ranks): call / (one MXNet engine op + 2x plain MPI), "
             f"worst ({worst})", "<= 1", f"{ratios[worst]:.2f}")]


def report_section(result):
    if not result:
        return []
    s = summary(result)
    lines = ["## Small-message latency (`bench/latency.py`)", "",
             f"One {result['bytes']} B float32 message per call, end to end (the Python call until the data is "
             "readable), median over "
             f"{result['calls']} back-to-back calls ({result['calls'] // 10} for the group of {result['group']}), "
             f"median over {result['rounds']} rounds alternating with the plain MPI program (bench/mpi_plain.c, "
             "single-threaded, its own process) timing the same MPI collective (for the group: one "
             f"MPI_Allreduce of all its {result['group']} x {result['bytes']} B at once). The last row of each world "
             f"size is a reference measured in the mxplugin job: one trivial MXNet op (`y += 1` on a "
             f"{result['bytes']} B NDArray, then wait_to_read), what any call MXNet's engine runs costs from Python."
             " \"vs op + 2x\": a call against that op's time plus twice the plain program's, each round its own "
             "figures (median over rounds; at most 1 meets the target)" + beside_text(result) + "." +
             bound_text(result),
             "", "| ranks | call | mxplugin | rounds' range | plain MPI | ratio | target | op beside | vs op + 2x |",
             "|---|---|---|---|---|---|---|---|---|"]
    budgets = budget_ratios(result)
    for ranks, rows in s.items():
        for label, (ours, plain, low, high) in rows.items():
            target = TARGETS.get((label, ranks), "")
            budget = budgets.get(label) if ranks == CURVE_RANKS else None
            op = beside_median(result, ranks, label)
            lines.append(f"| {ranks} | {label} | {ours:.1f} us | {low:.1f}-{high:.1f} us | "
                         f"{f'{plain:.1f} us' if plain is not None else '-'} | "
                         f"{f'{ours / plain:.1f}x' if plain else ''} | "
                         f"{target} | {f'{op:.1f} us' if op is not None else ''} | "
                         f"{f'{budget:.2f}' if budget is not None else ''} |")
    lines += unbound_section(result)
    lines += curve_section(result)
    lines += ["", f"This machine has {os.cpu_count()} cores: at 3 ranks they are oversubscribed (each rank has its "
              "Python thread and mxplugin's thread; the plain program's ranks busy-poll), and every figure, the "
              "plain program's included, is set by the scheduler's time slices rather than by the path.", ""]
    return lines


def beside_median(result, ranks, label, placement=""):
    """The median over rounds of the engine op measured beside `label` (us), or None."""
    rounds = result["ranks"].get(str(ranks), [])
    key = f"mxplugin{placement}_s"
    if not rounds or beside(label) not in rounds[0].get(key, {}):
        return None
    return statistics.median(r[key][beside(label)] for r in rounds) * 1e6


def beside_text(result):
    rounds = result["ranks"].get(str(CURVE_RANKS), [])
    if not rounds or beside("broadcast_") not in rounds[0]["mxplugin_s"]:
        return ""
    return (f", the op measured beside each call (its column \"op beside\"): the call's back-to-back calls in "
            f"{BLOCKS} blocks alternating with as many of the op, so that both meet the same stretch of the machine")


def bound_text(result):
    bound = result.get("bound", [])
    if not bound:
        return ""
    return (f" At {', '.join(map(str, bound))} ranks each rank is bound to a core of its own, in both programs "
            "(mpiexec -bind-to core; with mxplugin-run, --binding-args \"-bind-to core\"): unbound, this "
            "machine's scheduler places the ranks' threads differently from stretch to stretch, which calls that "
            "hand work between threads feel and the engine op barely does (the table after this one; Note [Ranks "
            "bound to cores] in bench/latency.py).")


def unbound_section(result):
    """The calls with a budget, from the same rounds' unbound jobs (Note [Ranks bound to cores])."""
    lines = []
    for ranks in result.get("bound", []):
        rounds = result["ranks"].get(str(ranks), [])
        ratios = budget_ratios(result, ranks, "_unbound")
        if not ratios:
            continue
        lines += ["", f"The same rounds at {ranks} ranks, both programs unbound:", "",
                  "| call | mxplugin | rounds' range | plain MPI | op beside | vs op + 2x |",
                  "|---|---|---|---|---|---|"]
        for label in [ENGINE_OP] + [k for k in rounds[0]["mxplugin_unbound_s"] if k in ratios]:
            each = [r["mxplugin_unbound_s"][label] * 1e6 for r in rounds]
            plain = (f"{statistics.median(r['plain_unbound_s'][label] for r in rounds) * 1e6:.1f} us"
                     if label in rounds[0]["plain_unbound_s"] else "-")
            ratio = f"{ratios[label]:.2f}" if label in ratios else ""
            op = beside_median(result, ranks, label, "_unbound")
            lines.append(f"| {label} | {statistics.median(each):.1f} us | {min(each):.1f}-{max(each):.1f} us | "
                         f"{plain} | {f'{op:.1f} us' if op is not None else ''} | {ratio} |")
    return lines


def curve_section(result):
    rounds = result["ranks"].get(str(CURVE_RANKS), [])
    if not rounds or f"group {GROUP_SIZES[0]}" not in rounds[0]["mxplugin_s"]:
        return []
    lines = ["", f"Curves at {CURVE_RANKS} ranks, the same rounds: `grouped_allreduce_` of N tensors of "
             f"{BYTES} B against one plain MPI_Allreduce of all N x {BYTES} B, and one `allreduce_` of each "
             "size against MPI_Allreduce of it.", "",
             "| call | mxplugin | plain MPI | ratio | per tensor |", "|---|---|---|---|---|"]
    for label in list(f"group {n}" for n in GROUP_SIZES) + list(f"single {b}" for b in SINGLE_BYTES):
        ours = statistics.median(r["mxplugin_s"][label] for r in rounds) * 1e6
        plain = statistics.median(r["plain_s"][label] for r in rounds) * 1e6
        kind, amount = label.split()
        shown = (f"grouped {amount} x {BYTES // 1024} KB" if kind == "group" else
                 f"allreduce_ {int(amount) // 1024} KB")
        per = f"{ours / int(amount):.1f} us" if kind == "group" else ""
        lines.append(f"| {shown} | {ours:.1f} us | {plain:.1f} us | {ours / plain:.1f}x | {per} |")
    return lines


def main():
    p = arguments(__doc__, rounds=(ROUNDS, "rounds per world size"))
    p.add_argument("mode", nargs="?", default="all", choices=["all", "worker"])
    p.add_argument("--report", action="store_true", help="print the section from the committed results")
    p.add_argument("--calls", type=int, default=CALLS, help=f"calls per figure (default {CALLS})")
    p.add_argument("--ranks", type=int, nargs="+", default=list(RANKS), help=f"world sizes (default {RANKS})")
    p.add_argument("--output", default="latency.json", help="the results' file (default bench/results/latency.json)")
    args = p.parse_args()
    if args.mode == "worker":
        return worker(args.calls)
    if not args.report:
        write_result(args.output, measure(args.rounds, args.calls, args.ranks))
    print("\n".join(report_section(read_result(args.output))))


if __name__ == "__main__":
    main()
