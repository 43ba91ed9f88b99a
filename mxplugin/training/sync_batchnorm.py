"""Batch normalization over the ranks' combined batch: mxplugin.SyncBatchNorm
and convert_sync_batchnorm(net).

Note [Statistics of the combined batch]: in training, each rank takes its
batch's count, mean and sum of squared deviations per channel, and one
allgather brings every rank's to every rank, which combines them in rank
order (Chan's parallel formula: no E[x^2] - E[x]^2, whose cancellation
turned a ResNet's nearly constant 1x1 channels into gradients of 1e13), so
every rank normalizes with the same mean and variance of the combined batch; the backward adds up the two sums the
input gradient needs (of dy and of dy * xhat) in one more allreduce, so
the input gradient is that of the combined batch's loss, as in one process
on the combined batch. gamma's and beta's gradients stay this rank's part,
like every other parameter's: the trainer's reduction adds them up. The
statistics are taken in float32 whatever the input's type. Ranks
may hold different batch sizes (the counts add up), none an empty one. In
inference (and with use_global_stats) it is BatchNorm on the running
statistics, with no collective.

The layer is a custom operator (mx.operator.CustomOp), so it runs
hybridized as well as imperatively; the collectives are named by the
layer's prefix, the same on every rank that builds the same model, and each
completes within its call (Note [Backward outputs depend on collectives] in
mxplugin/parallel/collectives.py: every output depends on its collective).

Note [Arrays in oneDNN's layout]: MXNet hands a custom operator its arrays
as they are, and one that oneDNN keeps in its own blocked layout (a
pooling's gradient, a convolution's output) reads as garbage there: a
model-zoo ResNet's gradients came out as NaN. So the operator sits between
two clips to (-inf, inf), operators oneDNN has no kernel of: their outputs
and gradients are in the plain layout, hybridized too (an identity was
enough imperatively, not in a hybridized graph)."""
import mxnet as mx
import numpy as np
from mxnet.gluon import HybridBlock, nn

from mxplugin import ops
from mxplugin.errors import ArgumentError
from mxplugin.parallel._kinds import LegacyForward
from mxplugin.basics import global_process_set

OP_TYPE = "mxplugin_sync_batchnorm"
_INF = float("inf")
_PROCESS_SETS = {}  # layer key -> its process set (custom operators take strings only)


# Note [Per-channel arithmetic]: MXNet's reductions over several axes and
# its broadcasting arithmetic run element by element on one thread (a sum
# over N, H and W of a 4x64x32x32 batch took 3.5 ms, a broadcast product
# 1 ms), ten times BatchNorm's own kernels. So the layer's per-channel sums
# are matrix products with a vector of ones, and its per-channel affine maps
# (x * scale + shift) are the BatchNorm operator itself on mean 0, variance
# 1 and eps 0, which computes exactly x * scale + shift; what is per channel
# only (the combined statistics, the coefficients) is numpy's, on the host.


def _channel_sum(v, axis):
    """The per-channel sums of `v` along `axis` (float32, shape (C,))."""
    shape = v.shape
    channels = shape[axis]
    before = int(np.prod(shape[:axis], dtype=np.int64))
    after = int(np.prod(shape[axis + 1:], dtype=np.int64))
    nd = mx.nd
    if after == 1:
        return nd.dot(nd.ones((1, before), ctx=v.context), v.reshape((before, channels))).reshape((channels,))
    rows = nd.dot(v.reshape((before * channels, after)), nd.ones((after, 1), ctx=v.context))
    return nd.sum(rows.reshape((before, channels)), axis=0)


def _affine(v, scale, shift, axis):
    """v * scale + shift, `scale` and `shift` per channel along `axis`."""
    nd, channels = mx.nd, v.shape[axis]
    return nd.BatchNorm(v, scale, shift, nd.zeros((channels,), ctx=v.context), nd.ones((channels,), ctx=v.context),
                        eps=0.0, use_global_stats=True, fix_gamma=False, axis=axis)


