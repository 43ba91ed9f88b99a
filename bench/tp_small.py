"""A small tensor-parallel MLP, where the per-layer allreduce's latency is
the cost: Dense(1024) column-parallel -> ReLU -> Dense(256) row-parallel on
64 tokens x 256 (`parallel.parallelize`, plan "auto"), dp1 x mp2, forward +
backward, against the same MLP in one process of one thread.

    python bench/tp_small.py                       # writes bench/results/tp_small.json
    python bench/tp_small.py --before /path/tree   # also the mp = 2 job on another
                                                   # built checkout (e.g. the commit before a change)

Interleaved rounds; a step's time is the slower rank's; medians over all
steps of all rounds. Each mp = 2 step makes two allreduces of 64 x 256
float32 (64 KiB): the row layer's output forward, the column layer's input
gradient backward.
"""
import argparse
import sys

from harness import REPO, arguments, interleave, medians, spread, timed, write_result
from jobs import mpi_command, print_result, run_job, this_script
from machine import load_span

UNITS, HIDDEN, TOKENS = 256, 1024, 64


def worker(args):
    sys.path.insert(0, args.tree)
    import mxnet as mx
    from mxnet import autograd
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Dense(HIDDEN, in_units=UNITS, flatten=False, activation="relu"),
            nn.Dense(UNITS, in_units=HIDDEN, flatten=False))
    mx.random.seed(1)
    net.initialize(mx.init.Xavier())
    x = mx.nd.random.uniform(-1, 1, (TOKENS, UNITS))
    x.attach_grad()
    if args.mode == "mp":
        import mxplugin as hvd
        from mxplugin import parallel

        hvd.init()
        mesh = parallel.ProcessMesh(1, hvd.size())
        parallel.parallelize(net, mesh, parallel.auto_plan(net, mesh))

    def step():
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        x.grad.wait_to_read()

    times = interleave({"step": timed(step, before=mx.nd.waitall, wait=mx.nd.waitall)},
                       args.steps, args.warmup)["step"]
    if args.mode == "mp":
        times = hvd.allreduce(mx.nd.array(times, dtype="float64"), op=hvd.Max, name="bench.steps").asnumpy().tolist()
        if hvd.rank() != 0:
            return
    print_result(times)


def driver(args):
    from mpi_harness import rank_env

    def job(ranks, tree, mode):
        cmd = mpi_command(ranks, this_script(__file__, "--mode", mode, "--tree", tree, "--steps", args.steps,
                                             "--warmup", args.warmup))
        return lambda: run_job(cmd, env=rank_env())

    runs = {"serial": job(1, REPO, "serial"), "mp2": job(2, REPO, "mp")}
    if args.before:
        runs["mp2_before"] = job(2, args.before, "mp")
    steps = {name: [] for name in runs}

    def gather(r, got):
        for name, times in got.items():
            steps[name] += times
        print(f"round {r + 1}: " + ", ".join(f"{n} {m * 1e3:.2f} ms" for n, m in medians(steps).items()), flush=True)

    with load_span() as load:
        interleave(runs, args.rounds, after_round=gather)
    med = medians(steps)
    result = {"units": UNITS, "hidden": HIDDEN, "tokens": TOKENS, "rounds": args.rounds, "steps": args.steps,
              "before_tree": args.before, "before_label": args.before_label, "steps_s": steps, "median_s": med, "spread_s": spread(steps),
              "load_average_1min": load, "ratio_mp2_to_serial": med["mp2"] / med["serial"]}
    if args.before:
        result["ratio_mp2_before_to_serial"] = med["mp2_before"] / med["serial"]
    write_result("tp_small.json", result)
    print("\n".join(report_section(result)))


def report_section(r):
    if not r:
        return []
    ms = r["median_s"]
    lines = ["## A small tensor-parallel MLP (`bench/tp_small.py`)", "",
             f"Dense({r['hidden']}) column-parallel -> ReLU -> Dense({r['units']}) row-parallel on {r['tokens']} "
             f"tokens, dp1 x mp2, forward + backward; medians of {r['rounds']} interleaved rounds x {r['steps']} "
             "steps, the slower rank's step; one process of one thread as the reference. Here each step's two "
             f"{r['tokens'] * r['units'] * 4 // 1024} KiB allreduces, not the compute, set the time.", "",
             "| run | step (median) | / one process |", "|---|---|---|",
             f"| one process, 1 thread | {ms['serial'] * 1e3:.2f} ms | 1.000 |",
             f"| mp = 2 | {ms['mp2'] * 1e3:.2f} ms | {r['ratio_mp2_to_serial']:.3f} |"]
    if "mp2_before" in ms:
        label = r.get("before_label") or "before the doorbell and kAsync (commit 7b9e137)"
        lines.append(f"| mp = 2, {label} | {ms['mp2_before'] * 1e3:.2f} ms | "
                     f"{r['ratio_mp2_before_to_serial']:.3f} |")
    return lines + [""]


def main():
    p = arguments(__doc__, steps=(200, "measured steps per round"), warmup=(20, "warm-up steps per round"),
                  rounds=4)
    p.add_argument("--mode", choices=["serial", "mp"], help=argparse.SUPPRESS)
    p.add_argument("--tree", default=REPO, help=argparse.SUPPRESS)
    p.add_argument("--before", help="a built checkout whose mp = 2 job to time as well")
    p.add_argument("--before-label", default=None, help="what the --before checkout is, for the report")
    args = p.parse_args()
    if args.mode:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
