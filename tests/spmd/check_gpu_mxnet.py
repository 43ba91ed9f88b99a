"""MXNet GPU NDArrays through the core's GPU path (NCCL), one GPU per rank
(gpu(local_rank)): every collective against NumPy with its output on the
same GPU, ordering against MXNet's own GPU work, a grouped call mixing CPU
and GPU tensors, and DistributedTrainer on a GPU against gluon.Trainer (its
buckets reduced on the GPU and updated by MXNet's ops, not the CPU kernels).

Needs a CUDA build of MXNet, an NCCL build of mxplugin and a GPU per rank;
run by tests/test_gpu_mxnet.py at 1 and 2 ranks."""
import logging
import sys

import common
from common import hvd, mx, np, rank_data

from mxnet import autograd, gluon

from mxplugin.training import native_update

rank, size = common.start()
ctx = mx.gpu(hvd.local_rank())
FLOATS = ("float16", "float32", "float64")
TOL = {"float16": dict(rtol=1e-2, atol=2e-2), "float32": dict(rtol=1e-5, atol=1e-5),
       "float64": dict(rtol=1e-12, atol=1e-12)}
_checks = []    # (what, NDArray, expected, tolerance): read after everything is issued
failures = []   # collected, so every rank issues the same collectives (no hang)


def later(what, result, expected, dtype="float32"):
    _checks.append((what, result, np.asarray(expected), dtype))


def run_checks():
    for what, result, expected, dtype in _checks:
        try:
            assert result.context == ctx, f"{what}: output on {result.context}, expected {ctx}"
            got = result.asnumpy()
            assert got.shape == expected.shape, f"{what}: shape {got.shape} vs {expected.shape}"
            assert got.dtype == np.dtype(dtype), f"{what}: dtype {got.dtype} vs {dtype}"
            if dtype in FLOATS:
                np.testing.assert_allclose(got.astype("float64"), expected, err_msg=what, **TOL[dtype])
            else:
                np.testing.assert_array_equal(got, expected.astype(dtype), err_msg=what)
        except AssertionError as e:
            failures.append(f"rank {rank}: {e}")
    _checks.clear()


def data(shape, r, dtype, seed=0):
    if dtype in FLOATS:
        return rank_data(shape, r, "float64", seed).astype(dtype)
    rng = np.random.RandomState(seed * 1000 + r + 500)
    return rng.randint(0, 4, size=shape).astype(dtype)  # products of a few ranks stay in range


def on_gpu(array):
    return mx.nd.array(array, ctx=ctx, dtype=array.dtype)


def reduce_all(arrays, op, dtype):
    stack = np.stack([a.astype("float64" if dtype in FLOATS else "int64") for a in arrays])
    return {"Sum": stack.sum(0), "Average": stack.sum(0) / len(arrays), "Min": stack.min(0),
            "Max": stack.max(0), "Product": stack.prod(0)}[op]


OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}

