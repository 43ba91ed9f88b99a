"""Elastic training of an MLP on the digits bundled with the examples: the job goes
on when ranks are lost or hosts come and go (mxplugin.elastic).

    mxplugin-run --min-np 2 --max-np 3 -H host1:1,host2:1,host3:1 python examples/mxnet_elastic_digits.py
    mxplugin-run --min-np 1 --max-np 4 --host-discovery-script "examples/discover_hosts.sh hosts.txt" \
        python examples/mxnet_elastic_digits.py

examples/discover_hosts.sh lists the hosts of hosts.txt, a "host:slots" line each,
which you may edit while the job runs (examples/discover_hosts.sh --help).

Each rank takes --batch-size samples per step, so the global batch is
batch-size x ranks, and the learning rate follows it (lr = base lr x ranks,
set again after every reset). The state (weights, optimizer, epoch, batch)
is committed every --commit-every steps and at the end of every epoch: a
lost rank costs at most the steps since the last commit. With --compression
powersgd the PowerSGD state (its Q factors and error buffers) is part of it,
carried into a world of another size.

With --until-exists PATH the training goes on past --epochs, an epoch at a
time, until the file PATH exists: a run that something else ends, once it
has seen what it waits for (a new world, say).
"""
import argparse
import logging
import os
import pickle
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxplugin as hvd
from mxplugin.training.powersgd import STATE_KEY as POWERSGD_STATE  # its entry in the trainer's states
from mxnet_digits import evaluate, load_digits  # the data and the test of examples/mxnet_digits.py


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set (default 20)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--base-lr", type=float, default=0.05, help="learning rate per rank (default 0.05)")
    p.add_argument("--optimizer", default="sgd", help="sgd (with --momentum) or any other MXNet optimizer by name "
                                                       "(default sgd)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    p.add_argument("--shard-optimizer-states", action="store_true",
                   help="each rank keeps 1/N of the optimizer states (re-sharded after every reset)")
    p.add_argument("--compression", choices=["none", "fp16", "bf16", "powersgd"], default="none",
                   help="how gradients travel (default none): as float16, bfloat16, or as PowerSGD's low-rank "
                        "factors with error feedback (state carried across resets)")
    p.add_argument("--powersgd-rank", type=int, default=4, help="--compression powersgd: the factors' rank (default 4)")
    p.add_argument("--powersgd-warmup", type=int, default=10,
                   help="--compression powersgd: uncompressed steps first (default 10)")
    p.add_argument("--hidden", type=int, default=128, help="hidden units (default 128)")
    p.add_argument("--commit-every", type=int, default=5, help="steps between commits (default 5)")
    p.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    p.add_argument("--log-steps", action="store_true", help="rank 0 prints a line per step and per commit")
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit with status 1 if the final test accuracy is below this")
    p.add_argument("--until-exists", metavar="PATH",
                   help="after --epochs, keep training until the file PATH exists (rank 0 looks at the end of "
                        "every epoch)")
    return p.parse_args()


