"""mxplugin.parallel under MXNet's NumPy interface (npx.set_np()) against the
same code on legacy NDArrays, on the mesh dp = 1 x mp = size.

Each check runs once under set_np and once after reset_np, in one process
(the modes are toggled back and forth, which is checked), records what it
computed as numpy values, and the two records must agree: the NumPy run must
get mx.np.ndarrays back everywhere and the legacy run legacy NDArrays.

- the differentiable collectives, forward and backward;
- a tensor-parallel model with every split (vocabulary-parallel embedding,
  column -> row with the hidden features split, gathered column -> scattering
  row, sharded classifier and loss): outputs, losses, input and parameter
  gradients, and the weights over STEPS steps of DistributedTrainer(mesh=);
  sharded_argmax and sharded_accuracy;
- under set_np only, against numbers known in advance: broadcast_parameters
  and allreduce_gradients of mesh.py, and parallelize() of a serial NumPy
  nn.Sequential (auto plan, forward, sharded loss, initial draws, serial
  checkpoints both ways).
"""
import os
import shutil
import tempfile

import common
from common import assert_close, hvd, mx, np

from mxnet import autograd, gluon, npx
from mxnet.gluon import nn

from mxplugin import parallel

rank, size = common.start()
mesh = parallel.ProcessMesh(1, size)
MP = mesh.mp
V, D, H, C = 12, 6, 12, 12        # V, H and C split over mp in {2, 3}
N, STEPS, SEED = 4, 3, 7
OPT = {"learning_rate": 0.1, "momentum": 0.9}
TOL = dict(rtol=1e-5, atol=1e-6)
BODY_SHAPES = [(H, D), (D, H), (H, D), (D, H), (C, D)]  # (units, in_units) of TinyModel.body's layers
MY_CLASSES = slice(mesh.mp_rank * (C // MP), (mesh.mp_rank + 1) * (C // MP))


# --- array modes ------------------------------------------------------------------

def numpy_mode(on):
    """Switches MXNet's NumPy interface on or off and checks that it took."""
    if on:
        npx.set_np()
    else:
        npx.reset_np()
    assert mx.util.is_np_array() == on and mx.util.is_np_shape() == on, f"rank {rank}: set_np({on}) did not take"


def array(values):
    """`values` as an MXNet array of the current mode's kind."""
    return (mx.np.array if mx.util.is_np_array() else mx.nd.array)(values, dtype=values.dtype)


def expect_kind(value, what):
    """The result is of the current mode's kind: mx.np.ndarray under set_np, a legacy NDArray otherwise."""
    numpy = mx.util.is_np_array()
    ok = isinstance(value, mx.np.ndarray) if numpy else type(value) is mx.nd.NDArray
    assert ok, f"rank {rank}: {what}: got {type(value).__name__} under set_np={numpy}"
    return value.asnumpy()


def same_records(numpy_run, legacy_run, what):
    assert sorted(numpy_run) == sorted(legacy_run), (rank, what, sorted(numpy_run), sorted(legacy_run))
    for key, expected in legacy_run.items():
        assert_close(numpy_run[key], expected, **TOL, what=f"{what}: {key} (NumPy run against legacy run)")


def both_modes(check):
    """Runs `check` (which returns {what: numpy value}) under set_np and after
    reset_np, and compares the two records; ends under set_np."""
    numpy_mode(True)
    numpy_run = check()
    numpy_mode(False)
    legacy_run = check()
    numpy_mode(True)
    same_records(numpy_run, legacy_run, check.__name__)


# --- the differentiable collectives -----------------------------------------------

COLLECTIVES = {
    "allreduce": lambda x: parallel.allreduce(x, op=hvd.Sum, process_set=mesh.mp_set),
    "allgather": lambda x: parallel.allgather(x, process_set=mesh.mp_set),
    "broadcast": lambda x: parallel.broadcast(x, root_rank=0, process_set=mesh.mp_set),
    "reducescatter": lambda x: parallel.reducescatter(x, op=hvd.Sum, process_set=mesh.mp_set),
    "copy_to_group": lambda x: parallel.copy_to_group(x, mesh.mp_set),
    "reduce_from_group": lambda x: parallel.reduce_from_group(x, mesh.mp_set),
    "gather_from_group": lambda x: parallel.gather_from_group(x, mesh.mp_set, axis=-1),
    "scatter_to_group": lambda x: parallel.scatter_to_group(x, mesh.mp_set, axis=-1),
}


def collectives():
    """Each collective's output and its input's gradient under a per-rank weighting of the output."""
    record = {}
    for i, (name, collective) in enumerate(COLLECTIVES.items()):
        x = array(common.rank_data((2 * MP, 2 * MP), rank, seed=i))
        x.attach_grad()
        with autograd.record():
            y = collective(x)
            loss = (y * array(common.rank_data(y.shape, rank, seed=100 + i))).sum()
        loss.backward()
        record[f"{name} output"] = expect_kind(y, f"{name} output")
        record[f"{name} input gradient"] = expect_kind(x.grad, f"{name} input gradient")
    return record


# --- a tensor-parallel model --------------------------------------------------------

class TinyModel(gluon.Block):
    """Every tensor-parallel block and split: embeddings of ids plus features
    (whose gradient reaches the caller), column -> row with the hidden
    features split, gathered column -> scattering row, sharded classifier."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embed = parallel.VocabParallelEmbedding(V, D, mesh=mesh)
            self.body = nn.Sequential()
            self.body.add(parallel.ColumnParallelDense(H, D, gather_output=False, activation="relu", mesh=mesh),
                          parallel.RowParallelDense(D, H, input_is_parallel=True, mesh=mesh),
                          parallel.ColumnParallelDense(H, D, gather_output=True, activation="tanh", mesh=mesh),
                          parallel.RowParallelDense(D, H, input_is_parallel=False, mesh=mesh),
                          parallel.ColumnParallelDense(C, D, gather_output=False, mesh=mesh))

    def load_starting_values(self):
        """The same whole weights in both modes, through load_full: MXNet's
        NumPy and legacy samplers draw different values for all but small
        arrays, so an initializer would not start both runs alike."""
        rng = np.random.RandomState(SEED)
        self.embed.load_full(rng.uniform(-1, 1, (V, D)).astype("float32"))
        for layer, (units, in_units) in zip(self.body, BODY_SHAPES):
            layer.load_full(rng.uniform(-0.5, 0.5, (units, in_units)).astype("float32"),
                            array(rng.uniform(-0.5, 0.5, units).astype("float32")))

    def forward(self, ids, features):
        return self.body(self.embed(ids) + features)


def batch(step):
    rng = np.random.RandomState(100 + step)
    ids = rng.randint(0, V, N).astype("float32")
    features = rng.uniform(-1, 1, (N, D)).astype("float32")
    return ids, features, rng.randint(0, C, N).astype("float32")


def whole_params(net, what):
    """{what name: whole array as numpy} of the model, gathered over the mp group."""
    return {f"{what} {name}": expect_kind(value, f"{what} {name}")
            for name, value in parallel.gather_serial_parameters(net).items()}


def train_step(net, loss_fn, trainer, step, record):
    ids, features, labels = batch(step)
    features = array(features)
    features.attach_grad()
    with autograd.record():
        logits = net(array(ids), features)
        loss = loss_fn(logits, array(labels))
    loss.backward()
    record[f"step {step} logits"] = expect_kind(logits, "logits")
    record[f"step {step} loss"] = expect_kind(loss, "loss")
    record[f"step {step} feature gradient"] = expect_kind(features.grad, "feature gradient")
    for name, param in net._collect_params_with_prefix().items():
        record[f"step {step} gradient {name}"] = expect_kind(param.grad(), f"gradient of {name}")
    trainer.step(N)
    return logits, labels


def tensor_parallel_model():
    net = TinyModel()
    net.initialize()
    net.load_starting_values()
    record = whole_params(net, "initial")
    loss_fn = parallel.ShardedSoftmaxCrossEntropyLoss(mesh=mesh)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", OPT, mesh=mesh)
    for step in range(STEPS):
        logits, labels = train_step(net, loss_fn, trainer, step, record)
    record.update(whole_params(net, f"after {STEPS} steps"))
    record["full weight of the classifier"] = expect_kind(net.body[4].full_weight(), "full_weight")
    record["argmax"] = expect_kind(parallel.sharded_argmax(logits, mesh=mesh), "sharded_argmax")
    record["accuracy"] = parallel.sharded_accuracy(logits, array(labels), mesh=mesh)
    return record


# --- mesh.py's parameter helpers (set_np only) --------------------------------------

def check_mesh_helpers():
    """On a dp = size x mp = 1 mesh, where both helpers act: the values come
    from the root rank, the gradients are averaged, in the NumPy arrays."""
    dp_mesh = parallel.ProcessMesh(size, 1)
    params = {}
    for name in ("replicated", "shard"):
        params[name] = gluon.Parameter(name, shape=(3,))
        params[name].initialize(mx.init.Constant(float(rank)))
    parallel.mark_distributed(params["shard"])
    parallel.broadcast_parameters(params, dp_mesh, root_rank=size - 1)
    for name, param in params.items():
        assert_close(expect_kind(param.data(), name), np.full(3, size - 1.0), what=f"broadcast_parameters {name}")
        param.grad()[:] = rank + 1
    parallel.allreduce_gradients(params, dp_mesh)
    for name, param in params.items():
        assert_close(expect_kind(param.grad(), name), np.full(3, (size + 1) / 2), what=f"allreduce_gradients {name}")


# --- parallelize() of a serial NumPy network (set_np only) ---------------------------

def serial_mlp():
    net = nn.Sequential()
    net.add(nn.Dense(H, in_units=D), nn.Activation("relu"), nn.Dense(D, in_units=H), nn.Dense(C, in_units=D))
    return net


MLP_PLAN = {"0": parallel.ColwiseParallel(), "2": parallel.RowwiseParallel(), "3": parallel.ShardedOutput()}


def initialised(build):
    mx.random.seed(SEED)
    net = build()
    net.initialize(mx.init.Xavier())
    return net


def serial_params(net):
    return {name: expect_kind(p.data(), name) for name, p in net._collect_params_with_prefix().items()}


def same_as_serial(pnet, serial, what):
    gathered = {name: expect_kind(v, f"{what}: {name}") for name, v in parallel.gather_serial_parameters(pnet).items()}
    expected = serial_params(serial)
    assert sorted(gathered) == sorted(expected), (rank, what, sorted(gathered), sorted(expected))
    for name, value in expected.items():
        assert_close(gathered[name], value, **TOL, what=f"{what}: {name}")


def same_forward(pnet, serial, what):
    x = array(np.random.RandomState(3).uniform(-1, 1, (N, D)).astype("float32"))
    assert_close(expect_kind(pnet(x), f"{what}: forward"), serial(x).asnumpy()[:, MY_CLASSES], **TOL,
                 what=f"{what}: forward")


def same_loss_and_gradient(pnet, serial):
    """The sharded loss of the split network against gluon's on the serial one."""
    _, features, labels = batch(0)
    results = []
    for net, loss_fn in ((serial, gluon.loss.SoftmaxCrossEntropyLoss()),
                         (pnet, parallel.ShardedSoftmaxCrossEntropyLoss(mesh=mesh))):
        x = array(features)
        x.attach_grad()
        with autograd.record():
            loss = loss_fn(net(x), array(labels))
        loss.backward()
        results.append((expect_kind(loss, "loss"), expect_kind(x.grad, "input gradient")))
    (ref_loss, ref_dx), (loss, dx) = results
    assert_close(loss, ref_loss, **TOL, what="parallelized MLP: sharded loss")
    assert_close(dx, ref_dx, **TOL, what="parallelized MLP: input gradient")


def shared_dir():
    path = tempfile.mkdtemp(prefix="mxp_numpy_") if rank == 0 else None
    return hvd.broadcast_object(path, root_rank=0, name="numpy.dir")


def save_legacy_file(serial, path):
    """The serial values in a file saved without NumPy shape semantics (as a legacy program writes it)."""
    with mx.util.np_array(False), mx.util.np_shape(False):
        mx.nd.save(path, {name: p.data().as_nd_ndarray() for name, p in serial._collect_params_with_prefix().items()})


def check_checkpoints(pnet, serial):
    """save_serial_parameters read by a serial NumPy network; load_serial_parameters
    of that file and of one saved without NumPy shape semantics."""
    folder = shared_dir()
    try:
        gathered, legacy_file = os.path.join(folder, "gathered.params"), os.path.join(folder, "legacy.params")
        parallel.save_serial_parameters(pnet, gathered)
        if rank == 0:
            save_legacy_file(serial, legacy_file)
        hvd.barrier()
        plain = serial_mlp()
        plain.load_parameters(gathered)
        for name, value in serial_params(serial).items():
            assert_close(serial_params(plain)[name], value, **TOL, what=f"saved, loaded by plain Gluon: {name}")
        for path in (gathered, legacy_file):
            again = parallel.parallelize(serial_mlp(), mesh, MLP_PLAN)
            parallel.load_serial_parameters(again, path)
            same_forward(again, serial, f"load_serial_parameters of {os.path.basename(path)}")
        hvd.barrier()
    finally:
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)


def check_parallelize():
    plan = parallel.auto_plan(serial_mlp(), mesh)
    assert plan == MLP_PLAN, f"rank {rank}: auto plan\n{plan}"
    serial, pnet = initialised(serial_mlp), initialised(serial_mlp)
    parallel.parallelize(pnet, mesh, "auto")
    assert isinstance(pnet[0], parallel.ColumnParallelDense) and isinstance(pnet[3], parallel.ColumnParallelDense)
    expect_kind(pnet[0].weight.data(), "a split layer's weight")
    same_as_serial(pnet, serial, "parallelized after initialize()")
    same_forward(pnet, serial, "parallelized MLP")
    same_loss_and_gradient(pnet, serial)
    pnet.hybridize()  # the blocks holding no split layer (the activation) compile under set_np
    assert pnet[1]._active and not pnet[0]._active, f"rank {rank}: hybridize() after parallelize"
    same_forward(pnet, serial, "parallelized MLP hybridized")
    # parallelized before initialize(): each rank draws the serial NumPy network's values
    mx.random.seed(SEED)
    fresh = parallel.parallelize(serial_mlp(), mesh, "auto")
    fresh.initialize(mx.init.Xavier())
    same_as_serial(fresh, initialised(serial_mlp), "parallelized before initialize()")
    check_checkpoints(pnet, serial)


both_modes(collectives)
both_modes(tensor_parallel_model)
check_mesh_helpers()
check_parallelize()
if rank == 0:
    common.say(f"numpy parallel checks passed on mesh {mesh}")
common.finish()
