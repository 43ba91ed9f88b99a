"""Collectives on MXNet NDArrays, with horovod.mxnet's names, signatures and
defaults. Each call pushes one asynchronous op into MXNet's engine (input as a
read dependency, output as a write dependency); reading the result
(asnumpy(), wait_to_read()) is the only synchronisation needed."""
import warnings

import mxnet as mx
import numpy as np

from mxplugin import basics, exchange
from mxplugin.basics import global_process_set
from mxplugin.errors import ArgumentError

# MXNet 1.9.1's bfloat16: NumPy has no such type, MXNet names it by this dtype.
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])

# Reduce ops, with horovod.mxnet's values.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_op_names = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

_core_reduce = None  # filled lazily: horovod value -> core value
_counters = {}
_core = None
_dtype_by_type = {}  # filled lazily from the core's codes: NumPy scalar type -> dtype code


def _dtype_code_of(dtype):
    """The core's code of an NDArray dtype, None if the core has none. The
    codes come from the binding (their one definition is src/common/codes.h);
    NumPy has no bfloat16: MXNet gives its arrays the dtype BFLOAT16."""
    if not _dtype_by_type:
        for name, code in _core_module().DTYPES.items():
            try:
                _dtype_by_type[np.dtype(name).type] = code
            except TypeError:
                pass
        _dtype_by_type[BFLOAT16] = _core_module().DTYPES["bfloat16"]
    return _dtype_by_type.get(dtype)


def _core_module():
    global _core
    if _core is None:  # once: this runs for every tensor of every call
        from mxplugin._loader import core_module

        _core = core_module
    return _core


def _reduce_code(op):
    global _core_reduce
    if _core_reduce is None:
        m = _core_module()
        _core_reduce = {Average: m.REDUCE_AVERAGE, Sum: m.REDUCE_SUM, Min: m.REDUCE_MIN,
                        Max: m.REDUCE_MAX, Product: m.REDUCE_PRODUCT}
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by mxplugin; use Average or Sum")
    try:
        return _core_reduce[op]
    except KeyError:
        raise ArgumentError(f"unknown reduce op {op!r}; use Average, Sum, Min, Max or Product")


