"""Reference sections of the differentiable collectives (attached by
`_reference.reference`)."""
from mxplugin.parallel._reference import NAME, PROCESS_SET, SET_ERRORS

_X = """x : NDArray or mxnet.numpy.ndarray
    This rank's array."""

_START = """>>> import mxnet as mx
>>> import mxplugin as hvd
>>> from mxplugin import parallel
>>> hvd.init()"""

_OP = """op : mxplugin.Sum or mxplugin.Average, default ``mxplugin.Average``
    The reduction; the differentiable collectives take no other."""

ALLGATHER = f"""
PyTorch: ``torch.distributed.nn.functional.all_gather``, which returns
the ranks' tensors as a tuple and needs equal shapes. The plain
(non-differentiable) collective is ``mxplugin.allgather``.

Parameters
----------
x : NDArray or mxnet.numpy.ndarray
    This rank's rows: at least one dimension; the first may differ between
    ranks, the others must agree.
{NAME}
{PROCESS_SET}

Returns
-------
NDArray or mxnet.numpy.ndarray
    The ranks' arrays concatenated along the first axis in rank order, of
    ``x``'s kind (a copy of ``x`` on a set of one rank).

Raises
------
{SET_ERRORS}
    Also when ``x`` has no dimension.

Examples
--------
{_START}
>>> x = mx.nd.ones((1, 2)) * hvd.rank()
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.allgather(x)  # row r holds rank r's x
...     loss = (y * y).sum()  # each rank's loss, its own term of the total
>>> loss.backward()
>>> y.shape == (hvd.size(), 2)
True
>>> x.grad.asnumpy().tolist() == (2 * hvd.size() * x).asnumpy().tolist()  # every rank's 2 * y, summed
True
"""

ALLREDUCE = f"""
PyTorch: ``torch.distributed.nn.functional.all_reduce`` (its default
reduction is the sum). The plain (non-differentiable) collective is
``mxplugin.allreduce``.

Parameters
----------
{_X}
{_OP}
{NAME}
{PROCESS_SET}

Returns
-------
NDArray or mxnet.numpy.ndarray
    A new array of ``x``'s kind, shape and type (a copy of ``x`` on a set
    of one rank).

Raises
------
{SET_ERRORS}
    Also when ``op`` is neither Sum nor Average.

Examples
--------
{_START}
>>> x = mx.nd.ones(2) * (hvd.rank() + 1)
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.allreduce(x, op=hvd.Sum)
>>> y.backward()
>>> y.asnumpy().tolist() == [hvd.size() * (hvd.size() + 1) / 2] * 2
True
>>> x.grad.asnumpy().tolist() == [hvd.size()] * 2  # every rank's gradient of 1, summed
True
"""

BROADCAST = f"""
PyTorch: ``torch.distributed.nn.functional.broadcast``. The plain
(non-differentiable) collective is ``mxplugin.broadcast``.

Parameters
----------
{_X} Every rank's must have the same shape and type.
root_rank : int
    The global rank, a member of ``process_set``, whose ``x`` every rank
    receives.
{NAME}
{PROCESS_SET}

Returns
-------
NDArray or mxnet.numpy.ndarray
    A new array holding the root's ``x``, of ``x``'s kind (a copy of ``x``
    on a set of one rank).

Raises
------
{SET_ERRORS}
    Also when ``root_rank`` is not a member of ``process_set``.

Examples
--------
{_START}
>>> x = mx.nd.ones(2) * (hvd.rank() + 1)
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.broadcast(x, root_rank=0)
>>> y.backward()
>>> y.asnumpy().tolist()  # rank 0's x on every rank
[1.0, 1.0]
>>> x.grad.asnumpy().tolist() == ([hvd.size()] * 2 if hvd.rank() == 0 else [0.0, 0.0])
True
"""

REDUCESCATTER = f"""
PyTorch: ``torch.distributed.nn.functional.reduce_scatter``, which takes
the blocks as a list. The plain (non-differentiable) collective is
``mxplugin.reducescatter``.

Parameters
----------
x : NDArray or mxnet.numpy.ndarray
    This rank's array, the same shape and type on every rank, with at
    least one dimension.
{_OP}
{NAME}
{PROCESS_SET}

Returns
-------
NDArray or mxnet.numpy.ndarray
    This rank's block of rows of the reduction, of ``x``'s kind (a copy of
    ``x`` on a set of one rank).

Raises
------
{SET_ERRORS}
    Also when ``op`` is neither Sum nor Average, or ``x`` has no
    dimension.

Examples
--------
{_START}
>>> x = mx.nd.ones((2 * hvd.size(), 3))
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.reducescatter(x, op=hvd.Sum)  # 2 rows for each rank
>>> y.backward()
>>> y.shape, y.asnumpy().tolist() == [[hvd.size()] * 3] * 2
((2, 3), True)
>>> x.grad.shape == x.shape  # every rank's gradient of its rows, gathered
True
"""

