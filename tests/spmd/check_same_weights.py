"""Training is reproducible: the same script, seeds and ranks give the same
weights bit for bit, whatever the timing, in every trainer mode.

A small convolutional net with BatchNorm trains STEPS steps per mode;
before each step a rank chosen at random (a new choice every launch) is
held back a little. Rank 0 prints "weights MODE <digest>" for the test to
compare launches. Within a launch, modes that differ only in how the
gradients are cut into reductions (tiny buckets, autotune) must give the
weights of the plain mode: the bits of a sum do not depend on what it was
fused with."""
import hashlib
import random
import time

from common import finish, hvd, mx, np, say, start

from mxnet import autograd, gluon

r, n = start()
STEPS = 6
PER_RANK = 4
hold = random.Random(time.time_ns())  # differs between launches; ranks need not agree


def make_net():
    mx.random.seed(11)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(6, 3, in_channels=1), gluon.nn.BatchNorm(in_channels=6), gluon.nn.Activation("relu"),
            gluon.nn.Conv2D(8, 3, in_channels=6), gluon.nn.Flatten(), gluon.nn.Dense(10, in_units=8 * 4 * 4))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    return net


def batch(step, rank):
    rng = np.random.RandomState(7000 + 97 * step + rank)
    x = rng.standard_normal((PER_RANK, 1, 8, 8)).astype("float32") * np.exp(rng.uniform(-3, 3, (PER_RANK, 1, 8, 8)))
    return mx.nd.array(x.astype("float32")), mx.nd.array(rng.randint(0, 10, PER_RANK))


def one_step(net, trainer, step):
    x, y = batch(step, r)
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    if hold.random() < 1.0 / n:
        time.sleep(hold.uniform(0.0, 0.01))
    trainer.step(PER_RANK)


SGD = ("sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4})
ADAM = ("adam", {"learning_rate": 0.01})
MODES = {
    "plain": (SGD, {}),
    "tiny_buckets": (SGD, {"bucket_bytes": 256}),
    "autotune": (SGD, {"autotune": True}),
    "unfused_update": (SGD, {"fused_update": False}),
    "fp16": (SGD, {"compression": hvd.Compression.fp16}),
    "bf16": (SGD, {"compression": hvd.Compression.bf16}),
    "powersgd": (SGD, {"compression": hvd.Compression.powersgd(rank=2, min_compression_rate=0)}),
    "predivide": (SGD, {"gradient_predivide_factor": float(n)}),
    "sharded_adam": (ADAM, {"shard_optimizer_states": True}),
    "local_sgd": (SGD, {"local_sgd_steps": 2}),
    "join": (SGD, {}),  # the last rank has one batch fewer
}


def digest(net, trained_only=False):
    """Of every parameter, BatchNorm's running statistics included (each
    rank's own: made from its own batches), or only of those trained."""
    h = hashlib.sha256()
    for _, p in sorted(net.collect_params().items()):
        if p.grad_req != "null" or not trained_only:
            h.update(p.data().asnumpy().tobytes())
    return h.hexdigest()


digests = {}
for mode, ((optimizer, params), options) in MODES.items():
    net = make_net()
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix=mode + ".")
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer, dict(params), prefix=mode + ".", **options)
    if mode == "join":
        with hvd.join_when_done(trainer):
            for step in range(STEPS - (1 if r == n - 1 else 0)):
                one_step(net, trainer, step)
    else:
        for step in range(STEPS):
            one_step(net, trainer, step)
    mx.nd.waitall()
    digests[mode] = digest(net)
    theirs = hvd.allgather_object(digest(net, trained_only=True), name=mode + ".digests")
    assert len(set(theirs)) == 1, f"{mode}: ranks hold different weights: {theirs}"
    if r == 0:
        say(f"weights {mode} {digests[mode]}")

for same in ("tiny_buckets", "autotune"):
    assert digests[same] == digests["plain"], f"rank {r}: {same} trained other weights than plain"
finish()
