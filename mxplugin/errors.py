"""Exceptions raised by mxplugin.

Argument errors found before anything is enqueued are ValueError/TypeError.
Errors of asynchronous MXNet ops surface as mxnet.base.MXNetError when the
result is read; their message is the same as these exceptions'.
"""


class MXPluginError(RuntimeError):
    """An error reported by the mxplugin core."""


class MismatchError(MXPluginError):
    """Ranks submitted a collective under the same name with different
    operation, dtype, shape, root rank, device or scale factors."""


class PeerFailureError(MXPluginError):
    """A peer died, timed out, or shut down while a collective was pending."""


class NotInitializedError(ValueError):
    """An operation was called before mxplugin.init()."""