# -- allreduce: every dtype and op, small (fused) and large (reduced in place)
for dtype in ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]:
    for op in OPS:
        if op == "Average" and dtype not in FLOATS:
            continue
        for seed, shape in enumerate([(17,), (300_000 // np.dtype(dtype).itemsize // 50, 50)]):
            if seed and op not in ("Sum", "Average"):
                continue
            what = f"allreduce {dtype} {op} {shape}"
            out = hvd.allreduce(on_gpu(data(shape, rank, dtype, seed)), op=OPS[op], name=what)
            later(what, out, reduce_all([data(shape, r, dtype, seed) for r in range(size)], op, dtype), dtype)

# -- in place, with scale factors
for dtype in ["float16", "float32"]:
    x = on_gpu(data((33,), rank, dtype, 3))
    hvd.allreduce_(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name=f"scaled {dtype}")
    later(f"scaled allreduce_ {dtype}", x, 1.5 * reduce_all([data((33,), r, dtype, 3) for r in range(size)],
                                                            "Sum", dtype), dtype)

# -- grouped (fused into one buffer) and grouped in place
shapes = [(5,), (3, 4), (1,), (64, 3), (7, 7, 2)]
outs = hvd.grouped_allreduce([on_gpu(data(s, rank, "float32", 10 + i)) for i, s in enumerate(shapes)],
                             name="group", op=hvd.Average)
for i, (s, out) in enumerate(zip(shapes, outs)):
    later(f"grouped_allreduce member {i}", out, reduce_all([data(s, r, "float32", 10 + i) for r in range(size)],
                                                           "Average", "float32"))
inplace = [on_gpu(data(s, rank, "float64", 20 + i)) for i, s in enumerate(shapes)]
hvd.grouped_allreduce_(inplace, name="group.inplace", op=hvd.Sum)
for i, (s, out) in enumerate(zip(shapes, inplace)):
    later(f"grouped_allreduce_ member {i}", out, reduce_all([data(s, r, "float64", 20 + i) for r in range(size)],
                                                            "Sum", "float64"), "float64")

# -- broadcast, allgather, reducescatter, alltoall
root = size - 1
later("broadcast", hvd.broadcast(on_gpu(data((6, 2), rank, "float32", 30)), root, name="bcast"),
      data((6, 2), root, "float32", 30))
b = on_gpu(data((9,), rank, "int32", 31))
hvd.broadcast_(b, 0, name="bcast.inplace")
later("broadcast_", b, data((9,), 0, "int32", 31), "int32")
later("allgather", hvd.allgather(on_gpu(data((rank + 1, 3), rank, "float32", 32)), name="gather"),
      np.concatenate([data((r + 1, 3), r, "float32", 32) for r in range(size)]))
rows = 2 * size + 1
scattered = hvd.reducescatter(on_gpu(data((rows, 3), rank, "float32", 33)), op=hvd.Sum, name="scatter")
total = reduce_all([data((rows, 3), r, "float32", 33) for r in range(size)], "Sum", "float32")
starts = np.cumsum([0] + [rows // size + (1 if r < rows % size else 0) for r in range(size)])
later("reducescatter", scattered, total[starts[rank]:starts[rank + 1]])
splits = [j + 1 for j in range(size)]  # every rank sends j+1 rows to rank j
sent = data((sum(splits), 2), rank, "float32", 34)
received, received_splits = hvd.alltoall(on_gpu(sent), splits=splits, name="a2a")
offset = sum(splits[:rank])
later("alltoall", received,
      np.concatenate([data((sum(splits), 2), r, "float32", 34)[offset:offset + rank + 1] for r in range(size)]))
assert list(received_splits.asnumpy()) == [rank + 1] * size, received_splits

# -- ordering: each allreduce reads what MXNet computed on the GPU just before
# (nothing waits in between), and the next GPU op reads the allreduce's output.
x = mx.nd.ones((1 << 20,), ctx=ctx)
expected = 1.0
for i in range(4):
    x = hvd.allreduce(x * 2 + 1, op=hvd.Sum, name=f"chain{i}")
    expected = size * (2 * expected + 1)
later("chained allreduce of MXNet GPU results", x, np.full(1 << 20, expected))

# -- CPU and GPU tensors in separate calls of one step are fine; in one grouped call, a clear error
cpu_out = hvd.allreduce(mx.nd.ones((4,)) * (rank + 1), op=hvd.Sum, name="cpu.beside.gpu")
gpu_out = hvd.allreduce(mx.nd.ones((4,), ctx=ctx) * (rank + 1), op=hvd.Sum, name="gpu.beside.cpu")
later("gpu allreduce beside a cpu one", gpu_out, np.full(4, size * (size + 1) / 2))
try:
    hvd.grouped_allreduce([mx.nd.ones((3,)), mx.nd.ones((3,), ctx=ctx)], name="mixed")
    failures.append(f"rank {rank}: a grouped call of a cpu and a gpu tensor was accepted")
except ValueError as e:
    for fragment in ("'allreduce.mixed_2of2' is on " + str(ctx), "'allreduce.mixed_1of2'", "cpu(0)"):
        if fragment not in str(e):
            failures.append(f"rank {rank}: expected {fragment!r} in: {e}")
run_checks()
np.testing.assert_array_equal(cpu_out.asnumpy(), np.full(4, size * (size + 1) / 2, "float32"))

# -- DistributedTrainer on the GPU == gluon.Trainer on the whole batch
GLOBAL_BATCH = 4 * size


def build_net():
    mx.random.seed(1)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(32, in_units=10, activation="tanh"), gluon.nn.Dense(4, in_units=32))
    net.initialize(mx.init.Uniform(0.5), ctx=ctx)
    net[1].weight.lr_mult = 0.5
    net.hybridize()
    return net


def train(net, trainer, shard, steps=3):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(7)
    for _ in range(steps):
        x = rng.uniform(-1, 1, (GLOBAL_BATCH, 10)).astype("float32")
        y = rng.randint(0, 4, GLOBAL_BATCH).astype("float32")
        if shard:
            per = GLOBAL_BATCH // size
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        with autograd.record():
            loss = loss_fn(net(on_gpu(x)), on_gpu(y))
        loss.backward()
        trainer.step(len(x))
    return [p.data().asnumpy() for p in net.collect_params().values()]


native_calls = []
native_update_fn = native_update.update
native_update.update = lambda *args: (native_calls.append(args), native_update_fn(*args))
log_records = []
handler = logging.Handler(logging.DEBUG)
handler.emit = log_records.append
trainer_log = logging.getLogger("mxplugin.training.trainer")
trainer_log.addHandler(handler)
trainer_log.setLevel(logging.DEBUG)

OPTIMIZERS = {"sgd": {"momentum": 0.9}, "nag": {"momentum": 0.9}, "adam": {}, "rmsprop": {"centered": True},
              "adagrad": {}, "lamb": {}, "adadelta": {}}
for name, extra in OPTIMIZERS.items():
    params = dict({"learning_rate": 0.05, "wd": 0.01}, **extra)
    ref_net, dist_net = build_net(), build_net()
    ref = train(ref_net, gluon.Trainer(ref_net.collect_params(), name, dict(params), kvstore=None), False)
    trainer = hvd.DistributedTrainer(dist_net.collect_params(), name, dict(params))
    got = train(dist_net, trainer, True)
    for i, (g, r) in enumerate(zip(got, ref)):
        try:
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=f"rank {rank}: {name} parameter {i}")
        except AssertionError as e:
            failures.append(str(e))
    for bucket in trainer._layout.buckets:
        if bucket.grad.context != ctx:
            failures.append(f"rank {rank}: {name}: a gradient bucket is on {bucket.grad.context}, not {ctx}")
if native_calls:
    failures.append(f"rank {rank}: the core's CPU optimizer kernel ran on GPU buckets {len(native_calls)} times")
if not any("on a GPU" in r.getMessage() for r in log_records):
    failures.append(f"rank {rank}: no debug line saying GPU buckets use MXNet's optimizer ops")
native_update.update = native_update_fn
trainer_log.removeHandler(handler)

# -- local SGD on the GPU: after an averaging step every rank holds the same weights
net = build_net()
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                                 local_sgd_steps=2)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
for step in range(2):
    x = on_gpu(data((4, 10), rank, "float32", 40 + step))
    with autograd.record():
        loss = loss_fn(net(x), on_gpu(np.arange(4, dtype="float32") % 4))
    loss.backward()
    trainer.step(4)
for i, p in enumerate(net.collect_params().values()):
    everyone = hvd.allgather(p.data().reshape((1, -1)), name=f"localsgd.weights{i}").asnumpy()
    for r in range(size):
        if not np.array_equal(everyone[r], everyone[0]):
            failures.append(f"rank {rank}: local SGD parameter {i} differs between ranks 0 and {r}")

if failures:
    sys.stderr.write("\n".join(failures)[:20000] + "\n")
    hvd.shutdown()
    sys.exit(1)
common.finish()