COPY_TO_GROUP = f"""
Megatron-LM: ``copy_to_tensor_model_parallel_region``
(``megatron.core.tensor_parallel``).

Parameters
----------
x : NDArray or mxnet.numpy.ndarray
    The replicated array, the same on every rank of the set.
{PROCESS_SET}
{NAME}

Returns
-------
NDArray or mxnet.numpy.ndarray
    A copy of ``x`` that records the summing backward (``x`` itself on a
    set of one rank).

Raises
------
{SET_ERRORS}

Examples
--------
{_START}
>>> x = mx.nd.ones(2)  # replicated
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.copy_to_group(x)
...     part = (y * (hvd.rank() + 1)).sum()  # each rank's share of the computation
>>> part.backward()
>>> x.grad.asnumpy().tolist() == [hvd.size() * (hvd.size() + 1) / 2] * 2  # the shares' gradients, summed
True
"""

REDUCE_FROM_GROUP = f"""
Megatron-LM: ``reduce_from_tensor_model_parallel_region``
(``megatron.core.tensor_parallel``).

Parameters
----------
x : NDArray or mxnet.numpy.ndarray
    This rank's partial result, the same shape and type on every rank of
    the set.
{PROCESS_SET}
{NAME}

Returns
-------
NDArray or mxnet.numpy.ndarray
    The sum over the set, of ``x``'s kind (``x`` itself on a set of one
    rank). Outside ``autograd.record()`` it is a plain allreduce-sum.

Raises
------
{SET_ERRORS}

Examples
--------
{_START}
>>> x = mx.nd.ones(2) * (hvd.rank() + 1)  # a partial sum
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.reduce_from_group(x)
>>> y.backward()
>>> y.asnumpy().tolist() == [hvd.size() * (hvd.size() + 1) / 2] * 2
True
>>> x.grad.asnumpy().tolist()  # the replicated gradient, passed through
[1.0, 1.0]
"""

GATHER_FROM_GROUP = f"""
Megatron-LM: ``gather_from_tensor_model_parallel_region``
(``megatron.core.tensor_parallel``), which gathers along the last axis.

Parameters
----------
x : NDArray or mxnet.numpy.ndarray
    This rank's block, the same shape and type on every rank of the set,
    with at least one dimension.
{PROCESS_SET}
axis : int, default -1
    The axis the blocks are concatenated along.
{NAME}

Returns
-------
NDArray or mxnet.numpy.ndarray
    The blocks of the set's ranks, in rank order, along ``axis``, of
    ``x``'s kind (``x`` itself on a set of one rank).

Raises
------
{SET_ERRORS}
    Also when ``x`` has no dimension or ``axis`` is out of range.

Examples
--------
{_START}
>>> x = mx.nd.ones((2, 1)) * hvd.rank()  # this rank's feature
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.gather_from_group(x)  # all features, on every rank
...     loss = (y * y).sum()  # the same loss on every rank
>>> loss.backward()
>>> y[0].asnumpy().tolist() == [float(r) for r in range(hvd.size())]
True
>>> x.grad.asnumpy().tolist() == (2 * x).asnumpy().tolist()  # this rank's block of 2 * y
True
"""

SCATTER_TO_GROUP = f"""
Megatron-LM: ``scatter_to_tensor_model_parallel_region``
(``megatron.core.tensor_parallel``), which splits the last axis.

Parameters
----------
x : NDArray or mxnet.numpy.ndarray
    The replicated array, the same on every rank of the set.
{PROCESS_SET}
axis : int, default -1
    The axis split into as many equal blocks as the set has ranks; rank i
    of the set keeps block i.
{NAME}

Returns
-------
NDArray or mxnet.numpy.ndarray
    This rank's block of ``x`` (``x`` itself on a set of one rank).

Raises
------
{SET_ERRORS}
    Also when ``x`` has no dimension, ``axis`` is out of range or its size
    does not divide by the set's size.

Examples
--------
{_START}
>>> x = mx.nd.arange(2 * hvd.size()).reshape((1, -1))  # replicated
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = parallel.scatter_to_group(x)
>>> y.backward()
>>> y.asnumpy().tolist() == [[2.0 * hvd.rank(), 2.0 * hvd.rank() + 1]]
True
>>> x.grad.asnumpy().tolist() == [[1.0] * 2 * hvd.size()]  # every rank's block gradient, gathered
True
"""
