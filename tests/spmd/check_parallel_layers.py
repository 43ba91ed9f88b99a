"""Tensor-parallel layers and the sharded loss against the unsplit model, which
every rank recomputes itself on the whole global batch, for every dp x mp mesh
of the world (at 2 ranks: 1x2 and 2x1; at 4: 1x4, 2x2 and 4x1).
argv[1] "plain-trainer": DistributedTrainer without a mesh on the 1 x size mesh.

Each dp group trains on its block of the global batch; the gradients of all
parameters are averaged over the dp group either by hand
(parallel.allreduce_gradients + gluon.Trainer) or by DistributedTrainer(mesh=),
with its optimizer states sharded over the dp group or not, or with its
gradients compressed by full-rank PowerSGD over the dp group.
To switch to the trainer only, set TRAINER_MODES = ["DistributedTrainer"].
"""
import inspect
import sys

import common
from common import assert_close, hvd, mx, np

from mxnet import autograd, gluon

from mxplugin import parallel

rank, size = common.start()

D, H, O, C = 6, 8, 5, 12          # H and C split over mp in {1, 2, 4}
PER_GROUP = 4                     # samples per dp group per step
SEED, LR, STEPS = 3, 0.1, 3
TOL = dict(rtol=1e-5, atol=1e-6)
TRAINER_MODES = ["manual"]
if "mesh" in inspect.signature(hvd.DistributedTrainer.__init__).parameters:
    TRAINER_MODES.append("DistributedTrainer")
    # Sharded optimizer states on the mesh's data-parallel group (momentum:
    # states to shard; the reference gets the same optimizer).
    TRAINER_MODES.append("DistributedTrainer sharded")
    # PowerSGD over the dp group, at a rank no smaller than any matrix's
    # smaller side: the uncompressed step exactly (Note [PowerSGD orientation]).
    TRAINER_MODES.append("DistributedTrainer powersgd")


def meshes():
    return [(dp, size // dp) for dp in range(1, size + 1) if size % dp == 0]


def global_batch(step, dp):
    rng = np.random.RandomState(100 + step)
    n = dp * PER_GROUP
    return rng.uniform(-1, 1, (n, D)).astype("float32"), rng.uniform(-1, 1, (n, O)).astype("float32")


def reference_mlp(init):
    mx.random.seed(SEED)
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(H, in_units=D, activation="relu"), gluon.nn.Dense(O, in_units=H))
    net.initialize(init)
    return net


def parallel_mlp(mesh, variant, init):
    mx.random.seed(SEED)
    net = gluon.nn.Sequential()
    if variant == "split hidden":
        net.add(parallel.ColumnParallelDense(H, D, gather_output=False, activation="relu", mesh=mesh),
                parallel.RowParallelDense(O, H, input_is_parallel=True, mesh=mesh))
    else:
        net.add(parallel.ColumnParallelDense(H, D, gather_output=True, activation="relu", mesh=mesh),
                parallel.RowParallelDense(O, H, input_is_parallel=False, mesh=mesh))
    net.initialize(init)
    return net


def full_params(net):
    """(weight, bias) of each layer as numpy; a collective over the mp group."""
    out = []
    for layer in net:
        if isinstance(layer, (parallel.ColumnParallelDense, parallel.RowParallelDense)):
            out += [layer.full_weight().asnumpy(), layer.full_bias().asnumpy()]
        else:
            out += [layer.weight.data().asnumpy(), layer.bias.data().asnumpy()]
    return out


def same_params(net, ref, what):
    for i, (a, b) in enumerate(zip(full_params(net), full_params(ref))):
        assert_close(a, b, **TOL, what=f"{what}: parameter {i}")


def forward_backward(net, x, t):
    x = mx.nd.array(x)
    x.attach_grad()
    with autograd.record():
        y = net(x)
        loss = ((y - mx.nd.array(t)) ** 2).sum(axis=1)
    loss.backward()
    return y.asnumpy(), x.grad.asnumpy()


def make_trainer(net, mode, mesh):
    if mode == "manual":
        return gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": LR}, kvstore=None)
    if mode == "DistributedTrainer without mesh":  # data-parallel over the world: skips the shards
        return hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR})
    if mode == "DistributedTrainer sharded":
        return hvd.DistributedTrainer(net.collect_params(), "sgd", optimizer_params(mode), mesh=mesh,
                                      shard_optimizer_states=True, bucket_bytes=BUCKET_BYTES_SHARDED)
    if mode == "DistributedTrainer powersgd":
        return hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR}, mesh=mesh,
                                      compression=hvd.Compression.powersgd(rank=H, min_compression_rate=0))
    return hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": LR}, mesh=mesh)


