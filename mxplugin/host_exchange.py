"""Small allgathers and alltoalls of host tensors in one round (Note
[Outputs the core sizes] in src/core/sized_output.cc): the caller waits for the
result anyway, so instead of a blocking exchange of sizes and then an
engine op whose output MXNet needs sized at push, the call goes to the core
with the output left to it, which sizes it from the negotiated rows; the
result is copied into a new NDArray, all in one call of the MXNet adapter
(Note [Host exchanges in one call] in src/mxnet/host_exchange.cc). Rows,
splits, dtype and trailing dimensions are checked by the coordinator,
whose message for a disagreement is the exchange's."""
import ctypes

import mxnet as mx

from mxplugin import basics, calls
from mxplugin.errors import ArgumentError

# The one-round path copies the data twice (out of the input NDArray, into
# the output one): at 2 ranks here 2x faster than the exchange at 64 KB
# gathered, even at 1 MB, 2.2x slower at 16 MB. Ranks must take the same
# path, and only the bytes of the whole exchange are the same on every rank
# (each rank knows its own rows only), so the choice follows the last call
# of the same kind and name: the two-round path once its exchange moved
# more than MOST_BYTES. A name's first call, and unnamed calls (names never
# repeat), take the one-round path.
MOST_BYTES = 1 << 20
_HOST = ("cpu", "cpu_pinned", "cpu_shared")
_exchanged = {}  # (process set id, kind, call name) -> bytes its last call's exchange moved
_MOST_NAMES = 4096  # forget them all beyond this many (a fresh start, alike on every rank)


def key(process_set, kind, name):
    """What a call is remembered by: its set, its kind ("allgather",
    "alltoall") and the user's name (None: unnamed)."""
    return process_set.process_set_id, kind, name


def checked(tensor, what="tensor", kind="allgather"):
    """`tensor`, after the checks both paths make first."""
    calls.check_dense(tensor, what)
    if not tensor.shape:
        raise ArgumentError(f"{kind}: {what} must have at least one dimension")
    return tensor


def fits(tensors, key):
    """Whether `tensors` (checked, dense NDArrays) take the one-round path;
    `key`: what the call is remembered by. The same on every rank for a
    well-formed call (dtypes and trailing dimensions agree)."""
    for t in tensors:
        if t.context.device_type not in _HOST:
            return False
    return _exchanged.get(key, 0) <= MOST_BYTES


def exchanged(key, nbytes):
    """Records the bytes the exchange of the call remembered by `key` moved (both paths)."""
    if key[2] is None:
        return
    if len(_exchanged) >= _MOST_NAMES and key not in _exchanged:
        _exchanged.clear()
    _exchanged[key] = nbytes


def forget():
    """After a join: the joined ranks missed calls, so histories differ."""
    _exchanged.clear()


def allgather(tensors, names, dtypes, process_set, priority, group, key):
    """Every rank's rows of each tensor, concatenated: new NDArrays on the
    tensors' contexts, ready when this returns (the wait for the inputs,
    their snapshot and the outputs, in one call without Python's lock)."""
    made, _ = _exchange(calls.core_module().OP_ALLGATHER, tensors, names, dtypes, [None] * len(tensors),
                        process_set, priority, group, key)
    return [mx.nd.NDArray(ctypes.c_void_p(h)) for h in made]


def alltoall(tensor, name, dtype, splits, process_set, priority, group, key):
    """(output, the rows each rank of the set sent here) of one alltoall
    sending splits[i] rows of `tensor` to rank i, ready when this returns."""
    made, rows = _exchange(calls.core_module().OP_ALLTOALL, [tensor], [name], [dtype], [splits], process_set,
                           priority, group, key)
    return mx.nd.NDArray(ctypes.c_void_p(made[0])), rows[0]


def _exchange(op_type, tensors, names, dtypes, splits, process_set, priority, group, key):
    """(output handles, rows from each rank), the exchange's bytes recorded
    under `key`, even where it failed on this rank alone after the exchange
    (its output not made), so that every rank picks the next call's path alike."""
    try:
        made, rows, total = calls.core_module().exchange_host_arrays(
            basics._core(), op_type, tensors, names, dtypes, splits, calls.set_id(process_set),
            len(process_set.ranks), priority, group)
    except Exception as e:
        if getattr(e, "exchanged_bytes", None) is not None:
            exchanged(key, e.exchanged_bytes)
        raise
    exchanged(key, total)
    return made, rows
