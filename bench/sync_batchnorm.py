"""The cost of synchronized BatchNorm: a training step of resnet18_v1 with
mxplugin.SyncBatchNorm (convert_sync_batchnorm) against the same model
with plain BatchNorm, both under DistributedTrainer at 2 ranks, and the
layers' collectives alone.

    python bench/sync_batchnorm.py             # writes bench/results/sync_batchnorm.json

One job of 2 ranks, one thread each; interleaved rounds of three ways:
plain (BatchNorm: statistics of each rank's own batch), sync (the same
model converted: one allgather of count, mean and squared deviations per
layer forward, one allreduce backward) and collectives (those same
collectives, of the same sizes, one after another with no model: what the
reductions cost by themselves). Both models are hybridized, with the same
weights; a step is forward, backward and DistributedTrainer.step (SGD
momentum). A step's time is the slower rank's; medians over every step of
every round.
"""
import argparse
import sys

from harness import REPO, arguments, interleave, medians, spread, timed, write_result
from jobs import mpi_command, print_result, run_job, this_script
from machine import load_span

RANKS = 2
CLASSES = 10


def worker(args):
    sys.path.insert(0, REPO)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon.model_zoo import vision

    import mxplugin as hvd

    hvd.init()
    shape = (args.batch_size, 3, args.image_size, args.image_size)

    def model(sync):
        mx.random.seed(7)
        net = vision.resnet18_v1(classes=CLASSES)
        net.initialize(mx.init.Xavier())
        net(mx.nd.zeros(shape))  # parameters take their shapes before the conversion keeps them
        if sync:
            hvd.convert_sync_batchnorm(net)
        net.hybridize(static_alloc=True)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                         {"learning_rate": 0.01, "momentum": 0.9})
        return net, trainer

    mx.random.seed(100 + hvd.rank())
    x = mx.nd.random.uniform(shape=shape)
    y = mx.nd.array([i % CLASSES for i in range(args.batch_size)])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step(net, trainer):
        def run():
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(args.batch_size)
        return run

    plain, sync = model(False), model(True)
    channels = [p.shape[0] for name, p in sync[0].collect_params().items() if name.endswith("running_mean")]
    stats = [mx.nd.ones((1, 1 + 2 * c)) for c in channels]
    sums = [mx.nd.ones((2 * c,)) for c in channels]

    def collectives():
        """Each layer's forward allgather, then each one's backward
        allreduce in reverse, each completed before the next (as the
        layers wait for theirs)."""
        for i, s in enumerate(stats):
            hvd.allgather(s, name=f"bench.stats.{i}").wait_to_read()
        for i in reversed(range(len(sums))):
            hvd.allreduce(sums[i], op=hvd.Sum, name=f"bench.sums.{i}").wait_to_read()

    def slowest(fn):
        return timed(fn, before=lambda: (mx.nd.waitall(), hvd.barrier()), wait=mx.nd.waitall)

    ways = {"plain": slowest(step(*plain)), "sync": slowest(step(*sync)), "collectives": slowest(collectives)}
    times = interleave(ways, args.steps, args.warmup, rotate=True)
    slower = {name: hvd.allreduce(mx.nd.array(t, dtype="float64"), op=hvd.Max,
                                  name=f"bench.times.{name}").asnumpy().tolist() for name, t in times.items()}
    if hvd.rank() == 0:
        print_result({"steps_s": slower, "layers": len(channels), "channels": sum(channels)})


def driver(args):
    from mpi_harness import rank_env

    cmd = mpi_command(RANKS, this_script(__file__, "--worker", "--steps", args.steps, "--warmup", args.warmup,
                                         "--batch-size", args.batch_size, "--image-size", args.image_size))
    steps, layers = {}, {}

    def job():
        got = run_job(cmd, env=rank_env({"OMP_NUM_THREADS": 1}), timeout=1800)
        layers.update(layers=got["layers"], channels=got["channels"])
        return got["steps_s"]

    def gather(r, got):
        for name, times in got["job"].items():
            steps.setdefault(name, []).extend(times)
        print(f"round {r + 1}: " + ", ".join(f"{n} {m * 1e3:.1f} ms" for n, m in medians(steps).items()), flush=True)

    with load_span() as load:
        interleave({"job": job}, args.rounds, after_round=gather)
    med = medians(steps)
    result = {"ranks": RANKS, "threads_per_rank": 1, "batch_per_rank": args.batch_size,
              "image": args.image_size, "rounds": args.rounds, "steps": args.steps, **layers,
              "steps_s": steps, "median_s": med, "spread_s": spread(steps), "load_average_1min": load,
              "ratio_sync_to_plain": med["sync"] / med["plain"],
              "extra_to_collectives": (med["sync"] - med["plain"]) / med["collectives"]}
    write_result("sync_batchnorm.json", result)
    print("\n".join(report_section(result)))


def report_section(r):
    if not r:
        return []
    ms = r["median_s"]
    return ["## Synchronized BatchNorm (`bench/sync_batchnorm.py`, 2 ranks)", "",
            f"resnet18_v1 hybridized, batch {r['batch_per_rank']} per rank, 3x{r['image']}x{r['image']}, "
            f"{r['ranks']} ranks of {r['threads_per_rank']} thread, DistributedTrainer (SGD momentum); "
            f"medians of {r['rounds']} jobs x {r['steps']} interleaved steps, the slower rank's step. "
            f"Converted, its {r['layers']} BatchNorm layers ({r['channels']} channels) make "
            f"{2 * r['layers']} small collectives a step, each waited for inside its layer.", "",
            "| step | median | / plain BatchNorm |", "|---|---|---|",
            f"| plain BatchNorm (each rank's own batch) | {ms['plain'] * 1e3:.1f} ms | 1.000 |",
            f"| SyncBatchNorm (the combined batch) | {ms['sync'] * 1e3:.1f} ms | {r['ratio_sync_to_plain']:.3f} |",
            f"| the same collectives alone, no model | {ms['collectives'] * 1e3:.1f} ms | "
            f"{ms['collectives'] / ms['plain']:.3f} |", "",
            f"The step's extra time is {r['extra_to_collectives']:.2f}x the time of its collectives alone.", ""]


def main():
    p = arguments(__doc__, steps=(20, "measured steps of each way per job"), warmup=(3, "warm-up steps per job"),
                  rounds=3)
    p.add_argument("--batch-size", type=int, default=4, help="batch per rank (default 4)")
    p.add_argument("--image-size", type=int, default=64, help="image side (default 64)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
