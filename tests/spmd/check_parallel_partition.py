"""The partitioner (parallel.parallelize) against the serial network it
starts from, on the mesh dp = size / 2 x mp = 2 (2 ranks: 1 x 2; 4 ranks:
2 x 2). Every rank recomputes the serial network on the whole global batch;
each dp group trains the parallelized one on its block of it.

argv: one or more of, each run in turn and followed by "ok NAME RANK":
  mlp          a plain-Gluon MLP: hand-written and auto plans, forward and
               training against the serial MLP, serial checkpoints both ways
  transformer  a plain-Gluon language model (vocabulary-parallel embedding, a
               transformer block with attention split by heads and a
               column -> row feed-forward, sharded classifier): the same,
               plus hybridize() and per-rank parameter bytes
  errors       what cannot be split is refused, naming the child, and the
               network is left as it was
"""
import math
import os
import shutil
import sys
import tempfile

import common
from common import assert_close, hvd, mx, np

from mxnet import autograd, gluon
from mxnet.gluon import nn

from mxplugin import parallel
from mxplugin.errors import ArgumentError

rank, size = common.start()
mesh = parallel.ProcessMesh(size // 2, 2)
MP = mesh.mp
PER_GROUP, STEPS, SEED = 3, 4, 5
OPT = {"learning_rate": 0.1, "momentum": 0.9}
TOL = dict(rtol=1e-5, atol=1e-5)


# --- serial networks, written with plain Gluon ------------------------------------

D, H1, H2, C = 8, 16, 8, 24


def serial_mlp():
    net = nn.HybridSequential()
    net.add(nn.Dense(H1, in_units=D), nn.Activation("relu"), nn.Dropout(0.0),
            nn.Dense(H2, in_units=H1, activation="tanh"), nn.Dense(C, in_units=H2))
    return net


MLP_PLAN = {"0": parallel.ColwiseParallel(), "3": parallel.RowwiseParallel(), "4": parallel.ShardedOutput()}

V, U, HEADS, HIDDEN, T = 32, 16, 4, 32, 5


class SelfAttention(gluon.HybridBlock):
    """Multi-head self-attention as a user writes it: the forward reads the
    head count and the width from attributes."""

    def __init__(self, units, num_heads, **kwargs):
        super().__init__(**kwargs)
        self._units, self._num_heads = units, num_heads
        with self.name_scope():
            self.query = nn.Dense(units, in_units=units, flatten=False)
            self.key = nn.Dense(units, in_units=units, flatten=False)
            self.value = nn.Dense(units, in_units=units, flatten=False)
            self.proj = nn.Dense(units, in_units=units, flatten=False)

    def _split_heads(self, F, x):  # (N, T, units) -> (N * heads, T, head size)
        x = F.transpose(F.reshape(x, shape=(0, 0, self._num_heads, -1)), axes=(0, 2, 1, 3))
        return F.reshape(x, shape=(-3, 0, 0))

    def hybrid_forward(self, F, x):
        q, k, v = (self._split_heads(F, layer(x)) for layer in (self.query, self.key, self.value))
        scale = 1.0 / math.sqrt(self._units // self._num_heads)
        weights = F.softmax(F.batch_dot(q, k, transpose_b=True) * scale, axis=-1)
        heads = F.reshape(F.batch_dot(weights, v), shape=(-4, -1, self._num_heads, 0, 0))
        return self.proj(F.reshape(F.transpose(heads, axes=(0, 2, 1, 3)), shape=(0, 0, self._units)))


class TransformerBlock(gluon.HybridBlock):
    def __init__(self, units, num_heads, hidden, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.attn = SelfAttention(units, num_heads)
            self.norm1 = nn.LayerNorm(in_channels=units)
            self.ffn = nn.HybridSequential()
            self.ffn.add(nn.Dense(hidden, in_units=units, flatten=False), nn.GELU(),
                         nn.Dense(units, in_units=hidden, flatten=False))
            self.norm2 = nn.LayerNorm(in_channels=units)

    def hybrid_forward(self, F, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ffn(x))


def serial_lm():
    net = nn.HybridSequential()
    net.add(nn.Embedding(V, U), TransformerBlock(U, HEADS, HIDDEN), nn.Dense(V, in_units=U, flatten=False))
    return net


LM_PLAN = {"0": parallel.VocabParallel(), "1.attn": parallel.HeadParallel(per_rank=("_units",)),
           "1.ffn.0": parallel.ColwiseParallel(), "1.ffn.2": parallel.RowwiseParallel(),
           "2": parallel.ShardedOutput()}


# --- helpers ----------------------------------------------------------------------

def initialised(build, seed=SEED):
    mx.random.seed(seed)
    net = build()
    net.initialize(mx.init.Xavier())
    return net


def global_batch(kind, step):
    rng = np.random.RandomState(1000 * step + 17)
    n = mesh.dp * PER_GROUP
    if kind == "mlp":
        return rng.uniform(-1, 1, (n, D)).astype("float32"), rng.randint(0, C, n).astype("float32")
    return rng.randint(0, V, (n, T)).astype("float32"), rng.randint(0, V, (n, T)).astype("float32")


MY_ROWS = slice(mesh.dp_rank * PER_GROUP, (mesh.dp_rank + 1) * PER_GROUP)
MY_CLASSES = slice(mesh.mp_rank * (C // MP), (mesh.mp_rank + 1) * (C // MP))
MY_WORDS = slice(mesh.mp_rank * (V // MP), (mesh.mp_rank + 1) * (V // MP))


def serial_params(net):
    return {k: p.data().asnumpy() for k, p in net._collect_params_with_prefix().items()}


def same_as_serial(pnet, serial, what):
    gathered = {k: v.asnumpy() for k, v in parallel.gather_serial_parameters(pnet).items()}
    expected = serial_params(serial)
    assert sorted(gathered) == sorted(expected), (rank, what, sorted(gathered), sorted(expected))
    for name, value in expected.items():
        assert_close(gathered[name], value, **TOL, what=f"{what}: {name}")


def check_forward(pnet, serial, kind, my_outputs, what):
    x, _ = global_batch(kind, 99)
    with autograd.predict_mode():
        assert_close(pnet(mx.nd.array(x)), serial(mx.nd.array(x)).asnumpy()[..., my_outputs], **TOL,
                     what=f"{what}: forward")


def train_both(pnet, serial, kind, what):
    """STEPS steps of SGD momentum: the serial net on the global batch with
    SoftmaxCrossEntropyLoss, the parallel one on this replica's rows with
    ShardedSoftmaxCrossEntropyLoss and DistributedTrainer(mesh=)."""
    serial_loss, sharded_loss = gluon.loss.SoftmaxCrossEntropyLoss(), parallel.ShardedSoftmaxCrossEntropyLoss(mesh)
    serial_trainer = gluon.Trainer(serial.collect_params(), "sgd", OPT, kvstore=None)
    trainer = hvd.DistributedTrainer(pnet.collect_params(), "sgd", OPT, mesh=mesh)
    for step in range(STEPS):
        x, y = global_batch(kind, step)
        with autograd.record():
            ref = serial_loss(serial(mx.nd.array(x)), mx.nd.array(y))
        ref.backward()
        serial_trainer.step(x.shape[0])
        with autograd.record():
            loss = sharded_loss(pnet(mx.nd.array(x[MY_ROWS])), mx.nd.array(y[MY_ROWS]))
        loss.backward()
        trainer.step(PER_GROUP)
        assert_close(loss, ref.asnumpy()[MY_ROWS], **TOL, what=f"{what}: loss at step {step}")
    same_as_serial(pnet, serial, f"{what}: after {STEPS} steps")


def shared_dir():
    path = tempfile.mkdtemp(prefix="mxp_partition_") if rank == 0 else None
    return hvd.broadcast_object(path, root_rank=0, name="partition.dir")


def check_checkpoints(build, plan, kind, outputs, what):
    """A serial checkpoint loaded, parallelized, trained and gathered back
    into a file that plain Gluon loads; and the reverse, a serial file loaded
    into the parallelized network."""
    folder = shared_dir()
    try:
        start, trained = os.path.join(folder, "start.params"), os.path.join(folder, "trained.params")
        if rank == 0:
            initialised(build, seed=SEED + 1).save_parameters(start)
        hvd.barrier()
        serial = build()
        serial.load_parameters(start)
        pnet = build()
        pnet.load_parameters(start)
        parallel.parallelize(pnet, mesh, plan)
        check_forward(pnet, serial, kind, outputs, f"{what} loaded from a serial checkpoint")
        train_both(pnet, serial, kind, f"{what} loaded")
        parallel.save_serial_parameters(pnet, trained)
        hvd.barrier()
        plain = build()
        plain.load_parameters(trained)
        assert_close_params(plain, serial, f"{what}: trained, gathered, loaded by plain Gluon")
        # the reverse: a serial file into an uninitialised parallelized network
        again = parallel.parallelize(build(), mesh, plan)
        parallel.load_serial_parameters(again, trained)
        check_forward(again, serial, kind, outputs, f"{what}: load_serial_parameters")
        hvd.barrier()
    finally:
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


def assert_close_params(net, ref, what):
    got, expected = serial_params(net), serial_params(ref)
    for name, value in expected.items():
        assert_close(got[name], value, **TOL, what=f"{what}: {name}")


def raises(fragments, fn, what):
    try:
        fn()
    except ArgumentError as e:
        missing = [f for f in fragments if f not in str(e)]
        assert not missing, f"rank {rank}: {what}: message lacks {missing}: {e}"
        return
    raise AssertionError(f"rank {rank}: {what}: no ArgumentError")


# --- the checks -------------------------------------------------------------------

def check_mlp():
    plan = parallel.auto_plan(serial_mlp(), mesh)
    assert plan == MLP_PLAN, f"rank {rank}: auto plan\n{plan}\nis not the hand-written {MLP_PLAN}"
    if rank == 0:
        common.say(f"auto plan of the MLP on {mesh}:\n{plan}")
    ffn = nn.HybridSequential()  # its narrowing last Dense is no classifier
    ffn.add(nn.Dense(4 * D, in_units=D, flatten=False), nn.GELU(), nn.Dense(D, in_units=4 * D, flatten=False))
    assert parallel.auto_plan(ffn, mesh) == {"0": parallel.ColwiseParallel(), "2": parallel.RowwiseParallel()}
    # initialised serial network: each rank keeps its slices of the existing weights
    serial, pnet = initialised(serial_mlp), initialised(serial_mlp)
    out = parallel.parallelize(pnet, mesh, MLP_PLAN)
    assert out is pnet and isinstance(pnet[0], parallel.ColumnParallelDense)
    assert isinstance(pnet[3], parallel.RowParallelDense) and isinstance(pnet[4], parallel.ColumnParallelDense)
    assert pnet[0].weight.shape == (H1 // MP, D) and pnet[3].weight.shape == (H2, H1 // MP)
    same_as_serial(pnet, serial, "MLP parallelized after initialize()")
    check_forward(pnet, serial, "mlp", MY_CLASSES, "MLP")
    train_both(pnet, serial, "mlp", "MLP")
    # uninitialised serial network, plan "auto": initialize() draws what the serial one draws
    mx.random.seed(SEED)
    pnet = parallel.parallelize(serial_mlp(), mesh, "auto")
    pnet.initialize(mx.init.Xavier())
    same_as_serial(pnet, initialised(serial_mlp), "MLP parallelized before initialize()")
    # hybridize() afterwards: the blocks holding no split layer are hybridized
    pnet.hybridize()
    assert pnet[1]._active and not pnet._active and not pnet[0]._active
    check_forward(pnet, initialised(serial_mlp), "mlp", MY_CLASSES, "MLP hybridized after parallelize")
    check_checkpoints(serial_mlp, MLP_PLAN, "mlp", MY_CLASSES, "MLP")


def param_bytes(block, split):
    return sum(p.data().size * p.data().dtype(0).itemsize for p in block.collect_params().values()
               if getattr(p, "distributed", False) == split)


def check_transformer():
    auto = parallel.auto_plan(serial_lm(), mesh)
    expected_auto = {k: LM_PLAN[k] for k in ("1.ffn.0", "1.ffn.2", "2")}
    assert auto == expected_auto, f"rank {rank}: auto plan of the LM\n{auto}"
    serial, pnet = initialised(serial_lm), initialised(serial_lm)
    serial_block_bytes = param_bytes(serial[1], False)
    parallel.parallelize(pnet, mesh, LM_PLAN)
    attn = pnet[1].attn
    assert (attn._num_heads, attn._units) == (HEADS // MP, U // MP), (attn._num_heads, attn._units)
    same_as_serial(pnet, serial, "LM parallelized after initialize()")
    check_forward(pnet, serial, "lm", MY_WORDS, "LM")

    # per-rank parameter bytes of the transformer block: the split ones halve
    split, whole = param_bytes(pnet[1], True), param_bytes(pnet[1], False)
    names = {name for name, p in pnet[1]._collect_params_with_prefix().items() if getattr(p, "distributed", False)}
    serial_split = sum(p.data().size * 4 for name, p in serial[1]._collect_params_with_prefix().items()
                       if name in names)
    assert split * MP == serial_split, (split, serial_split)
    assert whole == serial_block_bytes - serial_split, (whole, serial_block_bytes, serial_split)
    if rank == 0:
        common.say(f"MEMORY transformer block: serial {serial_block_bytes} bytes; per rank at mp={MP} "
                   f"{split + whole} bytes (split weights {serial_split} -> {split}, replicated {whole})")

    train_both(pnet, serial, "lm", "LM")
    # uninitialised serial LM: initialize() after parallelize gives the serial initial values
    mx.random.seed(SEED)
    patterns = {"0": parallel.VocabParallel(), "*.attn": parallel.HeadParallel(per_rank=("_units",)),
                "*.ffn.0": parallel.ColwiseParallel(), "?.ffn.[2]": parallel.RowwiseParallel(),
                "2": parallel.ShardedOutput()}
    fresh = parallel.parallelize(serial_lm(), mesh, patterns)
    assert [type(fresh[1].ffn[i]) for i in (0, 2)] == [parallel.ColumnParallelDense, parallel.RowParallelDense]
    fresh.initialize(mx.init.Xavier())
    same_as_serial(fresh, initialised(serial_lm), "LM parallelized before initialize()")
    # hybridize(): layer norms compiled, the blocks above split layers imperative
    fresh.hybridize(static_alloc=True)
    block = fresh[1]
    assert block.norm1._active and block.norm2._active and not block._active and not block.attn._active
    check_forward(fresh, initialised(serial_lm), "lm", MY_WORDS, "LM hybridized after parallelize")
    check_checkpoints(serial_lm, LM_PLAN, "lm", MY_WORDS, "LM")


def unchanged(net, types, what):
    assert [type(b) for b in net._children.values()] == types, f"rank {rank}: {what}: network changed"


def check_errors():
    def refused(build, plan, fragments, what, prepare=None):
        net = build()
        if prepare:
            prepare(net)
        before = [type(b) for b in net._children.values()]
        raises(fragments, lambda: parallel.parallelize(net, mesh, plan), what)
        unchanged(net, before, what)

    def odd_widths():
        net = nn.HybridSequential()
        net.add(nn.Dense(7, in_units=4), nn.Dense(4, in_units=7))
        return net

    refused(odd_widths, {"0": parallel.ColwiseParallel(), "1": parallel.RowwiseParallel()},
            ["'0'", "units=7", f"mp={MP}"], "width not divisible")

    def used_twice():
        net, dense = nn.HybridSequential(), nn.Dense(4, in_units=4)
        net.add(dense, nn.Activation("relu"), dense)
        return net

    refused(used_twice, {"0": parallel.ColwiseParallel(), "2": parallel.RowwiseParallel()},
            ["'0'", "used twice", "'2'"], "a layer used twice")

    def tied():
        net = nn.HybridSequential()
        first = nn.Dense(4, in_units=4)
        net.add(first, nn.Dense(4, in_units=4, params=first.params))
        return net

    refused(tied, {"0": parallel.ColwiseParallel(), "1": parallel.RowwiseParallel()},
            ["'0'", "shared with '1'"], "tied weights")
    refused(serial_mlp, {"5": parallel.ColwiseParallel()}, ["'5'", "no child '5'", "0, 1, 2, 3, 4"],
            "a child that does not exist")
    refused(serial_lm, {"1.attn.qry": parallel.ColwiseParallel()}, ["'1.attn' (SelfAttention)", "no child 'qry'",
                                                                   "query, key, value, proj"], "a nested name")
    refused(serial_lm, {"*.nothing": parallel.ColwiseParallel()}, ["'*.nothing'", "matches no child"],
            "a pattern matching nothing")
    refused(serial_mlp, {"0": parallel.ColwiseParallel(), "*": parallel.Replicate()}, ["'0'", "two plan entries"],
            "a child named twice")
    refused(serial_mlp, {"0": parallel.ColwiseParallel()}, ["'0'", "'3'", "needs whole features"],
            "a split output nothing consumes")
    refused(serial_mlp, {"3": parallel.RowwiseParallel()}, ["'3'", "expects its input split"],
            "a split input nothing produces")
    refused(serial_mlp, {"1": parallel.ColwiseParallel()}, ["'1'", "not a gluon.nn.Dense"], "not a Dense")
    refused(lambda: initialised(serial_mlp), MLP_PLAN, ["hybridize(False)", "holds no split layer"],
            "a hybridized network", prepare=lambda net: net.hybridize())

    def deferred():
        net = nn.HybridSequential()
        net.add(nn.Dense(4), nn.Dense(4))
        net.initialize()
        return net

    refused(deferred, {"0": parallel.ColwiseParallel(), "1": parallel.RowwiseParallel()},
            ["'0'", "in_units", "forward pass"], "deferred in_units")

    def odd_heads():
        net = nn.HybridSequential()
        net.add(TransformerBlock(12, 3, 8))
        return net

    refused(odd_heads, {"0.attn": parallel.HeadParallel(per_rank=("_units",))}, ["'0.attn'", "_num_heads=3"],
            "heads not divisible")
    refused(serial_lm, {"1.attn": parallel.HeadParallel(per_rank=("_width",))}, ["'1.attn'", "'_width'"],
            "a per-rank attribute that does not exist")
    refused(serial_lm, {"1.attn": parallel.HeadParallel(), "1.attn.query": parallel.ColwiseParallel()},
            ["'1.attn.query'", "also named"], "a head-split child named again")
    # a row layer cannot flatten a split 3-d input (the serial columns would interleave)
    def flattening():
        net = nn.HybridSequential()
        net.add(nn.Dense(4, in_units=3, flatten=False), nn.Dense(2, in_units=20))
        net.initialize()
        return net

    auto = parallel.auto_plan(flattening(), mesh, classifier=False)
    assert auto == {} and any("flattens its input" in note for note in auto.notes), f"rank {rank}: {auto}"
    flat = parallel.parallelize(flattening(), mesh, {"0": parallel.ColwiseParallel(), "1": parallel.RowwiseParallel()})
    raises(["input_is_parallel with flatten=True", "(2, 5, 2)"], lambda: flat(mx.nd.ones((2, 5, 3))),
           "flattening a split input")
    # a parallelized network is not split again
    pnet = parallel.parallelize(serial_mlp(), mesh, MLP_PLAN)
    raises(["'0'", "already split"], lambda: parallel.parallelize(pnet, mesh, {"0": parallel.ColwiseParallel()}),
           "splitting twice")


checks = {"mlp": check_mlp, "transformer": check_transformer, "errors": check_errors}
for name in sys.argv[1:]:  # in one process, in order (a rank start costs 2.5 s of CPU)
    checks[name]()
    common.say(f"ok {name} {rank}")
common.finish()
