"""Collectives on MXNet NDArrays, with horovod.mxnet's names, signatures and
defaults. Each call pushes one asynchronous op into MXNet's engine (input as a
read dependency, output as a write dependency); reading the result
(asnumpy(), wait_to_read()) is the only synchronisation needed. Every call
takes legacy and NumPy-interface arrays alike and returns the caller's kind
(Note [Array kinds] in array_kinds.py)."""
import ctypes
import warnings

import mxnet as mx
import numpy as np

from mxplugin import array_kinds, basics, calls, exchange, host_exchange, plain_calls, sizes_first
from mxplugin.dtypes import BFLOAT16, describe as _describe  # noqa: F401  (both: others' import of them)
from mxplugin.basics import global_process_set
from mxplugin._reference_ops import reference
from mxplugin.errors import ArgumentError

# Reduce ops, with horovod.mxnet's values.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_op_names = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

_core_reduce = None  # filled lazily: horovod value -> core value
_REDUCE_OPS = (Average, Sum, Min, Max, Product)  # those the core reduces


# What training/sharding.py builds its calls from.
_base_name, _core_module, _push, _record, _set_id = (calls.base_name, calls.core_module, calls.push, calls.record,
                                                     calls.set_id)


def _reduce_code(op):
    global _core_reduce
    if _core_reduce is None:
        m = calls.core_module()
        _core_reduce = {Average: m.REDUCE_AVERAGE, Sum: m.REDUCE_SUM, Min: m.REDUCE_MIN,
                        Max: m.REDUCE_MAX, Product: m.REDUCE_PRODUCT}
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by mxplugin; use Average or Sum")
    try:
        return _core_reduce[op]
    except KeyError:
        raise ArgumentError(f"unknown reduce op {op!r}; use Average, Sum, Min, Max or Product")


def _plain_code(op, allowed):
    """The core's code of `op`, one of `allowed`, for a plain call (Note
    [Plain calls] in plain_calls.py); None where the general path is to look at it."""
    if type(op) is not int:  # noqa: E721
        return None
    if _core_reduce is None:
        _reduce_code(Sum)  # fills the codes
    return _core_reduce[op] if op in allowed else None


