"""The common case of allreduce_, broadcast_ and reducescatter, pushed
without the general path's checks.

Note [Plain calls]: most calls in a loop pass a legacy NDArray, a name,
an int priority, the global process set and default scale factors. For
those every check of the general path (calls.submit and each call's body)
holds by the arguments' types alone, and the push is what remains, through
a binding entry for one array (Core.enqueue_mxnet_array). At 2 ranks, 4 KB
end to end, against the general path in alternating blocks of one job:
broadcast_ 0.90-0.94x, reducescatter 0.91x, allreduce_ 0.90-0.93x. Each
function here pushes such a call and returns what the call returns, or
returns None having pushed nothing: the caller then takes its general
path, which gives every other argument its error. An error from the push
itself refuses the call as the general path does (calls.refuse_after),
under the same group: the name."""
import ctypes

import mxnet as mx

from mxplugin import basics, calls
from mxplugin.basics import global_process_set

_NDArray = mx.nd.NDArray
_INT32 = 2 ** 31


def _scales(prescale_factor, postscale_factor):
    return type(prescale_factor) is float and type(postscale_factor) is float  # noqa: E721


def _core(tensor, name, priority, process_set):
    """The core when the call's common arguments are the plain ones, else None."""
    if (type(tensor) is _NDArray and type(name) is str and name and type(priority) is int  # noqa: E721
            and process_set is global_process_set and -_INT32 <= priority < _INT32):
        return basics._state.core
    return None


def _enqueue(core, name, op_type, tensor, output, base, reduce, pre, post, priority, root_rank=0):
    try:
        return core.enqueue_mxnet_array(op_type, tensor, output, base, reduce, pre, post, priority, name, root_rank)
    except Exception as e:
        calls.refuse_after(e, name, global_process_set)
        raise


def broadcast_(tensor, root_rank, name, priority, process_set):
    """ops.broadcast_ of a plain call: `tensor`; None otherwise."""
    core = _core(tensor, name, priority, process_set)
    if core is None or type(root_rank) is not int or not 0 <= root_rank < basics._state.topology["size"]:  # noqa: E721
        return None
    m = calls.core_module()
    _enqueue(core, name, m.OP_BROADCAST, tensor, tensor, "broadcast." + name, m.REDUCE_SUM, 1.0, 1.0, priority,
             root_rank)
    return tensor


def allreduce_(tensor, reduce, name, priority, process_set, prescale_factor, postscale_factor):
    """ops.allreduce_ of a plain call (`reduce`: the core's code of its op,
    None where that is not plain): `tensor`; None otherwise."""
    core = _core(tensor, name, priority, process_set)
    if core is None or reduce is None or not _scales(prescale_factor, postscale_factor):
        return None
    _enqueue(core, name, calls.core_module().OP_ALLREDUCE, tensor, tensor, "allreduce." + name, reduce, prescale_factor,
             postscale_factor, priority)
    return tensor


def reducescatter(tensor, reduce, name, priority, process_set, prescale_factor, postscale_factor):
    """ops.reducescatter of a plain call (`reduce` as allreduce_'s): this
    rank's block; None otherwise."""
    core = _core(tensor, name, priority, process_set)
    if core is None or reduce is None or not _scales(prescale_factor, postscale_factor):
        return None
    made = _enqueue(core, name, calls.core_module().OP_REDUCESCATTER, tensor, None, "reducescatter." + name, reduce,
                    prescale_factor, postscale_factor, priority)
    return _NDArray(ctypes.c_void_p(made))
