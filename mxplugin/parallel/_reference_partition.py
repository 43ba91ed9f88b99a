"""Reference sections of the partitioner (parallelize, auto_plan, Plan) and
of the serial checkpoints (attached by `_reference.reference`)."""

_START = """>>> import mxnet as mx
>>> import numpy as np
>>> import mxplugin as hvd
>>> from mxplugin import parallel
>>> hvd.init()
>>> mesh = parallel.ProcessMesh(dp=1, mp=hvd.size())"""

_MLP = """>>> def mlp():  # a serial network, in plain Gluon
...     net = mx.gluon.nn.Sequential()
...     net.add(mx.gluon.nn.Dense(8, in_units=4, activation="relu"), mx.gluon.nn.Dense(4, in_units=8))
...     return net
>>> plan = {"0": parallel.ColwiseParallel(), "1": parallel.RowwiseParallel()}"""

_FOLDER = """>>> import os, shutil, tempfile
>>> folder = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, root_rank=0)
>>> path = os.path.join(folder, "model.params")  # a folder every rank sees"""

_NET = """net : gluon.Block
    The network parallelized by ``parallelize``."""

PARALLELIZE = f"""
PyTorch: ``torch.distributed.tensor.parallel.parallelize_module(module,
device_mesh, parallelize_plan)``.

Parameters
----------
net : gluon.Block
    The serial network, changed in place. Its children may hold values
    (each split child keeps this rank's slices of them) or not yet (a split
    child's initializer then draws the whole array as the serial child's
    would, and keeps its slice).
mesh : ProcessMesh, optional
    The mesh whose model-parallel group the children are split over; by
    default ``default_mesh()``.
plan : dict, Plan or "auto", default "auto"
    {{child path or pattern: placement}}, a Plan, or "auto" (``auto_plan``:
    Dense -> activation/dropout -> Dense chains in Sequential blocks, and a
    large final classifier). Paths are the child names of
    ``save_parameters`` ("0", "encoder.attn.query"); a '*' in a pattern
    matches one name ("layers.*.ffn.0"). Children not named stay
    replicated.
verbose : bool, default False
    Print the plan applied, with its notes, on global rank 0.

Returns
-------
gluon.Block
    ``net``, its named children replaced by tensor-parallel blocks under
    the same names.

Raises
------
TypeError
    When ``net`` is not a Block, or the plan is not a dict of placements.
ArgumentError
    When ``plan`` is a str other than "auto", a plan entry names no child
    or the same child as another, a child
    cannot take its placement (not a Dense, a width that does not divide by
    ``mp``, a block used twice or sharing parameters, a hybridized block
    above it), or split features would reach a layer that needs whole ones
    in a Sequential. The message names the child; the network is left as
    it was.

Examples
--------
{_START}
{_MLP}
>>> mx.random.seed(0)  # the same serial values on every rank
>>> net = mlp()
>>> net.initialize()
>>> x = mx.nd.ones((2, 4))
>>> before = net(x).asnumpy()
>>> net = parallel.parallelize(net, mesh, plan)
>>> net[0]
ColumnParallelDense(4 -> 8, ...)
>>> np.allclose(net(x).asnumpy(), before, atol=1e-6)  # the serial network's output
True
"""

AUTO_PLAN = f"""
Parameters
----------
net : gluon.Block
    The serial network; it is only read.
mesh : ProcessMesh, optional
    The mesh to plan for; by default ``default_mesh()``.
classifier : "auto", True or False, default "auto"
    The final Dense: "auto" gives it ShardedOutput when it widens (more
    classes than input features) and its weight is the largest Dense
    weight; True whenever its classes divide by ``mp``; False never.

Returns
-------
Plan
    The placements, in the network's order, and a note on each choice and
    each pair passed over.

Raises
------
ArgumentError
    When ``classifier`` is not "auto", True or False.

Examples
--------
{_START}
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(16, in_units=4, activation="relu"), mx.gluon.nn.Dropout(0.1),
...         mx.gluon.nn.Dense(4, in_units=16))
>>> plan = parallel.auto_plan(net, mesh)  # print(plan) shows both of:
>>> plan.placements
{{'0': ColwiseParallel(gather_output=False), '2': RowwiseParallel(input_is_parallel=True)}}
>>> for note in plan.notes:
...     print(note)
2: final classifier Dense(16 -> 4) left replicated: it does not widen (classes <= input features; ...)
0 -> 2: Dense(4 -> 16) then Dense(16 -> 4): column- then row-wise, hidden features split, ...
"""

