"""DistributedTrainer(shard_optimizer_states=True) on per-rank shards ==
gluon.Trainer on the whole batch (Note [Sharded optimizer states] in
mxplugin/training/sharding.py): every shardable optimizer, buckets of sizes that are
not multiples of the number of ranks, every hybridize mode; each rank holds
about 1/N of the states; what cannot be sharded is refused.

argv: case names (default: all)."""
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import gluon

import check_hybridize
import check_trainer
from mxplugin.errors import ArgumentError
from mxplugin.training.sharding import SHARDABLE_OPTIMIZERS, state_arrays

# lamb's bounds clip its weight norms, which are summed across slices (Note [Sharded LAMB])
SHARDED_PARAMS = dict(check_trainer.OPTIMIZER_PARAMS, lamb={"lower_bound": 0.1, "upper_bound": 0.5})
# 44 bytes: 11 float32 elements, so buckets of 11, 16+..., never a multiple of 2 or 3
ODD_BUCKET_BYTES = 44


def train_pair(name, rank, size, bucket_bytes):
    params = dict({"learning_rate": 0.05, "wd": 0.01}, **SHARDED_PARAMS.get(name, {}))
    ref_net, net = check_trainer.build_net(1), check_trainer.build_net(1)
    ref = check_trainer.train(ref_net, gluon.Trainer(ref_net.collect_params(), name, dict(params), kvstore=None),
                              False, 3, rank, size)
    trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), shard_optimizer_states=True,
                                     bucket_bytes=bucket_bytes)
    got = check_trainer.train(net, trainer, True, 3, rank, size)
    for k in ref:
        assert_close(got[k], ref[k], rtol=1e-4, atol=1e-6, what=f"sharded {name}, {bucket_bytes}-byte buckets, "
                                                                f"parameter {k}")
    return trainer


def check_optimizers(rank, size):
    for name in sorted(SHARDABLE_OPTIMIZERS):
        for bucket_bytes in (ODD_BUCKET_BYTES, 25 << 20):
            trainer = train_pair(name, rank, size, bucket_bytes)
            sizes = [s.size for s in trainer._shards.slices]
            whole = [s.bucket.size for s in trainer._shards.slices]
            assert sum(sizes) < sum(whole) or size == 1, f"{name}: slices {sizes} of buckets {whole}"


def check_hybridize_modes(rank, size):
    for mode in check_hybridize.MODES:
        for optimizer in check_hybridize.OPTIMIZERS:  # sgd, adam, lamb
            check_hybridize.run_pair(f"sharded {mode}/{optimizer}", rank, size, optimizer,
                                     lambda n, m=mode: check_hybridize.hybridize(n, m),
                                     shard_optimizer_states=True, bucket_bytes=ODD_BUCKET_BYTES * 3)


def check_state_bytes(rank, size):
    """Each rank holds its slices' states: at most 1/N of an unsharded
    trainer's, plus one element of rounding per bucket and state."""
    got = {}
    for shard in (False, True):
        net = check_trainer.build_net(1)
        trainer = hvd.DistributedTrainer(net.collect_params(), "adam", {"learning_rate": 0.01},
                                         shard_optimizer_states=shard, bucket_bytes=ODD_BUCKET_BYTES)
        check_trainer.train(net, trainer, True, 1, rank, size)
        got[shard] = trainer.optimizer_state_bytes()
    buckets = len(trainer._layout.buckets)
    slack = buckets * 2 * 4  # adam: 2 float32 states; one element of rounding each
    assert got[False] > 0 and got[True] <= got[False] / size + slack, (got, size, buckets)
    if size > 1:
        assert got[True] < got[False], got
    everyone = hvd.allgather_object(got[True])
    assert abs(sum(everyone) - got[False]) <= 0, (everyone, got[False])  # the slices partition the states
    say(f"state bytes rank {rank}: unsharded {got[False]}, sharded {got[True]}")


def check_refusals(rank, size):
    net = check_trainer.build_net(1)
    for name in ("nadam", "sgld", "lars"):
        try:
            hvd.DistributedTrainer(net.collect_params(), name, {}, shard_optimizer_states=True)
        except ArgumentError as e:
            assert f"'{name}'" in str(e) and "element-wise" in str(e), str(e)
        else:
            raise AssertionError(f"{name} was not refused")
    for options, word in (({"compression": hvd.Compression.fp16}, "compression"),
                          ({"local_sgd_steps": 2}, "local_sgd_steps")):
        try:
            hvd.DistributedTrainer(net.collect_params(), "sgd", {}, shard_optimizer_states=True, **options)
        except ArgumentError as e:
            assert word in str(e), str(e)
        else:
            raise AssertionError(f"{options} was not refused")


