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
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
sys.path.insert(0, os.path.join(REPO, "tests"))

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
    times = []
    for i in range(args.warmup + args.steps):
        mx.nd.waitall()
        start = time.perf_counter()
        with autograd.record():
            loss = net(x).sum()
        loss.backward()
        x.grad.wait_to_read()
        mx.nd.waitall()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    if args.mode == "mp":
        times = hvd.allreduce(mx.nd.array(times, dtype="float64"), op=hvd.Max, name="bench.steps").asnumpy().tolist()
        if hvd.rank() != 0:
            return
    print("RESULT " + json.dumps(times), flush=True)


def run(cmd):
    from mpi_harness import rank_env

    out = subprocess.run(cmd, capture_output=True, text=True, env=rank_env(), cwd=REPO, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-4000:]}")
    return json.loads([x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1][len("RESULT "):])


def driver(args):
    from mpi_harness import mpiexec_path

    def me(tree, mode):
        return [sys.executable, os.path.abspath(__file__), "--mode", mode, "--tree", tree, "--steps",
                str(args.steps), "--warmup", str(args.warmup)]

    runs = {"serial": me(REPO, "serial"), "mp2": [mpiexec_path(), "-n", "2", *me(REPO, "mp")]}
    if args.before:
        runs["mp2_before"] = [mpiexec_path(), "-n", "2", *me(args.before, "mp")]
    steps = {name: [] for name in runs}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for name, cmd in runs.items():
            steps[name] += run(cmd)
        print(f"round {r + 1}: " + ", ".join(f"{n} {statistics.median(s) * 1e3:.2f} ms" for n, s in steps.items()),
              flush=True)
    load.append(os.getloadavg()[0])
    medians = {name: statistics.median(s) for name, s in steps.items()}
    result = {"units": UNITS, "hidden": HIDDEN, "tokens": TOKENS, "rounds": args.rounds, "steps": args.steps,
              "before_tree": args.before, "steps_s": steps, "median_s": medians, "load_average_1min": load,
              "ratio_mp2_to_serial": medians["mp2"] / medians["serial"]}
    if args.before:
        result["ratio_mp2_before_to_serial"] = medians["mp2_before"] / medians["serial"]
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "tp_small.json"), "w") as f:
        json.dump(result, f, indent=1)
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
        lines.append(f"| mp = 2, before the doorbell and kAsync (commit 7b9e137) | {ms['mp2_before'] * 1e3:.2f} ms | "
                     f"{r['ratio_mp2_before_to_serial']:.3f} |")
    return lines + [""]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["serial", "mp"], help=argparse.SUPPRESS)
    p.add_argument("--tree", default=REPO, help=argparse.SUPPRESS)
    p.add_argument("--before", help="a built checkout whose mp = 2 job to time as well")
    p.add_argument("--steps", type=int, default=200, help="measured steps per round (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps per round (default 20)")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    args = p.parse_args()
    if args.mode:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
