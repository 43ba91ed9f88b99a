"""An embedding-bag classifier with row-sparse gradients
(`nn.Embedding(..., sparse_grad=True)`), the way large-vocabulary models
(recommenders, NMT) train embeddings, on the digits bundled with the examples
(no download): each image becomes 64 tokens, one per pixel position and
intensity (a vocabulary of 64 x 17), whose embeddings are summed and
classified. Trained with mxplugin.DistributedTrainer and AdaGrad: every
rank's touched rows are gathered, summed, and AdaGrad makes its sparse
update on their union (only those rows and their histories change), as one
process on the whole batch would. AdaGrad's sparse update is its standard
one; Adam's or momentum SGD's lazy_update (their default) would differ from
their standard update, which MXNet notes on stderr.

    mxplugin-run -np 2 python examples/mxnet_sparse_embedding.py
    mxplugin-run -np 2 python examples/mxnet_sparse_embedding.py --sparse-as-dense   # densify instead
"""
import argparse
import logging
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import digits_data  # examples/digits_data.py: the data, read from examples/data/
import mxplugin as hvd

LEVELS = 17  # the digits' pixel intensities, 0..16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10, help="passes over the training set (default 10)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch size, split across ranks (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="AdaGrad learning rate (default 0.05)")
    p.add_argument("--width", type=int, default=32, help="embedding width (default 32)")
    p.add_argument("--sparse-as-dense", action="store_true",
                   help="allreduce the embedding's gradient densified (a dense update of every row)")
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument("--save", default=None, help="rank 0 saves the trained parameters to this file")
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit with status 1 if the final test accuracy is below this")
    return p.parse_args()


def load_tokens(seed):
    """Each digit as 64 token ids: position * LEVELS + intensity."""
    images, labels = digits_data.load_digits()
    tokens = (np.arange(64) * LEVELS + images.astype(np.int64)).astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(tokens))
    split = int(0.8 * len(tokens))
    train, test = order[:split], order[split:]
    return (tokens[train], labels[train].astype(np.float32)), (tokens[test], labels[test])


class EmbeddingBag(gluon.HybridBlock):
    def __init__(self, vocab, width, classes):
        super().__init__()
        self.embedding = gluon.nn.Embedding(vocab, width, sparse_grad=True)
        self.out = gluon.nn.Dense(classes, in_units=width)

    def hybrid_forward(self, F, tokens):
        return self.out(F.relu(self.embedding(tokens).sum(axis=1)))


def accuracy(net, x, y):
    return float((net(mx.nd.array(x)).argmax(axis=1).asnumpy() == y).mean())


def main():
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_tokens(args.seed)

    net = EmbeddingBag(64 * LEVELS, args.width, 10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 64)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), "adagrad", {"learning_rate": args.lr},
                                     sparse_as_dense=args.sparse_as_dense)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    per_rank = args.batch_size // size
    steps = len(x_train) // args.batch_size
    for epoch in range(args.epochs):
        order = np.random.RandomState(args.seed + epoch).permutation(len(x_train))
        start, total = time.time(), 0.0
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size][rank * per_rank:(rank + 1) * per_rank]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x_train[idx])), mx.nd.array(y_train[idx]))
            loss.backward()
            trainer.step(per_rank)
            total += float(loss.mean().asscalar())
        if rank == 0:
            rows = net.embedding.weight.grad().indices.shape[0]
            logging.info("epoch %d: loss %.4f, test accuracy %.4f, %.0f samples/s (%d rank%s; the last step "
                         "updated %d of %d embedding rows)", epoch + 1, total / steps, accuracy(net, x_test, y_test),
                         steps * args.batch_size / (time.time() - start), size, "" if size == 1 else "s",
                         rows, 64 * LEVELS)
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
