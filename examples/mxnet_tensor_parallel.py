"""Tensor parallelism with mxplugin.parallel: an MLP split across the ranks of
each model-parallel group, topped by a 100,000-class classifier of which each
rank holds only its share of the classes (no rank ever holds all the scores).
Synthetic data: each sample is a noisy prototype of its class.

    mxplugin-run -np 2 python examples/mxnet_tensor_parallel.py    # dp=1 x mp=2
    mxplugin-run -np 4 python examples/mxnet_tensor_parallel.py    # dp=2 x mp=2

The ranks of an mp group see the same batch; each dp group (model replica)
sees its own, and DistributedTrainer(mesh=...) averages gradients over the
replicas of each shard.
"""
import argparse
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxplugin as hvd
from mxplugin import parallel


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mp", type=int, default=0,
                   help="ranks per model-parallel group (default: 2 when the world size is even, else 1)")
    p.add_argument("--classes", type=int, default=100_000, help="number of classes (default 100000)")
    p.add_argument("--active-classes", type=int, default=256,
                   help="classes that occur in the synthetic data (default 256)")
    p.add_argument("--features", type=int, default=32, help="input features (default 32)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per replica per step (default 32)")
    p.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    p.add_argument("--lr", type=float, default=0.2, help="learning rate (default 0.2)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    p.add_argument("--log-every", type=int, default=10, help="print every N steps (default 10)")
    p.add_argument("--check", action="store_true",
                   help="exit with status 1 unless the loss fell to less than half its first value")
    return p.parse_args()


class SyntheticClasses:
    """Samples of `active` classes out of `classes`, each a noisy prototype."""

    def __init__(self, classes, active, features, seed):
        rng = np.random.RandomState(seed)
        self.labels = rng.choice(classes, size=active, replace=False)
        self.prototypes = rng.randn(active, features).astype(np.float32)

    def batch(self, step, replica, n):
        rng = np.random.RandomState(1_000_003 * step + replica)
        which = rng.randint(0, len(self.labels), n)
        x = self.prototypes[which] + 0.3 * rng.randn(n, self.prototypes.shape[1]).astype(np.float32)
        return mx.nd.array(x), mx.nd.array(self.labels[which])


def build_model(args, mesh):
    net = gluon.nn.Sequential()  # a plain Sequential: the parallel blocks run imperatively
    net.add(parallel.ColumnParallelDense(args.hidden, args.features, gather_output=False, activation="relu",
                                         mesh=mesh),
            parallel.RowParallelDense(args.hidden, args.hidden, input_is_parallel=True, activation="relu",
                                      mesh=mesh),
            parallel.ColumnParallelDense(args.classes, args.hidden, gather_output=False, mesh=mesh))
    net.initialize(mx.init.Xavier())
    return net


def main():
    args = parse_args()
    hvd.init()
    size = hvd.size()
    mp = args.mp or (2 if size % 2 == 0 else 1)
    if size % mp:
        raise SystemExit(f"--mp {mp} does not divide the {size} ranks")
    mesh = parallel.ProcessMesh(dp=size // mp, mp=mp)  # every rank builds the mesh
    mx.random.seed(args.seed)  # the same seed everywhere: shards are slices of one initial model
    net = build_model(args, mesh)
    parallel.broadcast_parameters(net.collect_params(), mesh)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                     {"learning_rate": args.lr, "momentum": args.momentum}, mesh=mesh)
    loss_fn = parallel.ShardedSoftmaxCrossEntropyLoss(mesh=mesh)
    data = SyntheticClasses(args.classes, args.active_classes, args.features, args.seed)

    classifier = net[-1]
    if hvd.rank() == 0:
        print(f"{mesh}: {size} ranks, classifier {args.hidden} -> {args.classes} classes, "
              f"{classifier.weight.shape[0]} classes per rank", flush=True)
    first = last = None
    start = time.time()
    for step in range(args.steps):
        x, y = data.batch(step, mesh.dp_rank, args.batch_size)
        with autograd.record():
            scores = net(x)                       # this rank's block of the class scores
            loss = loss_fn(scores, y)
        loss.backward()
        trainer.step(args.batch_size)
        # the loss is the same on an mp group; average it over the replicas
        mean_loss = hvd.allreduce(loss.mean(), op=hvd.Average, name="example.loss",
                                  process_set=mesh.dp_set).asscalar()
        first = mean_loss if first is None else first
        last = mean_loss
        if step % args.log_every == 0 or step == args.steps - 1:
            accuracy = parallel.sharded_accuracy(scores, y, mesh=mesh)
            if hvd.rank() == 0:
                print(f"step {step:4d}  loss {mean_loss:8.4f}  train accuracy {accuracy:.3f}  "
                      f"({time.time() - start:.1f}s)", flush=True)
    if hvd.rank() == 0:
        print(f"loss {first:.4f} -> {last:.4f} (ln {args.classes} = {np.log(args.classes):.4f})", flush=True)
    # Wait for every rank before exiting: a rank that shuts down stops all
    # ranks, and the other mp groups may still be finishing their last step.
    hvd.barrier()
    if args.check and not last < 0.5 * first:
        raise SystemExit(f"rank {hvd.rank()}: loss did not fall enough ({first:.4f} -> {last:.4f})")


if __name__ == "__main__":
    main()
