"""Row-sparse gradients (nn.Embedding(..., sparse_grad=True)) across ranks
(Note [Sparse gradients travel as rows] in mxplugin/training/sparse_rows.py):
DistributedTrainer on each rank's batch == gluon.Trainer in one process on
every rank's batch in one backward, for optimizers whose sparse update is
lazy (SGD with momentum, Adam) and not (SGD with lazy_update=False), AdaGrad
and FTRL; ranks touch different and overlapping rows, and the last rank
touches none in two of the steps. Also sparse_as_dense=True (== a dense
embedding in one process), hybridized, DistributedOptimizer and
kvstore='mxplugin'. argv: case names (default: all)."""
import sys

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import autograd, gluon

rank, size = start()
VOCAB, WIDTH, TOKENS, BATCH, STEPS = 60, 6, 3, 4, 4
OPTIMIZERS = {"sgd": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}),
              "sgd lazy_update=False": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01,
                                                "lazy_update": False}),
              "adam": ("adam", {"learning_rate": 0.05, "wd": 0.01}), "adagrad": ("adagrad", {"learning_rate": 0.1}),
              "ftrl": ("ftrl", {"learning_rate": 0.1})}


def optimizer_of(label):
    name, params = OPTIMIZERS[label]
    return name, dict(params)


class Model(gluon.Block):
    """Features through a dense layer, plus the summed embeddings of the
    sample's tokens when the batch has any (tokens None: the embedding is
    not used, its gradient not written)."""

    def __init__(self, sparse_grad=True):
        super().__init__()
        self.embedding = gluon.nn.Embedding(VOCAB, WIDTH, sparse_grad=sparse_grad)
        self.features = gluon.nn.Dense(WIDTH, in_units=5)
        self.out = gluon.nn.Dense(3, in_units=WIDTH)

    def forward(self, tokens, features):
        h = self.features(features)
        if tokens is not None:
            h = h + self.embedding(tokens).sum(axis=1)
        return self.out(mx.nd.tanh(h))


class HybridModel(gluon.HybridBlock):
    def __init__(self):
        super().__init__()
        self.embedding = gluon.nn.Embedding(VOCAB, WIDTH, sparse_grad=True)
        self.out = gluon.nn.Dense(3, in_units=WIDTH)

    def hybrid_forward(self, F, tokens):
        return self.out(F.tanh(self.embedding(tokens).sum(axis=1)))


def build(model):
    net = model()
    net.initialize()
    rng = np.random.RandomState(1)
    for _, p in sorted(net.collect_params().items()):
        p.set_data(mx.nd.array(rng.uniform(-0.5, 0.5, p.shape)))
    return net


def batch(step, r):
    """Rank r's batch at `step`: tokens from rows [10r, 10r + 15) (each rank
    overlaps its neighbours'), or None when the last rank touches none (steps 1, 2)."""
    rng = np.random.RandomState(100 * step + r)
    tokens = rng.randint(10 * r, 10 * r + 15, (BATCH, TOKENS)).astype("float32")
    if size > 1 and r == size - 1 and step in (1, 2):
        tokens = None
    return tokens, rng.uniform(-1, 1, (BATCH, 5)).astype("float32"), rng.randint(0, 3, BATCH).astype("float32")


def nd(a):
    return None if a is None else mx.nd.array(a)


def loss_of(net, parts, hybrid):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    total = 0
    for tokens, features, labels in parts:
        out = net(nd(tokens)) if hybrid else net(nd(tokens), nd(features))
        total = total + loss_fn(out, nd(labels)).sum()
    return total


def train(net, trainer, everyone, hybrid=False):
    """STEPS steps on this rank's batches, or (everyone) on every rank's in one backward."""
    for step in range(STEPS):
        parts = [batch(step, r) for r in (range(size) if everyone else [rank])]
        if hybrid:
            parts = [p if p[0] is not None else batch(step, 0) for p in parts]
        with autograd.record():
            loss = loss_of(net, parts, hybrid)
        loss.backward()
        trainer.step(BATCH)  # the per-rank batch: DistributedTrainer's step scales by ranks
    return {name: p.data().asnumpy() for name, p in net._collect_params_with_prefix().items()}


def reference(optimizer, model=Model, hybrid=False):
    net = build(model)
    if hybrid:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), *optimizer_of(optimizer), kvstore=None)
    trainer._scale = 1.0 / size  # steps on every rank's batches, each stepped as BATCH: the mean over size * BATCH
    return train(net, trainer, True, hybrid)


def same(got, want, what):
    for name in want:
        assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, what=f"{what}: {name}")
    say(f"ok {what} {rank}")


def case_optimizers():
    for optimizer in OPTIMIZERS:
        net = build(Model)
        trainer = hvd.DistributedTrainer(net.collect_params(), *optimizer_of(optimizer))
        got = train(net, trainer, False)
        assert net.embedding.weight.grad().stype == "row_sparse"
        same(got, reference(optimizer), f"sparse {optimizer}")


def case_dense():
    """sparse_as_dense=True: a dense allreduce and the dense update, as one
    process with a dense-gradient embedding."""
    net = build(Model)
    trainer = hvd.DistributedTrainer(net.collect_params(), *optimizer_of("sgd"), sparse_as_dense=True)
    same(train(net, trainer, False), reference("sgd", lambda: Model(sparse_grad=False)), "sparse_as_dense")


def case_sharded():
    """shard_optimizer_states=True: the dense parameters' states are sharded,
    the embedding's (updated from the gathered rows on every rank) are whole."""
    net = build(Model)
    trainer = hvd.DistributedTrainer(net.collect_params(), *optimizer_of("adam"), shard_optimizer_states=True)
    same(train(net, trainer, False), reference("adam"), "sparse with sharded states")


def case_hybrid():
    net = build(HybridModel)
    net.hybridize()
    trainer = hvd.DistributedTrainer(net.collect_params(), *optimizer_of("adam"))
    same(train(net, trainer, False, hybrid=True), reference("adam", HybridModel, hybrid=True), "sparse hybridized")


def case_wrappers():
    """Every rank touches rows in every step: gluon.Trainer's own stale check
    runs before a wrapped optimizer or kvstore sees the gradient."""
    for label, make in {"DistributedOptimizer": lambda p: gluon.Trainer(
                            p, hvd.DistributedOptimizer(mx.optimizer.create("adam", **optimizer_of("adam")[1])),
                            kvstore=None),
                        "kvstore=mxplugin": lambda p: gluon.Trainer(p, *optimizer_of("adam"),
                                                                    kvstore="mxplugin")}.items():
        net = build(HybridModel)
        same(train(net, make(net.collect_params()), False, hybrid=True), reference("adam", HybridModel, hybrid=True),
             f"sparse {label}")


def case_error():
    """A collective of a row_sparse array is refused on every rank, saying what to do."""
    try:
        hvd.allreduce(mx.nd.sparse.zeros("row_sparse", (VOCAB, WIDTH)), name="sparse.refused")
    except ValueError as e:  # mxplugin's ArgumentError
        assert "sparse NDArrays are not supported by collectives" in str(e) and "as rows" in str(e), str(e)
        say(f"ok refused {rank}")
    else:
        raise AssertionError("allreduce of a row_sparse array did not raise")


CASES = {"error": case_error, "optimizers": case_optimizers, "dense": case_dense, "sharded": case_sharded,
         "hybrid": case_hybrid, "wrappers": case_wrappers}
for name in sys.argv[1:] or CASES:
    CASES[name]()
finish()
