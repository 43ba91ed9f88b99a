"""Forward+backward of a BERT-large-sized feed-forward block (1024 -> 4096 ->
GELU -> 1024, on tokens x 1024 activations) split by parallel.parallelize
at mp = 2, against the same serial block in one process.

    python bench/tensor_parallel.py         # runs every measurement below
Writes bench/results/tensor_parallel.json.

Measured in one run, interleaved over --rounds rounds (medians over all
steps of all rounds):
- serial: the block in one process, 1 thread;
- serial half: 1024 -> 2048 -> 1024 in one process, 1 thread: the compute
  each rank does at mp = 2, so the floor of the split step;
- mp = 2: the parallelized block (auto plan) on 2 ranks of 1 thread each;
  the step time is the slower rank's;
- allreduce: inside the mp = 2 job, one allreduce (Sum, over the mp group) of
  a tokens x 1024 float32 array, alone; a step makes two (the row layer's
  output forward, the column layer's input gradient backward);
- serial, 2 threads: the block in one process using both cores, the user's
  alternative on a 2-core machine.
"""
import argparse
import os
import statistics

from harness import arguments, interleave, timed, write_result
from jobs import mpi_command, print_result, run_job, this_script
from machine import load_span

UNITS, HIDDEN = 1024, 4096


def ffn(hidden):
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Dense(hidden, in_units=UNITS, flatten=False), nn.GELU(),
            nn.Dense(UNITS, in_units=hidden, flatten=False))
    return net


def step_times(net, x, steps, warmup):
    import mxnet as mx
    from mxnet import autograd

    def step():
        with autograd.record():
            loss = net(x).sum()
        loss.backward()

    return interleave({"step": timed(step, before=mx.nd.waitall, wait=mx.nd.waitall)}, steps, warmup)["step"]


def worker(args):
    """One measurement; prints 'RESULT <json>'."""
    import mxnet as mx

    import mxplugin as hvd
    from mxplugin import parallel

    shape = (args.batch, args.seq, UNITS)
    mx.random.seed(1)
    x = mx.nd.random.uniform(-1, 1, shape)
    x.attach_grad()
    if args.mode == "serial":
        net = ffn(args.hidden)
        net.initialize(mx.init.Xavier())
        out = {"step_s": step_times(net, x, args.steps, args.warmup)}
    else:
        hvd.init()
        mesh = parallel.ProcessMesh(1, hvd.size())
        net = ffn(HIDDEN)
        net.initialize(mx.init.Xavier())
        plan = parallel.auto_plan(net, mesh)
        parallel.parallelize(net, mesh, plan)
        times = step_times(net, x, args.steps, args.warmup)
        slowest = hvd.allreduce(mx.nd.array(times, dtype="float64"), op=hvd.Max, name="bench.steps")
        y = mx.nd.random.uniform(-1, 1, shape)
        reduce = timed(lambda: hvd.allreduce(y, op=hvd.Sum, name="bench.allreduce",
                                             process_set=mesh.mp_set).wait_to_read(), before=hvd.barrier)
        reduce_times = interleave({"allreduce": reduce}, args.steps, args.warmup)["allreduce"]
        slowest_reduce = hvd.allreduce(mx.nd.array(reduce_times, dtype="float64"), op=hvd.Max, name="bench.ar")
        out = {"step_s": slowest.asnumpy().tolist(), "allreduce_s": slowest_reduce.asnumpy().tolist(),
               "allreduce_bytes": y.size * 4, "plan": str(plan)}
        hvd.barrier()
        if hvd.rank() != 0:
            return
    print_result(out)


