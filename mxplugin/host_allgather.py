"""Small allgathers of host tensors in one round (Note [Outputs the core
sizes] in src/core/executor.cc): the caller waits for the result anyway,
so instead of a blocking exchange of sizes and then an engine op whose
output MXNet needs sized at push, the call goes to the core's raw entry
with the output left to the core, which sizes it from the negotiated rows;
the result is copied into a new NDArray, all in one call of the MXNet
adapter (Note [Host allgathers in one call] in src/mxnet/host_allgather.cc).
The rows, dtype and trailing
dimensions are checked by the coordinator, whose message for a
disagreement is the exchange's."""
import ctypes

import mxnet as mx

from mxplugin import basics, calls
from mxplugin.errors import ArgumentError

# The one-round path copies the data twice (out of the input NDArray, into
# the output one): at 2 ranks here 2x faster than the exchange at 64 KB
# gathered, even at 1 MB, 2.2x slower at 16 MB. Ranks must take the same
# path, and only the gathered bytes are the same on every rank (each rank
# knows its own rows only), so the choice follows the last call of the same
# name: the exchange path once it gathered more than MOST_BYTES. A name's
# first call, and unnamed calls (names never repeat), take the one-round path.
MOST_BYTES = 1 << 20
_HOST = ("cpu", "cpu_pinned", "cpu_shared")
_gathered = {}  # (process set id, call name) -> bytes its last call gathered
_MOST_NAMES = 4096  # forget them all beyond this many (a fresh start, alike on every rank)


def key(process_set, name):
    """What a call is remembered by: its set and the user's name (None: unnamed)."""
    return process_set.process_set_id, name


def checked(tensor, what="tensor"):
    """`tensor`, after the checks both paths make first."""
    calls.check_dense(tensor, what)
    if not tensor.shape:
        raise ArgumentError(f"allgather: {what} must have at least one dimension")
    return tensor


def fits(tensors, key):
    """Whether `tensors` (checked, dense NDArrays) take the one-round path;
    `key`: (process set id, the call's name). The same on every rank for a
    well-formed call (dtypes and trailing dimensions agree)."""
    for t in tensors:
        if t.context.device_type not in _HOST:
            return False
    return _gathered.get(key, 0) <= MOST_BYTES


def gathered(key, nbytes):
    """Records what the call named by `key` gathered (both paths)."""
    if key[1] is None:
        return
    if len(_gathered) >= _MOST_NAMES and key not in _gathered:
        _gathered.clear()
    _gathered[key] = nbytes


def forget():
    """After a join: the joined ranks missed calls, so histories differ."""
    _gathered.clear()


def allgather(tensors, names, dtypes, process_set, priority, group, key):
    """Every rank's rows of each tensor, concatenated: new NDArrays on the
    tensors' contexts, ready when this returns (Note [Host allgathers in one
    call] in src/mxnet/host_allgather.cc: the wait for the inputs, their
    snapshot and the outputs, in one call without Python's lock)."""
    made, total = basics._core().allgather_host_arrays(tensors, names, dtypes, calls.set_id(process_set), priority,
                                                       group)
    gathered(key, total)
    return [mx.nd.NDArray(ctypes.c_void_p(h)) for h in made]
