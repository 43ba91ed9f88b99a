"""Reference sections of the mesh and of the parameter helpers that follow
from it (attached by `_reference.reference`)."""

_START = """>>> import mxnet as mx
>>> import mxplugin as hvd
>>> from mxplugin import parallel
>>> hvd.init()"""

PROCESS_MESH = f"""
PyTorch: ``init_device_mesh(device, (dp, mp))``, a 2-d ``DeviceMesh`` whose
inner dimension is the model-parallel one.

Parameters
----------
dp : int
    The number of model replicas: the size of each data-parallel group.
mp : int
    The number of shards of each model: the size of each model-parallel
    group. ``dp * mp`` must be ``mxplugin.size()``.

Raises
------
ArgumentError
    When ``dp`` or ``mp`` is not a positive int, or ``dp * mp`` is not
    the number of ranks.

Examples
--------
{_START}
>>> mesh = parallel.ProcessMesh(dp=1, mp=hvd.size())  # one model, split over every rank
>>> mesh
ProcessMesh(dp=1, mp=..., rank=...)
>>> mesh.mp_rank == hvd.rank(), mesh.mp_group_ranks(0) == list(range(hvd.size()))
(True, True)
>>> mesh.dp_group_ranks(mesh.mp_rank) == [hvd.rank()]  # no other replica holds this shard
True
"""

DP_GROUP_RANKS = """
Parameters
----------
mp_rank : int
    A shard, ``0 <= mp_rank < mp``.

Returns
-------
list of int
    The global ranks holding shard ``mp_rank``, one per replica, in
    replica order: ``mp_rank``, ``mp_rank + mp``, ...
"""

MP_GROUP_RANKS = """
Parameters
----------
dp_rank : int
    A replica, ``0 <= dp_rank < dp``.

Returns
-------
list of int
    The consecutive global ranks that hold replica ``dp_rank``, in shard
    order: ``dp_rank * mp`` to ``dp_rank * mp + mp - 1``.
"""

DEFAULT_MESH = f"""
Returns
-------
ProcessMesh
    The same mesh at every call of a job of this size.

Examples
--------
{_START}
>>> mesh = parallel.default_mesh()
>>> (mesh.dp, mesh.mp) == (1, hvd.size())
True
>>> parallel.default_mesh() is mesh
True
"""

MARK_DISTRIBUTED = f"""
Parameters
----------
param : gluon.Parameter
    The parameter holding this rank's shard.

Returns
-------
gluon.Parameter
    ``param``.

Raises
------
TypeError
    When ``param`` is not a ``gluon.Parameter``.

Examples
--------
{_START}
>>> weight = mx.gluon.Parameter("my_shard", shape=(4, 2))
>>> parallel.mark_distributed(weight) is weight, weight.distributed
(True, True)
"""

BROADCAST_PARAMETERS = f"""
Horovod: ``hvd.broadcast_parameters`` sends every parameter from one rank;
this one sends each shard within its data-parallel group only (and the
replicated parameters with ``mxplugin.broadcast_parameters``).

Parameters
----------
params : ParameterDict, dict or list of Parameter
    The parameters, the same ones on every rank. Shards must be
    initialised; a replicated parameter whose initialisation is deferred is
    broadcast once it is initialised.
mesh : ProcessMesh
    The mesh whose replicas are made equal.
root_rank : int, default 0
    The global rank whose replica the others take.

Raises
------
TypeError
    When ``params`` is not a dict, ParameterDict or list of Parameters.

Examples
--------
{_START}
>>> mesh = parallel.ProcessMesh(dp=hvd.size(), mp=1)  # one replica on each rank
>>> mx.random.seed(hvd.rank())  # different values on every rank
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(2, in_units=3), parallel.ColumnParallelDense(2, 2, mesh=mesh))
>>> net.initialize()
>>> parallel.broadcast_parameters(net.collect_params(), mesh)
>>> for p in (net[0].weight, net[1].weight):  # a replicated parameter, then a shard
...     w = p.data()  # the same on every rank now
...     print(bool((hvd.allreduce(w, op=hvd.Max) == hvd.allreduce(w, op=hvd.Min)).min().asscalar()))
True
True
"""

ALLREDUCE_GRADIENTS = f"""
Parameters
----------
params : ParameterDict, dict or list of Parameter
    The parameters whose gradients are averaged (those with
    ``grad_req="null"`` are skipped), the same ones on every rank.
mesh : ProcessMesh
    The mesh over whose data-parallel group the gradients are averaged;
    with ``dp=1`` nothing is done.
name : str, default ``"parallel.grads"``
    The grouped allreduce's name, the same on every rank.

Raises
------
TypeError
    When ``params`` is not a dict, ParameterDict or list of Parameters.

Examples
--------
{_START}
>>> mesh = parallel.ProcessMesh(dp=hvd.size(), mp=1)
>>> net = mx.gluon.nn.Dense(1, in_units=2, use_bias=False)
>>> net.initialize()
>>> with mx.autograd.record():
...     loss = net(mx.nd.ones((1, 2)) * (hvd.rank() + 1)).sum()  # each replica's own batch
>>> loss.backward()
>>> parallel.allreduce_gradients(net.collect_params(), mesh)
>>> net.weight.grad().asnumpy().tolist() == [[(hvd.size() + 1) / 2] * 2]  # the replicas' mean
True
"""
