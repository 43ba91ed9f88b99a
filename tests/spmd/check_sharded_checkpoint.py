"""Checkpoints of sharded trainers (Note [Sharded optimizer states] in
mxplugin/training/sharding.py). argv: save DIR, resume DIR MODE... (each of
sharded, unsharded in turn), or save_on_rank_0_only DIR.

save (any size): a sharded trainer's states_bytes() equals an unsharded
one's after the same steps; rank 0 writes the parameters and save_states'
file. resume (any size): a trainer, sharded or not, loads them and trains on;
its weights equal gluon.Trainer's on one process for all the steps."""
import os
import pickle
import sys

from common import assert_close, finish, hvd, mx, np, start

from mxnet import autograd, gluon

import check_trainer

PARAMS = {"learning_rate": 0.05, "wd": 0.01}
BUCKET_BYTES = 44  # 11 float32 elements: slices of uneven sizes
SAVED_AT = 3
STEPS = 6
LIMIT_S = 5  # seconds, not the stall shutdown nor the cached resend (10 s, before Note [Fences] sent them in full)


def train(net, trainer, first, last, rank, size, shard=True):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for s, (x, y) in enumerate(check_trainer.batches(last)):
        if s < first:
            continue
        if shard:
            per = check_trainer.GLOBAL_BATCH // size
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        trainer.step(len(x))


def flat_states(data):
    states, optimizer = pickle.loads(data)
    out = {}
    for index, state in states.items():
        leaves = state if isinstance(state, (tuple, list)) else [state]
        out[index] = [leaf.asnumpy() for leaf in leaves if isinstance(leaf, mx.nd.NDArray)]
    return out, dict(optimizer._index_update_count)


def save(directory, rank, size):
    got = {}
    for shard in (True, False):
        net = check_trainer.build_net(1)
        trainer = hvd.DistributedTrainer(net.collect_params(), "adam", dict(PARAMS), bucket_bytes=BUCKET_BYTES,
                                         shard_optimizer_states=shard)
        train(net, trainer, 0, SAVED_AT, rank, size)
        got[shard] = flat_states(trainer.states_bytes())
        if shard:
            trainer.save_states(os.path.join(directory, "trainer.states"))  # every rank: it gathers
            if rank == 0:
                net.save_parameters(os.path.join(directory, "net.params"))
    (sharded, sharded_counts), (whole, whole_counts) = got[True], got[False]
    assert sorted(sharded) == sorted(whole) and sharded_counts == whole_counts, (sorted(sharded), sorted(whole))
    for index in whole:
        assert len(sharded[index]) == len(whole[index]) == 2, (index, sharded[index], whole[index])  # mean, var
        for a, b in zip(sharded[index], whole[index]):
            assert_close(a, b, rtol=1e-6, what=f"state of parameter {index}")
    hvd.barrier()
    assert os.path.exists(os.path.join(directory, "trainer.states"))


def resume(directory, shard, rank, size):
    ref_net = check_trainer.build_net(1)
    train(ref_net, gluon.Trainer(ref_net.collect_params(), "adam", dict(PARAMS), kvstore=None), 0, STEPS,
          rank, size, shard=False)
    net = check_trainer.build_net(1)
    net.load_parameters(os.path.join(directory, "net.params"))
    trainer = hvd.DistributedTrainer(net.collect_params(), "adam", dict(PARAMS), bucket_bytes=BUCKET_BYTES * 2,
                                     shard_optimizer_states=shard)
    trainer.load_states(os.path.join(directory, "trainer.states"))
    train(net, trainer, SAVED_AT, STEPS, rank, size)
    for (name, want), have in zip(ref_net.collect_params().items(), net.collect_params().values()):
        assert_close(have.data(), want.data().asnumpy(), rtol=1e-4, atol=1e-6,
                     what=f"resumed at {size} ranks ({'sharded' if shard else 'unsharded'}): {name}")


def save_on_rank_0_only(directory, rank, size):
    """Note [Fences] (src/core/message_conflicts.cc): save_states() of a trainer
    whose states are gathered, called on rank 0 only while the others train
    on, fails there and in the others' step at once, naming both, instead of
    stalling; afterwards the library works."""
    import time

    from mxnet.base import MXNetError

    from mxplugin import MismatchError

    trainers = {"sharded": dict(shard_optimizer_states=True),
                "powersgd": dict(compression=hvd.Compression.powersgd(rank=1, min_compression_rate=0,
                                                                       warmup_steps=0))}
    for mode, options in trainers.items():
        net = check_trainer.build_net(1)
        trainer = hvd.DistributedTrainer(net.collect_params(), "adam", dict(PARAMS), bucket_bytes=BUCKET_BYTES,
                                         **options)
        train(net, trainer, 0, 2, rank, size)
        t0 = time.time()
        try:
            if rank == 0:
                trainer.save_states(os.path.join(directory, f"{mode}.states"))
            else:
                train(net, trainer, 2, 3, rank, size)
                mx.nd.waitall()
        except (MismatchError, MXNetError) as e:  # this rank's fence; the others' step
            message = str(e)
        else:
            raise AssertionError(f"rank {rank}: {mode}: save_states on rank 0 only raised nothing")
        took = time.time() - t0
        for part in ("DistributedTrainer.save_states()", "must be called by every rank", "rank 0 is in it",
                     "went on without it", "on ranks 1" if size > 2 else "on rank 1"):
            assert part in message, f"rank {rank}: {mode}: expected {part!r} in:\n{message}"
        assert took < LIMIT_S, f"rank {rank}: {mode}: the error took {took:.1f} s"
        assert not os.path.exists(os.path.join(directory, f"{mode}.states")), f"{mode}: a file was written"
        out = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name=f"after.{mode}")
        assert (out.asnumpy() == size).all(), f"rank {rank}: after {mode}: {out.asnumpy()}"
        print(f"rank {rank}: {mode}: raised in {took:.1f} s", flush=True)


def main():
    rank, size = start()
    if sys.argv[1] == "save":
        save(sys.argv[2], rank, size)
    elif sys.argv[1] == "save_on_rank_0_only":
        save_on_rank_0_only(sys.argv[2], rank, size)
    else:  # each mode in turn, in one process (a rank start costs 2.5 s of CPU)
        for mode in sys.argv[3:]:
            resume(sys.argv[2], {"sharded": True, "unsharded": False}[mode], rank, size)
    finish()


if __name__ == "__main__":
    main()
