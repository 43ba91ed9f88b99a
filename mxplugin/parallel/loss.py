"""Softmax cross-entropy and top-1 accuracy over class scores split across
the mp group (the output of ColumnParallelDense(num_classes, ...,
gather_output=False)): no rank ever holds all the scores of a sample.

With z the scores of one sample, split into blocks z_m of C/mp classes
(block m on mp rank m), and t the target class:

    M   = max over ranks of max(z_m)                 (allreduce Max)
    S   = sum over ranks of sum(exp(z_m - M))        (allreduce Sum, together
    z_t = sum over ranks of (z_m[t] - M if t is in block m else 0)    with z_t)
    loss = log(S) - z_t

and the gradient of block m is softmax(z)_m - onehot(t)_m, computed locally.
"""
import mxnet as mx
import numpy as np
from mxnet import gluon

from mxplugin import ops
from mxplugin.array_kinds import legacy, like
from mxplugin.parallel import _reference_layers as ref
from mxplugin.parallel._kinds import LegacyForward
from mxplugin.parallel._reference import reference
from mxplugin.parallel.collectives import next_name
from mxplugin.parallel.mesh import default_mesh


def _shard_start(logits, mesh):
    return mesh.mp_rank * logits.shape[-1]


class _ShardedCrossEntropy(mx.autograd.Function):
    def __init__(self, mesh, name):
        super().__init__()
        self._mesh, self._name = mesh, name
        self._softmax = self._target = self._inside = self._label = None

    def forward(self, logits, label):
        ps = self._mesh.mp_set
        n = len(ps.ranks)
        classes = logits.shape[-1]
        local_max = logits.max(axis=-1, keepdims=True)
        top = ops.allreduce(local_max, op=ops.Max, name=self._name + ".max", process_set=ps) if n > 1 else local_max
        shifted = mx.nd.broadcast_sub(logits, top)
        exp = shifted.exp()
        target = label.reshape(logits.shape[:-1]).astype(logits.dtype) - _shard_start(logits, self._mesh)
        inside = (target >= 0) * (target < classes)
        target = target.clip(0, classes - 1)
        picked = mx.nd.pick(shifted, target, axis=-1, keepdims=True) * inside.expand_dims(-1)
        stats = mx.nd.concat(exp.sum(axis=-1, keepdims=True), picked, dim=-1)
        if n > 1:
            stats = ops.allreduce(stats, op=ops.Sum, name=self._name + ".sums", process_set=ps)
        sum_exp = mx.nd.slice_axis(stats, axis=-1, begin=0, end=1)
        self._softmax = mx.nd.broadcast_div(exp, sum_exp)
        self._target, self._inside, self._label = target, inside, label
        return sum_exp.log() - mx.nd.slice_axis(stats, axis=-1, begin=1, end=2)

    def backward(self, dloss):
        onehot = mx.nd.one_hot(self._target, self._softmax.shape[-1], dtype=self._softmax.dtype)
        onehot = mx.nd.broadcast_mul(onehot, self._inside.expand_dims(-1))
        grad = mx.nd.broadcast_mul(self._softmax - onehot, dloss)
        return grad, mx.nd.zeros_like(self._label)


@reference(ref.SHARDED_LOSS)
class ShardedSoftmaxCrossEntropyLoss(LegacyForward, gluon.loss.Loss):
    """Softmax cross-entropy with integer labels over class scores split along
    the last axis across the mesh's mp group (mp rank m holds classes
    [m*C/mp, (m+1)*C/mp)), without gathering them: no rank ever holds all the
    scores of a sample. Same value and gradient as
    gluon.loss.SoftmaxCrossEntropyLoss on the gathered scores: returns the
    loss per sample, replicated on every rank of the mp group.

    Called as loss(pred, label, sample_weight=None): pred is this rank's
    block of scores (from ColumnParallelDense(gather_output=False) or a
    ShardedOutput classifier), label the global class index of each sample
    (shape pred.shape[:-1], or with a trailing 1), the same on every rank of
    the mp group. Imperative only (hybridize() leaves it so, as for the
    parallel layers). Takes and returns mx.np.ndarrays under npx.set_np()."""

    def __init__(self, mesh=None, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._mesh = mesh if mesh is not None else default_mesh()

    @reference(ref.LOSS_HYBRIDIZE)
    def hybridize(self, active=True, **kwargs):
        """Accepted so that a container's hybridize() may reach this loss,
        which stays imperative."""
        super().hybridize(False, **kwargs)

    @reference(ref.LOSS_FORWARD)
    def hybrid_forward(self, F, pred, label, sample_weight=None):
        """The loss's computation, which Gluon runs when the loss is called
        (call the loss, not this method)."""
        if F is not mx.nd:
            raise NotImplementedError("ShardedSoftmaxCrossEntropyLoss runs collectives imperatively and cannot "
                                      "be part of a hybridized graph")
        name = next_name(self._mesh.mp_set, "xent")  # Note [Collective names] in layers.py
        loss = _ShardedCrossEntropy(self._mesh, name)(pred, label)
        if sample_weight is not None:
            loss = F.broadcast_mul(loss, sample_weight.reshape(loss.shape))
        if self._weight is not None:
            loss = loss * self._weight
        return F.mean(loss, axis=self._batch_axis, exclude=True)


@reference(ref.SHARDED_ARGMAX)
def sharded_argmax(logits, mesh=None, name=None):
    """Global index of the top class of each sample, from class scores split
    over the mp group (float64, the same on every rank of the group; ties go to
    the lowest index, as numpy.argmax; in the array kind of `logits`). Not
    differentiable."""
    mesh = mesh if mesh is not None else default_mesh()
    return like(logits, _sharded_argmax(legacy(logits), mesh, name))


def _sharded_argmax(logits, mesh, name):
    ps = mesh.mp_set
    local_max = logits.max(axis=-1)
    best = mx.nd.argmax(logits, axis=-1).astype("float64") + _shard_start(logits, mesh)
    if len(ps.ranks) == 1:
        return best
    base = next_name(ps, "argmax", name)
    top = ops.allreduce(local_max, op=ops.Max, name=base + ".max", process_set=ps)
    no_candidate = mx.nd.full(best.shape, np.inf, dtype="float64")
    best = mx.nd.where(local_max == top, best, no_candidate)
    return ops.allreduce(best, op=ops.Min, name=base + ".min", process_set=ps)


@reference(ref.SHARDED_ACCURACY)
def sharded_accuracy(logits, label, mesh=None, name=None):
    """Fraction of samples whose top class (sharded_argmax) is `label`, as a
    float, from class scores split over the mp group. Not differentiable."""
    mesh = mesh if mesh is not None else default_mesh()
    pred = _sharded_argmax(legacy(logits), mesh, name)
    label = legacy(label).reshape(pred.shape).astype("float64")
    return float((pred == label).mean().asscalar())
