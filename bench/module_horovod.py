"""The Module API path against Horovod 0.28.1: mx.mod.Module with
DistributedOptimizer, resnet50_v1, 2 ranks.

    python bench/module_horovod.py all --horovod-python /path/to/venv/bin/python [--rounds 3]
    python bench/module_horovod.py one --lib mxplugin|horovod|alone --out FILE   # one rank (what `all` starts)

Horovod is not a dependency: build it in a venv of its own (DEVELOPERS.md in
the docs, "Comparing with Horovod") and pass that venv's python; its jobs
run under that venv's mpiexec, ours under ours.

Every job: 2 ranks x 1 thread, resnet50_v1 as a Symbol with SoftmaxOutput,
BATCH images of SIZE x SIZE per rank (synthetic, fixed per rank), SGD with
momentum, `kvstore=None` and the optimizer wrapped in hvd.DistributedOptimizer
(what horovod.mxnet's Module example does). A step is forward_backward +
update; the figure is the median step time over STEPS steps after WARMUP.
Settings, each a fresh job, in ROUNDS interleaved rounds (order rotating):
  horovod   import horovod.mxnet as hvd
  mxplugin  import mxplugin as hvd (the same script otherwise)
  alone     each rank trains alone: the optimizer not wrapped, no
            communication (the same two processes on the same cores), what
            the step would cost if communication were free
Ratios: samples/s of mxplugin over horovod (>= 1 is faster), and each
against alone. Results: bench/results/module_horovod.json.
"""
import json
import os
import statistics
import sys
import tempfile

from harness import arguments, interleave, timed, write_result
from jobs import run
from machine import load_span

BATCH = 8
SIZE = 112
WARMUP = 3
STEPS = 12
CLASSES = 1000


def train_one(lib, out):
    """One rank of a job; rank 0 writes its step times to `out`."""
    import mxnet as mx
    import numpy as np
    from mxnet.gluon.model_zoo import vision

    if lib == "horovod":
        import horovod.mxnet as hvd
    else:
        import mxplugin as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    net = vision.resnet50_v1(classes=CLASSES)
    sym = mx.sym.SoftmaxOutput(net(mx.sym.var("data")), name="softmax")
    rng = np.random.RandomState(rank)
    data = mx.nd.array(rng.uniform(-1, 1, (BATCH, 3, SIZE, SIZE)))
    label = mx.nd.array(rng.randint(0, CLASSES, BATCH))
    batch = mx.io.DataBatch(data=[data], label=[label])

    mod = mx.mod.Module(sym, context=mx.cpu())
    mod.bind(data_shapes=[("data", data.shape)], label_shapes=[("softmax_label", label.shape)])
    mod.init_params(mx.init.Xavier(magnitude=2))
    opt = mx.optimizer.SGD(learning_rate=0.01, momentum=0.9, wd=1e-4, rescale_grad=1.0 / BATCH)
    if lib != "alone":
        arg, aux = mod.get_params()
        hvd.broadcast_parameters(arg, root_rank=0)
        hvd.broadcast_parameters(aux, root_rank=0)
        mod.set_params(arg, aux)
        opt = hvd.DistributedOptimizer(opt)
    mod.init_optimizer(kvstore=None, optimizer=opt)

    def step():
        mod.forward_backward(batch)
        mod.update()

    times = interleave({"step": timed(step, before=mx.nd.waitall, wait=mx.nd.waitall)}, STEPS, WARMUP)["step"]
    # the weights must still be identical: a broken path that skips
    # communication would otherwise pass for a fast one
    check = sum(float(w.sum().asscalar()) for w in mod.get_params()[0].values())
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"lib": lib, "ranks": size, "step_s": times, "weight_sum": check}, f)
    else:
        with open(out + f".{rank}", "w") as f:
            json.dump({"weight_sum": check}, f)


