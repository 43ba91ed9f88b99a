"""Trains an MLP on the handwritten digits bundled with the examples (no download)
with mxplugin.DistributedTrainer; each rank trains on its shard of every batch.

    mxplugin-run -np 2 python examples/mxnet_digits.py
"""
import argparse
import logging
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import digits_data  # examples/digits_data.py: the data, read from examples/data/
import mxplugin as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set (default 20)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch size, split across ranks (default 64)")
    p.add_argument("--lr", type=float, default=0.1,
                   help="learning rate (default 0.1)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    p.add_argument("--wd", type=float, default=0.0, help="weight decay (default 0)")
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit with status 1 if the final test accuracy is below this")
    return p.parse_args()


def load_digits(seed):
    images, labels = digits_data.load_digits()
    x = (images / 16.0).astype(np.float32)
    y = labels.astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    x, y = x[order], y[order]
    split = int(0.8 * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:])


def evaluate(net, x, y):
    pred = net(mx.nd.array(x)).argmax(axis=1).asnumpy()
    return float((pred == y).mean())


def main():
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(args.seed + rank)  # different init per rank: broadcast makes them equal
    (x_train, y_train), (x_test, y_test) = load_digits(args.seed)

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(args.hidden, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 64)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)

    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": args.lr, "momentum": args.momentum, "wd": args.wd})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    per_rank = args.batch_size // size
    steps = len(x_train) // args.batch_size
    for epoch in range(args.epochs):
        order = np.random.RandomState(args.seed + epoch).permutation(len(x_train))
        start, total_loss = time.time(), 0.0
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size][rank * per_rank:(rank + 1) * per_rank]
            data, label = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(per_rank)
            total_loss += float(loss.mean().asscalar())
        elapsed = time.time() - start
        acc = evaluate(net, x_test, y_test)
        if rank == 0:
            logging.info("epoch %d: loss %.4f, test accuracy %.4f, %.0f samples/s (%d rank%s)",
                         epoch + 1, total_loss / steps, acc, steps * args.batch_size / elapsed, size,
                         "" if size == 1 else "s")
    acc = evaluate(net, x_test, y_test)
    if rank == 0:
        logging.info("final test accuracy %.4f", acc)
    hvd.shutdown()
    if acc < args.min_accuracy:
        raise SystemExit(f"test accuracy {acc:.4f} is below --min-accuracy {args.min_accuracy}")


if __name__ == "__main__":
    main()
