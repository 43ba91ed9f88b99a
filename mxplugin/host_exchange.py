"""Small allgathers and alltoalls of host tensors in one round (Note
[Outputs the core sizes] in src/core/sized_output.cc): the caller waits for the
result anyway, so instead of a blocking exchange of sizes and then an
engine op whose output MXNet needs sized at push, the call goes to the core
with the output left to it, which sizes it from the negotiated rows; the
result is copied into a new NDArray, all in one call of the MXNet adapter
(Note [Host exchanges in one call] in src/mxnet/host_exchange.cc), which
also reads and checks the inputs' dtype, context, storage and shape: read
here, through MXNet's Python API, they cost 1-2 us each. It declines, having
submitted nothing, what it does not take (GPU arrays, and arguments the
engine path's checks refuse by name), and the caller takes the engine path.
Rows, splits, dtype and trailing dimensions are checked by the coordinator,
whose message for a disagreement is the exchange's."""
import ctypes

import mxnet as mx

from mxplugin import basics, calls

# The one-round path copies the data twice (out of the input NDArray, into
# the output one): at 2 ranks here 2x faster than the exchange at 64 KB
# gathered, even at 1 MB, 2.2x slower at 16 MB. Ranks must take the same
# path, and only the bytes of the whole exchange are the same on every rank
# (each rank knows its own rows only), so the choice follows the last call
# of the same kind and name: the two-round path once its exchange moved
# more than MOST_BYTES. A name's first call, and unnamed calls (names never
# repeat), take the one-round path.
MOST_BYTES = 1 << 20
_exchanged = {}  # (process set id, kind, call name) -> bytes its last call's exchange moved
_MOST_NAMES = 4096  # forget them all beyond this many (a fresh start, alike on every rank)


def key(process_set, kind, name):
    """What a call is remembered by: its set, its kind ("allgather",
    "alltoall") and the user's name (None: unnamed)."""
    return process_set.process_set_id, kind, name


def fits(key):
    """Whether the call remembered by `key` tries the one-round path: the
    same on every rank for well-formed calls (their kind and name agree)."""
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


def allgather(tensors, names, process_set, priority, group, key):
    """Every rank's rows of each tensor, concatenated: new NDArrays on the
    tensors' contexts, ready when this returns (the wait for the inputs,
    their snapshot and the outputs, in one call without Python's lock);
    None where the path declines them."""
    got = _exchange(calls.core_module().OP_ALLGATHER, tensors, names, [None] * len(tensors), process_set, priority,
                    group, key)
    if got is None:
        return None
    return [mx.nd.NDArray(ctypes.c_void_p(h)) for h in got[0]]


def alltoall(tensor, name, splits, process_set, priority, group, key):
    """(output, the rows each rank of the set sent here) of one alltoall
    sending splits[i] rows of `tensor` to rank i (splits None: equal
    blocks), ready when this returns; None where the path declines it."""
    got = _exchange(calls.core_module().OP_ALLTOALL, [tensor], [name], [splits], process_set, priority, group, key)
    if got is None:
        return None
    return mx.nd.NDArray(ctypes.c_void_p(got[0][0])), got[1][0]


def _exchange(op_type, tensors, names, splits, process_set, priority, group, key):
    """(output handles, rows from each rank), the exchange's bytes recorded
    under `key`, even where it failed on this rank alone after the exchange
    (its output not made), so that every rank picks the next call's path
    alike; None where the adapter declined the call (nothing submitted)."""
    try:
        got = calls.core_module().exchange_host_arrays(basics._core(), op_type, tensors, names, splits,
                                                       process_set.process_set_id, len(process_set.ranks),
                                                       priority, group)
    except Exception as e:
        if getattr(e, "exchanged_bytes", None) is not None:
            exchanged(key, e.exchanged_bytes)
        raise
    if got is None:
        return None
    made, rows, total = got
    exchanged(key, total)
    return made, rows