class _SyncBatchNorm(mx.operator.CustomOp):
    """One call of the layer: its forward, then its backward."""

    def __init__(self, key, axis, eps, momentum, fix_gamma):
        super().__init__()
        self.key, self.axis, self.eps, self.momentum, self.fix_gamma = key, axis, eps, momentum, fix_gamma

    def forward(self, is_train, req, in_data, out_data, aux):
        """Normalizes with the combined batch's statistics (training) or
        the running ones."""
        x, gamma, beta = in_data
        moving_mean, moving_var = aux
        nd, axis, ctx = mx.nd, self.axis, x.context
        x32 = x.astype("float32", copy=False)
        channels = x.shape[axis]
        if is_train:
            count = x.size // channels
            local_mean = _channel_sum(x32, axis) / count
            centred = _affine(x32, nd.ones((channels,), ctx=ctx), -local_mean, axis)
            local = nd.concat(nd.full((1,), count, ctx=ctx, dtype="float32"), local_mean,
                              _channel_sum(centred * centred, axis), dim=0).reshape((1, -1))
            ranks = ops.allgather(local, name=f"syncbn.{self.key}.stats", process_set=_PROCESS_SETS[self.key])
            mean, var, n = _combined(ranks.asnumpy(), channels)
            momentum = np.float32(self.momentum)
            for state, value in ((moving_mean, mean), (moving_var, var)):
                self.assign(state, "write", nd.array(state.asnumpy() * momentum + value * (1 - momentum), ctx=ctx,
                                                     dtype=state.dtype))
        else:
            mean, var = moving_mean.asnumpy().astype(np.float32), moving_var.asnumpy().astype(np.float32)
        invstd = (1 / np.sqrt(var + np.float32(self.eps))).astype(np.float32)
        scale = invstd if self.fix_gamma else gamma.asnumpy().astype(np.float32) * invstd
        shift = beta.asnumpy().astype(np.float32) - mean * scale
        y = _affine(x32, nd.array(scale, ctx=ctx), nd.array(shift, ctx=ctx), axis)
        self.assign(out_data[0], req[0], y.astype(x.dtype, copy=False))
        if is_train:
            self.saved = mean, invstd, n  # an operator's state is its call's own (its backward's)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        """The combined batch's input gradient; gamma's and beta's of this
        rank's part."""
        x, gamma, _ = in_data
        mean, invstd, n = self.saved
        nd, axis, ctx = mx.nd, self.axis, x.context
        channels = x.shape[axis]
        dy = out_grad[0].astype("float32", copy=False)
        xhat = _affine(x.astype("float32", copy=False), nd.array(invstd, ctx=ctx), nd.array(-mean * invstd, ctx=ctx),
                       axis)
        sum_dy, sum_dy_xhat = _channel_sum(dy, axis), _channel_sum(dy * xhat, axis)
        total = ops.allreduce(nd.concat(sum_dy, sum_dy_xhat, dim=0), op=ops.Sum, name=f"syncbn.{self.key}.grad",
                              process_set=_PROCESS_SETS[self.key]).asnumpy()
        g = invstd if self.fix_gamma else gamma.asnumpy().astype(np.float32) * invstd
        # g * (dy - sum_dy / n - xhat * sum_dy_xhat / n), as two affine maps
        dx = (_affine(dy, nd.array(g, ctx=ctx), nd.array(-g * total[:channels] / n, ctx=ctx), axis)
              + _affine(xhat, nd.array(-g * total[channels:] / n, ctx=ctx), nd.zeros((channels,), ctx=ctx), axis))
        self.assign(in_grad[0], req[0], dx.astype(x.dtype, copy=False))
        dgamma = nd.zeros_like(sum_dy_xhat) if self.fix_gamma else sum_dy_xhat
        self.assign(in_grad[1], req[1], dgamma.astype(gamma.dtype))
        self.assign(in_grad[2], req[2], sum_dy.astype(gamma.dtype))


def _combined(ranks, channels):
    """(mean, variance, count) of the combined batch, float32, from each
    rank's row of (count, mean, sum of squared deviations) per channel,
    combined in rank order (Chan's formula) on the host: a handful of
    channel-sized sums, where MXNet's dispatch of each would cost more."""
    counts, means, m2s = ranks[:, :1], ranks[:, 1:channels + 1], ranks[:, channels + 1:]
    n = counts.sum(dtype=np.float32)
    mean = (counts * means).sum(axis=0) / n
    deviations = means - mean[None, :]
    var = (m2s + counts * deviations * deviations).sum(axis=0) / n
    return mean.astype(np.float32), var.astype(np.float32), np.float32(n)


@mx.operator.register(OP_TYPE)
class _SyncBatchNormProp(mx.operator.CustomOpProp):
    """The operator's signature: data, gamma and beta in, one output, the
    running mean and variance as auxiliary states."""

    def __init__(self, key, axis, eps, momentum, fix_gamma):
        super().__init__(need_top_grad=True)
        self.key, self.axis, self.eps = key, int(axis), float(eps)
        self.momentum, self.fix_gamma = float(momentum), fix_gamma == "True"

    def list_arguments(self):
        """The inputs."""
        return ["data", "gamma", "beta"]

    def list_outputs(self):
        """The one output."""
        return ["output"]

    def list_auxiliary_states(self):
        """The running statistics, updated in training."""
        return ["moving_mean", "moving_var"]

    def infer_shape(self, in_shape):
        """Per-channel vectors for gamma, beta and the running statistics."""
        channels = in_shape[0][self.axis]
        vector = [channels]
        return [in_shape[0], vector, vector], [in_shape[0]], [vector, vector]

    def infer_type(self, in_type):
        """The output has the input's type; the statistics gamma's."""
        return in_type, [in_type[0]], [in_type[1], in_type[1]]

    def create_operator(self, ctx, shapes, dtypes):
        """The operator of one call."""
        return _SyncBatchNorm(self.key, self.axis, self.eps, self.momentum, self.fix_gamma)


