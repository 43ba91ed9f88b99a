"""Reference sections of the placements (attached by
`_reference.reference`)."""

_START = """>>> import mxnet as mx
>>> import numpy as np
>>> import mxplugin as hvd
>>> from mxplugin import parallel
>>> hvd.init()
>>> mesh = parallel.ProcessMesh(dp=1, mp=hvd.size())"""

_PATH_BLOCK_MESH = """path : str
    The child's dotted path in the network ("encoder.ffn.0"), for messages.
block : gluon.Block
    The child.
mesh : ProcessMesh
    The mesh whose model-parallel group the child is to be split over."""

_BLOCK_MESH = """block : gluon.Block
    The child, which ``check`` accepted.
mesh : ProcessMesh
    The mesh whose model-parallel group the child is split over."""

_REFUSED = """Raises
------
ArgumentError
    When the child cannot take this placement, naming it and the reason."""

_DENSE_REFUSED = """Raises
------
ArgumentError
    When ``block`` is not a ``gluon.nn.Dense``, overrides its forward, does
    not know its ``in_units`` yet (deferred initialisation), or its {width}
    do not divide by ``mesh.mp``."""

_TAKES_VALUES = """this rank's slices of ``block``'s values and its parameters'
    ``lr_mult``, ``wd_mult`` and ``grad_req`` (an uninitialised ``block``
    leaves it uninitialised: its initializer then draws the whole array and
    keeps this rank's slice)."""

PLACEMENT_CHECK = f"""
Parameters
----------
{_PATH_BLOCK_MESH}

{_REFUSED}
"""

PLACEMENT_REPLACE = f"""
Parameters
----------
{_BLOCK_MESH}

Returns
-------
gluon.Block or None
    The block put in ``block``'s place, under its child name; None keeps
    ``block`` there.
"""

PLACEMENT_CHILDREN = """
Parameters
----------
block : gluon.Block
    The child this placement is given.

Returns
-------
dict
    {child key: Placement} of ``block``'s own children, split with it.
"""

PLACEMENT = f"""
Examples
--------
{_START}
>>> class Frozen(parallel.Placement):  # whole on every rank, not trained
...     def replace(self, block, mesh):
...         for param in block.collect_params().values():
...             param.grad_req = "null"
...         return None  # keep the block, changed
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.Dense(4 * hvd.size(), in_units=8))
>>> net = parallel.parallelize(net, mesh, {{"0": Frozen(), "1": parallel.ShardedOutput()}})
>>> net[0].weight.grad_req, type(net[1]).__name__
('null', 'ColumnParallelDense')
"""

COLWISE = f"""
PyTorch: ``ColwiseParallel``, whose output is split by default too.

Parameters
----------
gather_output : bool, default False
    False: each rank returns its ``units / mp`` output features. True: every
    rank gets all of them.

Examples
--------
{_START}
>>> mx.random.seed(0)  # the same serial values on every rank
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(8, in_units=4))
>>> net.initialize()
>>> net = parallel.parallelize(net, mesh, {{"0": parallel.ColwiseParallel(gather_output=True)}})
>>> net[0].weight.shape == (8 // hvd.size(), 4), net(mx.nd.ones((2, 4))).shape
(True, (2, 8))
"""

COLWISE_CHECK = f"""
Parameters
----------
{_PATH_BLOCK_MESH}

{_DENSE_REFUSED.format(width='units')}
"""

COLWISE_REPLACE = f"""
Parameters
----------
{_BLOCK_MESH}

Returns
-------
ColumnParallelDense
    Built as ``block`` was (units, bias, activation, flatten, dtype,
    initializers, prefix), holding {_TAKES_VALUES}
"""

ROWWISE = f"""
PyTorch: ``RowwiseParallel``, whose input is split by default too.

Parameters
----------
input_is_parallel : bool, default True
    True: the input is this rank's block of features, from a
    ColwiseParallel Dense (element-wise blocks may come between). False:
    the whole input, sliced here.

Examples
--------
{_START}
>>> mx.random.seed(0)  # the same serial values on every rank
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.Dense(2, in_units=8))
>>> net.initialize()
>>> net = parallel.parallelize(net, mesh, {{"1": parallel.RowwiseParallel(input_is_parallel=False)}})
>>> net[1].weight.shape == (2, 8 // hvd.size()), net(mx.nd.ones((3, 4))).shape
(True, (3, 2))
"""

ROWWISE_CHECK = f"""
Parameters
----------
{_PATH_BLOCK_MESH}

{_DENSE_REFUSED.format(width='in_units')}
"""

ROWWISE_REPLACE = f"""
Parameters
----------
{_BLOCK_MESH}

Returns
-------
RowParallelDense
    Built as ``block`` was, holding {_TAKES_VALUES}
"""

SHARDED_OUTPUT = f"""
PyTorch: a ``ColwiseParallel(use_local_output=False)`` output layer trained
under ``loss_parallel()``.

Examples
--------
{_START}
>>> mx.random.seed(0)  # the same serial values on every rank
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(8, in_units=4, activation="relu"), mx.gluon.nn.Dense(4 * hvd.size(), in_units=8))
>>> net.initialize()
>>> net = parallel.parallelize(net, mesh, {{"1": parallel.ShardedOutput()}})
>>> scores = net(mx.nd.ones((2, 4)))
>>> scores.shape  # this rank's 4 classes
(2, 4)
>>> loss = parallel.ShardedSoftmaxCrossEntropyLoss(mesh)(scores, mx.nd.array([0, 1]))
>>> loss.shape
(2,)
"""

