"""Reference sections of the tensor-parallel layers and of the sharded loss
and metrics (attached by `_reference.reference`)."""
from mxplugin.parallel._reference import F_ARGUMENT, KWARGS_BLOCK, NOT_HYBRID

_START = """>>> import mxnet as mx
>>> import numpy as np
>>> import mxplugin as hvd
>>> from mxplugin import parallel
>>> hvd.init()
>>> mesh = parallel.ProcessMesh(dp=1, mp=hvd.size())"""

_MESH = """mesh : ProcessMesh, optional
    The mesh whose model-parallel group the layer is split over; by default
    ``default_mesh()``."""

_DENSE_TAIL = f"""use_bias : bool, default True
    Whether the layer has a bias, as in ``gluon.nn.Dense``.
activation : str, optional
    An activation (``"relu"``, ...) applied as ``gluon.nn.Dense`` applies it,
    by default none.
{_MESH}
flatten : bool, default True
    As in ``gluon.nn.Dense``: True flattens the input to two dimensions,
    False applies the layer along the last axis.
dtype : str, default ``"float32"``
    The parameters' type.
weight_initializer : str or mxnet.init.Initializer, optional
    The initializer of the whole weight, by default the one passed to
    ``initialize()``. The whole array is drawn and this rank keeps its
    slice, so the same seed on every rank gives the shards of one serial
    weight.
bias_initializer : str or mxnet.init.Initializer, default ``"zeros"``
    The initializer of the whole bias, drawn whole as the weight.
{KWARGS_BLOCK}"""

COLUMN_PARALLEL_DENSE = f"""
Megatron-LM: ``ColumnParallelLinear``, with the same ``gather_output``.
PyTorch: an ``nn.Linear`` split by ``ColwiseParallel``.

Parameters
----------
units : int
    The output features of the whole layer, divisible by ``mesh.mp``.
in_units : int
    The input features (needed now: the shards are made at construction).
gather_output : bool, default True
    True: every rank gets all ``units`` output features (gathered along the
    last axis). False: each rank returns its ``units / mp`` features.
{_DENSE_TAIL}

Raises
------
ArgumentError
    When ``units`` does not divide by ``mesh.mp``.

Examples
--------
{_START}
>>> mx.random.seed(0)
>>> serial = mx.gluon.nn.Dense(8, in_units=3)
>>> serial.initialize()
>>> layer = parallel.ColumnParallelDense(8, in_units=3, mesh=mesh)  # gather_output=True
>>> layer.initialize()
>>> layer.load_full(serial.weight.data(), serial.bias.data())  # this rank keeps its rows
>>> layer.weight.shape == (8 // hvd.size(), 3)
True
>>> x = mx.nd.ones((2, 3))
>>> np.allclose(layer(x).asnumpy(), serial(x).asnumpy(), atol=1e-6)
True
>>> layer.full_weight().shape  # gathered over the mp group
(8, 3)
"""

COLUMN_FORWARD = f"""
Parameters
----------
{F_ARGUMENT}
x : NDArray
    The input, the same on every rank of the mp group.
weight : NDArray
    This rank's rows of the weight.
bias : NDArray, optional
    This rank's block of the bias; None without one.

Returns
-------
NDArray
    All output features with ``gather_output``, else this rank's block.

Raises
------
{NOT_HYBRID}
"""

ROW_PARALLEL_DENSE = f"""
Megatron-LM: ``RowParallelLinear``, with the same ``input_is_parallel``.
PyTorch: an ``nn.Linear`` split by ``RowwiseParallel``.

Parameters
----------
units : int
    The output features.
in_units : int
    The input features of the whole layer, divisible by ``mesh.mp``.
input_is_parallel : bool, default False
    True: the input is this rank's block of ``in_units / mp`` features
    (from a ColumnParallelDense with ``gather_output=False``). False: the
    whole input, the same on every rank of the group, sliced here.
{_DENSE_TAIL}

Raises
------
ArgumentError
    When ``in_units`` does not divide by ``mesh.mp``.

Examples
--------
{_START}
>>> mx.random.seed(0)  # the same on every rank: shards of the same whole weights
>>> net = mx.gluon.nn.Sequential()  # the tensor-parallel MLP
>>> net.add(parallel.ColumnParallelDense(8, 4, gather_output=False, activation="relu", mesh=mesh),
...         parallel.RowParallelDense(2, 8, input_is_parallel=True, mesh=mesh))
>>> net.initialize()
>>> net[1].weight.shape == (2, 8 // hvd.size())  # this rank's columns
True
>>> net(mx.nd.ones((3, 4))).shape  # the whole output on every rank
(3, 2)
"""

ROW_FORWARD = f"""
Parameters
----------
{F_ARGUMENT}
x : NDArray
    This rank's block of input features with ``input_is_parallel``, else
    the whole input, the same on every rank of the mp group.
weight : NDArray
    This rank's columns of the weight.
bias : NDArray, optional
    The whole bias, added once after the sum; None without one.

Returns
-------
NDArray
    The whole output, the same on every rank of the mp group.

Raises
------
{NOT_HYBRID}
ArgumentError
    With ``input_is_parallel`` and ``flatten=True``, for an input of more
    than two dimensions (its flattened features would not be this rank's
    block).
"""