# Buckets of 11 float32 elements: sizes no data-parallel group divides.
BUCKET_BYTES_SHARDED = 44


def optimizer_params(mode):
    return {"learning_rate": LR, "momentum": 0.9} if mode.endswith("sharded") else {"learning_rate": LR}


def step(trainer, mode, net, mesh, batch_size):
    if mode == "manual":
        parallel.allreduce_gradients(net.collect_params(), mesh)
    trainer.step(batch_size)


def check_marks_and_broadcast(mesh):
    net = parallel_mlp(mesh, "split hidden", mx.init.Uniform(0.5))
    column, row = net[0], net[1]
    assert column.weight.distributed and column.bias.distributed and row.weight.distributed
    assert not getattr(row.bias, "distributed", False), "RowParallelDense's bias is replicated"
    shards = [p.data().asnumpy().copy() for p in (column.weight, column.bias, row.weight)]
    row.bias.set_data(mx.nd.full((O,), float(rank)))
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    assert_close(row.bias.data(), np.zeros(O), what="replicated bias broadcast from rank 0")
    for p, before in zip((column.weight, column.bias, row.weight), shards):
        assert_close(p.data(), before, what=f"{p.name}: broadcast_parameters must skip shards")
    if mesh.mp > 1:
        gathered = hvd.allgather(column.weight.data().reshape((1, -1)), process_set=mesh.mp_set,
                                 name=f"shards.{mesh.dp}x{mesh.mp}").asnumpy()
        assert not np.allclose(gathered[0], gathered[1]), "mp ranks must hold different shards"
    # parallel.broadcast_parameters: shards equal over each dp group, from dp rank 0
    column.weight.set_data(column.weight.data() + mesh.dp_rank)
    parallel.broadcast_parameters(net.collect_params(), mesh)
    assert_close(column.weight.data(), shards[0], what="shard broadcast over the dp group")


def check_init_and_load(mesh):
    ref = reference_mlp(mx.init.Xavier())
    mx.random.seed(SEED)
    net = gluon.nn.Sequential()
    net.add(parallel.ColumnParallelDense(H, D, activation="relu", mesh=mesh),
            parallel.RowParallelDense(O, H, mesh=mesh))
    net.initialize(mx.init.Xavier())
    same_params(net, ref, f"{mesh} initial values (Xavier)")
    # a layer's own weight_initializer, as on Dense
    mx.random.seed(SEED)
    dense = gluon.nn.Dense(H, in_units=D, weight_initializer=mx.init.Normal(0.5), bias_initializer="ones")
    dense.initialize()
    mx.random.seed(SEED)
    col = parallel.ColumnParallelDense(H, D, mesh=mesh, weight_initializer=mx.init.Normal(0.5),
                                       bias_initializer="ones")
    col.initialize()
    assert_close(col.full_weight(), dense.weight.data().asnumpy(), what="weight_initializer")
    assert_close(col.full_bias(), np.ones(H), what="bias_initializer")
    if mesh.mp > 1:  # sizes that do not split evenly are refused
        for make in (lambda: parallel.ColumnParallelDense(mesh.mp + 1, D, mesh=mesh),
                     lambda: parallel.RowParallelDense(O, mesh.mp + 1, mesh=mesh)):
            try:
                make()
            except ValueError:
                pass
            else:
                raise AssertionError(f"rank {rank}: uneven split accepted on {mesh}")
    # load_full keeps the shard of full arrays
    w = np.random.RandomState(5).uniform(-1, 1, (O, H)).astype("float32")
    b = np.arange(O, dtype="float32")
    net[1].load_full(w, mx.nd.array(b))
    assert_close(net[1].full_weight(), w, what="RowParallelDense.load_full weight")
    assert_close(net[1].full_bias(), b, what="RowParallelDense.load_full bias")
    wc = np.random.RandomState(6).uniform(-1, 1, (H, D)).astype("float32")
    net[0].load_full(mx.nd.array(wc), np.arange(H, dtype="float32"))
    assert_close(net[0].full_weight(), wc, what="ColumnParallelDense.load_full weight")
    assert_close(net[0].full_bias(), np.arange(H), what="ColumnParallelDense.load_full bias")


