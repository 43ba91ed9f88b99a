"""hvd.elastic states outside an elastic launch: run() syncs rank 0's
state to every rank; commit()/restore() go back to the committed
parameters, optimizer states (Adam: moments and update count) and values;
dumps()/loads() carry the committed state into a fresh network and trainer,
which then trains exactly as the original does after restore()."""
from common import assert_close, finish, hvd, mx, np, start

from mxnet import autograd, gluon

r, n = start()


def build(seed):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(4))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 8)))
    trainer = hvd.DistributedTrainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    return net, trainer


def train_step(net, trainer, step):
    rng = np.random.RandomState(100 * step + r)
    x, y = mx.nd.array(rng.rand(6, 8)), mx.nd.array(rng.randint(0, 4, 6))
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(6)


def weights(net):
    return [p.data().asnumpy().copy() for _, p in sorted(net._collect_params_with_prefix().items())]


net, trainer = build(seed=10 + r)  # a different start on every rank
state = hvd.elastic.GluonState(net, trainer, epoch=0, note="start")
resets = []
state.register_reset_callbacks([lambda: resets.append(1)])


@hvd.elastic.run
def train(state):
    # run() made every rank's parameters rank 0's
    digests = hvd.allgather_object(float(sum(w.sum() for w in weights(net))))
    assert len(set(digests)) == 1, f"rank {r}: parameters differ after sync: {digests}"
    for step in range(3):
        train_step(net, trainer, step)
    state.epoch, state.note = 1, "committed"
    state.commit()  # no launcher: no host check, no interrupt
    committed = weights(net)
    blob = state.dumps()
    for step in range(3, 6):
        train_step(net, trainer, step)
    state.epoch, state.note = 2, "lost"
    assert not np.allclose(weights(net)[0], committed[0]), "training did not change the weights"
    state.restore()
    assert (state.epoch, state.note, state.commits) == (1, "committed", 1), (state.epoch, state.note, state.commits)
    for got, want in zip(weights(net), committed):
        assert_close(got, want, what="parameters after restore")
    train_step(net, trainer, 99)
    return blob, weights(net)


blob, after_restore = train(state)
assert not resets, "reset callbacks ran without a reset"

# A fresh network and trainer (another process, as far as they know) take the
# committed state and train the same step: same weights, so Adam's moments
# and update count came along.
net2, trainer2 = build(seed=77)
state2 = hvd.elastic.GluonState(net2, trainer2, epoch=0, note="fresh")
state2.loads(blob)
assert (state2.epoch, state2.note, state2.commits) == (1, "committed", 1)
train_step(net2, trainer2, 99)
for got, want in zip(weights(net2), after_restore):
    assert_close(got, want, rtol=1e-6, atol=1e-7, what="fresh trainer from the committed state")

# ObjectState alone
objects = hvd.elastic.ObjectState(epoch=3, seen=[1, 2])
objects.commit()
objects.epoch, objects.seen = 4, [9]
objects.seen.append(5)
objects.restore()
assert (objects.epoch, objects.seen) == (3, [1, 2]), (objects.epoch, objects.seen)
# a value named as the state's own counter, lock or methods is refused, not kept over them
for name in ("commits", "lock", "restore", "_names"):
    try:
        hvd.elastic.ObjectState(**{name: 5})
    except ValueError as e:
        assert f"{name} would replace the state's own attribute" in str(e), str(e)
    else:
        raise AssertionError(f"ObjectState({name}=5) was taken")
finish()
