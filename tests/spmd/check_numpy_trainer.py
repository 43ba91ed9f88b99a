"""DistributedTrainer and its relatives under MXNet's NumPy interface
(npx.set_np(): parameters, gradients and inputs are mx.np.ndarray), in
every mode: the weights equal gluon.Trainer's on the combined batch where
the mode is exact, and equal the legacy-NDArray path's DistributedTrainer
where it is not (compression, local SGD). Parameters keep their kind (a
step must not hand Gluon legacy arrays). argv: case names (default: all)."""
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import autograd, gluon, npx

rank, size = start()
GLOBAL_BATCH = 6 * size
STEPS = 4
LR_MULT = 0.5
LR = {"sgd": {"learning_rate": 0.05, "momentum": 0.9}, "adam": {"learning_rate": 0.01},
      "lamb": {"learning_rate": 0.01}, "rmsprop": {"learning_rate": 0.01, "centered": True},
      "adagrad": {"learning_rate": 0.05}, "nag": {"learning_rate": 0.05, "momentum": 0.9}}


def set_kind(kind):
    if kind == "numpy":
        npx.set_np()
    else:
        npx.reset_np()


def build(kind, hybridize=None):
    set_kind(kind)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, in_units=10, activation="tanh"), gluon.nn.Dense(4, in_units=16))
    net.initialize()
    # The same start in both kinds (their initializers draw from different generators)
    rng = np.random.RandomState(1)
    make = mx.np.array if kind == "numpy" else mx.nd.array
    for p in net.collect_params().values():
        p.set_data(make(rng.uniform(-0.5, 0.5, p.shape), dtype="float32"))
    net[1].weight.lr_mult = LR_MULT
    if hybridize is not None:
        net.hybridize(**hybridize)
    return net


def batches():
    rng = np.random.RandomState(7)
    for _ in range(STEPS):
        yield rng.uniform(-1, 1, (GLOBAL_BATCH, 10)).astype("float32"), rng.randint(0, 4, GLOBAL_BATCH)


def shard(x, y, whole):
    if whole:
        return x, y
    per = GLOBAL_BATCH // size
    return x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]


def train(kind, net, trainer, whole, steps=STEPS, split_step=False):
    make = mx.np.array if kind == "numpy" else mx.nd.array
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for i, (x, y) in enumerate(batches()):
        if i == steps:
            break
        x, y = shard(x, y, whole)
        with autograd.record():
            loss = loss_fn(net(make(x)), make(y))
        loss.backward()
        if split_step:  # allreduce_grads(), then update(): clipping code's way
            trainer.allreduce_grads()
            trainer.update(len(x))
        else:
            trainer.step(len(x))
    want = mx.np.ndarray if kind == "numpy" else mx.nd.NDArray
    for p in net.collect_params().values():
        assert type(p.data()) is want and type(p.grad()) is want, (
            f"rank {rank}: {p.name} holds {type(p.data()).__name__} / {type(p.grad()).__name__} after steps")
    return [p.data().asnumpy().copy() for p in net.collect_params().values()]


def reference(optimizer, hybridize=None, kind="numpy"):
    net = build(kind, hybridize)
    return train(kind, net, gluon.Trainer(net.collect_params(), optimizer, dict(LR[optimizer]), kvstore=None), True)


def distributed(kind, optimizer, hybridize=None, split_step=False, **options):
    net = build(kind, hybridize)
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer, dict(LR[optimizer]), **options)
    return train(kind, net, trainer, False, split_step=split_step)


def same(got, want, what, rtol=1e-4, atol=1e-6):
    for k, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, rtol=rtol, atol=atol, what=f"{what}: parameter {k}")
    say(f"ok {what} {rank}")


HYBRIDIZE = {"imperative": None, "hybridize": {}, "static_alloc": {"static_alloc": True},
             "static_shape": {"static_alloc": True, "static_shape": True}}


def case_exact():
    """Modes that equal one process's gluon.Trainer on the combined batch."""
    for label, flags in HYBRIDIZE.items():
        for optimizer in ("sgd", "adam"):
            same(distributed("numpy", optimizer, flags), reference(optimizer, flags), f"{optimizer} {label}")
    same(distributed("numpy", "lamb"), reference("lamb"), "lamb (multi-tensor update)")
    for optimizer in ("rmsprop", "nag"):
        same(distributed("numpy", optimizer), reference(optimizer), f"{optimizer} (per-parameter update)")
    same(distributed("numpy", "sgd", fused_update=False), reference("sgd"), "sgd fused_update=False")
    same(distributed("numpy", "adagrad", num_groups=2), reference("adagrad"), "adagrad num_groups=2")
    same(distributed("numpy", "adam", split_step=True), reference("adam"), "adam allreduce_grads + update")
    same(distributed("numpy", "adam", HYBRIDIZE["static_shape"], shard_optimizer_states=True),
         reference("adam", HYBRIDIZE["static_shape"]), "adam sharded states static_shape")
    same(distributed("numpy", "lamb", shard_optimizer_states=True), reference("lamb"), "lamb sharded states")
    same(distributed("numpy", "sgd", bucket_bytes=256), reference("sgd"), "sgd small buckets")