def check_mlp(mesh, variant, mode):
    init = mx.init.Xavier() if variant == "split hidden" else mx.init.Uniform(0.5)
    ref, net = reference_mlp(init), parallel_mlp(mesh, variant, init)
    what = f"{mesh} {variant} {mode}"
    same_params(net, ref, f"{what}: initial values")
    ref_trainer = gluon.Trainer(ref.collect_params(), "sgd", optimizer_params(mode), kvstore=None)
    trainer = make_trainer(net, mode, mesh)
    rows = slice(mesh.dp_rank * PER_GROUP, (mesh.dp_rank + 1) * PER_GROUP)
    for s in range(STEPS):
        x, t = global_batch(s, mesh.dp)
        ref_y, ref_dx = forward_backward(ref, x, t)
        ref_trainer.step(x.shape[0])
        y, dx = forward_backward(net, x[rows], t[rows])
        step(trainer, mode, net, mesh, PER_GROUP)
        assert_close(y, ref_y[rows], **TOL, what=f"{what} step {s}: outputs")
        assert_close(dx, ref_dx[rows], **TOL, what=f"{what} step {s}: input gradient")
        same_params(net, ref, f"{what} after step {s + 1}")
    if mode.endswith("powersgd"):  # every weight (a matrix) went as factors when there is a dp group to sum over
        compressed = sorted(trainer._powersgd.factors)
        weights = [i for i, p in enumerate(trainer._params) if len(p.shape) == 2]
        assert compressed == (weights if mesh.dp > 1 else []), f"rank {rank}: {what}: compressed {compressed}"


def check_hybridize(mesh):
    net = parallel_mlp(mesh, "split hidden", mx.init.Uniform(0.5))
    x = mx.nd.ones((2, D))
    before = net(x).asnumpy()
    net.hybridize()  # accepted: the parallel blocks stay imperative
    assert_close(net(x), before, what="hybridize() keeps results")
    hybrid = gluon.nn.HybridSequential()
    hybrid.add(parallel.ColumnParallelDense(H, D, mesh=mesh))
    hybrid.initialize()
    hybrid.hybridize()
    try:
        hybrid(x)
    except NotImplementedError:
        pass
    else:
        raise AssertionError("a hybridized parent must refuse tensor-parallel children")


def softmax_xent(z, label):
    z = z.astype("float64")
    shifted = z - z.max(axis=1, keepdims=True)
    logsum = np.log(np.exp(shifted).sum(axis=1))
    loss = logsum - shifted[np.arange(len(z)), label]
    grad = np.exp(shifted - logsum[:, None])
    grad[np.arange(len(z)), label] -= 1
    return loss, grad


