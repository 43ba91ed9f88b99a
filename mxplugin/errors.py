"""Exceptions raised by mxplugin.

Argument errors found before anything is enqueued are ArgumentError (a
ValueError and an mxnet.base.MXNetError, so programs written for
horovod.mxnet, which raises MXNetError, and programs that catch ValueError
both catch them) or TypeError. Errors of asynchronous MXNet ops surface as
mxnet.base.MXNetError when the result is read; their message is the same as
these exceptions'.
"""
try:
    from mxnet.base import MXNetError as _MXNetError
except ImportError:  # a core-only build, on a machine without MXNet
    class _MXNetError(RuntimeError):
        """Stands in for mxnet.base.MXNetError where MXNet is not installed."""


def values_by_rank(ranks, keys, texts):
    """"A on ranks 0, 2; B on rank 1": ranks grouped by key (each group
    shown by the text of its first rank), the core's format for mismatches;
    "" when every rank has the same key."""
    groups = {}
    for rank, key, text in zip(ranks, keys, texts):
        groups.setdefault(key, (text, []))[1].append(rank)
    if len(groups) <= 1:
        return ""
    return "; ".join(f"{text} on rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
                     for text, rs in groups.values())


class MXPluginError(RuntimeError):
    """An error of mxplugin's own: the base of MismatchError and
    PeerFailureError, and raised itself for other failures (a rank alone
    in its MPI world where its launcher started several, an internal error).
    Collectives on MXNet arrays run in MXNet's engine, which reports their
    errors as mxnet.base.MXNetError when the result is read, with the same
    message; what mxplugin checks before a call returns (allgather's shapes,
    DistributedTrainer's model, init()) raises these classes themselves.

    Horovod: none of its own in horovod.mxnet, which raises
    mxnet.base.MXNetError; elsewhere Horovod's nearest is
    ``HorovodInternalError`` (a RuntimeError too).

    Examples
    --------
    >>> import mxnet as mx
    >>> import mxplugin as hvd
    >>> hvd.init()
    >>> issubclass(hvd.MismatchError, hvd.MXPluginError), issubclass(hvd.PeerFailureError, hvd.MXPluginError)
    (True, True)
    >>> try:  # rows of different widths cannot be gathered
    ...     hvd.allgather(mx.nd.ones((1, 2 + hvd.rank())), name="mxpluginerror.example")
    ... except hvd.MXPluginError as e:
    ...     print(type(e).__name__)
    MismatchError
    """


class ArgumentError(_MXNetError, ValueError):
    """A bad argument: wrong splits, an unknown op or process set, a value out
    of range. Both a ValueError and an mxnet.base.MXNetError."""


class MismatchError(MXPluginError):
    """Ranks submitted a collective under the same name with different
    operation, dtype, shape, root rank, device, scale factors or group size
    (or, for DistributedTrainer, different models). Raised on every rank,
    naming what each rank submitted. Where the collective runs in MXNet's
    engine (allreduce, broadcast and the like) the error is an
    mxnet.base.MXNetError with this message, raised when the result is
    read; allgather's shape check and the trainer's model check raise
    MismatchError itself.

    Horovod: none of its own; horovod.mxnet reports a mismatch as an
    mxnet.base.MXNetError when the result is read.

    Examples
    --------
    >>> import mxnet as mx
    >>> import mxplugin as hvd
    >>> from mxnet.base import MXNetError
    >>> hvd.init()
    >>> try:
    ...     hvd.allgather(mx.nd.ones((1, 2 + hvd.rank())), name="mismatch.rows")
    ... except hvd.MismatchError as e:
    ...     print(e)
    Mismatched allgather for tensor 'allgather.mismatch.rows': float32, rank-2 with trailing dims (2,) on rank 0; ...
    >>> try:
    ...     hvd.allreduce(mx.nd.ones(1 + hvd.rank()), name="mismatch.shape").asnumpy()
    ... except MXNetError as e:  # the engine's error, read with the result
    ...     print(str(e).splitlines()[0])
    MXNetError: Mismatched shape for tensor 'allreduce.mismatch.shape': (1,) on rank 0; (2,) on rank 1. ...
    """


class PeerFailureError(MXPluginError):
    """A peer died, timed out, or shut down while a collective was pending:
    this rank's collectives fail from then on. Collectives in MXNet's engine
    report it as mxnet.base.MXNetError (same message) when the result is
    read. Under ``mxplugin.elastic.run`` either one means a lost rank: the
    job goes on, in a new world of the ranks that remain, from the last commit.

    Horovod: ``HorovodInternalError``, which Horovod's elastic mode catches alike.

    Examples
    --------
    >>> import mxplugin as hvd
    >>> hvd.init()
    >>> def gathered(value):
    ...     try:
    ...         return hvd.allgather_object(value, name="peerfailure.example")
    ...     except hvd.PeerFailureError as e:  # a rank is gone: save what you can, then stop
    ...         raise SystemExit(f"rank {hvd.rank()}: {e}")
    >>> gathered(hvd.rank())
    [0, 1]
    """


class NotInitializedError(ArgumentError):
    """An operation was called before mxplugin.init() (or after shutdown()).
    An ArgumentError: a ValueError, as Horovod raises, and an
    mxnet.base.MXNetError.

    Horovod: ValueError("Horovod has not been initialized; use hvd.init().").

    Examples
    --------
    >>> import mxplugin as hvd
    >>> def world_size():
    ...     try:
    ...         return hvd.size()
    ...     except hvd.NotInitializedError:  # a program that runs without mxplugin too
    ...         return 1
    >>> hvd.init()
    >>> world_size()
    2
    >>> issubclass(hvd.NotInitializedError, ValueError)
    True
    """
