"""DistributedTrainer features against single-process gluon.Trainer on the
whole batch. argv: 'features' (default) and/or 'clipping', each run in
turn and followed by "ok SECTION RANK"; or 'save' or 'resume' DIR."""
import os
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import autograd, gluon

GLOBAL_BATCH = 12


def make_net(seed, in_units=10, deferred=False, hybridize=True):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=0 if deferred else in_units, activation="relu"),
            gluon.nn.Dense(3, in_units=0 if deferred else 8))
    net.initialize(mx.init.Uniform(0.5))
    if hybridize:
        net.hybridize(static_alloc=True)
    return net


def batch(step, rank=None, size=None):
    rng = np.random.RandomState(100 + step)
    x, y = rng.uniform(-1, 1, (GLOBAL_BATCH, 10)).astype("float32"), rng.randint(0, 3, GLOBAL_BATCH)
    if rank is not None:
        per = GLOBAL_BATCH // size
        x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    return mx.nd.array(x), mx.nd.array(y)


def backward(net, x, y):
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()


def run(net, trainer, steps, rank=None, size=None, first=0):
    for s in range(first, first + steps):
        x, y = batch(s, rank, size)
        backward(net, x, y)
        trainer.step(x.shape[0])


def weights(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


def same(a_net, b_net, what, rtol=1e-4):
    for i, (a, b) in enumerate(zip(weights(a_net), weights(b_net))):
        assert_close(a, b, rtol=rtol, atol=1e-6, what=f"{what}: parameter {i}")


def check_kvstore_plugin(rank, size):
    """kvstore='mxplugin', and 'horovod' (Horovod's MXNet kvstore's name), as gluon.Trainer in one process."""
    ref = make_net(1)
    run(ref, gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=None), 3)
    for name, kind in (("mxplugin", "MXPlugin"), ("horovod", "Horovod")):
        net = make_net(1)
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=name)
        run(net, trainer, 3, rank, size)
        assert type(trainer._kvstore).__name__ == kind, f"kvstore={name!r} not used: {trainer._kvstore}"
        assert mx.kv.create(name).num_workers == size, name
        same(net, ref, f"kvstore={name!r}")


def check_two_trainers(rank, size):
    ref_a, ref_b, net_a, net_b = make_net(1), make_net(2), make_net(1), make_net(2)
    ra = gluon.Trainer(ref_a.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=None)
    rb = gluon.Trainer(ref_b.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=None)
    ta = hvd.DistributedTrainer(net_a.collect_params(), "adam", {"learning_rate": 0.01})
    tb = hvd.DistributedTrainer(net_b.collect_params(), "sgd", {"learning_rate": 0.1})
    for s in range(3):  # alternate, like a GAN's generator and discriminator
        run(ref_a, ra, 1, first=s)
        run(ref_b, rb, 1, first=s)
        run(net_a, ta, 1, rank, size, first=s)
        run(net_b, tb, 1, rank, size, first=s)
    same(net_a, ref_a, "two trainers, first")
    same(net_b, ref_b, "two trainers, second")


def check_deferred_init(rank, size):
    # Values are drawn at the first forward: seed right before it, differently per rank.
    ref = make_net(1, deferred=True)
    mx.random.seed(11)
    run(ref, gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=None), 3)
    net = make_net(1, deferred=True)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # deferred: broadcast at first init
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    mx.random.seed(11 + rank)
    run(net, trainer, 3, rank, size)
    same(net, ref, "deferred init")


def check_clipping(rank, size):
    """Note [Reduced gradients are sums]: between allreduce_grads() and
    update() the gradients are one process's on the combined batch, so
    clipping at one process's threshold gives its weights. The norms are
    compared too, and the threshold must bind (else the check proves nothing)."""
    max_norm = 1.0
    for optimizer, params in (("sgd", {"learning_rate": 0.1, "momentum": 0.9}), ("adam", {"learning_rate": 0.01})):
        for hybridize in (False, True):
            what = f"allreduce_grads + clip_global_norm({max_norm}) + update, {optimizer}, " \
                   f"{'hybridized' if hybridize else 'not hybridized'}"
            ref, net = make_net(1, hybridize=hybridize), make_net(1, hybridize=hybridize)
            rt = gluon.Trainer(ref.collect_params(), optimizer, dict(params), kvstore=None)
            # A predivide factor f leaves sums divided by f (update() undoes
            # it); one rank reduces nothing, so divides by nothing.
            predivide = 2.0 if optimizer == "adam" else 1.0
            tr = hvd.DistributedTrainer(net.collect_params(), optimizer, dict(params),
                                        gradient_predivide_factor=predivide)
            for s in range(4):
                norms = []
                for n, t, r, f in ((ref, rt, None, 1.0), (net, tr, rank, predivide if size > 1 else 1.0)):
                    x, y = batch(s, r, size if r is not None else None)
                    backward(n, x, y)
                    t.allreduce_grads()
                    grads = [p.grad() for p in n.collect_params().values()]
                    norms.append(gluon.utils.clip_global_norm(grads, max_norm / f) * f)
                    t.update(x.shape[0])
                assert norms[0] > 1.5 * max_norm, f"{what}: the threshold does not bind (norm {norms[0]})"
                assert_close(np.float32(norms[1]), np.float32(norms[0]), rtol=1e-4,
                             what=f"{what}: global norm at step {s}")
                rt.set_learning_rate(rt.learning_rate * 0.5)
                tr.set_learning_rate(tr.learning_rate * 0.5)
            assert tr.learning_rate == rt.learning_rate
            same(net, ref, what)
    # update() without allreduce_grads(): this rank's own gradients, as before.
    ref, net = make_net(1), make_net(1)
    rt = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=None)
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x, y = batch(0, rank, size)
    for n, t in ((ref, rt), (net, tr)):
        backward(n, x, y)
        t.update(x.shape[0])
    same(net, ref, "update() without allreduce_grads(): local gradients")