def driver(args):
    from mpi_harness import rank_env

    me = this_script(__file__, "--batch", args.batch, "--seq", args.seq, "--steps", args.steps,
                     "--warmup", args.warmup)

    def job(ranks, threads, *more):
        cmd = mpi_command(ranks, [*me, *more])
        return lambda: run_job(cmd, env=rank_env({"OMP_NUM_THREADS": threads}), timeout=1200)

    runs = {"serial": job(1, 1, "--mode", "serial"),
            "serial_half": job(1, 1, "--mode", "serial", "--hidden", HIDDEN // 2),
            "mp2": job(2, 1, "--mode", "mp"),
            "serial_2threads": job(1, 2, "--mode", "serial")}
    got = {name: {"step_s": []} for name in runs}

    def gather(r, outs):
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{name} {statistics.median(out['step_s']) * 1e3:.1f} ms" for name, out in outs.items()), flush=True)
        for name, out in outs.items():
            got[name]["step_s"] += out["step_s"]
        mp2 = outs["mp2"]
        got["mp2"].setdefault("allreduce_s", []).extend(mp2["allreduce_s"])
        got["mp2"]["allreduce_bytes"], got["mp2"]["plan"] = mp2["allreduce_bytes"], mp2["plan"]

    with load_span() as load:
        interleave(runs, args.rounds, after_round=gather)
    for entry in got.values():
        entry["median_s"] = statistics.median(entry["step_s"])
    mp2 = got["mp2"]
    mp2["allreduce_median_s"] = statistics.median(mp2["allreduce_s"])
    result = {"units": UNITS, "hidden": HIDDEN, "tokens": args.batch * args.seq, "batch": args.batch,
              "seq": args.seq, "threads_per_process": 1, "rounds": args.rounds, "steps_per_round": args.steps,
              "runs": got, "load_average_1min": load, "cores": os.cpu_count(),
              "ratio_mp2_to_serial": mp2["median_s"] / got["serial"]["median_s"],
              "ratio_mp2_to_serial_half": mp2["median_s"] / got["serial_half"]["median_s"],
              "ratio_mp2_to_serial_2threads": mp2["median_s"] / got["serial_2threads"]["median_s"],
              "allreduce_share_of_mp2_step": 2 * mp2["allreduce_median_s"] / mp2["median_s"]}
    write_result("tensor_parallel.json", result)
    print("\n".join(report_section(result)))


def report_section(r):
    """The docs/benchmarks.md section (bench/run_all.py renders it)."""
    runs, ms = r["runs"], lambda s: f"{s * 1e3:.1f} ms"
    mp2 = runs["mp2"]
    return [
        "## Tensor parallelism: a partitioned feed-forward block (`bench/tensor_parallel.py`)", "",
        f"BERT-large's feed-forward block, {r['units']} -> {r['hidden']} -> GELU -> {r['units']} on "
        f"{r['tokens']} tokens ({r['batch']} x {r['seq']}), forward + backward (input gradient included), "
        "the serial `HybridSequential` split by `parallel.parallelize(net, mesh, \"auto\")` (column then row). "
        f"Medians of {r['rounds']} interleaved rounds x {r['steps_per_round']} steps; the mp = 2 step is the "
        f"slower rank's. The machine ({r['cores']} cores) is shared: its 1-minute load average was "
        f"{r['load_average_1min'][0]:.1f} before and {r['load_average_1min'][1]:.1f} after the run.", "",
        "| run | processes x threads | forward+backward (median) | fastest step | mp = 2 / this |",
        "|---|---|---|---|---|",
        f"| serial block | 1 x 1 | {ms(runs['serial']['median_s'])} | {ms(min(runs['serial']['step_s']))} | "
        f"**{r['ratio_mp2_to_serial']:.3f}** |",
        f"| serial half block ({r['units']} -> {r['hidden'] // 2} -> {r['units']}: one rank's compute) | 1 x 1 | "
        f"{ms(runs['serial_half']['median_s'])} | {ms(min(runs['serial_half']['step_s']))} | "
        f"{r['ratio_mp2_to_serial_half']:.3f} |",
        f"| serial block | 1 x 2 | {ms(runs['serial_2threads']['median_s'])} | "
        f"{ms(min(runs['serial_2threads']['step_s']))} | {r['ratio_mp2_to_serial_2threads']:.3f} |",
        f"| parallelized, mp = 2 | 2 x 1 | {ms(mp2['median_s'])} | {ms(min(mp2['step_s']))} | |", "",
        f"Allreduce, measured alone in the mp = 2 job: one {mp2['allreduce_bytes'] / 2 ** 20:.1f} MiB float32 "
        f"allreduce over the mp group takes {ms(mp2['allreduce_median_s'])}; a step makes two (the row layer's "
        f"output forward, the column layer's input gradient backward), "
        f"{100 * r['allreduce_share_of_mp2_step']:.1f}% of the mp = 2 step.", ""]


def main():
    p = arguments(__doc__, steps=(5, "measured steps per round"), warmup=(2, "warm-up steps per round"), rounds=6)
    p.add_argument("--mode", choices=["serial", "mp"], help="run one measurement (internal)")
    p.add_argument("--hidden", type=int, default=HIDDEN, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=4, help="sequences (default 4)")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence (default 128)")
    args = p.parse_args()
    if args.mode:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