def main():
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    hvd.init()
    mx.random.seed(args.seed + hvd.rank())  # differing starts: the state's sync makes them equal
    (x_train, y_train), (x_test, y_test) = load_digits(args.seed)

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(args.hidden, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 64)))
    optimizer_params = {"learning_rate": args.base_lr * hvd.size()}
    if args.optimizer == "sgd":
        optimizer_params["momentum"] = args.momentum
    if args.compression == "powersgd":
        compression = hvd.Compression.powersgd(rank=args.powersgd_rank, warmup_steps=args.powersgd_warmup)
    else:
        compression = getattr(hvd.Compression, args.compression)
    trainer = hvd.DistributedTrainer(net.collect_params(), args.optimizer, optimizer_params,
                                     shard_optimizer_states=args.shard_optimizer_states, compression=compression)
    # sample: where this epoch's pass over the data is (a sample offset, not
    # a batch index, so that a world of another size goes on from the same
    # place); step: steps taken in all.
    state = hvd.elastic.GluonState(net, trainer, epoch=0, sample=0, step=0)

    def on_reset():  # a new world: the learning rate follows the global batch
        trainer.set_learning_rate(args.base_lr * hvd.size())
        if args.log_steps:  # every rank: where it resumes, digests of its weights and optimizer states
            digest = sum(float(p.data().sum().asscalar()) for p in net.collect_params().values())
            states, compressed = states_digests()
            logging.info("rank %d of %d resumes at step %d, weights digest %.6f, states digest %s, "
                         "%d bytes of optimizer state held%s", hvd.rank(), hvd.size(), state.step, digest,
                         states, trainer.optimizer_state_bytes(), compressed)

    state.register_reset_callbacks([on_reset])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def states_digests():
        """Digests of the whole optimizer states and, with PowerSGD, of its
        state (", powersgd step S, Q digest D, errors digest E": reductions
        seen, the Q factors, the errors summed over the ranks), or "" (every
        rank takes part: sharded states are gathered, PowerSGD's errors summed)."""
        states, _ = pickle.loads(trainer.states_bytes())
        powersgd = states.pop(POWERSGD_STATE, None)
        arrays = [a for st in states.values() for a in (st if isinstance(st, (tuple, list)) else [st])
                  if isinstance(a, mx.nd.NDArray)]
        digest = "%.6f" % sum(float(mx.nd.abs(a).sum().asscalar()) for a in arrays)
        if powersgd is None:
            return digest, ""
        factors = powersgd["factors"].values()
        return digest, ", powersgd step %d, Q digest %.6f, errors digest %.6f" % (
            powersgd["steps"], sum(float(np.abs(f["q"]).sum()) for f in factors),
            sum(float(np.abs(f["error_sum"]).sum()) for f in factors))

    def commit():
        if args.log_steps:  # before the commit, which a lost peer may cut short after its snapshot
            digest, compressed = states_digests()
            if hvd.rank() == 0:
                logging.info("committing %d: states digest %s%s", state.commits + 1, digest, compressed)
        state.commit()
        if args.log_steps and hvd.rank() == 0:
            logging.info("commit %d: step %d", state.commits, state.step)

    def another_epoch():
        if state.epoch < args.epochs:
            return True
        if args.until_exists is None:
            return False
        # Rank 0 looks and every rank takes its answer: ranks that looked for
        # themselves could see the file appear at different moments and part.
        missing = not os.path.exists(args.until_exists) if hvd.rank() == 0 else None
        return hvd.broadcast_object(missing, root_rank=0, name="until_exists")

    @hvd.elastic.run
    def train(state):
        rank, size = hvd.rank(), hvd.size()
        per_step = args.batch_size * size
        while another_epoch():
            order = np.random.RandomState(args.seed + state.epoch).permutation(len(x_train))
            start, done = time.time(), 0
            while state.sample + per_step <= len(x_train):
                idx = order[state.sample:state.sample + per_step][rank * args.batch_size:(rank + 1) * args.batch_size]
                data, label = mx.nd.array(x_train[idx]), mx.nd.array(y_train[idx])
                with autograd.record():
                    loss = loss_fn(net(data), label)
                loss.backward()
                trainer.step(args.batch_size)
                loss.wait_to_read()
                state.sample, state.step, done = state.sample + per_step, state.step + 1, done + 1
                if args.log_steps and rank == 0:
                    logging.info("step %d: epoch %d, %d ranks", state.step, state.epoch, size)
                if state.step % args.commit_every == 0:
                    commit()
            elapsed = time.time() - start
            acc = evaluate(net, x_test, y_test)
            if rank == 0:
                logging.info("epoch %d: test accuracy %.4f, %.0f samples/s (%d rank%s)", state.epoch + 1, acc,
                             done * per_step / max(elapsed, 1e-9), size, "" if size == 1 else "s")
            state.epoch, state.sample = state.epoch + 1, 0
            commit()
        return evaluate(net, x_test, y_test)

    acc = train(state)
    if hvd.rank() == 0:
        logging.info("final test accuracy %.4f", acc)
    hvd.shutdown()
    if acc < args.min_accuracy:
        raise SystemExit(f"test accuracy {acc:.4f} is below --min-accuracy {args.min_accuracy}")


if __name__ == "__main__":
    main()