def _resolve_op(average, op):
    if op is not None and average is not None:
        raise ArgumentError("pass either op or the deprecated average, not both (op supersedes average)")
    if op is None and average is not None:
        warnings.warn("the average argument is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
        return Average if average else Sum
    return Average if op is None else op


def _base_name(kind, name):
    if name is None:
        n = _counters.get(kind, 0)
        _counters[kind] = n + 1
        return f"{kind}.noname.{n}"
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    return f"{kind}.{name}"


def _group_names(base, n):
    return [base] if n == 1 else [f"{base}_{i + 1}of{n}" for i in range(n)]


def _check_array(tensor, what="tensor"):
    if not isinstance(tensor, mx.nd.NDArray):
        raise TypeError(f"{what} must be an mxnet.nd.NDArray, got {type(tensor).__name__}")


def _describe(tensor, what="tensor"):
    """(dtype code, device, shape list) of an NDArray. The device is left to
    the C++ adapter, which reads it from the NDArray's context (the GPU's
    device id, CPU_DEVICE for host contexts) and checks storage type and that input,
    output and every tensor of a group share one device (cheaper there: this
    runs per tensor). Whether GPU tensors can run is the core's decision."""
    _check_array(tensor, what)
    code = _dtype_code_of(tensor.dtype)
    if code is None:
        supported = sorted("bfloat16" if t is BFLOAT16 else np.dtype(t).name for t in _dtype_by_type)
        raise TypeError(f"{what}: dtype {np.dtype(tensor.dtype).name} is not supported "
                        f"(use one of {supported})")
    return code, _core_module().CPU_DEVICE, list(tensor.shape)


def _set_id(process_set):
    basics._core()  # NotInitializedError before anything else
    if not isinstance(process_set, basics.ProcessSet):
        raise TypeError("process_set must be a ProcessSet")
    if process_set.process_set_id is None:
        raise ArgumentError(f"{process_set} is not registered; call add_process_set() first")
    return process_set.process_set_id


def _record(name, op_type, tensor, output, dtype, device, shape, **fields):
    """The binding's Op record for NDArrays `tensor` -> `output` (handles;
    the C++ adapter takes its own references during the enqueue call)."""
    return _core_module().Op(name, op_type, dtype, shape, tensor.handle.value, output.handle.value, device=device,
                             **fields)


def _push(ops, process_set, priority, group=None):
    """Enqueues one call's Op records. group: the user's name for the call
    (None: auto-named), which the core negotiates across kinds and group
    sizes, so that ranks calling different collectives or groups of different
    sizes under one name get a mismatch, not a stall."""
    core = basics._core()
    for op in ops:
        op.priority = priority
    core.enqueue(ops, _set_id(process_set), True, priority, group)


def _group_key(base, name):
    """The negotiation group of a call named `name` (its kind-prefixed
    `base`): the user's name, shared by every kind; auto names keep their
    kind, so that unrelated unnamed calls of different kinds never meet."""
    return base if name is None else name


def _check_scale(prescale_factor, postscale_factor):
    for label, v in (("prescale_factor", prescale_factor), ("postscale_factor", postscale_factor)):
        if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{label} must be a number, got {type(v).__name__}")
    return float(prescale_factor), float(postscale_factor)


def _push_allreduce(tensors, outputs, base, op, prescale_factor, postscale_factor, process_set, priority, name):
    """Enqueues an allreduce of NDArrays `tensors` -> `outputs` (already
    checked to be NDArrays) as one engine op. The adapter reads dtypes and
    shapes from the arrays (an unsupported dtype is a TypeError naming the
    tensor): this runs for every gradient of every step."""
    pre, post = _check_scale(prescale_factor, postscale_factor)
    reduce = _reduce_code(op)
    core = basics._core()
    core.enqueue_mxnet_arrays(_core_module().OP_ALLREDUCE, tensors, outputs, _group_names(base, len(tensors)),
                              reduce, pre, post, _set_id(process_set), priority, _group_key(base, name))


def _check_group(tensors):
    for i, t in enumerate(tensors):
        _check_array(t, f"tensor {i}")


def _check_distinct(tensors):
    seen = set()
    for t in tensors:
        key = t.handle.value
        if key in seen:
            raise ArgumentError("the same NDArray appears twice in one grouped in-place call")
        seen.add(key)


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set, op=None):
    """Returns a new NDArray with `op` (default Average) of `tensor` over the
    ranks of `process_set`. prescale/postscale multiply before/after the reduction."""
    op = _resolve_op(average, op)
    _check_array(tensor)
    output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    _push_allreduce([tensor], [output], _base_name("allreduce", name), op, prescale_factor, postscale_factor,
                    process_set, priority, name)
    return output


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, op=None):
    """In-place allreduce; returns `tensor`."""
    op = _resolve_op(average, op)
    _check_array(tensor)
    _push_allreduce([tensor], [tensor], _base_name("allreduce", name), op, prescale_factor, postscale_factor,
                    process_set, priority, name)
    return tensor


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """allreduce of a list of tensors as one group (negotiated and fused together)."""
    op = _resolve_op(average, op)
    if not tensors:
        return tensors
    _check_group(tensors)
    outputs = [mx.nd.empty(t.shape, ctx=t.context, dtype=t.dtype) for t in tensors]
    _push_allreduce(list(tensors), outputs, _base_name("allreduce", name), op, prescale_factor, postscale_factor,
                    process_set, priority, name)
    return outputs


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place grouped allreduce; returns `tensors`."""
    op = _resolve_op(average, op)
    if not tensors:
        return tensors
    _check_group(tensors)
    _check_distinct(tensors)
    arrays = list(tensors)
    _push_allreduce(arrays, arrays, _base_name("allreduce", name), op, prescale_factor, postscale_factor,
                    process_set, priority, name)
    return tensors


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


def _allgather_output(tensor, name, process_set, index=None):
    what = "tensor" if index is None else f"tensor {index}"
    dtype, device, shape = _describe(tensor, what)
    if not shape:
        raise ArgumentError(f"allgather: {what} must have at least one dimension")
    rows = exchange.exchange_int64(exchange.allgather_signature(dtype, shape), name + ".sizes", process_set,
                                   _set_id(process_set))
    exchange.check_allgather_rows(rows, name, process_set)
    firsts = rows[:, 0]
    out_shape = [int(firsts.sum())] + shape[1:]
    output = mx.nd.empty(tuple(out_shape), ctx=tensor.context, dtype=tensor.dtype)
    m = _core_module()
    return output, _record(name, m.OP_ALLGATHER, tensor, output, dtype, device, shape, out_shape=out_shape)


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension (which may
    differ per rank; the other dimensions must agree)."""
    _check_array(tensor)
    _set_id(process_set)
    base = _base_name("allgather", name)
    output, entry = _allgather_output(tensor, base, process_set)
    _push([entry], process_set, priority, _group_key(base, name))
    return output


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """allgather of each tensor of a list; returns the list of outputs."""
    if not tensors:
        return tensors
    _set_id(process_set)
    base = _base_name("allgather", name)
    names = _group_names(base, len(tensors))
    results = [_allgather_output(t, names[i], process_set, i) for i, t in enumerate(tensors)]
    _push([e for _, e in results], process_set, priority, _group_key(base, name))
    return [o for o, _ in results]


