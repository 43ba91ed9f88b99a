"""DistributedTrainer(shard_optimizer_states=True) on per-rank shards ==
gluon.Trainer on the whole batch (Note [Sharded optimizer states] in
mxplugin/sharding.py): every shardable optimizer, buckets of sizes that are
not multiples of the number of ranks, every hybridize mode; each rank holds
about 1/N of the states; what cannot be sharded is refused.

argv: case names (default: all)."""
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import gluon

import check_hybridize
import check_trainer
from mxplugin.errors import ArgumentError
from mxplugin.sharding import SHARDABLE_OPTIMIZERS

# 44 bytes: 11 float32 elements, so buckets of 11, 16+..., never a multiple of 2 or 3
ODD_BUCKET_BYTES = 44


def train_pair(name, rank, size, bucket_bytes):
    params = dict({"learning_rate": 0.05, "wd": 0.01}, **check_trainer.OPTIMIZER_PARAMS.get(name, {}))
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
        for optimizer in ("sgd", "adam"):
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
    for name in ("lamb", "nadam", "sgld", "lars"):
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


CASES = {
    "optimizers": check_optimizers,
    "hybridize": check_hybridize_modes,
    "state_bytes": check_state_bytes,
    "refusals": check_refusals,
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
