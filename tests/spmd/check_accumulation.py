"""backward_passes_per_step (Note [Accumulated passes] in
mxplugin/training/accumulation.py): K backward passes per rank, step()
after each, equal one process's gluon.Trainer on the combined batch of the
K passes of every rank, with one reduction per K passes; a user's own
grad_req='add' loop keeps working; what cannot combine is refused on every
rank, naming the option."""
from common import assert_close, finish, hvd, mx, np, start

from mxnet import autograd, gluon
from mxplugin.errors import ArgumentError

PASS_BATCH = 12  # the combined batch of one pass, over every rank
STEPS = 3


def make_net(seed, hybridize):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, in_units=10, activation="relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Uniform(0.5))
    if hybridize:
        net.hybridize(static_alloc=True)
    return net


def pass_batch(step, k, rank=None, size=None):
    rng = np.random.RandomState(1000 * step + k)
    x, y = rng.uniform(-1, 1, (PASS_BATCH, 10)).astype("float32"), rng.randint(0, 3, PASS_BATCH)
    if rank is not None:
        per = PASS_BATCH // size
        x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
    return x, y


def backward(net, x, y):
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()


def reference(passes, optimizer, params, hybridize):
    """One process, one step per K passes on their combined batch."""
    net = make_net(1, hybridize)
    trainer = gluon.Trainer(net.collect_params(), optimizer, dict(params), kvstore=None)
    for s in range(STEPS):
        xs, ys = zip(*(pass_batch(s, k) for k in range(passes)))
        backward(net, np.concatenate(xs), np.concatenate(ys))
        trainer.step(passes * PASS_BATCH)
    return net


def weights(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


def same(net, ref, what):
    for i, (a, b) in enumerate(zip(weights(net), weights(ref))):
        assert_close(a, b, rtol=1e-4, atol=1e-6, what=f"{what}: parameter {i}")


def check_trainer(rank, size, passes, optimizer, params, hybridize):
    net = make_net(1, hybridize)
    trainer = hvd.DistributedTrainer(net.collect_params(), optimizer, dict(params),
                                     backward_passes_per_step=passes)
    for s in range(STEPS):
        for k in range(passes):
            backward(net, *pass_batch(s, k, rank, size))
            trainer.step(PASS_BATCH // size)
    what = f"DistributedTrainer K={passes} {optimizer} hybridize={hybridize}"
    expected = STEPS if size > 1 else 0  # one process reduces nothing
    assert trainer.num_reductions == expected, f"{what}: {trainer.num_reductions} reductions for {STEPS} steps"
    same(net, reference(passes, optimizer, params, hybridize), what)


def check_optimizer(rank, size, passes):
    net = make_net(1, True)
    opt = hvd.DistributedOptimizer(mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9),
                                   backward_passes_per_step=passes)
    trainer = gluon.Trainer(net.collect_params(), opt, kvstore=None)
    for s in range(STEPS):
        for k in range(passes):
            backward(net, *pass_batch(s, k, rank, size))
            trainer.step(PASS_BATCH // size)
    same(net, reference(passes, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, True),
         f"DistributedOptimizer K={passes}")


def check_own_loop(rank, size, passes):
    """grad_req='add' and step() every K passes, as Sockeye's --update-interval does."""
    net = make_net(1, True)
    for p in net.collect_params().values():
        p.grad_req = "add"
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    for s in range(STEPS):
        for k in range(passes):
            backward(net, *pass_batch(s, k, rank, size))
        trainer.step(passes * PASS_BATCH // size)
        for p in net.collect_params().values():
            p.zero_grad()
    same(net, reference(passes, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, True), "grad_req='add' loop")


def refused(what, action):
    try:
        action()
    except ArgumentError as exc:
        assert "backward_passes_per_step" in str(exc), (what, exc)
        return
    raise AssertionError(f"{what} was not refused")


def check_refusals(rank, size):
    net = make_net(1, False)
    params = net.collect_params()
    refused("0 passes", lambda: hvd.DistributedTrainer(params, "sgd", backward_passes_per_step=0))
    refused("local SGD", lambda: hvd.DistributedTrainer(params, "sgd", backward_passes_per_step=2,
                                                         local_sgd_steps=2))
    trainer = hvd.DistributedTrainer(params, "sgd", backward_passes_per_step=2)
    backward(net, *pass_batch(0, 0, rank, size))
    refused("allreduce_grads", trainer.allreduce_grads)
    for p in params.values():
        p.grad_req = "add"
    refused("grad_req='add'", lambda: trainer.step(PASS_BATCH // size))


def main():
    rank, size = start()
    for passes in (1, 2, 4):
        check_trainer(rank, size, passes, "sgd", {"learning_rate": 0.1, "momentum": 0.9}, True)
    check_trainer(rank, size, 2, "adam", {"learning_rate": 0.01}, False)
    check_optimizer(rank, size, 2)
    check_own_loop(rank, size, 2)
    check_refusals(rank, size)
    finish()


if __name__ == "__main__":
    main()