SHARDED_OUTPUT_REPLACE = f"""
Parameters
----------
{_BLOCK_MESH}

Returns
-------
ColumnParallelDense
    With ``gather_output=False``, built as ``block`` was, holding
    {_TAKES_VALUES}
"""

VOCAB = f"""
PyTorch: ``RowwiseParallel`` applied to an ``nn.Embedding``.

Examples
--------
{_START}
>>> mx.random.seed(0)
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Embedding(4 * hvd.size(), 3))
>>> net.initialize()
>>> ids = mx.nd.array([[0, 1, 4 * hvd.size() - 1]])
>>> before = net(ids).asnumpy()
>>> net = parallel.parallelize(net, mesh, {{"0": parallel.VocabParallel()}})
>>> net[0].weight.shape  # this rank's 4 rows
(4, 3)
>>> np.allclose(net(ids).asnumpy(), before)
True
"""

VOCAB_CHECK = f"""
Parameters
----------
{_PATH_BLOCK_MESH}

Raises
------
ArgumentError
    When ``block`` is not a ``gluon.nn.Embedding``, overrides its forward,
    has ``sparse_grad=True``, or its ``input_dim`` does not divide by
    ``mesh.mp``.
"""

VOCAB_REPLACE = f"""
Parameters
----------
{_BLOCK_MESH}

Returns
-------
VocabParallelEmbedding
    Built as ``block`` was (sizes, dtype, initializer, prefix), holding
    {_TAKES_VALUES}
"""

HEAD = f"""
PyTorch: the tensor-parallel plan of an attention block, ``ColwiseParallel``
query, key and value and a ``RowwiseParallel`` output projection, with the
block's head count divided by the mesh size by hand.

Parameters
----------
projections : tuple of str, default ("query", "key", "value")
    The children computing Q, K and V: Dense layers, each with heads *
    head_size output features, head-major (feature h * head_size + d, as a
    reshape to (..., heads, head_size) reads them); split column-wise.
output : str, default "proj"
    The child projecting the concatenated heads back; split row-wise.
num_heads : str, default "_num_heads"
    The block's integer attribute holding the head count, which its forward
    reads; divided by ``mp`` on each rank.
per_rank : tuple of str, default ()
    Other integer attributes the forward reads that count features of all
    heads together (e.g. "_units" in a reshape to (N, T, units)); divided
    by ``mp`` as well.

Examples
--------
{_START}
>>> class SelfAttention(mx.gluon.nn.Block):  # as a user writes it
...     def __init__(self, units, num_heads):
...         super().__init__()
...         self._num_heads = num_heads
...         with self.name_scope():
...             self.query = mx.gluon.nn.Dense(units, in_units=units, flatten=False)
...             self.key = mx.gluon.nn.Dense(units, in_units=units, flatten=False)
...             self.value = mx.gluon.nn.Dense(units, in_units=units, flatten=False)
...             self.proj = mx.gluon.nn.Dense(units, in_units=units, flatten=False)
...     def forward(self, x):  # (N, T, units); the heads' shapes from _num_heads and -1
...         q, k, v = (layer(x).reshape((0, 0, self._num_heads, -1)).transpose((0, 2, 1, 3)).reshape((-3, 0, 0))
...                    for layer in (self.query, self.key, self.value))
...         heads = mx.nd.batch_dot(mx.nd.softmax(mx.nd.batch_dot(q, k, transpose_b=True)), v)
...         heads = heads.reshape((-4, -1, self._num_heads, 0, 0)).transpose((0, 2, 1, 3))
...         return self.proj(heads.reshape((0, 0, -1)))
>>> mx.random.seed(0)
>>> net = mx.gluon.nn.Sequential()
>>> net.add(SelfAttention(8, num_heads=2 * hvd.size()))
>>> net.initialize()
>>> x = mx.nd.random.uniform(shape=(2, 3, 8))
>>> before = net(x).asnumpy()
>>> net = parallel.parallelize(net, mesh, {{"0": parallel.HeadParallel()}})
>>> net[0]._num_heads, type(net[0].query).__name__  # this rank's 2 heads
(2, 'ColumnParallelDense')
>>> np.allclose(net(x).asnumpy(), before, atol=1e-5)
True
"""

HEAD_CHECK = f"""
Parameters
----------
{_PATH_BLOCK_MESH}

Raises
------
ArgumentError
    When ``block`` has no integer attribute ``num_heads`` (or one of
    ``per_rank``), one of them does not divide by ``mesh.mp``, a child
    named is missing, or a projection's output features are not a multiple
    of the head count.
"""

HEAD_CHILDREN = """
Parameters
----------
block : gluon.Block
    The attention block.

Returns
-------
dict
    ColwiseParallel() for each of ``projections``, RowwiseParallel() for
    ``output``.
"""

HEAD_REPLACE = f"""
Parameters
----------
{_BLOCK_MESH}

Returns
-------
None
    The block stays, its head count (and ``per_rank`` attributes) divided
    by ``mesh.mp``; its projections are replaced by their own placements.
"""

REPLICATE = f"""
Examples
--------
{_START}
>>> net = mx.gluon.nn.Sequential()
>>> net.add(mx.gluon.nn.Dense(8, in_units=4), mx.gluon.nn.Dense(2, in_units=8))
>>> net = parallel.parallelize(net, mesh, {{"*": parallel.Replicate()}})  # every child, by pattern
>>> type(net[0]).__name__, net[0].weight.shape
('Dense', (8, 4))
"""
