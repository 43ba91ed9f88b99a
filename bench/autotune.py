"""Autotune (Note [Autotune] in mxplugin/training/autotune.py) on resnet50_v1,
against the default bucket_bytes and the best size of a hand sweep, in one run:

    python bench/autotune.py            # writes bench/results/autotune.json (needs root for the fake hosts)
    python bench/autotune.py --report   # print the section from the results

Each job trains hybridized resnet50_v1 (10 classes, 3x64x64 images, batch 4
per rank, SGD momentum, one thread per rank) with DistributedTrainer(autotune=True)
until it has chosen, then STEADY more steps (the tuned step time: their
median). In the same job the trainer then takes each candidate size in turn
(the tuner's own list, the default 25 MB first) for one settling step and
STEADY measured ones: the sweep. Every step time is the slowest rank's (an
allreduce Max of each rank's median). Configurations: 1 host x 2 ranks, and
2 fake hosts x 2 ranks whose links tc tbf holds to 2 Gbit/s (UCX_TLS=tcp,self,
as bench/multi_host.py). The tuner runs with 2 warm-up steps and 4 steps per
sample (the defaults, 5 and 10, take 2.5x the steps).
"""
import json
import os
import statistics
import sys
import time

from harness import REPO, arguments, read_result, write_result
from jobs import check, mpi_command, print_result, result_in, run_job, this_script

STEADY = 6
BATCH = 4
IMAGE = 64
TUNE_ENV = {"MXPLUGIN_AUTOTUNE_WARMUP_STEPS": "2", "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE": "4"}
RATE_MBIT = 2000


def worker():
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon.model_zoo import vision

    import mxplugin as hvd

    hvd.init()
    mx.random.seed(1)
    net = vision.resnet50_v1(classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                                     autotune=True)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(BATCH, 3, IMAGE, IMAGE))
    y = mx.nd.array([i % 10 for i in range(BATCH)])

    def timed_steps(n):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(BATCH)
            mx.nd.waitall()
            times.append(time.perf_counter() - start)
        return times

    def slowest(seconds):
        """The slowest rank's figure (every rank gets it)."""
        return float(hvd.allreduce(mx.nd.array([seconds], dtype="float64"), op=hvd.Max, name="bench.slowest")
                     .asnumpy()[0])

    tuning_steps = 0
    while not trainer._tuner.done:
        timed_steps(1)
        tuning_steps += 1
    tuned = slowest(statistics.median(timed_steps(STEADY)))
    chosen = trainer._bucket_bytes
    sweep = []
    for bucket_bytes, cut in trainer._tuner._candidates:
        trainer._bucket_bytes, trainer._relayout = bucket_bytes, True  # as the tuner switches
        timed_steps(1)  # settles: the layout is built, the static graph binds it
        sweep.append({"bucket_bytes": bucket_bytes, "buckets": sum(len(r) for r in cut),
                      "step_s": slowest(statistics.median(timed_steps(STEADY)))})
    if hvd.rank() == 0:
        print_result({"chosen_bucket_bytes": chosen, "tuned_step_s": tuned, "tuning_steps": tuning_steps,
                      "sweep": sweep})
    hvd.shutdown()


def env():
    from mpi_harness import rank_env

    return rank_env({"MXNET_CPU_WORKER_NTHREADS": 1, **TUNE_ENV})


def one_host():
    return run_job(mpi_command(2, this_script(__file__, "worker")), env=env(), timeout=1200,
                   what="autotune on 1 host x 2 ranks")


def two_hosts():
    from fake_cluster import ENV, FakeCluster
    from mpi_harness import mpiexec_path

    why_not = FakeCluster.unavailable()
    if why_not:
        print(f"2 fake hosts: skipped ({why_not})", file=sys.stderr)
        return None
    with FakeCluster(2, rate_mbit=RATE_MBIT) as cluster:
        cmd = [mpiexec_path(), *cluster.mpiexec_args((2, 2)), "-n", "4", *this_script(__file__, "worker")]
        done = cluster.run(0, cmd, env={**env(), **ENV}, timeout=1800, cwd=REPO)
        return result_in(check(done, "autotune on 2 fake hosts x 2 ranks"), "autotune on 2 fake hosts")


def summary(row):
    """(tuned, default, best hand-picked) step seconds and the sizes."""
    default = row["sweep"][0]
    best = min(row["sweep"], key=lambda s: s["step_s"])
    return row["tuned_step_s"], default, best


def report_section(result):
    if not result:
        return []
    lines = ["## Autotune (`bench/autotune.py`)", "",
             f"resnet50_v1 hybridized (static_shape), batch {result['batch']} per rank, 3x{result['image']}x"
             f"{result['image']}, SGD momentum, one thread per rank. `autotune=True` with "
             f"{result['tune_env']['MXPLUGIN_AUTOTUNE_WARMUP_STEPS']} warm-up steps and "
             f"{result['tune_env']['MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE']} steps per sample; then, in the same "
             f"job, each candidate size by hand ({result['steady']} steps each after one to settle). Every "
             "figure is the slowest rank's median step.", "",
             "| configuration | chosen | tuned step | default 25 MB | best of the sweep | tuned / default | "
             "tuned / best |", "|---|---|---|---|---|---|---|"]
    for label, row in result["configs"].items():
        if row is None:
            continue
        tuned, default, best = summary(row)
        lines.append(f"| {label} | {row['chosen_bucket_bytes']} B | {tuned * 1e3:.0f} ms | "
                     f"{default['step_s'] * 1e3:.0f} ms | {best['step_s'] * 1e3:.0f} ms "
                     f"({best['bucket_bytes']} B, {best['buckets']} buckets) | {tuned / default['step_s']:.2f} | "
                     f"{tuned / best['step_s']:.2f} |")
    lines += ["", "The sizes differ by less than this machine's step-to-step noise (a size's figure moves by "
              "10 % between the tuner's samples and the sweep), so which one wins is partly chance here; what the "
              "tuner promises is one size on every rank and the numbers of an untuned run, and here its choice "
              "ran within that noise of the sweep's best.", "", "Every size of the sweeps: " + "; ".join(
        f"{label}: " + ", ".join(f"{s['bucket_bytes']} B ({s['buckets']}) {s['step_s'] * 1e3:.0f} ms"
                                 for s in row["sweep"])
        for label, row in result["configs"].items() if row is not None) + ".", ""]
    return lines


def main():
    p = arguments(__doc__, output="autotune.json")
    p.add_argument("mode", nargs="?", default="all", choices=["all", "worker"])
    p.add_argument("--report", action="store_true", help="print the section from the committed results")
    args = p.parse_args()
    if args.mode == "worker":
        return worker()
    if not args.report:
        result = {"batch": BATCH, "image": IMAGE, "steady": STEADY, "tune_env": TUNE_ENV,
                  "configs": {"1 host x 2 ranks": one_host(),
                              f"2 fake hosts x 2 ranks, {RATE_MBIT / 1000:g} Gbit/s": two_hosts()}}
        write_result(args.output, result)
        print(json.dumps(result["configs"], indent=1))
    print("\n".join(report_section(read_result(os.path.basename(args.output)))))


if __name__ == "__main__":
    main()