def float16_grads(step, rank, shapes):
    """Gradients exactly representable in float16, whose sums over ranks are
    too (multiples of 1/16 below 8)."""
    rng = np.random.RandomState(100 * step + rank)
    return [(rng.randint(-32, 33, shape) / 16.0).astype("float16") for shape in shapes]


def check_float16_multi_precision(rank, size):
    """float16 weights with multi_precision=True: each rank keeps the
    float32 master weights of its slice only. MXNet's CPU build has no
    float16 GEMM, so the gradients are set directly, as backward would."""
    shapes = [(7, 5), (13,), (3, 3)]
    for optimizer, params in (("sgd", {"momentum": 0.9}), ("adam", {}), ("lamb", {})):
        params = dict(params, learning_rate=0.05, wd=0.01, multi_precision=True)
        nets = []
        for shard in (None, True):
            mx.random.seed(4)
            pd = gluon.ParameterDict("fp16_")
            for i, shape in enumerate(shapes):
                pd.get(f"w{i}", shape=shape, dtype="float16")
            pd.initialize(mx.init.Uniform(0.5))
            if shard is None:
                trainer = gluon.Trainer(pd, optimizer, dict(params), kvstore=None)
            else:
                trainer = hvd.DistributedTrainer(pd, optimizer, dict(params), shard_optimizer_states=True,
                                                 bucket_bytes=22)  # 11 float16 elements
            nets.append((pd, trainer))
        for step in range(3):
            per_rank = [float16_grads(step, r, shapes) for r in range(size)]
            total = [sum(g[i].astype("float32") for g in per_rank).astype("float16") for i in range(len(shapes))]
            for (pd, trainer), grads in zip(nets, (total, per_rank[rank])):
                for p, g in zip(pd.values(), grads):
                    p.grad()[:] = mx.nd.array(g, dtype="float16")
                    p.data()._fresh_grad = True
                trainer.step(4 * (size if trainer is nets[0][1] else 1))
        (ref, _), (got, trainer) = nets
        for (name, want), have in zip(ref.items(), got.values()):
            assert have.data().dtype == np.float16
            assert_close(have.data().asnumpy().astype("float32"), want.data().asnumpy().astype("float32"),
                         rtol=1e-3, atol=1e-3, what=f"float16 multi-precision {optimizer}: {name}")
        # every state array (the float32 master weights included) covers this rank's slice only
        for sl in trainer._shards.slices:
            arrays = state_arrays(sl.state)
            assert any(a.dtype == np.float32 for a in arrays) or not sl.size, sl.state
            assert all(a.size == sl.size for a in arrays), ([a.size for a in arrays], sl.size)
        owned = sum(sl.size for sl in trainer._shards.slices)
        assert owned <= sum(int(np.prod(sh)) for sh in shapes) // size + len(trainer._shards.slices), owned

def check_process_set(rank, size):
    """A trainer on a process set of the first and last ranks shards over
    that set only; the rank outside it takes no part."""
    if size < 3:
        say(f"rank {rank}: process set case needs 3 ranks, not {size}: skipped")
        return
    members = [0, size - 1]
    ps = hvd.add_process_set(members)
    try:
        if rank in members:
            for name in ("adam", "lamb"):
                params = dict({"learning_rate": 0.05, "wd": 0.01}, **SHARDED_PARAMS.get(name, {}))
                ref_net, net = check_trainer.build_net(1), check_trainer.build_net(1)
                ref = check_trainer.train(ref_net, gluon.Trainer(ref_net.collect_params(), name, dict(params),
                                                                 kvstore=None), False, 3, 0, 1)
                trainer = hvd.DistributedTrainer(net.collect_params(), name, dict(params), process_set=ps,
                                                 shard_optimizer_states=True, bucket_bytes=ODD_BUCKET_BYTES)
                got = check_trainer.train(net, trainer, True, 3, ps.rank(), ps.size())
                for k in ref:
                    assert_close(got[k], ref[k], rtol=1e-4, atol=1e-6,
                                 what=f"sharded {name} on process set {members}, parameter {k}")
                whole = sum(s.bucket.size for s in trainer._shards.slices)
                assert sum(s.size for s in trainer._shards.slices) <= whole // 2 + len(trainer._shards.slices)
    finally:
        hvd.remove_process_set(ps)


CASES = {
    "optimizers": check_optimizers,
    "hybridize": check_hybridize_modes,
    "state_bytes": check_state_bytes,
    "refusals": check_refusals,
    "float16": check_float16_multi_precision,
    "process_set": check_process_set,
}


def main():
    rank, size = start()
    for name in sys.argv[1:] or CASES:
        CASES[name](rank, size)
        if rank == 0:
            say(f"ok {name}")
    finish()


if __name__ == "__main__":
    main()