def case_lossy():
    """Modes whose numbers differ from one process by design: the NumPy
    interface must give exactly the legacy path's numbers."""
    for label, options in {"powersgd": {"compression": hvd.Compression.powersgd(rank=2)},
                           "fp16": {"compression": hvd.Compression.fp16},
                           "bf16": {"compression": hvd.Compression.bf16},
                           "local sgd": {"local_sgd_steps": 2, "local_sgd_warmup_steps": 1}}.items():
        legacy = distributed("legacy", "sgd", **options)
        same(distributed("numpy", "sgd", **options), legacy, f"{label} numpy == legacy", rtol=1e-6, atol=1e-7)


def case_autotune():
    """autotune=True (the test's environment makes it try cuts at once):
    the weights still equal one process's."""
    same(distributed("numpy", "sgd", autotune=True), reference("sgd"), "sgd autotune")


def case_wrappers():
    """gluon.Trainer with a DistributedOptimizer or kvstore='mxplugin', in
    both kinds (the legacy run checks that lr_mult reaches a wrapped
    optimizer: it did not, in either kind)."""
    for label, make in {"DistributedOptimizer": lambda p: gluon.Trainer(
                            p, hvd.DistributedOptimizer(mx.optimizer.create("adam", **LR["adam"])), kvstore=None),
                        "kvstore=mxplugin": lambda p: gluon.Trainer(p, "adam", dict(LR["adam"]),
                                                                    kvstore="mxplugin")}.items():
        for kind in ("legacy", "numpy"):
            net = build(kind)
            same(train(kind, net, make(net.collect_params()), False), reference("adam", kind=kind),
                 f"{label} {kind}")


def case_join():
    """join_when_done with the last rank one batch short: equals one process
    on the batches each step had."""
    net = build("numpy")
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", dict(LR["sgd"]))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mine = [shard(x, y, False) for x, y in batches()]
    if rank == size - 1:
        mine = mine[:-1]
    with hvd.join_when_done(trainer):
        for x, y in mine:
            with autograd.record():
                loss = loss_fn(net(mx.np.array(x)), mx.np.array(y))
            loss.backward()
            trainer.step(len(x))
    ref = build("numpy")
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", dict(LR["sgd"]), kvstore=None)
    for i, (x, y) in enumerate(batches()):
        if i == STEPS - 1:  # the last step: every rank's batch but the last rank's
            x, y = x[:GLOBAL_BATCH - GLOBAL_BATCH // size], y[:GLOBAL_BATCH - GLOBAL_BATCH // size]
        with autograd.record():
            loss = loss_fn(ref(mx.np.array(x)), mx.np.array(y))
        loss.backward()
        ref_trainer.step(len(x))
    same([p.data().asnumpy() for p in net.collect_params().values()],
         [p.data().asnumpy() for p in ref.collect_params().values()], "join_when_done")


def case_elastic_state():
    """GluonState commit/restore of a NumPy-interface model and trainer."""
    net = build("numpy")
    trainer = hvd.DistributedTrainer(net.collect_params(), "adam", dict(LR["adam"]))
    state = hvd.elastic.GluonState(net, trainer, epoch=0)
    train("numpy", net, trainer, False, steps=2)
    state.commit()
    committed = [p.data().asnumpy().copy() for p in net.collect_params().values()]
    train("numpy", net, trainer, False, steps=2)
    state.restore()
    for p in net.collect_params().values():
        assert type(p.data()) is mx.np.ndarray, f"{p.name} is {type(p.data()).__name__} after restore"
    same([p.data().asnumpy() for p in net.collect_params().values()], committed, "elastic restore")
    train("numpy", net, trainer, False, steps=1)  # trains on after the restore


CASES = {"exact": case_exact, "lossy": case_lossy, "autotune": case_autotune, "wrappers": case_wrappers,
         "join": case_join, "elastic": case_elastic_state}
for name in sys.argv[1:] or CASES:
    CASES[name]()
npx.set_np()
finish()
