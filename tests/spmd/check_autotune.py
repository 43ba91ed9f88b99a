"""DistributedTrainer(autotune=True) (Note [Autotune] in
mxplugin/training/autotune.py): every rank keeps the same bucket_bytes, the
weights equal an untuned trainer's on the same data, rank 0 logs every
candidate to MXPLUGIN_AUTOTUNE_LOG; ranks asking for different tuning fail at
the first step, naming themselves.

argv: cases (plain, static_shape, sharded, mismatch); env: the test sets
MXPLUGIN_AUTOTUNE_WARMUP_STEPS, MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE and
MXPLUGIN_AUTOTUNE_LOG."""
import csv
import os
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import autograd, gluon

from mxplugin.errors import ArgumentError
from mxplugin.functions import allgather_object

BATCH = 4
CASES = {
    "plain": dict(optimizer="sgd", params={"learning_rate": 0.05, "momentum": 0.9}, hybridize=None),
    "static_shape": dict(optimizer="adam", params={"learning_rate": 0.01},
                         hybridize={"static_alloc": True, "static_shape": True}),
    "sharded": dict(optimizer="adam", params={"learning_rate": 0.01}, hybridize=None,
                    options={"shard_optimizer_states": True}),
}


def build_net(hybridize):
    mx.random.seed(5)
    net = gluon.nn.HybridSequential()
    # layers of different sizes, so that bucket sizes cut them differently
    net.add(gluon.nn.Dense(32, in_units=8, activation="relu"), gluon.nn.Dense(16, in_units=32, activation="relu"),
            gluon.nn.Dense(8, in_units=16, activation="relu"), gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Uniform(0.3))
    if hybridize is not None:
        net.hybridize(**hybridize)
    return net


def batch(step, rank):
    rng = np.random.RandomState(100 * step + rank)
    return (mx.nd.array(rng.uniform(-1, 1, (BATCH, 8)).astype("float32")),
            mx.nd.array(rng.randint(0, 3, BATCH).astype("float32")))


def train(net, trainer, steps, rank):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for step in range(steps):
        x, y = batch(step, rank)
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(BATCH)
    mx.nd.waitall()


def check_case(name, rank, size):
    case = CASES[name]
    warmup = int(os.environ["MXPLUGIN_AUTOTUNE_WARMUP_STEPS"])
    per_sample = int(os.environ["MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE"])
    tuned_net, plain_net = build_net(case["hybridize"]), build_net(case["hybridize"])
    options = case.get("options", {})
    tuned = hvd.DistributedTrainer(tuned_net.collect_params(), case["optimizer"], dict(case["params"]),
                                   prefix=f"{name}.tuned.", autotune=True, **options)
    plain = hvd.DistributedTrainer(plain_net.collect_params(), case["optimizer"], dict(case["params"]),
                                   prefix=f"{name}.plain.", autotune=False, **options)
    # enough steps to try every candidate (at most 7) and train on after the choice
    steps = warmup + 7 * (per_sample + 1) + 4
    train(tuned_net, tuned, steps, rank)
    train(plain_net, plain, steps, rank)
    tuner = tuned._tuner
    assert tuner.done and tuner.chosen is not None, f"rank {rank}: {name}: tuning did not finish in {steps} steps"
    tried = len(tuner._candidates)
    assert tried >= 3, f"rank {rank}: {name}: only {tried} bucket cuts tried"
    assert not plain._tuner.settings.enabled and plain._tuner.chosen is None
    everyone = allgather_object((tuner.chosen, tried, tuned._bucket_bytes), name=f"{name}.choices")
    assert len(set(everyone)) == 1, f"{name}: the ranks chose differently: {everyone}"
    assert tuned._bucket_bytes == tuner.chosen
    for (pname, p), q in zip(tuned_net.collect_params().items(), plain_net.collect_params().values()):
        assert_close(p.data(), q.data().asnumpy(), rtol=1e-6, atol=1e-7, what=f"{name}: {pname} tuned vs untuned")
    say(f"rank {rank}: {name}: chose bucket_bytes {tuner.chosen} of {tried} cuts; weights equal untuned")
    return tried


def check_log(rows_expected):
    path = os.environ["MXPLUGIN_AUTOTUNE_LOG"]
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for name, tried in rows_expected.items():
        mine = [r for r in rows if r["trainer"] == f"{name}.tuned"]
        assert len(mine) == tried, f"{name}: {len(mine)} rows logged for {tried} candidates: {mine}"
        assert sum(int(r["chosen"]) for r in mine) == 1, f"{name}: not one chosen row: {mine}"
        assert all(float(r["median_step_seconds"]) > 0 and int(r["steps"]) > 0 for r in mine), mine


def check_mismatch(rank):
    net = build_net(None)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, prefix="mismatch.",
                                     autotune=(rank == 0))
    x, y = batch(0, rank)
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    try:
        trainer.step(BATCH)
    except ArgumentError as e:
        text = str(e)
        assert "different tuning" in text and "rank 0" in text and "autotune off" in text, text
        say(f"rank {rank}: mismatch raised: {text}")
        return
    raise AssertionError(f"rank {rank}: ranks with different autotune settings were not refused")


def main():
    rank, size = start()
    names = sys.argv[1:] or ["plain", "static_shape", "sharded"]
    if names == ["mismatch"]:
        check_mismatch(rank)
    else:
        tried = {name: check_case(name, rank, size) for name in names}
        hvd.barrier()
        if rank == 0:
            check_log(tried)
    finish()


if __name__ == "__main__":
    main()