def launch(lib, horovod_python, rounds_dir):
    """One job of `lib` in fresh processes; returns rank 0's record."""
    from mpi_harness import mpiexec_path

    python = horovod_python if lib == "horovod" else sys.executable
    mpiexec = os.path.join(os.path.dirname(python), "mpiexec") if lib == "horovod" else mpiexec_path()
    env = dict(os.environ, OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1", PYTHONUNBUFFERED="1")
    out = os.path.join(rounds_dir, f"{lib}.json")
    cmd = [mpiexec, "-n", "2", python, os.path.abspath(__file__), "one", "--lib", lib, "--out", out]
    with load_span() as load:
        run(cmd, env=env, timeout=1200, what=lib)
    with open(out) as f:
        record = json.load(f)
    with open(out + ".1") as f:
        other = json.load(f)["weight_sum"]
    if lib != "alone" and other != record["weight_sum"]:
        raise SystemExit(f"{lib}: the ranks' weights differ after training ({record['weight_sum']} vs {other})")
    record["median_step_s"] = statistics.median(record["step_s"])
    record["load_average_1min"] = load
    print(f"  {lib}: {record['median_step_s'] * 1000:.0f} ms a step, "
          f"{2 * BATCH / record['median_step_s']:.1f} samples/s", flush=True)
    return record


def report_section(r):
    """The docs/benchmarks.md section, from bench/results/module_horovod.json."""
    if not r:
        return []
    s = r["summary"]
    rounds = ", ".join(f"{x:.3f}" for x in s["mxplugin_vs_horovod_per_round"])
    lines = ["## The Module API against Horovod 0.28.1 (`bench/module_horovod.py`)", "",
             f"`mx.mod.Module` with `hvd.DistributedOptimizer` (`kvstore=None`), resnet50_v1, 2 ranks x 1 thread, "
             f"{r['batch_per_rank']} synthetic {r['image_size']}x{r['image_size']} images per rank, SGD with "
             f"momentum; median step over {r['steps']} steps after {r['warmup']}, each setting a fresh job, "
             f"{len(r['runs']['mxplugin'])} interleaved rounds. Horovod built here against MXNet 1.9.1 and the "
             "mpich wheel, in a venv of its own. *Alone*: the same two processes, the optimizer not wrapped "
             "(no communication).", "",
             "| job | step (median) | samples/s | / alone |", "|---|---|---|---|"]
    for lib in ("alone", "horovod", "mxplugin"):
        step = s["median_step_s"][lib]
        lines.append(f"| {lib} | {step * 1e3:.0f} ms | {s['samples_per_s'][lib]:.1f} | "
                     f"{s['median_step_s']['alone'] / step:.3f} |")
    lines += ["", f"mxplugin against Horovod: **{s['mxplugin_vs_horovod']:.3f}x** the samples/s (per round: "
              f"{rounds}).", ""]
    return lines


def main():
    p = arguments(__doc__, rounds=3)
    p.add_argument("mode", choices=["all", "one"])
    p.add_argument("--lib", choices=["mxplugin", "horovod", "alone"])
    p.add_argument("--out")
    p.add_argument("--horovod-python", help="python of a venv holding horovod 0.28.1 built with MXNet")
    args = p.parse_args()
    if args.mode == "one":
        train_one(args.lib, args.out)
        return
    if not args.horovod_python:
        p.error("all needs --horovod-python")
    with tempfile.TemporaryDirectory() as tmp:
        runs = interleave({lib: lambda lib=lib: launch(lib, args.horovod_python, tmp)
                           for lib in ("mxplugin", "horovod", "alone")}, args.rounds, rotate=True)
    step = {lib: statistics.median(x["median_step_s"] for x in rs) for lib, rs in runs.items()}
    # per round, mxplugin against the horovod job of the same round
    per_round = [h["median_step_s"] / m["median_step_s"] for m, h in zip(runs["mxplugin"], runs["horovod"])]
    summary = {"median_step_s": step,
               "samples_per_s": {lib: 2 * BATCH / s for lib, s in step.items()},
               "mxplugin_vs_horovod": step["horovod"] / step["mxplugin"],
               "mxplugin_vs_horovod_per_round": per_round,
               "mxplugin_vs_alone": step["alone"] / step["mxplugin"],
               "horovod_vs_alone": step["alone"] / step["horovod"]}
    write_result("module_horovod.json", {"batch_per_rank": BATCH, "image_size": SIZE, "warmup": WARMUP,
                                         "steps": STEPS, "runs": runs, "summary": summary})
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
