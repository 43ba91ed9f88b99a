"""Allgathers and alltoalls that exchange sizes first (a small blocking
exchange, exchange.py) and then push an engine op whose output has its
final shape: GPU arrays, large host ones, and what the one-call host path
declines (host_exchange.py), whose arguments are checked here, by name."""
import mxnet as mx
import numpy as np

from mxplugin import calls, exchange, host_exchange
from mxplugin.dtypes import describe as _describe
from mxplugin.errors import ArgumentError


def described(tensor, what="tensor", kind="allgather"):
    """(dtype code, device, shape) of `tensor`, an input of a call of
    `kind`, after its checks, whose errors name it by `what`. A group's
    tensors are all described before the first exchange, so that a bad one
    fails the call before anything is submitted (and refuses it on the
    other ranks)."""
    dtype, device, shape = _describe(tensor, what)
    calls.check_dense(tensor, what)
    if not shape:
        raise ArgumentError(f"{kind}: {what} must have at least one dimension")
    return dtype, device, shape


def allgather_output(tensor, name, process_set, group, description):
    """(output NDArray, Op record) of an allgather of `tensor` named `name`,
    after the blocking exchange of every rank's rows (description: described(tensor))."""
    dtype, device, shape = description
    rows = exchange.exchange_int64(exchange.allgather_signature(dtype, shape), name + ".sizes", process_set,
                                   calls.set_id(process_set), group)
    exchange.check_allgather_rows(rows, name, process_set)
    firsts = rows[:, 0]
    out_shape = [int(firsts.sum())] + shape[1:]
    output = mx.nd.empty(tuple(out_shape), ctx=tensor.context, dtype=tensor.dtype)
    m = calls.core_module()
    return output, calls.record(name, m.OP_ALLGATHER, tensor, output, dtype, device, shape, out_shape=out_shape)


def alltoall(tensor, given, base, process_set, priority, group, key):
    """(output, rows each rank sends here) of an alltoall as an engine op,
    after a blocking exchange of the splits (given: None for equal blocks)."""
    dtype, device, shape = described(tensor, kind="alltoall")
    n = len(process_set.ranks)
    if given is None:
        if shape[0] % n:
            raise ArgumentError(f"alltoall: first dimension {shape[0]} is not divisible by {n} ranks; pass splits")
        given = [shape[0] // n] * n
    elif any(s < 0 for s in given) or sum(given) != shape[0]:
        raise ArgumentError(f"alltoall: splits {given} must be non-negative and sum to the first "
                            f"dimension {shape[0]}")
    matrix = exchange.exchange_int64(given, base + ".splits", process_set, calls.set_id(process_set), group)
    received = matrix[:, process_set.rank()]
    output = mx.nd.empty((int(received.sum()),) + tuple(shape[1:]), ctx=tensor.context, dtype=tensor.dtype)
    host_exchange.exchanged(key, int(matrix.sum()) * int(np.prod(shape[1:])) * np.dtype(tensor.dtype).itemsize)
    calls.push([calls.record(base, calls.core_module().OP_ALLTOALL, tensor, output, dtype, device, shape,
                             out_shape=list(output.shape), splits=given)], process_set, priority, group)
    return output, received
