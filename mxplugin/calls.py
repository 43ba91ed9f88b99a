"""What every collective call does before its data moves, whatever its
kind: its kind-prefixed name and the group it is negotiated under, the
checks all calls share, the Op records it pushes, and its refusal: an
error raised on this rank before the call is submitted fails the other
ranks' call too (Note [Refused calls] in src/core/message_conflicts.cc)."""
import contextlib

import mxnet as mx
import numpy as np

from mxplugin import basics
from mxplugin.basics import global_process_set
from mxplugin.errors import ArgumentError, MismatchError, PeerFailureError

_core = None
_counters = {}  # (kind, process set id) -> auto names given so far


def core_module():
    """The binding (mxplugin._core through the loader)."""
    global _core
    if _core is None:  # once: this runs for every tensor of every call
        from mxplugin._loader import core_module

        _core = core_module
    return _core


def base_name(kind, name, process_set=global_process_set):
    """The call's name prefixed by its kind; auto names (name None) count
    per kind and process set: only the set's members make its calls, so a
    call on a set leaves the other sets' names where they are on every rank
    (and a call on a set that is not registered, which fails, leaves them all)."""
    if name is None:
        number = getattr(process_set, "process_set_id", None)
        n = _counters.get((kind, number), 0)
        _counters[(kind, number)] = n + 1
        return f"{kind}.noname.{n}" if number == 0 else f"{kind}.set{number}.noname.{n}"
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    return f"{kind}.{name}"


_group_names = {}  # (base, n) -> the names of a named grouped call's tensors
_GROUP_NAMES_KEPT = 1024


def group_names(base, n, named):
    """The names of a grouped call's n tensors. A named call's (`named`: the
    user gave the name) repeat every step and are kept, up to
    _GROUP_NAMES_KEPT calls: making 50 of them took 10 us of a 4 KB x 50
    grouped allreduce's 90 us push. The list is shared: callers only read it."""
    if n == 1:
        return [base]
    names = _group_names.get((base, n)) if named else None
    if names is None:
        names = [f"{base}_{i + 1}of{n}" for i in range(n)]
        if named and len(_group_names) < _GROUP_NAMES_KEPT:
            _group_names[(base, n)] = names
    return names


def check_array(tensor, what="tensor"):
    """TypeError unless `tensor` is a legacy NDArray (`what` names it)."""
    if not isinstance(tensor, mx.nd.NDArray):
        raise TypeError(f"{what} must be an mxnet.nd.NDArray, got {type(tensor).__name__}")


def set_id(process_set):
    """The core's id of a registered `process_set` (NotInitializedError,
    TypeError or ArgumentError otherwise)."""
    if process_set is global_process_set and basics._state.core is not None:  # most calls: nothing to check
        return 0
    basics._core()  # NotInitializedError before anything else
    if not isinstance(process_set, basics.ProcessSet):
        raise TypeError("process_set must be a ProcessSet")
    if process_set.process_set_id is None:
        raise ArgumentError(f"{process_set} is not registered; call add_process_set() first")
    return process_set.process_set_id


def record(name, op_type, tensor, output, dtype, device, shape, **fields):
    """The binding's Op record for NDArrays `tensor` -> `output` (handles;
    the C++ adapter takes its own references during the enqueue call, so
    the caller keeps both arrays alive until push(): a legacy view made of
    a NumPy-interface array for the call (array_kinds.legacy) included)."""
    return core_module().Op(name, op_type, dtype, shape, tensor.handle.value, output.handle.value, device=device,
                            **fields)


def push(ops, process_set, priority, group=None):
    """Enqueues one call's Op records. group: the user's name for the call
    (None: auto-named), which the core negotiates across kinds and group
    sizes, so that ranks calling different collectives or groups of different
    sizes under one name get a mismatch, not a stall."""
    core = basics._core()
    priority = check_priority(priority)
    for op in ops:
        op.priority = priority
    core.enqueue(ops, set_id(process_set), True, priority, group)


@contextlib.contextmanager
def push_batch():
    """The collectives this thread pushes inside (a trainer's step) share
    one stamp, so that when a fence this rank went on without fails, every
    one of them fails with it (Note [Diverged pushes] in
    src/core/diverged_pushes.cc)."""
    core = basics._state.core
    if core is None:
        yield
        return
    core.begin_push_batch()
    try:
        yield
    finally:
        core.end_push_batch()


def group_key(base, name):
    """The negotiation group of a call named `name` (its kind-prefixed
    `base`): the user's name, shared by every kind; auto names (and the
    empty name, which the core takes for none) keep their kind, so that
    unrelated unnamed calls of different kinds never meet."""
    return name or base


