"""Sharded optimizer states (ZeRO-1) on resnet50_v1 with Adam.

    mxplugin-run -np N python bench/sharding.py memory --shard 0|1
    mxplugin-run -np 2 python bench/sharding.py time
    mxplugin-run -np N python bench/sharding.py fit --shard 0|1 --width W (bench/sharding_oom.py runs it)

memory: optimizer-state bytes per rank (trainer.optimizer_state_bytes()) and
  the process's peak RSS after 3 steps, sharded or not (one setting per run,
  so the peak RSS is that setting's).
time: hybridized resnet50_v1, two copies of the model, one trained by an
  unsharded and one by a sharded trainer, their steps interleaved; median
  step time of each (batch 4 per rank, 3x64x64, 1 thread per rank), and
  of the optimizer kernels alone (whole buckets, or this rank's slices).
Results go to bench/results/sharding_<mode>_<np>[_<shard>].json.
"""
import json
import resource

import mxnet as mx
from mxnet import autograd, gluon

from harness import arguments, interleave, medians, timed, write_result

# after harness, which puts this checkout on the path where no mxplugin is installed
import mxplugin as hvd

ADAM = {"learning_rate": 1e-3, "wd": 1e-4}


def model():
    mx.random.seed(1)
    net = gluon.model_zoo.vision.resnet50_v1(classes=100)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def step(net, trainer, batch, side):
    x = mx.nd.random.uniform(shape=(batch, 3, side, side))
    y = mx.nd.array([i % 100 for i in range(batch)])
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(batch)
    mx.nd.waitall()


def save(name, record):
    if hvd.rank() == 0:
        write_result(name, record)
    print(json.dumps(record), flush=True)


def memory(shard):
    net = model()
    trainer = hvd.DistributedTrainer(net.collect_params(), "adam", dict(ADAM), shard_optimizer_states=shard)
    for _ in range(3):
        step(net, trainer, 2, 32)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mine = {"state_bytes": trainer.optimizer_state_bytes(), "peak_rss_bytes": rss,
            "buckets": len(trainer._layout.buckets)}
    everyone = hvd.allgather_object(mine)
    save(f"sharding_memory_{hvd.size()}_{int(shard)}.json",
         {"ranks": hvd.size(), "sharded": shard, "per_rank": everyone})


def optimizer_kernels(trainer):
    """Runs the trainer's optimizer kernels alone over what this rank
    updates (whole buckets, or its slices), on the gradients already there,
    and waits for them; their time is the update's own."""
    from mxplugin import basics
    from mxplugin.training import native_update

    core, opt = basics._core_module(), trainer._optimizer
    if trainer._shards is None:
        for b in trainer._layout.buckets:
            native_update.update(opt, b, core)
    else:
        for s in trainer._shards.slices:
            if s.size:
                native_update.update_flat(opt, s.indices, s.weight, s.grad, s.state, core)
    mx.nd.waitall()


def timing(rounds):
    nets = [model(), model()]
    trainers = [hvd.DistributedTrainer(n.collect_params(), "adam", dict(ADAM), shard_optimizer_states=s,
                                       prefix=f"t{int(s)}.") for n, s in zip(nets, (False, True))]

    def step_then_kernels(net, trainer):
        """(seconds of a step from a barrier, seconds of the optimizer kernels alone after it)"""
        whole = timed(lambda: step(net, trainer, 4, 64), before=hvd.barrier)
        kernels = timed(lambda: optimizer_kernels(trainer))
        return lambda: (whole(), kernels())

    # round 0 builds the layouts and binds the graphs
    got = interleave({shard: step_then_kernels(net, trainer) for net, trainer, shard in
                      zip(nets, trainers, (False, True))}, rounds, warmup=1)
    med = medians({k: [t for t, _ in v] for k, v in got.items()})
    upd = medians({k: [t for _, t in v] for k, v in got.items()})
    save(f"sharding_time_{hvd.size()}.json", {"ranks": hvd.size(), "rounds": rounds,
                                               "unsharded_step_s": med[False], "sharded_step_s": med[True],
                                               "ratio": med[True] / med[False],
                                               "unsharded_update_s": upd[False], "sharded_update_s": upd[True],
                                               "update_ratio": upd[True] / upd[False]})


def fit(shard, width, steps):
    """A wide MLP (4 square Dense layers of `width`: its weights, gradients
    and Adam states are most of the process's memory) trained for `steps`
    steps; bench/sharding_oom.py runs it under a memory limit."""
    mx.random.seed(1)
    net = gluon.nn.HybridSequential()
    for _ in range(4):
        net.add(gluon.nn.Dense(width, in_units=width, activation="relu"))
    net.initialize(mx.init.Uniform(0.01))
    trainer = hvd.DistributedTrainer(net.collect_params(), "adam", dict(ADAM), shard_optimizer_states=shard)
    for _ in range(steps):
        x = mx.nd.random.uniform(shape=(8, width))
        with autograd.record():
            loss = (net(x) ** 2).mean()
        loss.backward()
        trainer.step(8)
        mx.nd.waitall()
    if hvd.rank() == 0:
        print(f"trained {steps} steps, {trainer.optimizer_state_bytes()} bytes of optimizer state per rank",
              flush=True)


def main():
    parser = arguments(__doc__, rounds=(8, "time: interleaved rounds"), steps=(3, "fit: training steps"))
    parser.add_argument("mode", choices=["memory", "time", "fit"])
    parser.add_argument("--shard", type=int, default=1)
    parser.add_argument("--width", type=int, default=4096, help="fit: the MLP's width")
    args = parser.parse_args()
    hvd.init()
    if args.mode == "memory":
        memory(bool(args.shard))
    elif args.mode == "fit":
        fit(bool(args.shard), args.width, args.steps)
    else:
        timing(args.rounds)
    hvd.shutdown()


if __name__ == "__main__":
    main()
