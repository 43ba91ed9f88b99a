"""DistributedTrainer on per-rank shards == gluon.Trainer on the whole batch,
for every optimizer MXNet registers, with a frozen parameter and lr_mult /
wd_mult different from the rest. argv: optimizer names (default: all)."""
import sys

from common import assert_close, finish, hvd, mx, np, start

from mxnet import autograd, gluon

OPTIMIZER_PARAMS = {
    "sgd": {"momentum": 0.9}, "ccsgd": {"momentum": 0.9}, "nag": {"momentum": 0.9},
    "signum": {"momentum": 0.9}, "rmsprop": {"centered": True}, "lbsgd": {"momentum": 0.9},
    "groupadagrad": {}, "test": {},
}
GLOBAL_BATCH = 12


def build_net(seed, only_2d=False):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, in_units=10, activation="tanh", bias_initializer=mx.init.Uniform(0.5)),
            gluon.nn.Dense(4, in_units=16))
    net.initialize(mx.init.Uniform(0.5))
    net[0].bias.grad_req = "null"      # frozen
    net[1].weight.lr_mult = 0.5
    net[1].bias.wd_mult = 0.0
    if only_2d:  # GroupAdaGrad updates 2-D weights only
        net[1].bias.grad_req = "null"
    net.hybridize()
    return net


def batches(steps):
    rng = np.random.RandomState(7)
    for _ in range(steps):
        yield rng.uniform(-1, 1, (GLOBAL_BATCH, 10)).astype("float32"), rng.randint(0, 4, GLOBAL_BATCH)


def train(net, trainer, shard, steps, rank, size):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for x, y in batches(steps):
        if shard:
            per = GLOBAL_BATCH // size
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        trainer.step(len(x))
    return {k: v.data().asnumpy() for k, v in zip(range(4), net.collect_params().values())}


def check(name, rank, size, steps=3):
    params = dict({"learning_rate": 0.05, "wd": 0.01}, **OPTIMIZER_PARAMS.get(name, {}))
    if name == "groupadagrad":
        params.pop("wd")  # GroupAdaGrad rejects weight decay
    ref_net, dist_net = build_net(1, name == "groupadagrad"), build_net(1, name == "groupadagrad")
    mx.random.seed(3)  # same random stream (sgld) for both runs
    ref = train(ref_net, gluon.Trainer(ref_net.collect_params(), name, dict(params), kvstore=None),
                False, steps, rank, size)
    mx.random.seed(3)
    trainer = hvd.DistributedTrainer(dist_net.collect_params(), name, dict(params))
    got = train(dist_net, trainer, True, steps, rank, size)
    for k in ref:
        assert_close(got[k], ref[k], rtol=1e-4, atol=1e-6, what=f"{name} parameter {k}")
    assert_close(dist_net[0].bias.data(), build_net(1)[0].bias.data().asnumpy(), what="frozen bias unchanged")


def main():
    rank, size = start()
    names = sys.argv[1:] or sorted(mx.optimizer.Optimizer.opt_registry)
    for name in names:
        check(name, rank, size)
    finish()


if __name__ == "__main__":
    main()