def _broadcast_entry(tensor, output, root_rank, base):
    if not isinstance(root_rank, (int, np.integer)) or isinstance(root_rank, bool):
        raise TypeError(f"root_rank must be an int, got {type(root_rank).__name__}")
    if not 0 <= root_rank < basics.size():
        raise ArgumentError(f"root_rank {root_rank} is out of range for {basics.size()} ranks")
    dtype, device, shape = _describe(tensor)
    m = _core_module()
    return _record(base, m.OP_BROADCAST, tensor, output, dtype, device, shape, root_rank=int(root_rank))


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Returns a new NDArray holding root_rank's `tensor` (root_rank is a global rank)."""
    _check_array(tensor)
    output = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)
    base = _base_name("broadcast", name)
    _push([_broadcast_entry(tensor, output, root_rank, base)], process_set, priority, _group_key(base, name))
    return output


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place broadcast from root_rank; returns `tensor`."""
    base = _base_name("broadcast", name)
    _push([_broadcast_entry(tensor, tensor, root_rank, base)], process_set, priority, _group_key(base, name))
    return tensor


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` (in order) to rank i of the set and
    concatenates what every rank sends here. Without splits the first
    dimension is divided evenly (it must be divisible by the set's size).
    Returns the output, or (output, received_splits) when splits are given."""
    dtype, device, shape = _describe(tensor)
    _set_id(process_set)
    n = len(process_set.ranks)
    if not shape:
        raise ArgumentError("alltoall: tensor must have at least one dimension")
    if splits is None:
        if shape[0] % n:
            raise ArgumentError(f"alltoall: first dimension {shape[0]} is not divisible by {n} ranks; pass splits")
        split_list = [shape[0] // n] * n
    else:
        split_list = exchange.integer_splits(splits)
        if len(split_list) != n:
            raise ArgumentError(f"alltoall: {len(split_list)} splits given for a process set of {n} ranks")
        if any(s < 0 for s in split_list) or sum(split_list) != shape[0]:
            raise ArgumentError(f"alltoall: splits {split_list} must be non-negative and sum to the first "
                             f"dimension {shape[0]}")
    base = _base_name("alltoall", name)
    matrix = exchange.exchange_int64(split_list, base + ".splits", process_set, _set_id(process_set))
    me = process_set.rank()
    received = matrix[:, me]
    out_shape = [int(received.sum())] + shape[1:]
    output = mx.nd.empty(tuple(out_shape), ctx=tensor.context, dtype=tensor.dtype)
    m = _core_module()
    _push([_record(base, m.OP_ALLTOALL, tensor, output, dtype, device, shape, out_shape=out_shape,
                   splits=split_list)],
          process_set, priority, _group_key(base, name))
    if splits is None:
        return output
    return output, mx.nd.array(received, ctx=mx.cpu(), dtype=np.int32)


def _reducescatter_entry(tensor, name, op, pre, post, process_set, index=None):
    what = "tensor" if index is None else f"tensor {index}"
    dtype, device, shape = _describe(tensor, what)
    if not shape:
        raise ArgumentError(f"reducescatter: {what} must have at least one dimension")
    n = len(process_set.ranks)
    me = process_set.rank()
    rows = shape[0] // n + (1 if me < shape[0] % n else 0)
    out_shape = [rows] + shape[1:]
    output = mx.nd.empty(tuple(out_shape), ctx=tensor.context, dtype=tensor.dtype)
    m = _core_module()
    return output, _record(name, m.OP_REDUCESCATTER, tensor, output, dtype, device, shape, out_shape=out_shape,
                           reduce_op=_reduce_code(op), prescale=pre, postscale=post)


def _check_reducescatter_op(op):
    if op not in (Average, Sum):
        raise ArgumentError(f"reducescatter supports Average and Sum, not {_op_names.get(op, op)}")


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this rank's block of the first
    dimension (lower ranks get one extra row when it does not divide evenly)."""
    _check_reducescatter_op(op)
    pre, post = _check_scale(prescale_factor, postscale_factor)
    _set_id(process_set)
    base = _base_name("reducescatter", name)
    output, entry = _reducescatter_entry(tensor, base, op, pre, post, process_set)
    _push([entry], process_set, priority, _group_key(base, name))
    return output


def grouped_reducescatter(tensors, op=Average, name=None, priority=0, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor of a list; returns the list of outputs."""
    _check_reducescatter_op(op)
    if not tensors:
        return tensors
    pre, post = _check_scale(prescale_factor, postscale_factor)
    _set_id(process_set)
    base = _base_name("reducescatter", name)
    names = _group_names(base, len(tensors))
    results = [_reducescatter_entry(t, names[i], op, pre, post, process_set, i) for i, t in enumerate(tensors)]
    _push([e for _, e in results], process_set, priority, _group_key(base, name))
    return [o for o, _ in results]


def barrier(process_set=global_process_set):
    """Blocks until every rank of the set has reached this call."""
    m = _core_module()
    handle = basics._core().enqueue([m.Op(_base_name("barrier", None), m.OP_BARRIER, m.DTYPES["float32"], [], 0, 0)],
                                    _set_id(process_set))
    handle.wait()


