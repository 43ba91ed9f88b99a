"""DistributedTrainer on per-rank shards == gluon.Trainer on the whole batch
under every hybridize mode (Note [Static graphs keep their gradients] in
mxplugin/training/buckets.py). The net has a convolution, BatchNorm and a dense layer
whose input size is inferred at the first forward; the data changes every
step. BatchNorm normalises each rank's shard with that shard's statistics, so
the reference runs the forward shard by shard too (as gluon does with one
shard per device) and sums the losses: the gradient is then the same sum.
Running statistics are per rank by design and not compared.

argv: case names (default: all)."""
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import autograd, gluon

import mxplugin.training.buckets as buckets

GLOBAL_BATCH = 12
STEPS = 6
MODES = {
    "imperative": None,
    "hybridize": {},
    "static_alloc": {"static_alloc": True},
    "static_shape": {"static_alloc": True, "static_shape": True},
}
OPTIMIZERS = {
    "sgd": {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01},
    "adam": {"learning_rate": 0.01, "wd": 0.01},
    "lamb": {"learning_rate": 0.01, "wd": 0.01},
}


def build_net():
    mx.random.seed(11)
    net = gluon.nn.HybridSequential()
    # No convolution bias before BatchNorm (as in ResNets): its gradient is
    # rounding noise, which Adam and LAMB would scale up to full steps.
    net.add(gluon.nn.Conv2D(4, 3, in_channels=2, use_bias=False), gluon.nn.BatchNorm(in_channels=4), gluon.nn.Activation("relu"),
            gluon.nn.Flatten(), gluon.nn.Dense(3))  # Dense: in_units inferred at the first forward
    net.initialize(mx.init.Uniform(0.5))
    return net


def hybridize(net, mode):
    if MODES[mode] is None:
        net.hybridize(active=False)
    else:
        net.hybridize(**MODES[mode])


def shards(step, size):
    rng = np.random.RandomState(1000 + step)
    x = rng.uniform(-1, 1, (GLOBAL_BATCH, 2, 6, 6)).astype("float32")
    y = rng.randint(0, 3, GLOBAL_BATCH).astype("float32")
    per = GLOBAL_BATCH // size
    return [(mx.nd.array(x[r * per:(r + 1) * per]), mx.nd.array(y[r * per:(r + 1) * per])) for r in range(size)]


def train(net, trainer, parts, steps, first=0, between=None):
    """`parts(step)` -> the (x, y) shards this process runs forward on."""
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for s in range(first, first + steps):
        if between is not None:
            between(s)
        mx.random.seed(5)  # deferred init happens inside the first forward
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in parts(s)]
        autograd.backward(losses)
        trainer.step(GLOBAL_BATCH if len(losses) > 1 else losses[0].shape[0])


def learned(net):
    return {name: p.data().asnumpy() for name, p in sorted(net.collect_params().items()) if p.grad_req != "null"}


def compare(case, ref_net, net):
    ref, got = learned(ref_net), learned(net)
    for (name, want), have in zip(ref.items(), got.values()):
        assert_close(have, want, rtol=2e-4, atol=2e-5, what=f"{case}: {name}")


def run_pair(case, rank, size, optimizer, setup, between=None, dist_between=None, **trainer_options):
    """Trains a reference (gluon.Trainer, whole batch) and a DistributedTrainer
    (this rank's shard) the same way; returns the distributed trainer."""
    ref_net, net = build_net(), build_net()
    setup(ref_net)
    setup(net)
    ref_trainer = gluon.Trainer(ref_net.collect_params(), optimizer, dict(OPTIMIZERS[optimizer]), kvstore=None)
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer, dict(OPTIMIZERS[optimizer]), **trainer_options)
    train(ref_net, ref_trainer, lambda s: shards(s, size), STEPS,
          between=(lambda s: between(ref_net, ref_trainer, s)) if between else None)
    hook = dist_between or between
    train(net, trainer, lambda s: [shards(s, size)[rank]], STEPS,
          between=(lambda s: hook(net, trainer, s)) if hook else None)
    compare(case, ref_net, net)
    return trainer