def check_predivide_fp16(rank, size):
    """Gradients near the float16 maximum survive compression when predivided."""
    for factor, expect_finite in ((float(size), True), (1.0, size == 1)):
        w = gluon.Parameter("w", shape=(4,), init=mx.init.Zero())
        w.initialize()
        trainer = hvd.DistributedTrainer({"w": w}, "sgd", {"learning_rate": 1e-6},
                                         compression=hvd.Compression.fp16,
                                         gradient_predivide_factor=factor, prefix=f"fp16.{factor}.")
        with autograd.record():
            loss = (w.data() * 60000.0).sum()
        loss.backward()
        trainer.step(1)
        got = w.data().asnumpy()
        if expect_finite:
            assert_close(got, np.full(4, -0.06, dtype=np.float32), rtol=2e-3, what=f"predivide {factor}")
        else:
            assert not np.isfinite(got).all(), f"expected float16 overflow without predivide, got {got}"


def check_reinit_and_stale(rank, size):
    ref, net = make_net(1), make_net(1)
    rt = gluon.Trainer(ref.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.5}, kvstore=None)
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.5})
    run(ref, rt, 2)
    run(net, tr, 2, rank, size)
    for n in (ref, net):  # re-create every array: layout must follow
        mx.random.seed(5)
        n.initialize(mx.init.Uniform(0.3), force_reinit=True)
        n.collect_params().zero_grad()
    run(ref, rt, 2, first=2)
    run(net, tr, 2, rank, size, first=2)
    same(net, ref, "after force_reinit")
    # a stale gradient raises unless ignored
    x, y = batch(9, rank, size)
    try:
        tr.step(x.shape[0])
        raise AssertionError("stale gradients were not reported")
    except UserWarning:
        pass
    tr.step(x.shape[0], ignore_stale_grad=True)


def conv_net():
    mx.random.seed(4)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, 3, in_channels=2), gluon.nn.Conv2D(4, 3, in_channels=4), gluon.nn.Dense(3, in_units=64))
    net.initialize(mx.init.Uniform(0.3))
    return net


def check_inference_between_steps(rank, size):
    """oneDNN reorders conv weights in place during an inference forward;
    training must go on correctly afterwards (weights are not views)."""
    rng = np.random.RandomState(3)
    xs = [rng.uniform(-1, 1, (GLOBAL_BATCH, 2, 8, 8)).astype("float32") for _ in range(3)]
    per = GLOBAL_BATCH // size
    results = []
    for trainer_kind in ("gluon", "mxplugin"):
        net = conv_net()
        if trainer_kind == "gluon":
            tr = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore=None)
        else:
            tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9})
        for x in xs:
            if trainer_kind == "mxplugin":
                x = x[rank * per:(rank + 1) * per]
            data = mx.nd.array(x)
            with autograd.record():
                loss = (net(data) ** 2).sum()
            loss.backward()
            tr.step(data.shape[0])
            net(data).wait_to_read()  # inference forward: may reorder weights in place
        results.append(net)
    same(results[1], results[0], "inference forward between steps")


def check_save(directory, rank, size):
    net = make_net(1)
    tr = hvd.DistributedTrainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    run(net, tr, 2, rank, size)
    if rank == 0:
        net.save_parameters(os.path.join(directory, "net.params"))
        tr.save_states(os.path.join(directory, "trainer.states"))


def check_resume(directory, rank, size):
    net = make_net(7)  # overwritten by the checkpoint
    net.load_parameters(os.path.join(directory, "net.params"))
    tr = hvd.DistributedTrainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    tr.load_states(os.path.join(directory, "trainer.states"))
    run(net, tr, 2, rank, size, first=2)
    ref = make_net(1)
    run(ref, gluon.Trainer(ref.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=None), 4)
    same(net, ref, "save_states / load_states across a restart")


def check_features(rank, size):
    check_kvstore_plugin(rank, size)
    check_two_trainers(rank, size)
    check_deferred_init(rank, size)
    check_predivide_fp16(rank, size)
    check_reinit_and_stale(rank, size)
    check_inference_between_steps(rank, size)


def main():
    rank, size = start()
    mode = sys.argv[1] if len(sys.argv) > 1 else "features"
    if mode == "save":
        check_save(sys.argv[2], rank, size)
    elif mode == "resume":
        check_resume(sys.argv[2], rank, size)
    else:  # 'features' and 'clipping', in the order given, in one process
        for section in sys.argv[1:] or ["features"]:
            {"features": check_features, "clipping": check_clipping}[section](rank, size)
            say(f"ok {section} {rank}")
    finish()


if __name__ == "__main__":
    main()
