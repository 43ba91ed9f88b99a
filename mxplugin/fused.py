"""Contiguous gradient buckets and fused updates of same-type parameter groups.

Parameters are grouped by everything their update depends on (dtype, lr_mult,
wd_mult, context; the optimizer and its hyper-parameters are the trainer's).
Each group is cut into buckets in reverse registration order. A bucket owns
three flat buffers: weights, gradients and optimizer state; every parameter's
data, gradient and state are views into them. So a bucket's gradients are
reduced with one in-place allreduce (no pack/unpack copy) and, for
optimizers whose update is element-wise, the bucket is updated with one call
of the optimizer on the flat buffers, computing exactly what gluon.Trainer's
per-parameter updates compute.
"""
from collections import OrderedDict

import mxnet as mx
from mxnet import autograd

# Optimizers whose update of an element depends only on that element (and the
# step count), so one update over a flat buffer equals per-parameter updates.
# The others (per-tensor norms: lamb, lars, lbsgd; per-row: groupadagrad;
# random noise drawn per call: sgld; a schedule advanced once per call:
# nadam) are updated per parameter through views, in gluon.Trainer's order.
ELEMENTWISE_OPTIMIZERS = frozenset({
    "sgd", "ccsgd", "nag", "signum", "ftml", "dcasgd", "adam", "adagrad", "rmsprop",
    "adadelta", "ftrl", "adamax", "test",
})


def is_elementwise(optimizer):
    return type(optimizer).__name__.lower() in ELEMENTWISE_OPTIMIZERS


def group_key(param):
    """Everything besides the shared optimizer that one update call depends on."""
    return (str(param.dtype), float(param.lr_mult), float(param.wd_mult), str(param.list_ctx()[0]))


def slice_state(state, start, stop, shape):
    """The part of a flat optimizer state that belongs to one parameter (views)."""
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(slice_state(s, start, stop, shape) for s in state)
    if isinstance(state, mx.nd.NDArray):
        return state[start:stop].reshape(shape)
    return state  # scalars some optimizers keep (e.g. nadam's schedule)


def copy_state(dst, src):
    if dst is None or src is None:
        return
    if isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            copy_state(d, s)
    elif isinstance(dst, mx.nd.NDArray):
        dst[:] = src.reshape(dst.shape)


class Bucket:
    """Flat weight/gradient buffers shared by a run of parameters of one group."""

    def __init__(self, entries, dtype, ctx):
        # entries: (index, param) in the order they sit in the buffers
        self.entries = entries
        self.ctx = ctx
        self.offsets = []
        total = 0
        for _, p in entries:
            n = 1
            for d in p.shape:
                n *= d
            self.offsets.append((total, total + n))
            total += n
        self.size = total
        self.weight = mx.nd.empty((total,), ctx=ctx, dtype=dtype)
        self.grad = mx.nd.zeros((total,), ctx=ctx, dtype=dtype)
        self.state = None           # flat optimizer state (fused updates)
        self.param_states = {}      # index -> state views (or own states, per-parameter updates)
        self._views = []
        for (index, p), (a, b) in zip(entries, self.offsets):
            w = self.weight[a:b].reshape(p.shape)
            g = self.grad[a:b].reshape(p.shape)
            fresh = p.data()._fresh_grad
            w[:] = p.data()
            if p._grad is not None:
                g[:] = p.grad()
            p._data[0] = w
            p._grad[0] = g
            autograd.mark_variables([w], [g], p.grad_req)
            w._fresh_grad = fresh  # a layout built between backward and update keeps the gradient
            self._views.append((w, g))

    @property
    def index(self):
        """The index the fused update runs under: all members share its settings."""
        return self.entries[0][0]

    def intact(self):
        """False once Gluon has replaced a member's arrays (re-initialisation,
        reset_ctx, ...): then the layout must be rebuilt."""
        for (_, p), (w, g) in zip(self.entries, self._views):
            if p._data is None or p._grad is None or p._data[0] is not w or p._grad[0] is not g:
                return False
        return True

    def create_states(self, optimizer, fused):
        if fused:
            self.state = optimizer.create_state_multi_precision(self.index, self.weight)
            for (index, p), (a, b) in zip(self.entries, self.offsets):
                self.param_states[index] = slice_state(self.state, a, b, p.shape)
        else:
            for index, p in self.entries:
                self.param_states[index] = optimizer.create_state_multi_precision(index, p.data())


class Layout:
    """All buckets of a trainer, in reduction order (last layers first)."""

    def __init__(self, params, optimizer, bucket_bytes, num_buckets=0, include_distributed=False):
        self.fused = is_elementwise(optimizer)
        groups = OrderedDict()
        self.excluded = []
        for index in reversed(range(len(params))):
            p = params[index]
            if p.grad_req == "null" or (getattr(p, "distributed", False) and not include_distributed):
                continue
            if p._stype != "default" or p._grad_stype != "default" or len(p.list_ctx()) != 1:
                self.excluded.append((index, p))
                continue
            groups.setdefault(group_key(p), []).append((index, p))
        self.buckets = []
        for members in groups.values():
            self.buckets.extend(self._cut(members, bucket_bytes, num_buckets))
        for b in self.buckets:
            b.create_states(optimizer, self.fused)

    @staticmethod
    def _cut(members, bucket_bytes, num_buckets):
        dtype = members[0][1].dtype
        ctx = members[0][1].list_ctx()[0]
        itemsize = mx.nd.empty((1,), dtype=dtype).asnumpy().itemsize
        sizes = [itemsize * max(1, int(_numel(p.shape))) for _, p in members]
        if num_buckets > 0:
            bucket_bytes = max(1, sum(sizes) // num_buckets + 1)
        runs, current, used = [], [], 0
        for member, size in zip(members, sizes):
            if current and used + size > bucket_bytes:
                runs.append(current)
                current, used = [], 0
            current.append(member)
            used += size
        if current:
            runs.append(current)
        return [Bucket(run, dtype, ctx) for run in runs]

    def intact(self):
        return all(b.intact() for b in self.buckets)

    def param_states(self):
        out = {}
        for b in self.buckets:
            out.update(b.param_states)
        return out

    def load_param_states(self, states):
        for b in self.buckets:
            for index, dst in b.param_states.items():
                if index in states:
                    copy_state(dst, states[index])


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n
