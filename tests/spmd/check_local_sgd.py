"""LocalSGD on real data (the examples' digits): converges to within 1% of
synchronous training with K times fewer reductions."""
from common import finish, hvd, mx, np, start

from mxnet import autograd, gluon

K, WARMUP, EPOCHS, BATCH = 4, 8, 12, 64


def digits():
    from digits_data import load_digits

    images, labels = load_digits()
    x, y = (images / 16.0).astype(np.float32), labels.astype(np.float32)
    order = np.random.RandomState(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def train(rank, size, **local_sgd):
    (xt, yt), (xv, yv) = digits()
    mx.random.seed(1)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 64)))
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                                     **local_sgd)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    per = BATCH // size
    steps = 0
    for epoch in range(EPOCHS):
        order = np.random.RandomState(epoch).permutation(len(xt))
        for s in range(len(xt) // BATCH):
            idx = order[s * BATCH:(s + 1) * BATCH][rank * per:(rank + 1) * per]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(xt[idx])), mx.nd.array(yt[idx]))
            loss.backward()
            trainer.step(per)
            steps += 1
    acc = float((net(mx.nd.array(xv)).argmax(axis=1).asnumpy() == yv).mean())
    return acc, trainer.num_reductions, steps


def main():
    rank, size = start()
    sync_acc, sync_reductions, steps = train(rank, size)
    local_acc, local_reductions, _ = train(rank, size, local_sgd_steps=K, local_sgd_warmup_steps=WARMUP,
                                           local_sgd_average_states=True)
    if rank == 0:
        print(f"sync accuracy {sync_acc:.4f} ({sync_reductions} reductions), "
              f"local SGD accuracy {local_acc:.4f} ({local_reductions} reductions), {steps} steps")
    assert sync_reductions == steps
    assert local_reductions == WARMUP + (steps - WARMUP) // K, local_reductions
    assert sync_acc > 0.95, sync_acc
    assert local_acc >= sync_acc - 0.01, (local_acc, sync_acc)
    finish()


if __name__ == "__main__":
    main()
