"""Fusion across priorities (Note [Fusion across priorities]), measured where
it matters: every gradient its own allreduce at its own priority.

    python bench/priority_fusion.py --before /path/to/a/build/of/5598ce9 [--flat]

Two paths, 2 ranks on one host (the shared-memory data plane):
module:  mx.mod.Module.fit with hvd.DistributedOptimizer (kvstore=None):
         gradient i is allreduced at priority -i.
kvstore: gluon.Trainer(..., kvstore='mxplugin'): gluon gives pushpull(i)
         priority -i.
Each figure is a ratio against a reference measured in the same processes
and run, interleaved with it: the same training loop with the optimizer not
wrapped / kvstore=None (every rank training alone, no communication). The
ratio is what communication costs on top of the step. Each job times rounds
of (reference, distributed) per path; a job's figure is the median of its
rounds' ratios. Jobs of the build before (--before: a tree holding a build
of an earlier commit) and of this tree alternate, and each build's figure
is the median of its jobs. Each distributed path also counts its
data-plane calls per step from a timeline taken after the timing (the
tensors of one call share its ALLREDUCE span).

The model is a narrow, deep MLP (many small gradients, little compute),
where per-call costs show; on one host the shared-memory data plane takes
tensors where they lie, so what fusion saves there is the barriers of a
call per gradient, not copies. --flat turns that data plane off
(MXPLUGIN_HIERARCHICAL_ALLREDUCE=0): plain MPI, as between hosts, where
small gradients are copied into the fusion buffer and reduced in one call.
Writes bench/results/priority_fusion.json (priority_fusion_flat.json).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from harness import REPO, arguments, interleave, medians, timed, write_result
from jobs import mpi_command, print_result, run_job, this_script


# --- one rank of one job -------------------------------------------------------------------------------------

def rank_main(args):
    sys.path.insert(0, args.tree)
    import mxnet as mx
    import numpy as np
    from mxnet import autograd, gluon

    import mxplugin as hvd

    hvd.init()
    rank = hvd.rank()
    assert os.path.dirname(os.path.abspath(hvd.__file__)) == os.path.join(os.path.abspath(args.tree), "mxplugin")
    batch, steps = args.batch, args.steps
    rng = np.random.RandomState(rank)
    data = mx.nd.array(rng.uniform(-1, 1, (batch * steps, args.hidden)))
    label = mx.nd.array(rng.randint(0, 10, batch * steps))

    def symbol():
        x = mx.sym.var("data")
        for i in range(args.layers):
            x = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=args.hidden, name=f"fc{i}"), act_type="relu")
        x = mx.sym.FullyConnected(x, num_hidden=10, name="out")
        return mx.sym.SoftmaxOutput(x, name="softmax")

    def sgd():
        return mx.optimizer.SGD(learning_rate=0.01, momentum=0.9, rescale_grad=1.0 / batch)

    def module(distributed):
        it = mx.io.NDArrayIter(data, label, batch_size=batch)
        mod = mx.mod.Module(symbol(), context=mx.cpu())
        opt = hvd.DistributedOptimizer(sgd()) if distributed else sgd()
        mod.bind(it.provide_data, it.provide_label)
        mod.init_params(mx.init.Xavier(), force_init=True)
        mod.init_optimizer(kvstore=None, optimizer=opt)

        def epoch():
            it.reset()
            mod.fit(it, num_epoch=1, kvstore=None, optimizer=opt)
        return epoch

    def trainer(distributed):
        net = gluon.nn.HybridSequential()
        for _ in range(args.layers):
            net.add(gluon.nn.Dense(args.hidden, activation="relu"))
        net.add(gluon.nn.Dense(10))
        net.initialize(mx.init.Xavier())
        net.hybridize(static_alloc=True, static_shape=True)
        tr = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                           kvstore="mxplugin" if distributed else None)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

        def epoch():
            for s in range(steps):
                x, y = data[s * batch:(s + 1) * batch], label[s * batch:(s + 1) * batch]
                with autograd.record():
                    loss = loss_fn(net(x), y)
                loss.backward()
                tr.step(batch)
        return epoch

    import logging
    logging.getLogger().setLevel(logging.ERROR)  # Module.fit's "already bound/initialised" warnings
    runs = {"module": (module(False), module(True)), "kvstore": (trainer(False), trainer(True))}

    def seconds_per_step(epoch):
        clock = timed(epoch, before=mx.nd.waitall, wait=mx.nd.waitall)
        return lambda: clock() / steps

    for pair in runs.values():  # warm-up: graphs, buffers, negotiation caches
        for epoch in pair:
            seconds_per_step(epoch)()
    result = {}
    for path, (ref, dist) in runs.items():
        times = interleave({"reference": seconds_per_step(ref), "distributed": seconds_per_step(dist)}, args.rounds)
        refs, dists = times["reference"], times["distributed"]
        ratios = [d / r for r, d in zip(refs, dists)]
        with tempfile.TemporaryDirectory() as tmp:
            hvd.start_timeline(os.path.join(tmp, "t.{rank}.json"))
            dist()
            mx.nd.waitall()
            hvd.stop_timeline()
            with open(os.path.join(tmp, f"t.{rank}.json")) as f:
                events = json.load(f)
        rows = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
        spans = {(e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["name"] == "ALLREDUCE" and
                 rows[e["tid"]].startswith(("allreduce.optimizer.", "allreduce.kvstore."))}
        tensors = {rows[e["tid"]] for e in events if e["ph"] == "X" and e["name"] == "ALLREDUCE" and
                   rows[e["tid"]].startswith(("allreduce.optimizer.", "allreduce.kvstore."))}
        med = medians(times)
        result[path] = {"ratio": statistics.median(ratios), "ratios": ratios,
                        "reference_ms_per_step": med["reference"] * 1e3,
                        "distributed_ms_per_step": med["distributed"] * 1e3,
                        "calls_per_step": len(spans) / steps, "gradients": len(tensors)}
    if rank == 0:
        print_result(result)
    hvd.shutdown()


# --- the driver ----------------------------------------------------------------------------------------------

def job(name, tree, args):
    """One job of the build `name` in `tree`: its result per path."""
    from mpi_harness import rank_env

    env = rank_env({"OMP_NUM_THREADS": 1, "MXNET_CPU_WORKER_NTHREADS": 1,
                    "MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0" if args.flat else "1"})
    env["PYTHONPATH"] = tree
    cmd = mpi_command(2, this_script(__file__, "--rank", "--tree", tree, "--layers", args.layers, "--hidden",
                                     args.hidden, "--batch", args.batch, "--steps", args.steps, "--rounds",
                                     args.rounds))
    res = run_job(cmd, env=env, timeout=1200, what=f"the job of {name} ({tree})")
    print(name, {p: (round(r["ratio"], 3), r["calls_per_step"]) for p, r in res.items()}, flush=True)
    return res


def driver(args):
    trees = {"before": os.path.abspath(args.before), "after": REPO}
    # before and after alternate, each first in every other round
    jobs = interleave({name: lambda name=name: job(name, trees[name], args) for name in trees}, args.jobs,
                      rotate=True)
    summary = {}
    for path in ("module", "kvstore"):
        summary[path] = {}
        for name in ("before", "after"):
            rs = [j[path] for j in jobs[name]]
            summary[path][name] = {
                "ratio_to_reference": statistics.median(r["ratio"] for r in rs),
                "reference_ms_per_step": statistics.median(r["reference_ms_per_step"] for r in rs),
                "distributed_ms_per_step": statistics.median(r["distributed_ms_per_step"] for r in rs),
                "calls_per_step": statistics.median(r["calls_per_step"] for r in rs),
                "gradients": rs[0]["gradients"]}
        summary[path]["after_over_before"] = (summary[path]["after"]["ratio_to_reference"] /
                                              summary[path]["before"]["ratio_to_reference"])
    plane = "flat MPI, MXPLUGIN_HIERARCHICAL_ALLREDUCE=0" if args.flat else "shared-memory data plane"
    out = {"what": f"step time with 2 ranks on one host ({plane}) divided by the same loop "
                   "without communication in the same processes (ratio_to_reference); medians of jobs, "
                   "each the median of its rounds; before and after jobs alternate",
           "before": f"a build of {args.before_commit} in {trees['before']}", "after": "this tree",
           "model": {"layers": args.layers, "hidden": args.hidden, "batch_per_rank": args.batch,
                     "steps_per_measurement": args.steps, "rounds_per_job": args.rounds, "jobs_per_build": args.jobs},
           "threads_per_rank": 1, "summary": summary, "jobs": jobs}
    print(json.dumps(summary, indent=1))
    write_result("priority_fusion_flat.json" if args.flat else "priority_fusion.json", out)


def main():
    p = arguments(__doc__, rounds=(5, "rounds of (reference, distributed) per job"),
                  steps=(20, "steps per measurement"))
    p.add_argument("--before", help="a tree with a built mxplugin/ of the earlier commit")
    p.add_argument("--before-commit", default="5598ce9")
    p.add_argument("--flat", action="store_true", help="plain MPI instead of the shared-memory data plane")
    p.add_argument("--jobs", type=int, default=3, help="jobs per build")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tree", default=REPO, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank:
        rank_main(args)
    elif not args.before:
        p.error("--before is required")
    else:
        driver(args)


if __name__ == "__main__":
    main()
