"""A multilayer perceptron in the style of d2l.ai's MXNet edition (MXNet's
NumPy interface: `from mxnet import np, npx`, `npx.set_np()`), on
the handwritten digits bundled with the examples (no download), trained on every
rank with mxplugin.DistributedTrainer: each rank takes its shard of every
batch of a gluon DataLoader.

    mxplugin-run -np 2 python examples/mxnet_numpy_d2l.py

What changes from d2l's single-process loop: hvd.init(), the trainer, the
broadcast of the initial parameters, and the shard of each batch.
"""
import argparse
import logging
import time

import numpy as onp
from mxnet import autograd, gluon, init, np, npx

import digits_data  # examples/digits_data.py: the data, read from examples/data/
import mxplugin as hvd

npx.set_np()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10, help="passes over the training set (default 10)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch size, split across ranks (default 64)")
    p.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    p.add_argument("--hidden", type=int, default=256, help="hidden units (default 256)")
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument("--save", default=None, help="rank 0 saves the trained parameters to this file")
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit with status 1 if the final test accuracy is below this")
    return p.parse_args()


def load_digits(seed):
    images, labels = digits_data.load_digits()
    x, y = (images / 16.0).astype(onp.float32), labels.astype(onp.int32)
    order = onp.random.RandomState(seed).permutation(len(x))
    split = int(0.8 * len(x))
    train, test = order[:split], order[split:]
    return gluon.data.ArrayDataset(x[train], y[train]), (np.array(x[test]), np.array(y[test]))


def accuracy(net, x, y):
    return float((net(x).argmax(axis=1) == y.astype("int64")).mean())


def main():
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)  # mxnet.gluon.data set one up
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    npx.random.seed(args.seed)
    onp.random.seed(args.seed)  # the DataLoader's shuffle: every rank must read the same global batches
    train_set, (x_test, y_test) = load_digits(args.seed)
    # Every rank reads the same global batches (same shuffle) and trains on its shard of each
    train_iter = gluon.data.DataLoader(train_set, args.batch_size, shuffle=True, last_batch="discard")
    per_rank = args.batch_size // size

    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(args.hidden, activation="relu"), gluon.nn.Dense(10))
    net.initialize(init.Normal(sigma=0.01))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # deferred: broadcast at the first forward
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": args.lr})

    for epoch in range(args.epochs):
        start, total, batches = time.time(), 0.0, 0
        for X, y in train_iter:
            X, y = X[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
            with autograd.record():
                l = loss(net(X), y)
            l.backward()
            trainer.step(per_rank)
            total, batches = total + float(l.mean()), batches + 1
        if rank == 0:
            logging.info("epoch %d: loss %.4f, test accuracy %.4f, %.0f samples/s (%d rank%s)", epoch + 1,
                         total / batches, accuracy(net, x_test, y_test), batches * args.batch_size /
                         (time.time() - start), size, "" if size == 1 else "s")
    final = accuracy(net, x_test, y_test)
    if rank == 0:
        logging.info("final test accuracy %.4f", final)
        if args.save:
            net.save_parameters(args.save)
    hvd.shutdown()
    if final < args.min_accuracy:
        raise SystemExit(f"test accuracy {final:.4f} is below --min-accuracy {args.min_accuracy}")


if __name__ == "__main__":
    main()