_refusals = []  # refusals still in flight (a Handle, when freed, waits for its op)


def refuse(group, process_set):
    """Submits a refusal of the call negotiated under `group` on
    `process_set`, which raised on this rank before it was submitted, so
    that the other ranks' call under that name fails too rather than wait
    for this rank's (Note [Refused calls] in src/core/message_conflicts.cc).
    Nothing when it cannot reach them (no core, a set this rank is not in or
    that is not registered): nobody waits for this rank's call there."""
    core = basics._state.core
    if core is None or not isinstance(process_set, basics.ProcessSet) or process_set.process_set_id is None:
        return
    m = core_module()
    try:
        handle = core.enqueue([m.Op("mxplugin.refused:" + group, m.OP_REFUSAL, m.DTYPES["float32"], [], 0, 0)],
                              process_set.process_set_id, False, 0, group)
    except Exception:  # noqa: BLE001 -- the call's own error is the one to raise
        return
    _refusals[:] = [h for h in _refusals if not h.done()]
    _refusals.append(handle)


def submit(kind, name, process_set, body):
    """Runs body(base) for a call of `kind` named `name` (base: its
    kind-prefixed name) and returns what it returns. The name comes first,
    so that auto names advance alike on every rank whatever the arguments;
    an error raised before the call is submitted also fails the other ranks'
    call (refuse) rather than leave them waiting for this rank's. Errors
    that negotiation returned (a mismatch, a lost peer) every rank has."""
    base = base_name(kind, name, process_set)
    try:
        return body(base)
    except Exception as e:
        refuse_after(e, group_key(base, name), process_set)
        raise


def refuse_after(error, group, process_set):
    """Refuses the call negotiated under `group` that raised `error` on this
    rank (refuse), unless negotiation returned it (a mismatch, a lost peer:
    every rank has it) or the call submits nothing (nothing_submitted)."""
    if isinstance(error, (MismatchError, PeerFailureError)) or getattr(error, "_mxplugin_nothing_submitted", False):
        return
    refuse(group, process_set)


def nothing_submitted(error):
    """Marks `error`, raised by a call that submits nothing whatever its
    arguments (a grouped call of no tensors), as needing no refusal: one
    would wait for the other ranks' calls, which submit nothing either, and
    fail their next call under the name."""
    error._mxplugin_nothing_submitted = True
    return error


def check_priority(priority):
    """The priority as a plain int (TypeError for a non-int, ArgumentError outside 32 bits)."""
    if type(priority) is int and -2 ** 31 <= priority < 2 ** 31:  # noqa: E721 -- an exact int: the other checks hold
        return priority
    if not isinstance(priority, (int, np.integer)) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, got {type(priority).__name__}")
    if not -2 ** 31 <= priority < 2 ** 31:
        raise ArgumentError(f"priority {priority} is out of range (a 32-bit int)")
    return int(priority)


def check_scale(prescale_factor, postscale_factor):
    """TypeError unless both scale factors are real numbers."""
    if type(prescale_factor) is float and type(postscale_factor) is float:  # noqa: E721 -- the defaults' type
        return prescale_factor, postscale_factor
    for label, v in (("prescale_factor", prescale_factor), ("postscale_factor", postscale_factor)):
        if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{label} must be a number, got {type(v).__name__}")
    return float(prescale_factor), float(postscale_factor)


def group_list(tensors):
    """A grouped call's tensors as a list (any iterable of NDArrays), each checked."""
    if isinstance(tensors, mx.nd.NDArray):
        raise TypeError("a grouped call takes a list of NDArrays, not one NDArray")
    try:
        arrays = list(tensors)
    except TypeError:
        raise TypeError(f"a grouped call takes a list of NDArrays, not {type(tensors).__name__}") from None
    for i, t in enumerate(arrays):
        check_array(t, f"tensor {i}")
    return arrays


def check_distinct(tensors):
    """ArgumentError when a grouped call names one array twice."""
    seen = set()
    for t in tensors:
        key = t.handle.value
        if key in seen:
            raise ArgumentError("the same NDArray appears twice in one grouped in-place call")
        seen.add(key)


def check_dense(tensor, what):
    """The C++ adapter refuses sparse arrays too, but only when the op is
    pushed: calls that exchange sizes first check here, so that the
    exchange does not report the sparse array's shape as a mismatch."""
    if tensor.stype != "default":
        raise ArgumentError(f"{what}: sparse NDArrays ({tensor.stype}) are not supported by collectives; use "
                            "tostype('default') (DistributedTrainer, DistributedOptimizer and kvstore='mxplugin' "
                            "reduce row_sparse gradients as rows)")