VOCAB_PARALLEL_EMBEDDING = f"""
Megatron-LM: ``VocabParallelEmbedding``. PyTorch: an ``nn.Embedding``
split by ``RowwiseParallel``.

Parameters
----------
input_dim : int
    The vocabulary size (rows of the whole table), divisible by ``mesh.mp``.
output_dim : int
    The size of each embedding.
{_MESH}
dtype : str, default ``"float32"``
    The table's type.
weight_initializer : str or mxnet.init.Initializer, optional
    The initializer of the whole table, by default the one passed to
    ``initialize()``; drawn whole, this rank keeping its rows.
{KWARGS_BLOCK}

Raises
------
ArgumentError
    When ``input_dim`` does not divide by ``mesh.mp``.

Examples
--------
{_START}
>>> emb = parallel.VocabParallelEmbedding(4 * hvd.size(), 3, mesh=mesh)
>>> emb.initialize()
>>> emb.weight.shape  # this rank's 4 rows
(4, 3)
>>> table = mx.nd.arange(4 * hvd.size() * 3).reshape((-1, 3))
>>> emb.load_full(table)
>>> ids = mx.nd.array([[0, 4 * hvd.size() - 1]])  # the first row and the last
>>> emb(ids).asnumpy().tolist() == mx.nd.take(table, ids).asnumpy().tolist()
True
"""

EMBEDDING_FORWARD = f"""
Parameters
----------
{F_ARGUMENT}
x : NDArray
    The ids, any shape, the same on every rank of the mp group.
weight : NDArray
    This rank's rows of the table.

Returns
-------
NDArray
    The embeddings, shape ``x.shape + (output_dim,)``, on every rank of the
    group.

Raises
------
{NOT_HYBRID}
"""

EMBEDDING_LOAD_FULL = """
Parameters
----------
weight : NDArray, mxnet.numpy.ndarray or numpy.ndarray
    The whole table, shape ``(input_dim, output_dim)``. The layer must be
    initialised.

Raises
------
TypeError
    When ``weight`` is not an array.
ArgumentError
    When its shape is not ``(input_dim, output_dim)``.
"""

SHARDED_LOSS = f"""
Megatron-LM: ``vocab_parallel_cross_entropy``. PyTorch: cross-entropy
under ``loss_parallel()`` on a ``ColwiseParallel`` output.

Parameters
----------
mesh : ProcessMesh, optional
    The mesh whose model-parallel group holds the scores' blocks; by default
    ``default_mesh()``.
weight : float, optional
    A global scalar weight of the loss, as ``gluon.loss.Loss`` takes.
batch_axis : int, default 0
    The axis of the samples: the loss is averaged over the others.
**kwargs : dict
    Passed on to ``gluon.loss.Loss``: ``prefix``, ``params``.

Examples
--------
{_START}
>>> mx.random.seed(0)
>>> scores = mx.nd.random.normal(shape=(3, 2 * hvd.size()))  # the whole scores, the same on every rank
>>> label = mx.nd.array([0, 1, 2 * hvd.size() - 1])
>>> mine = parallel.scatter_to_group(scores, mesh.mp_set)  # this rank's 2 classes
>>> mine.attach_grad()
>>> with mx.autograd.record():
...     loss = parallel.ShardedSoftmaxCrossEntropyLoss(mesh)(mine, label)
>>> loss.backward()
>>> whole = scores.copy()
>>> whole.attach_grad()
>>> with mx.autograd.record():
...     serial = mx.gluon.loss.SoftmaxCrossEntropyLoss()(whole, label)
>>> serial.backward()
>>> np.allclose(loss.asnumpy(), serial.asnumpy(), atol=1e-6)
True
>>> np.allclose(mine.grad.asnumpy(), parallel.scatter_to_group(whole.grad, mesh.mp_set).asnumpy(), atol=1e-6)
True
"""

LOSS_HYBRIDIZE = """
Parameters
----------
active : bool, default True
    Ignored: the loss always runs imperatively.
**kwargs : dict
    Passed on to ``HybridBlock.hybridize``, which is called with
    ``active=False``.
"""

LOSS_FORWARD = f"""
Parameters
----------
{F_ARGUMENT}
pred : NDArray
    This rank's block of class scores, along the last axis.
label : NDArray
    The global class index of each sample, shape ``pred.shape[:-1]`` (or
    with a trailing 1), the same on every rank of the mp group.
sample_weight : NDArray, optional
    One weight per sample (reshaped to the loss's shape).

Returns
-------
NDArray
    The loss of each sample, the same on every rank of the mp group.

Raises
------
{NOT_HYBRID}
"""

_SCORES = """>>> scores = mx.nd.array([[0.0, 5.0, 1.0, 2.0], [7.0, 0.0, 0.0, 3.0]])  # 4 classes, top: 1 and 0
>>> mine = parallel.scatter_to_group(scores, mesh.mp_set)  # this rank's classes"""

_LOGITS = """logits : NDArray or mxnet.numpy.ndarray
    This rank's block of class scores, along the last axis (the output of
    a ColumnParallelDense with ``gather_output=False``)."""

_METRIC_TAIL = """mesh : ProcessMesh, optional
    The mesh whose model-parallel group holds the blocks; by default
    ``default_mesh()``.
name : str, optional
    A label of the collectives' names, the same on every rank."""

SHARDED_ARGMAX = f"""
Parameters
----------
{_LOGITS}
{_METRIC_TAIL}

Returns
-------
NDArray or mxnet.numpy.ndarray
    The global index of each sample's top class, float64, shape
    ``logits.shape[:-1]``.

Examples
--------
{_START}
{_SCORES}
>>> parallel.sharded_argmax(mine, mesh).asnumpy().tolist()
[1.0, 0.0]
"""

SHARDED_ACCURACY = f"""
Parameters
----------
{_LOGITS}
label : NDArray or mxnet.numpy.ndarray
    The global class index of each sample, the same on every rank of the mp
    group.
{_METRIC_TAIL}

Returns
-------
float
    The fraction of samples whose top class is their label, the same on
    every rank of the mp group.

Examples
--------
{_START}
{_SCORES}
>>> parallel.sharded_accuracy(mine, mx.nd.array([1, 3]), mesh)
0.5
"""