def check_sharded_loss(mesh):
    what = f"{mesh} sharded loss"
    c = C // mesh.mp
    cls = slice(mesh.mp_rank * c, (mesh.mp_rank + 1) * c)
    rng = np.random.RandomState(11)
    logits = (rng.randn(7, C) * 30).astype("float32")  # large scores: exp would overflow unshifted
    label = rng.randint(0, C, 7)
    label[:3] = [0, C - 1, C // 2]
    weight = rng.uniform(0.5, 2, 7).astype("float32")
    exp_loss, exp_grad = softmax_xent(logits, label)
    z = mx.nd.array(logits[:, cls])
    z.attach_grad()
    loss_fn = parallel.ShardedSoftmaxCrossEntropyLoss(mesh=mesh)
    with autograd.record():
        loss = loss_fn(z, mx.nd.array(label))
    loss.backward(mx.nd.array(weight))
    assert_close(loss, exp_loss, rtol=1e-5, atol=1e-5, what=f"{what}: value")
    assert_close(z.grad, (exp_grad * weight[:, None])[:, cls], rtol=1e-5, atol=1e-6, what=f"{what}: gradient")
    with autograd.record():  # labels of shape (N, 1) and sample weights, as gluon's loss
        loss = loss_fn(z, mx.nd.array(label).reshape((-1, 1)), mx.nd.array(weight).reshape((-1, 1)))
    assert_close(loss, exp_loss * weight, rtol=1e-5, atol=1e-5, what=f"{what}: sample weights")

    # top-1: ties across shards go to the lowest class, as numpy.argmax
    tied = logits.copy()
    tied[0, :] = 0
    tied[0, [C - 1, 1]] = 5.0
    pred = parallel.sharded_argmax(mx.nd.array(tied[:, cls]), mesh=mesh).asnumpy()
    np.testing.assert_array_equal(pred, tied.argmax(axis=1), err_msg=f"rank {rank}: {what}: argmax")
    acc = parallel.sharded_accuracy(mx.nd.array(tied[:, cls]), mx.nd.array(label), mesh=mesh)
    assert abs(acc - float((tied.argmax(axis=1) == label).mean())) < 1e-9, (acc, what)

    # end to end: ColumnParallelDense(C, gather_output=False) + sharded loss
    # against Dense(C) + SoftmaxCrossEntropyLoss (loss, input and weight gradients)
    mx.random.seed(SEED)
    dense = gluon.nn.Dense(C, in_units=H)
    dense.initialize(mx.init.Uniform(1.0))
    mx.random.seed(SEED)
    head = parallel.ColumnParallelDense(C, H, gather_output=False, mesh=mesh)
    head.initialize(mx.init.Uniform(1.0))
    x_np = rng.uniform(-1, 1, (7, H)).astype("float32")
    outs = []
    for block, fn in ((dense, gluon.loss.SoftmaxCrossEntropyLoss()), (head, loss_fn)):
        x = mx.nd.array(x_np)
        x.attach_grad()
        with autograd.record():
            loss = fn(block(x), mx.nd.array(label))
        loss.backward()
        outs.append((loss.asnumpy(), x.grad.asnumpy(), block.weight.grad().asnumpy()))
    (ref_loss, ref_dx, ref_dw), (loss, dx, dw) = outs
    assert_close(loss, ref_loss, **TOL, what=f"{what}: classifier loss")
    assert_close(dx, ref_dx, **TOL, what=f"{what}: classifier input gradient")
    assert_close(dw, ref_dw[cls], **TOL, what=f"{what}: classifier weight gradient shard")


if sys.argv[1:] == ["plain-trainer"]:
    # The world as one mp group: replicated gradients are equal on all ranks,
    # so a plain data-parallel DistributedTrainer is right if (and only if) it
    # updates the distributed shards locally, leaving them out of its averaging.
    for variant in ("split hidden", "gathered hidden"):
        check_mlp(parallel.ProcessMesh(1, size), variant, "DistributedTrainer without mesh")
else:
    for dp, mp in meshes():
        mesh = parallel.ProcessMesh(dp, mp)
        check_marks_and_broadcast(mesh)
        check_init_and_load(mesh)
        for variant in ("split hidden", "gathered hidden"):
            for mode in TRAINER_MODES:
                check_mlp(mesh, variant, mode)
        check_sharded_loss(mesh)
    check_hybridize(parallel.ProcessMesh(1, size))

common.finish()