class SyncBatchNorm(LegacyForward, HybridBlock):
    """gluon.nn.BatchNorm with its statistics over the combined batch of the
    ranks of `process_set`: in training every rank normalizes with the mean
    and variance of all the ranks' samples (batches may differ in size, none
    be empty), the running statistics follow them alike on every rank, and
    the input gradient is that of the combined batch's loss. Inference (and
    ``use_global_stats``) uses the running statistics, with no
    communication. The layer runs imperatively and hybridized; its
    collectives are named after its prefix, so build the same model, in the
    same order, on every rank. Its parameters have BatchNorm's names, so
    checkpoints load either way.

    Horovod: none in horovod.mxnet; Horovod's PyTorch ``hvd.SyncBatchNorm``
    does the same for ``torch.nn.BatchNorm``. This one takes
    ``gluon.nn.BatchNorm``'s parameters.

    Parameters
    ----------
    axis : int, default 1
        The channel axis of the input.
    momentum : float, default 0.9
        The running statistics' momentum (each step keeps this much of them).
    epsilon : float, default 1e-5
        Added to the variance before its square root.
    center : bool, default True
        Whether ``beta`` (the shift) is trained; otherwise it keeps its
        initial value (zeros).
    scale : bool, default True
        Whether ``gamma`` (the scale) is used and trained; otherwise the
        scale is 1.
    use_global_stats : bool, default False
        Normalizes with the running statistics in training too (no
        communication), as BatchNorm does.
    beta_initializer : str or Initializer, default 'zeros'
        Initializer of ``beta``.
    gamma_initializer : str or Initializer, default 'ones'
        Initializer of ``gamma``.
    running_mean_initializer : str or Initializer, default 'zeros'
        Initializer of the running mean.
    running_variance_initializer : str or Initializer, default 'ones'
        Initializer of the running variance.
    in_channels : int, default 0
        The number of channels; 0: taken from the first input.
    process_set : ProcessSet, default ``global_process_set``
        The ranks whose batches are combined.
    **kwargs : keyword arguments
        ``prefix`` and ``params``, as for every Gluon block.

    Examples
    --------
    >>> import mxnet as mx, mxplugin as hvd
    >>> hvd.init()
    >>> bn = hvd.SyncBatchNorm(in_channels=1)
    >>> bn.initialize()
    >>> with mx.autograd.record():  # training: the statistics of every rank's batch
    ...     y = bn(mx.nd.full((2, 1), hvd.rank()))
    >>> mean = bn.running_mean.data().asscalar()  # a tenth of the combined batch's mean (momentum 0.9)
    >>> bool(abs(mean - 0.1 * (hvd.size() - 1) / 2) < 1e-6)
    True
    """

    def __init__(self, axis=1, momentum=0.9, epsilon=1e-5, center=True, scale=True, use_global_stats=False,
                 beta_initializer="zeros", gamma_initializer="ones", running_mean_initializer="zeros",
                 running_variance_initializer="ones", in_channels=0, process_set=global_process_set, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {"axis": axis, "eps": epsilon, "momentum": momentum, "fix_gamma": not scale,
                        "use_global_stats": use_global_stats}
        self._axis, self._key = axis, self.prefix.rstrip("_") or "syncbatchnorm"
        _PROCESS_SETS[self._key] = process_set
        self.in_channels = in_channels
        shape = (in_channels,)
        self.gamma = self.params.get("gamma", grad_req="write" if scale else "null", shape=shape,
                                     init=gamma_initializer, allow_deferred_init=True, differentiable=scale)
        self.beta = self.params.get("beta", grad_req="write" if center else "null", shape=shape,
                                    init=beta_initializer, allow_deferred_init=True, differentiable=center)
        self.running_mean = self.params.get("running_mean", grad_req="null", shape=shape,
                                            init=running_mean_initializer, allow_deferred_init=True,
                                            differentiable=False)
        self.running_var = self.params.get("running_var", grad_req="null", shape=shape,
                                           init=running_variance_initializer, allow_deferred_init=True,
                                           differentiable=False)

    def cast(self, dtype):
        """Casts the layer's parameters to `dtype`, as Gluon's ``Block.cast``;
        float16 keeps float32 parameters, as BatchNorm does (its statistics
        are taken in float32 whatever the input's type).

        Horovod: none; as ``gluon.nn.BatchNorm.cast``.

        Parameters
        ----------
        dtype : str or numpy dtype
            The new type (``"float16"``: the parameters stay float32).
        """
        if mx.base.dtype_np_to_mx(dtype) == mx.base.dtype_np_to_mx("float16"):
            dtype = "float32"  # as BatchNorm: its parameters stay float32
        super().cast(dtype)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        """BatchNorm on the combined batch's statistics in training, on the
        running ones otherwise. Gluon calls it: call the layer, ``bn(x)``.

        Horovod: none; as ``gluon.nn.BatchNorm``'s, on the combined statistics.

        Parameters
        ----------
        F : module
            ``mxnet.ndarray`` or ``mxnet.symbol``, as Gluon passes it.
        x : NDArray or Symbol
            The input.
        gamma : NDArray or Symbol
            The scale.
        beta : NDArray or Symbol
            The shift.
        running_mean : NDArray or Symbol
            The running mean, updated in training.
        running_var : NDArray or Symbol
            The running variance, updated in training.

        Returns
        -------
        NDArray or Symbol
            The normalized input, of its shape and type.
        """
        if self._kwargs["use_global_stats"]:
            return F.BatchNorm(x, gamma, beta, running_mean, running_var, name="fwd", axis=self._axis,
                               eps=self._kwargs["eps"], momentum=self._kwargs["momentum"],
                               fix_gamma=self._kwargs["fix_gamma"], use_global_stats=True)
        x = F.clip(x, -_INF, _INF)  # Note [Arrays in oneDNN's layout]
        out = F.Custom(x, gamma, beta, running_mean, running_var, op_type=OP_TYPE, key=self._key, axis=self._axis,
                       eps=self._kwargs["eps"], momentum=self._kwargs["momentum"],
                       fix_gamma=self._kwargs["fix_gamma"])
        return F.clip(out, -_INF, _INF)  # its backward hands the operator a gradient in the plain layout

    def __repr__(self):
        return f"{self.__class__.__name__}(axis={self._axis}, eps={self._kwargs['eps']}, " \
               f"momentum={self._kwargs['momentum']}, in_channels={self.in_channels or None})"


def convert_sync_batchnorm(net, process_set=global_process_set):
    """Replaces every gluon.nn.BatchNorm in `net` (its children, at any
    depth) by a SyncBatchNorm with the same settings and the same
    Parameters (their values and names kept), in place.

    Horovod: none (PyTorch's ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``
    does the same for PyTorch modules).

    Parameters
    ----------
    net : gluon.Block
        The network holding the BatchNorm layers.
    process_set : ProcessSet, default ``global_process_set``
        The ranks whose batches each SyncBatchNorm combines.

    Returns
    -------
    gluon.Block
        ``net`` itself.

    Raises
    ------
    ArgumentError
        Where ``net`` is itself a BatchNorm (pass the block holding it).

    Examples
    --------
    >>> import mxnet as mx, mxplugin as hvd
    >>> hvd.init()
    >>> net = mx.gluon.nn.HybridSequential()
    >>> net.add(mx.gluon.nn.Dense(4, in_units=2), mx.gluon.nn.BatchNorm(in_channels=4))
    >>> hvd.convert_sync_batchnorm(net) is net
    True
    >>> type(net[1]).__name__
    'SyncBatchNorm'
    """
    if isinstance(net, nn.BatchNorm):
        raise ArgumentError("convert_sync_batchnorm(net): net is itself a BatchNorm; pass the block holding it")
    for name, child in list(net._children.items()):
        if isinstance(child, nn.BatchNorm) and not isinstance(child, SyncBatchNorm):
            net._children[name] = replacement = _replacement(child, process_set)
            for attr, value in list(vars(net).items()):
                if value is child:
                    object.__setattr__(net, attr, replacement)
        else:
            convert_sync_batchnorm(child, process_set)
    return net


def _replacement(bn, process_set):
    """A SyncBatchNorm with BatchNorm `bn`'s settings and Parameters."""
    kw = bn._kwargs
    sync = SyncBatchNorm(axis=kw["axis"], momentum=kw["momentum"], epsilon=kw["eps"], scale=not kw["fix_gamma"],
                         use_global_stats=kw["use_global_stats"], in_channels=getattr(bn, "in_channels", 0),
                         process_set=process_set, prefix=bn.prefix, params=bn.params)
    return sync  # bn's prefix and ParameterDict: bn's very Parameters