def _resolve_op(average, op):
    if op is not None and average is not None:
        raise ArgumentError("pass either op or the deprecated average, not both (op supersedes average)")
    if op is None and average is not None:
        # the caller's line: it called allreduce(), which called calls.submit(), which called its body
        warnings.warn("the average argument is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=5)
        return Average if average else Sum
    return Average if op is None else op


def _push_allreduce(tensors, outputs, base, op, prescale_factor, postscale_factor, process_set, priority, name):
    """Enqueues an allreduce of NDArrays `tensors` -> `outputs` (already
    checked to be NDArrays) as one engine op. The adapter reads dtypes and
    shapes from the arrays (an unsupported dtype is a TypeError naming the
    tensor): this runs for every gradient of every step."""
    pre, post = calls.check_scale(prescale_factor, postscale_factor)
    reduce = _reduce_code(op)
    priority = calls.check_priority(priority)
    core = basics._core()
    names = calls.group_names(base, len(tensors), name is not None)
    core.enqueue_mxnet_arrays(calls.core_module().OP_ALLREDUCE, tensors, outputs, names, reduce, pre, post,
                              calls.set_id(process_set), priority, calls.group_key(base, name))


def _check_empty_call(process_set, priority, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """A grouped call of no tensors does nothing, after checking its other
    arguments as a call with tensors would (submitting nothing, it refuses
    nothing either: calls.nothing_submitted)."""
    try:
        calls.set_id(process_set)
        process_set.rank()  # an ArgumentError where this rank is not a member
        calls.check_priority(priority)
        if op is not None:
            _reduce_code(op)
        calls.check_scale(prescale_factor, postscale_factor)
    except Exception as e:
        raise calls.nothing_submitted(e)


@reference("allreduce")
def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, op=None):
    """Reduces `tensor` over the ranks of `process_set` (by default the
    average) into a new array; asynchronous: reading the result waits."""
    def body(base):
        reduce = _resolve_op(average, op)
        calls.check_array(tensor)
        output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
        _push_allreduce([array_kinds.legacy(tensor)], [output], base, reduce, prescale_factor, postscale_factor,
                        process_set, priority, name)
        return array_kinds.like(tensor, output)
    return calls.submit("allreduce", name, process_set, body)


@reference("allreduce_")
def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """Reduces `tensor` over the ranks in place (see allreduce);
    asynchronous: reading it waits."""
    if average is None and plain_calls.allreduce_(tensor, _plain_code(Average if op is None else op, _REDUCE_OPS),
                                                  name, priority, process_set, prescale_factor,
                                                  postscale_factor) is not None:
        return tensor

    def body(base):
        reduce = _resolve_op(average, op)
        calls.check_array(tensor)
        view = array_kinds.legacy(tensor)
        _push_allreduce([view], [view], base, reduce, prescale_factor, postscale_factor, process_set, priority,
                        name)
        return tensor
    return calls.submit("allreduce", name, process_set, body)


@reference("grouped_allreduce")
def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """Reduces a list of arrays as one group, negotiated and fused
    together, into new arrays (see allreduce)."""
    def body(base):
        reduce = _resolve_op(average, op)
        arrays = calls.group_list(tensors)
        if not arrays:
            _check_empty_call(process_set, priority, reduce, prescale_factor, postscale_factor)
            return arrays
        outputs = [mx.nd.empty(t.shape, ctx=t.context, dtype=t.dtype) for t in arrays]
        _push_allreduce(array_kinds.legacy_list(arrays), outputs, base, reduce, prescale_factor, postscale_factor,
                        process_set, priority, name)
        return array_kinds.like_each(arrays, outputs)
    return calls.submit("allreduce", name, process_set, body)


@reference("grouped_allreduce_")
def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """Reduces a list of arrays as one group, in place (see allreduce)."""
    def body(base):
        reduce = _resolve_op(average, op)
        arrays = calls.group_list(tensors)
        if not arrays:
            _check_empty_call(process_set, priority, reduce, prescale_factor, postscale_factor)
            return tensors
        calls.check_distinct(arrays)
        views = array_kinds.legacy_list(arrays)
        _push_allreduce(views, views, base, reduce, prescale_factor, postscale_factor, process_set, priority,
                        name)
        return tensors if isinstance(tensors, (list, tuple)) else arrays
    return calls.submit("allreduce", name, process_set, body)


def grouped_allreduce_by_context_(tensors, name, op, prescale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce of tensors that may lie on several
    devices: one grouped call per context (one engine op runs on one
    device), named by the context's position in a sorted order so that ranks
    whose GPUs have different ids agree."""
    by_ctx = {}
    for t in tensors:
        by_ctx.setdefault(t.context, []).append(t)
    contexts = sorted(by_ctx, key=lambda c: (c.device_type, c.device_id))
    for i, ctx in enumerate(contexts):
        grouped_allreduce_(by_ctx[ctx], name=name + (f".{i}" if len(contexts) > 1 else ""), op=op,
                           prescale_factor=prescale_factor, process_set=process_set)


@reference("allgather")
def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension (which may
    differ per rank; the other dimensions must agree)."""
    return array_kinds.like(tensor, calls.submit("allgather", name, process_set,
                                                 lambda base: _allgather(array_kinds.legacy(tensor), base, name,
                                                                         priority, process_set)))


def _allgather(tensor, base, name, priority, process_set):
    calls.check_array(tensor)
    calls.set_id(process_set)
    calls.check_priority(priority)
    group = calls.group_key(base, name)
    key = host_exchange.key(process_set, "allgather", name)
    if host_exchange.fits(key):
        made = host_exchange.allgather([tensor], [base], process_set, priority, group, key)
        if made is not None:
            return made[0]
    output, entry = sizes_first.allgather_output(tensor, base, process_set, group, sizes_first.described(tensor))
    host_exchange.exchanged(key, output.size * np.dtype(output.dtype).itemsize)
    calls.push([entry], process_set, priority, group)
    return output


@reference("grouped_allgather")
def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """Gathers each array of a list as allgather does, in one call
    negotiated as a group."""
    def body(base):
        arrays = calls.group_list(tensors)
        if not arrays:
            _check_empty_call(process_set, priority)
            return arrays
        return array_kinds.like_each(arrays, gather(array_kinds.legacy_list(arrays), base))

    def gather(arrays, base):
        calls.set_id(process_set)
        calls.check_priority(priority)
        group = calls.group_key(base, name)
        names = calls.group_names(base, len(arrays), name is not None)
        key = host_exchange.key(process_set, "allgather", name)
        if host_exchange.fits(key):  # group_list has checked that each is an NDArray
            made = host_exchange.allgather(arrays, names, process_set, priority, group, key)
            if made is not None:
                return made
        described = [sizes_first.described(t, f"tensor {i}") for i, t in enumerate(arrays)]
        results = [sizes_first.allgather_output(t, names[i], process_set, group, d)
                   for i, (t, d) in enumerate(zip(arrays, described))]
        host_exchange.exchanged(key, sum(o.size * np.dtype(o.dtype).itemsize for o, _ in results))
        calls.push([e for _, e in results], process_set, priority, group)
        return [o for o, _ in results]
    return calls.submit("allgather", name, process_set, body)


def _push_broadcast(view, output, root_rank, base, process_set, priority, name):
    """One engine op; the adapter reads dtype and shape from the arrays, as allreduce's does."""
    if not (type(root_rank) is int and 0 <= root_rank < basics.size()):  # noqa: E721 -- else, which check fails
        if not isinstance(root_rank, (int, np.integer)) or isinstance(root_rank, bool):
            raise TypeError(f"root_rank must be an int, got {type(root_rank).__name__}")
        if not 0 <= root_rank < basics.size():
            raise ArgumentError(f"root_rank {root_rank} is out of range for {basics.size()} ranks")
    m = calls.core_module()
    basics._core().enqueue_mxnet_arrays(m.OP_BROADCAST, [view], [output], [base], m.REDUCE_SUM, 1.0, 1.0,
                                        calls.set_id(process_set), calls.check_priority(priority),
                                        calls.group_key(base, name), int(root_rank))


@reference("broadcast")
def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """A new array holding root_rank's `tensor` (root_rank: a global rank);
    asynchronous: reading the result waits."""
    def body(base):
        calls.check_array(tensor)
        output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
        view = array_kinds.legacy(tensor)
        _push_broadcast(view, output, root_rank, base, process_set, priority, name)
        return array_kinds.like(tensor, output)
    return calls.submit("broadcast", name, process_set, body)


@reference("broadcast_")
def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's (a global rank), in place."""
    if plain_calls.broadcast_(tensor, root_rank, name, priority, process_set) is not None:
        return tensor

    def body(base):
        view = array_kinds.legacy(tensor)
        calls.check_array(view)
        _push_broadcast(view, view, root_rank, base, process_set, priority, name)
        return tensor
    return calls.submit("broadcast", name, process_set, body)


@reference("alltoall")
def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` (in order) to rank i of the set and
    concatenates what every rank sends here. Without splits the first
    dimension is divided evenly (it must be divisible by the set's size).
    Returns the output, or (output, received_splits) when splits are given."""
    return array_kinds.like(tensor, calls.submit(
        "alltoall", name, process_set,
        lambda base: _alltoall(array_kinds.legacy(tensor), splits, base, name, priority, process_set)))


def _alltoall(tensor, splits, base, name, priority, process_set):
    calls.check_array(tensor)
    calls.set_id(process_set)
    calls.check_priority(priority)
    n = len(process_set.ranks)
    given = None
    if splits is not None:
        given = exchange.integer_splits(splits)
        if len(given) != n:
            raise ArgumentError(f"alltoall: {len(given)} splits given for a process set of {n} ranks")
    key, group = host_exchange.key(process_set, "alltoall", name), calls.group_key(base, name)
    got = None
    if host_exchange.fits(key):
        got = host_exchange.alltoall(tensor, base, given, process_set, priority, group, key)
    output, received = got or sizes_first.alltoall(tensor, given, base, process_set, priority, group, key)
    if splits is None:
        return output
    return output, mx.nd.array(received, ctx=mx.cpu(), dtype=np.int32)


def _push_reducescatter(views, names, op, pre, post, process_set, priority, group):
    """One engine op; the adapter reads dtypes and shapes and makes each
    output, this rank's block (Note [Outputs made at push] in src/mxnet/engine_op.cc)."""
    m = calls.core_module()
    made = basics._core().enqueue_mxnet_arrays(m.OP_REDUCESCATTER, views, [None] * len(views), names,
                                               _reduce_code(op), pre, post, calls.set_id(process_set),
                                               calls.check_priority(priority), group)
    return [mx.nd.NDArray(ctypes.c_void_p(h)) for h in made]


def _check_reducescatter_op(op):
    if op not in (Average, Sum):
        raise ArgumentError(f"reducescatter supports Average and Sum, not {_op_names.get(op, op)}")


@reference("reducescatter")
def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this rank's block of the first
    dimension (lower ranks get one extra row when it does not divide evenly)."""
    block = plain_calls.reducescatter(tensor, _plain_code(op, (Average, Sum)), name, priority, process_set,
                                      prescale_factor, postscale_factor)
    if block is not None:
        return block

    def body(base):
        _check_reducescatter_op(op)
        pre, post = calls.check_scale(prescale_factor, postscale_factor)
        view = array_kinds.legacy(tensor)
        calls.check_array(view)
        return array_kinds.like(tensor, _push_reducescatter([view], [base], op, pre, post, process_set, priority,
                                                            calls.group_key(base, name))[0])
    return calls.submit("reducescatter", name, process_set, body)


@reference("grouped_reducescatter")
def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatters each array of a list as reducescatter does, in one
    call negotiated as a group."""
    def body(base):
        _check_reducescatter_op(op)
        arrays = calls.group_list(tensors)
        if not arrays:
            _check_empty_call(process_set, priority, op, prescale_factor, postscale_factor)
            return arrays
        pre, post = calls.check_scale(prescale_factor, postscale_factor)
        names = calls.group_names(base, len(arrays), name is not None)
        views = array_kinds.legacy_list(arrays)
        return array_kinds.like_each(arrays, _push_reducescatter(views, names, op, pre, post, process_set, priority,
                                                                 calls.group_key(base, name)))
    return calls.submit("reducescatter", name, process_set, body)


@reference("barrier")
def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has reached this call."""
    m = calls.core_module()
    name = calls.base_name("barrier", None, process_set)
    handle = basics._core().enqueue([m.Op(name, m.OP_BARRIER, m.DTYPES["float32"], [], 0, 0)],
                                    calls.set_id(process_set))
    handle.wait()


def fence(call, process_set=global_process_set):
    """Blocks until every rank of the set has reached `call` (a description,
    "DistributedTrainer.save_states()"), which every rank must make at the
    same point of its program: a rank that goes on to other collectives
    without it fails them and this at once, naming both (Note [Fences] in
    src/core/message_conflicts.cc). This rank's pending work comes first, so
    that nothing this rank submits after the fence was pushed before it."""
    mx.nd.waitall()
    m = calls.core_module()
    op = m.Op(m.FENCE_PREFIX + call, m.OP_BARRIER, m.DTYPES["float32"], [], 0, 0)
    basics._core().enqueue([op], calls.set_id(process_set)).wait()


