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
    """An error reported by the mxplugin core."""


class ArgumentError(_MXNetError, ValueError):
    """A bad argument: wrong splits, an unknown op or process set, a value out
    of range. Both a ValueError and an mxnet.base.MXNetError."""


class MismatchError(MXPluginError):
    """Ranks submitted a collective under the same name with different
    operation, dtype, shape, root rank, device, scale factors or group size."""


class PeerFailureError(MXPluginError):
    """A peer died, timed out, or shut down while a collective was pending."""


class NotInitializedError(ArgumentError):
    """An operation was called before mxplugin.init()."""
