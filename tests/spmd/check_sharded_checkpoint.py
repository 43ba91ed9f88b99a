"""Checkpoints of sharded trainers (Note [Sharded optimizer states] in
mxplugin/training/sharding.py). argv: save DIR, resume DIR MODE... (each of
sharded, unsharded in turn), or save_on_rank_0_only DIR.

save (any size): a sharded trainer's states_bytes() equals an unsharded
one's after the same steps; rank 0 writes the parameters and save_states'
file. resume (any size): a trainer, sharded or not, loads them and trains on;
its weights equal gluon.Trainer's on one process for all the steps."""
import os
import pickle
import re
import sys
import threading
import time

from common import assert_close, finish, hvd, mx, np, say, start

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
        for part in ("DistributedTrainer.save_states()", "must be called by every rank", "rank 0 is in it, while ",
                     "went on without it"):
            assert part in message, f"rank {rank}: {mode}: expected {part!r} in:\n{message}"
        # Each rank is named with what it submitted first, which depends on timing ("... 'p_1of2' on rank 1;
        # ... 'bucket1' on rank 2" or "... on ranks 1, 2"): every other rank is named.
        went_on = message.split("rank 0 is in it, while ")[1]
        named = {int(n) for group in re.findall(r"on ranks? ([\d, ]*\d)", went_on) for n in group.split(",")}
        assert named == set(range(1, size)), f"rank {rank}: {mode}: ranks {sorted(named)} named in:\n{message}"
        assert took < LIMIT_S, f"rank {rank}: {mode}: the error took {took:.1f} s"
        assert not os.path.exists(os.path.join(directory, f"{mode}.states")), f"{mode}: a file was written"
        out = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name=f"after.{mode}")
        assert (out.asnumpy() == size).all(), f"rank {rank}: after {mode}: {out.asnumpy()}"
        print(f"rank {rank}: {mode}: raised in {took:.1f} s", flush=True)


class _Gate(mx.operator.CustomOp):
    """Passes its input on once GATE is set: a collective whose input comes
    through it is pushed now and reaches the core only then."""

    def forward(self, is_train, req, in_data, out_data, aux):
        GATE.wait()
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError


@mx.operator.register("check_sharded_checkpoint_gate")
class _GateProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=False)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Gate()


GATE = threading.Event()


def pushed_before_the_fence_failed(rank, size):
    """Note [Diverged pushes] (src/core/diverged_pushes.cc): on the ranks that went on
    without rank 0's fence, a collective pushed before the fence failed but
    reaching the core after it (its input still computing: PowerSGD's P in a
    CI run, which then stalled), and one pushed after it in the same push
    batch (a trainer's step), fail with it at once; later calls work."""
    from mxnet.base import MXNetError

    from mxplugin.calls import push_batch
    from mxplugin.ops import fence

    if rank == 0:
        try:
            fence("check.gated()")
        except hvd.MismatchError as e:
            assert "went on without it" in str(e), str(e)
        else:
            raise AssertionError("rank 0: the fence the others went on without raised nothing")
    else:
        late = hvd.allreduce(mx.nd.Custom(mx.nd.ones(3), op_type="check_sharded_checkpoint_gate"), name="gated.late")
        try:  # the gate opens whatever happens here: an assertion must not leave the exit waiting for it
            with push_batch():
                first = hvd.allreduce(mx.nd.ones(3), name="gated.first")
                try:
                    first.wait_to_read()
                except MXNetError as e:
                    assert "check.gated() must be called by every rank" in str(e), str(e)
                else:
                    raise AssertionError(f"rank {rank}: a collective in place of the fence raised nothing")
                t0 = time.time()
                second = hvd.allreduce(mx.nd.ones(3), name="gated.second")
        finally:
            GATE.set()
        for what, out in (("pushed after it in the batch", second), ("pushed before it", late)):
            try:
                out.wait_to_read()
            except MXNetError as e:
                assert "check.gated() must be called by every rank" in str(e), f"rank {rank}: {what}: {e}"
            else:
                raise AssertionError(f"rank {rank}: a collective {what} did not fail with the fence")
        took = time.time() - t0
        assert took < LIMIT_S, f"rank {rank}: the pushed collectives failed after {took:.1f} s"
    out = hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name="after.gated")
    assert (out.asnumpy() == size).all(), f"rank {rank}: after the gated fence: {out.asnumpy()}"
    say(f"rank {rank}: diverged pushes failed with the fence")


def main():
    rank, size = start()
    if sys.argv[1] == "save":
        save(sys.argv[2], rank, size)
    elif sys.argv[1] == "save_on_rank_0_only":
        save_on_rank_0_only(sys.argv[2], rank, size)
        pushed_before_the_fence_failed(rank, size)
    else:  # each mode in turn, in one process (a rank start costs 2.5 s of CPU)
        for mode in sys.argv[3:]:
            resume(sys.argv[2], {"sharded": True, "unsharded": False}[mode], rank, size)
    finish()


if __name__ == "__main__":
    main()
