"""Helpers built on the collectives: parameter and Python-object broadcast."""
import io
import types

import mxnet as mx
import numpy as np

from mxplugin import basics
from mxplugin.basics import global_process_set
from mxplugin.errors import ArgumentError, PeerFailureError, values_by_rank
from mxplugin.calls import refuse
from mxplugin.ops import Sum, allgather, allreduce, broadcast_

try:
    import cloudpickle as _pickle
except ImportError:  # plain pickle handles everything but lambdas and local classes
    import pickle as _pickle


def _to_bytes(obj):
    buf = io.BytesIO()
    _pickle.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def _object_name(name, default):
    if name is None or name == "":
        return default
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    return name


def _pickled(obj, name, process_set):
    """`obj` pickled; when it cannot be, the other ranks' call named `name`
    fails too rather than wait for this rank's (calls.refuse)."""
    try:
        return _to_bytes(obj)
    except Exception:
        refuse(name + ".sz", process_set)
        raise


def broadcast_object(obj, root_rank=0, name=None):
    """Returns root_rank's `obj` on every rank: any object that pickles
    (with cloudpickle where it is installed: lambdas and local classes too).
    Other ranks' `obj` is ignored, so `obj if rank() == 0 else None` works.

    Horovod: ``hvd.broadcast_object``, same signature. The default name here
    is the same on every rank whatever they pass (Horovod's is the type name
    of each rank's `obj`, which differs where the other ranks pass None).

    Parameters
    ----------
    obj : object
        The object to send, on ``root_rank``; ignored on the other ranks.
    root_rank : int, default 0
        The global rank whose `obj` every rank receives.
    name : str, optional
        The broadcast's name, the same on every rank (errors name it); by
        default ``"broadcast_object"``.

    Returns
    -------
    object
        ``root_rank``'s object: on ``root_rank`` `obj` itself, elsewhere an
        unpickled copy.

    Raises
    ------
    TypeError
        When `name` is not a str.
    Exception
        Whatever pickling `obj` raises, on ``root_rank`` (the other ranks'
        call then fails too, rather than wait).
    PeerFailureError
        When a rank failed or stopped during the broadcast (MXNet may report
        that as mxnet.base.MXNetError, with the same message).

    Examples
    --------
    >>> import mxplugin as hvd
    >>> hvd.init()
    >>> config = {"lr": 0.1, "epochs": 3} if hvd.rank() == 0 else None
    >>> hvd.broadcast_object(config, root_rank=0)
    {'lr': 0.1, 'epochs': 3}
    """
    name = _object_name(name, "broadcast_object")
    if basics.rank() == root_rank:
        payload = _pickled(obj, name, global_process_set)
        length = mx.nd.array([len(payload)], dtype="int64")
    else:
        payload = None
        length = mx.nd.zeros((1,), dtype="int64")
    broadcast_(length, root_rank, name=name + ".sz")
    n = int(length.asnumpy()[0])
    if n <= 0:
        # A pickle is never empty: no length came from the root. Seen when a
        # third rank was killed during the broadcast (an elastic test): the
        # length read 0 rather than failing. Reported as what it is, a lost
        # peer, so that elastic training goes back to its last commit.
        raise PeerFailureError(f"broadcast_object '{name}': rank {basics.rank()} received no object from root "
                               f"rank {root_rank} (length {n}): a peer failed during the broadcast")
    data = mx.nd.array(payload, dtype="uint8") if payload is not None else mx.nd.zeros((n,), dtype="uint8")
    broadcast_(data, root_rank, name=name + ".t")
    if basics.rank() == root_rank:
        data.wait_to_read()
        return obj
    return _pickle.loads(data.asnumpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (of the ranks of `process_set`),
    in rank order; the objects may differ in type and size between ranks.
    Any object that pickles (with cloudpickle where it is installed).

    Horovod: ``hvd.allgather_object``; ``process_set`` is mxplugin's (Horovod's
    takes `obj` and `name`), and the default name is the same on every rank
    (Horovod's is the type name of each rank's `obj`).

    Parameters
    ----------
    obj : object
        This rank's object.
    name : str, optional
        The allgather's name, the same on every rank (errors name it); by
        default ``"allgather_object"``.
    process_set : ProcessSet, default ``global_process_set``
        The ranks taking part (``global_process_set``: every rank); ranks
        outside it must not call.

    Returns
    -------
    list
        One object per rank of the set, in the order of its ranks (this
        rank's included, as an unpickled copy).

    Raises
    ------
    TypeError
        When `name` is not a str, or `process_set` is not a ProcessSet.
    Exception
        Whatever pickling `obj` raises (the other ranks' call then fails too,
        rather than wait).
    ArgumentError
        When `process_set` is not registered.

    Examples
    --------
    >>> import mxplugin as hvd
    >>> hvd.init()
    >>> hvd.allgather_object({"rank": hvd.rank(), "samples": 100 + hvd.rank()})
    [{'rank': 0, 'samples': 100}, {'rank': 1, 'samples': 101}]
    """
    name = _object_name(name, "allgather_object")
    payload = _pickled(obj, name, process_set)
    sizes = allgather(mx.nd.array([len(payload)], dtype="int64"), name=name + ".sz",
                      process_set=process_set).asnumpy()
    data = allgather(mx.nd.array(payload, dtype="uint8"), name=name + ".t",
                     process_set=process_set).asnumpy().tobytes()
    out, offset = [], 0
    for s in sizes:
        out.append(_pickle.loads(data[offset:offset + int(s)]))
        offset += int(s)
    return out


def first_parameter_difference(signature, name, missing, process_set=global_process_set):
    """Where the ranks' parameters first differ, for an error every rank
    raises alike. `signature`: this rank's [(name, shape, dtype)] in an
    order all ranks share; one allgather over `process_set` compares shapes
    and dtypes position by position (names carry per-process counters and
    may differ harmlessly). (position, "'w' of shape (2,) and dtype float32
    on rank 0; ..." with `missing` for a rank that has fewer), or None when
    every rank has the same."""
    return parameter_difference(allgather_object(signature, name=name, process_set=process_set), missing,
                                process_set)


def parameter_difference(everyone, missing, process_set=global_process_set):
    """first_parameter_difference of signatures already gathered (every
    rank's, in the process set's order)."""
    ranks = process_set.ranks or list(range(len(everyone)))
    for i in range(max(len(theirs) for theirs in everyone)):
        entries = [theirs[i] if i < len(theirs) else None for theirs in everyone]
        detail = values_by_rank(ranks, [None if e is None else tuple(e[1:]) for e in entries],
                                [missing if e is None else f"'{e[0]}' of shape {e[1]} and dtype {e[2]}"
                                 for e in entries])
        if detail:
            return i, detail
    return None


def _parameter_dict_types():
    kinds = [dict]
    try:
        from mxnet.gluon.parameter import ParameterDict

        kinds.append(ParameterDict)
    except ImportError:
        pass
    return tuple(kinds)


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Sets every rank's parameters to root_rank's values, in place: call it
    once the model is initialised, before training, so that all ranks start
    alike. A parameter whose initialisation is deferred (its shape not known
    yet) is broadcast right after it is initialised, at the first forward
    pass. Asynchronous: reading a parameter waits for its broadcast.

    Horovod: ``hvd.broadcast_parameters``, same signature and deferred
    initialisation. Here each device's copy of a deferred parameter is
    broadcast (Horovod broadcasts the first), parameters marked as
    model-parallel shards (``mxplugin.parallel``) are left alone, and in a
    job of one rank nothing is done.

    Parameters
    ----------
    params : dict or gluon ParameterDict
        Parameters (``gluon.Parameter``) or NDArrays by name, as
        ``net.collect_params()`` returns them; every rank passes the same
        names. They are broadcast in the order of their names.
    root_rank : int, default 0
        The global rank whose values every rank receives.
    prefix : str, optional
        Put before each parameter's name to name its broadcast (the name
        errors show); the same on every rank.

    Raises
    ------
    ArgumentError
        When `params` is neither a dict nor a ParameterDict.
    TypeError
        When `prefix` is not a str.

    Examples
    --------
    >>> import mxnet as mx
    >>> import mxplugin as hvd
    >>> hvd.init()
    >>> net = mx.gluon.nn.Dense(2, in_units=3)
    >>> net.initialize(mx.init.Constant(hvd.rank() + 1))  # ranks differ
    >>> hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    >>> net.weight.data().asnumpy().tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]

    Deferred initialisation: the shapes come with the first batch.

    >>> net = mx.gluon.nn.Dense(2)
    >>> net.initialize(mx.init.Constant(hvd.rank() + 1))
    >>> hvd.broadcast_parameters(net.collect_params(), prefix="deferred.")
    >>> net(mx.nd.ones((1, 3))).asnumpy().tolist()
    [[3.0, 3.0]]
    """
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError("prefix must be a str or None")
    prefix = prefix or ""
    if not isinstance(params, _parameter_dict_types()):
        raise ArgumentError(f"invalid params of type: {type(params)}")
    if basics.size() == 1:
        return
    tensors = []
    for key, p in sorted(params.items()):
        name = prefix + str(key)
        if isinstance(p, mx.gluon.Parameter):
            if getattr(p, "distributed", False):
                continue  # model-parallel shards differ per rank by design
            try:
                tensors.append((name, p.data()))
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_init(p, root_rank, name)
        else:
            tensors.append((name, p))
    for name, tensor in tensors:
        broadcast_(tensor, root_rank, name=name)


def _broadcast_after_init(param, root_rank, name):
    original = param._init_impl

    def init_then_broadcast(self, *args, **kwargs):
        original(*args, **kwargs)
        for data in self.list_data():
            broadcast_(data, root_rank, name=name)
            data.wait_to_read()  # one name per context: finish before reusing it

    param._init_impl = types.MethodType(init_then_broadcast, param)


class RankTotals:
    """Sums a fixed set of named float64 counters over the ranks, in one
    small allreduce of a fixed name and shape: every call site that uses
    one RankTotals meets the same call on every rank."""

    def __init__(self, name, fields, process_set=global_process_set):
        self.name = name
        self.fields = tuple(fields)
        self.process_set = process_set

    def sum(self, **values):
        """The sums over ranks of `values` (fields not given count 0)."""
        local = np.array([float(values.get(f, 0.0)) for f in self.fields], dtype=np.float64)
        return self.read(self.start(mx.nd.array(local, dtype="float64")))

    def start(self, local):
        """Starts summing `local`, a float64 NDArray with one entry per
        field (it may still be being computed); read() waits for the sums."""
        if self.process_set.size() == 1:
            return local
        return allreduce(local, op=Sum, name=self.name, process_set=self.process_set)

    def read(self, pending):
        return dict(zip(self.fields, pending.asnumpy()))