PLAN = f"""
Parameters
----------
placements : dict
    {{child path or pattern: Placement}} (or another mapping), as
    ``parallelize`` takes it.
notes : sequence of str, optional
    Why each entry was chosen (``auto_plan`` writes them).

Raises
------
TypeError
    When ``placements`` is not a dict, a key is not a str or a value not a
    Placement.

Examples
--------
>>> from mxplugin import parallel
>>> plan = parallel.Plan({{"0": parallel.ColwiseParallel(), "2": parallel.RowwiseParallel()}})
>>> print(plan)
2 placement(s); every other child replicated
  0  ColwiseParallel(gather_output=False)
  2  RowwiseParallel(input_is_parallel=True)
>>> plan == {{"0": parallel.ColwiseParallel(), "2": parallel.RowwiseParallel()}}
True
"""

GATHER_SERIAL_PARAMETERS = f"""
Parameters
----------
{_NET}

Returns
-------
dict
    {{structural name: whole array on the CPU}}, as the serial network's
    ``save_parameters`` names them ("0.weight").

Raises
------
ArgumentError
    When a parameter outside the split layers is not initialised.

Examples
--------
{_START}
{_MLP}
>>> mx.random.seed(0)  # the same whole arrays drawn on every rank
>>> net = parallel.parallelize(mlp(), mesh, plan)
>>> net.initialize()
>>> arrays = parallel.gather_serial_parameters(net)
>>> sorted(arrays)
['0.bias', '0.weight', '1.bias', '1.weight']
>>> arrays["0.weight"].shape  # whole, on every rank
(8, 4)
"""

SAVE_SERIAL_PARAMETERS = f"""
Parameters
----------
{_NET}
filename : str
    The file to write, on global rank ``root_rank``.
root_rank : int, default 0
    The global rank that writes the file.

Raises
------
ArgumentError
    When a parameter outside the split layers is not initialised.

Examples
--------
{_START}
{_MLP}
{_FOLDER}
>>> mx.random.seed(0)
>>> net = parallel.parallelize(mlp(), mesh, plan)
>>> net.initialize()
>>> parallel.save_serial_parameters(net, path)  # every rank calls it; rank 0 writes
>>> hvd.barrier()  # the file is written
>>> serial = mlp()
>>> serial.load_parameters(path)  # plain Gluon
>>> x = mx.nd.ones((2, 4))
>>> np.allclose(serial(x).asnumpy(), net(x).asnumpy(), atol=1e-6)
True
>>> hvd.barrier()  # every rank has read it
>>> if hvd.rank() == 0:
...     shutil.rmtree(folder)
"""

LOAD_SERIAL_PARAMETERS = f"""
Parameters
----------
{_NET}
filename : str
    A file of the serial network's ``save_parameters``, or of
    ``save_serial_parameters``. Every rank reads it.
ctx : Context, optional
    Where parameters not yet initialised are initialised; by default the
    current context.

Raises
------
ArgumentError
    When the file holds no names, lacks a parameter of the network or has
    one the network lacks, or an array's shape differs from the serial
    parameter's.

Examples
--------
{_START}
{_MLP}
{_FOLDER}
>>> mx.random.seed(0)  # the same serial values on every rank
>>> serial = mlp()
>>> serial.initialize()
>>> if hvd.rank() == 0:
...     serial.save_parameters(path)  # a serial checkpoint
>>> hvd.barrier()  # the file is written
>>> net = parallel.parallelize(mlp(), mesh, plan)  # not initialised
>>> parallel.load_serial_parameters(net, path)  # each rank keeps its slices
>>> x = mx.nd.ones((2, 4))
>>> np.allclose(net(x).asnumpy(), serial(x).asnumpy(), atol=1e-6)
True
>>> hvd.barrier()  # every rank has read it
>>> if hvd.rank() == 0:
...     shutil.rmtree(folder)
"""
