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
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


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
        mx.nd.waitall()
        t0 = time.perf_counter()
        epoch()
        mx.nd.waitall()
        return (time.perf_counter() - t0) / steps

    for ref, dist in runs.values():  # warm-up: graphs, buffers, negotiation caches
        seconds_per_step(ref)
        seconds_per_step(dist)
    result = {}
    for path, (ref, dist) in runs.items():
        ratios, refs, dists = [], [], []
        for _ in range(args.rounds):
            r = seconds_per_step(ref)
            d = seconds_per_step(dist)
            refs.append(r)
            dists.append(d)
            ratios.append(d / r)
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
        result[path] = {"ratio": statistics.median(ratios), "ratios": ratios,
                        "reference_ms_per_step": statistics.median(refs) * 1e3,
                        "distributed_ms_per_step": statistics.median(dists) * 1e3,
                        "calls_per_step": len(spans) / steps, "gradients": len(tensors)}
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()


# --- the driver ----------------------------------------------------------------------------------------------

def run_job(tree, args):
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from mpi_harness import mpiexec_path, rank_env

    env = rank_env({"OMP_NUM_THREADS": 1, "MXNET_CPU_WORKER_NTHREADS": 1,
                    "MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0" if args.flat else "1"})
    env["PYTHONPATH"] = tree
    cmd = [mpiexec_path(), "-n", "2", sys.executable, os.path.abspath(__file__), "--rank", "--tree", tree,
           "--layers", str(args.layers), "--hidden", str(args.hidden), "--batch", str(args.batch),
           "--steps", str(args.steps), "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"job failed ({tree}):\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def driver(args):
    trees = {"before": os.path.abspath(args.before), "after": REPO}
    jobs = {"before": [], "after": []}
    for i in range(args.jobs):
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            res = run_job(trees[name], args)
            jobs[name].append(res)
            print(name, {p: (round(r["ratio"], 3), r["calls_per_step"]) for p, r in res.items()}, flush=True)
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
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "priority_fusion_flat.json" if args.flat else "priority_fusion.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(summary, indent=1))
    print("wrote", path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", help="a tree with a built mxplugin/ of the earlier commit")
    p.add_argument("--before-commit", default="5598ce9")
    p.add_argument("--flat", action="store_true", help="plain MPI instead of the shared-memory data plane")
    p.add_argument("--jobs", type=int, default=3, help="jobs per build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
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
