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
from mxnet.gluon import HybridBlock, nn

from mxplugin import ops
from mxplugin.errors import ArgumentError
from mxplugin.parallel._kinds import LegacyForward
from mxplugin.basics import global_process_set

OP_TYPE = "mxplugin_sync_batchnorm"
_INF = float("inf")
_PROCESS_SETS = {}  # layer key -> its process set (custom operators take strings only)


def _reduced_axes(ndim, axis):
    return tuple(a for a in range(ndim) if a != axis)


def _along(v, ndim, axis):
    """Per-channel vector `v` shaped to broadcast along `axis` of an ndim array."""
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return v.reshape(shape)


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
        nd, axis, ndim = mx.nd, self.axis, x.ndim
        x32 = x.astype("float32", copy=False)
        channels = x.shape[axis]
        if is_train:
            axes = _reduced_axes(ndim, axis)
            count = x.size // channels
            local_mean = nd.sum(x32, axis=axes) / count
            centred = x32 - _along(local_mean, ndim, axis)
            local = nd.concat(nd.full((1,), count, ctx=x.context, dtype="float32"), local_mean,
                              nd.sum(centred * centred, axis=axes), dim=0).reshape((1, -1))
            ranks = ops.allgather(local, name=f"syncbn.{self.key}.stats", process_set=_PROCESS_SETS[self.key])
            counts, means, m2s = ranks[:, :1], ranks[:, 1:channels + 1], ranks[:, channels + 1:]
            n = nd.sum(counts, axis=0)
            mean = nd.sum(counts * means, axis=0) / n
            deviations = means - mean.reshape((1, -1))
            var = nd.sum(m2s + counts * deviations * deviations, axis=0) / n
            self.assign(moving_mean, "write", moving_mean * self.momentum + mean * (1 - self.momentum))
            self.assign(moving_var, "write", moving_var * self.momentum + var * (1 - self.momentum))
        else:
            mean, var = moving_mean.astype("float32"), moving_var.astype("float32")
        invstd = 1.0 / nd.sqrt(var + self.eps)
        scale = invstd if self.fix_gamma else gamma.astype("float32") * invstd
        y = (x32 - _along(mean, ndim, axis)) * _along(scale, ndim, axis) + _along(beta.astype("float32"), ndim, axis)
        self.assign(out_data[0], req[0], y.astype(x.dtype, copy=False))
        if is_train:
            self.saved = mean, invstd, n  # an operator's state is its call's own (its backward's)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        """The combined batch's input gradient; gamma's and beta's of this
        rank's part."""
        x, gamma, _ = in_data
        mean, invstd, n = self.saved
        nd, axis, ndim = mx.nd, self.axis, x.ndim
        channels, axes = x.shape[axis], _reduced_axes(ndim, axis)
        dy = out_grad[0].astype("float32", copy=False)
        xhat = (x.astype("float32", copy=False) - _along(mean, ndim, axis)) * _along(invstd, ndim, axis)
        sum_dy, sum_dy_xhat = nd.sum(dy, axis=axes), nd.sum(dy * xhat, axis=axes)
        total = ops.allreduce(nd.concat(sum_dy, sum_dy_xhat, dim=0), op=ops.Sum, name=f"syncbn.{self.key}.grad",
                              process_set=_PROCESS_SETS[self.key])
        g = invstd if self.fix_gamma else gamma.astype("float32") * invstd
        dx = _along(g, ndim, axis) * (dy - _along(total[:channels] / n, ndim, axis)
                                      - xhat * _along(total[channels:] / n, ndim, axis))
        self.assign(in_grad[0], req[0], dx.astype(x.dtype, copy=False))
        dgamma = nd.zeros_like(sum_dy_xhat) if self.fix_gamma else sum_dy_xhat
        self.assign(in_grad[1], req[1], dgamma.astype(gamma.dtype))
        self.assign(in_grad[2], req[2], sum_dy.astype(gamma.dtype))


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
    and variance of all the ranks' images (batches may differ in size), and
    the input gradient is that of the combined batch's loss. Inference uses
    the running statistics, with no communication.

    Parameters
    ----------
    axis, momentum, epsilon, center, scale, use_global_stats : as for gluon.nn.BatchNorm
        BatchNorm's settings; the initializers and `in_channels` are taken
        as BatchNorm takes them, and the parameters have BatchNorm's names,
        so checkpoints load either way.
    process_set : ProcessSet
        The ranks whose batches are combined (default: all).
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
        """Casts the layer; float16 keeps float32 parameters, as BatchNorm does."""
        if mx.base.dtype_np_to_mx(dtype) == mx.base.dtype_np_to_mx("float16"):
            dtype = "float32"  # as BatchNorm: its parameters stay float32
        super().cast(dtype)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        """BatchNorm on the combined batch's statistics in training, on the
        running ones otherwise."""
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
    Parameters (their values and names kept); returns `net`."""
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