def check_mode(mode, optimizer, rank, size):
    trainer = run_pair(f"{mode}/{optimizer}", rank, size, optimizer, lambda n: hybridize(n, mode))
    # The buckets are written in place from the second step on (the first
    # step's layout release rebinds static graphs; nothing is copied).
    assert trainer._layout.copied == 0, f"{mode}/{optimizer}: {trainer._layout.copied} gradients copied"


def check_rehybridize_mid_training(rank, size):
    def between(net, trainer, s):
        if s == 2:
            net.hybridize(static_alloc=True, static_shape=True)
        if s == 4:
            net.hybridize()  # plain again, then static once more
        if s == 5:
            net.hybridize(static_alloc=True, static_shape=True)
    run_pair("re-hybridize mid-training", rank, size, "sgd", lambda n: hybridize(n, "static_shape"), between)


def check_hybridized_after_trainer(rank, size):
    def between(net, trainer, s):
        if s == 2:
            net.hybridize(static_alloc=True, static_shape=True)
    run_pair("hybridized after the trainer's first steps", rank, size, "adam", lambda n: None, between)


def check_layout_rebuilt_mid_training(rank, size):
    def between(net, trainer, s):
        if s == 3:  # changes the update groups: the trainer rebuilds its buckets
            net[4].weight.lr_mult = 0.5
    run_pair("buckets rebuilt mid-training", rank, size, "sgd", lambda n: hybridize(n, "static_shape"), between)


def check_copy_path(rank, size):
    """The per-step check on its own: with the layout's release of static
    graphs disabled, the first backward after the layout still writes the old
    arrays. The trainer must notice, copy (results stay exact) and rebind, so
    that only that one step is copied."""
    original = buckets.release_cached_graphs

    def layout_release_disabled(params, static_shape_only):
        return [] if static_shape_only else original(params, static_shape_only)

    buckets.release_cached_graphs = layout_release_disabled
    try:
        trainer = run_pair("copy path", rank, size, "sgd", lambda n: hybridize(n, "static_shape"))
    finally:
        buckets.release_cached_graphs = original
    members = len(trainer._layout._members)
    assert trainer._layout.copied == members, (
        f"copy path: expected one copy of each of {members} members, got {trainer._layout.copied}")


def check_mxnet_multi_tensor_ops(rank, size):
    """The update path of GPU buckets, proven on CPU: with fused_update=False
    every bucket is updated by the optimizer's MXNet ops, aggregated into
    multi-tensor calls (multi_sgd_mom_update, multi_lamb_update) as
    gluon.Trainer does, and the weights match gluon.Trainer's."""
    for optimizer in ("sgd", "lamb"):
        trainer = run_pair(f"MXNet multi-tensor ops/{optimizer}", rank, size, optimizer,
                           lambda n: hybridize(n, "static_shape"), fused_update=False)
        assert trainer.aggregated_updates >= STEPS, (
            f"{optimizer}: {trainer.aggregated_updates} multi-tensor calls in {STEPS} steps")


CASES = {f"{m}/{o}": (lambda m=m, o=o: lambda r, s: check_mode(m, o, r, s))() for m in MODES for o in OPTIMIZERS}
CASES.update({
    "rehybridize": check_rehybridize_mid_training,
    "after_trainer": check_hybridized_after_trainer,
    "rebuilt": check_layout_rebuilt_mid_training,
    "copy_path": check_copy_path,
    "mxnet_ops": check_mxnet_multi_tensor_ops,
})


def main():
    rank, size = start()
    for name in sys.argv[1:] or CASES:
        CASES[name](rank, size)
        if rank == 0:
            say(f"ok {name}")
    finish()


if __name__ == "__main__":
    main()
