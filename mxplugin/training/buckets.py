"""Contiguous gradient buckets and fused updates of same-type parameter groups.

Parameters are grouped by everything their update depends on (dtype, lr_mult,
wd_mult, context; the optimizer and its hyper-parameters are the trainer's).
Each group is cut into buckets in reverse registration order. A bucket owns a
flat gradient buffer and flat optimizer states; every parameter's gradient and
state are views into them. So a bucket's gradients are reduced with one
in-place allreduce (no pack/unpack copy) and, for the optimizers the core
implements, a host bucket is updated by one engine op running the core's
kernel over the flat gradient/states and the parameters' weights. Buffers
live on the parameters' context; a GPU bucket is reduced by the core's GPU
path and updated per parameter by MXNet's own ops (the kernels are CPU only).

Weights stay ordinary arrays: oneDNN reorders a convolution's weight in place
during an inference forward, which MXNet cannot do on a view of a larger array.

Note [Static graphs keep their gradients]
A bucket makes a parameter's gradient a view by marking the weight for
autograd with it (autograd.mark_variables). A block hybridized with
static_shape=True binds the gradient arrays at its first backward and goes on
writing into them whatever the weight is marked with later; its backward even
points autograd back at the array it wrote. Without care, a bucket built after
that first backward (the trainer builds its layout at the first step) keeps
the first step's gradients forever, on every rank alike. So:
  1. whenever a layout replaces gradient arrays, the cached graphs of blocks
     hybridized with static_shape that use those parameters are dropped (what
     hybridize() does), so their next call binds the bucket views;
  2. before every reduction and update, the trainer asks MXNet which array
     autograd holds as each weight's gradient (grads_bound: bookkeeping only,
     one C call for all members). A member written elsewhere is copied into
     its bucket for this step -- correct, one extra copy -- and its weight is
     marked with the view again and every cached graph using it dropped, so
     the next steps are zero-copy again. The debug log says which path a step
     took.
"""
import gc
import logging
from collections import OrderedDict

import mxnet as mx
from mxnet import autograd
from mxnet.gluon import HybridBlock

from mxplugin import array_kinds

_log = logging.getLogger(__name__)

# Optimizers whose update of an element depends only on that element (and the
# step count), so one update over a flat buffer equals per-parameter updates.
# The others (per-tensor norms: lamb, lars, lbsgd; per-row: groupadagrad;
# random noise drawn per call: sgld; a schedule advanced once per call:
# nadam) are updated per parameter through views, in gluon.Trainer's order.
ELEMENTWISE_OPTIMIZERS = frozenset({
    "sgd", "ccsgd", "nag", "signum", "ftml", "dcasgd", "adam", "adagrad", "rmsprop",
    "adadelta", "ftrl", "adamax", "test",
})


# Optimizers whose state is element-wise, so it can live in flat buffers:
# the element-wise ones, and lamb (its per-tensor norms are of weights and
# gradients, not of its state).
FLAT_STATE_OPTIMIZERS = ELEMENTWISE_OPTIMIZERS | {"lamb"}


def has_flat_state(optimizer):
    return type(optimizer).__name__.lower() in FLAT_STATE_OPTIMIZERS


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
    """A flat gradient buffer (and flat optimizer states) shared by a run of
    parameters of one group."""

    def __init__(self, entries, dtype, ctx):
        # entries: (index, param) in the order they sit in the buffers
        self.entries = entries
        self.ctx = ctx
        self.offsets = []
        total = 0
        for _, p in entries:
            n = _numel(p.shape)
            self.offsets.append((total, total + n))
            total += n
        self.size = total
        self.segments = [a for a, _ in self.offsets] + [total]
        self.grad = mx.nd.zeros((total,), ctx=ctx, dtype=dtype)
        self.compressed = False     # reduced member by member by PowerSGD, not as a whole
        self.state = None           # flat optimizer state (fused updates)
        self.param_states = {}      # index -> state views (or own states, per-parameter updates)
        # Note [Array kinds] (mxplugin/array_kinds.py): the parameters' own
        # arrays (`data`, `_grads`: what Gluon and autograd see, NumPy-interface
        # arrays under npx.set_np()) and legacy views of the same memory
        # (`weights`, `grad_views`), which every operator of ours runs on.
        self.data = [p.data() for _, p in entries]
        self.weights = array_kinds.legacy_list(self.data)
        self.mults = [(p.lr_mult, p.wd_mult) for _, p in entries]
        self._grads = []
        self.grad_views = []
        for (index, p), (a, b), w in zip(entries, self.offsets, self.data):
            view = self.grad[a:b].reshape(p.shape)
            g = array_kinds.like(w, view)
            fresh = w._fresh_grad
            if p._grad is not None:
                view[:] = array_kinds.legacy(p.grad())
            p._grad[0] = g
            autograd.mark_variables([w], [g], p.grad_req)
            w._fresh_grad = fresh  # a layout built between backward and update keeps the gradient
            self._grads.append(g)
            self.grad_views.append(view)

    @property
    def index(self):
        """The index the fused update runs under: all members share its settings."""
        return self.entries[0][0]

    def intact(self):
        """False once Gluon has replaced a member's arrays (re-initialisation,
        reset_ctx, ...) or a member's lr_mult/wd_mult changed (freezing layers
        mid-training): then the layout must be rebuilt."""
        for (_, p), w, g, mults in zip(self.entries, self.data, self._grads, self.mults):
            if p._data is None or p._grad is None or p._data[0] is not w or p._grad[0] is not g:
                return False
            if (p.lr_mult, p.wd_mult) != mults:
                return False
        return True

    def create_states(self, optimizer, fused):
        if fused:
            # States are created from the concatenated weights (multi-precision
            # master copies and dcasgd's previous weights start from them).
            flat = mx.nd.concat(*[w.reshape((-1,)) for w in self.weights], dim=0)
            self.state = optimizer.create_state_multi_precision(self.index, flat)
            for (index, p), (a, b) in zip(self.entries, self.offsets):
                self.param_states[index] = slice_state(self.state, a, b, p.shape)
        else:
            for index, p in self.entries:
                self.param_states[index] = optimizer.create_state_multi_precision(index,
                                                                                   array_kinds.legacy(p.data()))


class Layout:
    """All buckets of a trainer, in reduction order (last layers first)."""

    def __init__(self, params, optimizer, bucket_bytes, num_buckets=0, include_distributed=False,
                 bucket_states=True, compressed=None, fused_update=True):
        # bucket_states=False: the buckets hold no optimizer states (sharded
        # trainers keep them per slice, sharding.py). compressed(param): whether
        # its gradient is reduced by PowerSGD; those parameters get buckets of
        # their own, which the ordinary allreduce skips (bucket.compressed).
        # fused_update=False: per-parameter states, not views of flat ones.
        self.fused = has_flat_state(optimizer) and fused_update
        groups = OrderedDict()
        self.excluded = []
        self.local = []  # model-parallel shards outside a mesh: updated, never reduced
        for index in reversed(range(len(params))):
            p = params[index]
            if p.grad_req == "null":
                continue
            if getattr(p, "distributed", False) and not include_distributed:
                self.local.append((index, p))
                continue
            if p._stype != "default" or p._grad_stype != "default" or len(p.list_ctx()) != 1:
                self.excluded.append((index, p))
                continue
            key = group_key(p) + (bool(compressed and compressed(p)),)
            groups.setdefault(key, []).append((index, p))
        self.buckets = []
        self.group_sizes = []  # each group's members' gradient bytes, in bucket order (autotune.py)
        for key, members in groups.items():
            cut = self._cut(members, bucket_bytes, num_buckets)
            for b in cut:
                b.compressed = key[-1]
            self.buckets.extend(cut)
        for b in self.buckets if bucket_states else ():
            b.create_states(optimizer, self.fused)
        self.local_states = {index: optimizer.create_state_multi_precision(index, array_kinds.legacy(p.data()))
                             for index, p in self.local}
        # Every bucket member, flat, for the per-step check (Note [Static
        # graphs keep their gradients]).
        # (parameter, its weight array, its gradient array, the legacy view of that gradient)
        self._members = [(p, w, g, view) for b in self.buckets
                         for (_, p), w, g, view in zip(b.entries, b.data, b._grads, b.grad_views)]
        self._member_weights = [w for _, w, _, _ in self._members]
        self._member_views = [view for _, _, _, view in self._members]
        self.copied = 0  # member gradients copied into buckets because backward wrote elsewhere
        released = release_cached_graphs([p for p, _, _, _ in self._members], static_shape_only=True)
        if released:
            _log.debug("gradient buckets replaced the gradients of blocks hybridized with static_shape=True; "
                       "released their cached graphs so the next call binds the buckets: %s", ", ".join(released))

    def _cut(self, members, bucket_bytes, num_buckets):
        dtype = members[0][1].dtype
        ctx = members[0][1].list_ctx()[0]
        itemsize = mx.nd.empty((1,), dtype=dtype).asnumpy().itemsize
        sizes = [itemsize * max(1, int(_numel(p.shape))) for _, p in members]
        self.group_sizes.append(sizes)
        if num_buckets > 0:
            bucket_bytes = max(1, sum(sizes) // num_buckets + 1)
        buckets, start = [], 0
        for count in cut_runs(sizes, bucket_bytes):
            buckets.append(Bucket(members[start:start + count], dtype, ctx))
            start += count
        return buckets

    def intact(self):
        return all(b.intact() for b in self.buckets)

    def gather_gradients(self, core_module):
        """Makes every bucket hold the gradient its members' last backward
        wrote (Note [Static graphs keep their gradients]); returns how many
        members had to be copied (0: every bucket is written in place)."""
        if not self._members:
            return 0
        bound = core_module.grads_bound(self._member_weights, self._member_views)
        if all(bound):
            return 0
        stray = [m for m, ok in zip(self._members, bound) if not ok]
        for p, w, g, view in stray:
            written = w.grad
            if written is not None:
                view[:] = array_kinds.legacy(written).reshape(view.shape)
            fresh = w._fresh_grad
            autograd.mark_variables([w], [g], p.grad_req)
            w._fresh_grad = fresh
        self.copied += len(stray)
        released = release_cached_graphs([p for p, _, _, _ in stray], static_shape_only=False)
        _log.debug("copy path: backward wrote the gradients of %d parameter(s) (%s%s) outside their buckets; "
                   "copied them in for this step, marked the weights with the bucket views again and released "
                   "the cached graphs of %s", len(stray), ", ".join(p.name for p, _, _, _ in stray[:3]),
                   ", ..." if len(stray) > 3 else "", ", ".join(released) or "no block")
        return len(stray)

    def param_states(self):
        out = dict(self.local_states)
        for b in self.buckets:
            out.update(b.param_states)
        return out

    def load_param_states(self, states):
        targets = dict(self.local_states)
        for b in self.buckets:
            targets.update(b.param_states)
        for index, dst in targets.items():
            if index in states:
                copy_state(dst, states[index])


def cut_runs(sizes, bucket_bytes):
    """How a group whose members take `sizes` bytes is cut into buckets of at
    most `bucket_bytes` (a member larger than that gets one of its own): the
    number of members of each bucket, in order."""
    runs, count, used = [], 0, 0
    for size in sizes:
        if count and used + size > bucket_bytes:
            runs.append(count)
            count, used = 0, 0
        count += 1
        used += size
    if count:
        runs.append(count)
    return runs


def release_cached_graphs(params, static_shape_only):
    """Drops the cached graph of every hybridized block that uses one of
    `params` (as hybridize() does), so that its next call binds the gradient
    arrays the weights are marked with now; returns the blocks' names. Blocks
    are found among live objects: parameters do not know their blocks, and a
    block may have been built before mxplugin was imported. Runs only when a
    layout is built or a stray gradient was found, never on a normal step."""
    wanted = {id(p) for p in params}
    released = []
    for obj in gc.get_objects():
        if not isinstance(obj, HybridBlock) or getattr(obj, "_cached_op", None) is None:
            continue
        if static_shape_only and not dict(getattr(obj, "_flags", ())).get("static_shape"):
            continue
        if any(not is_arg and id(arg) in wanted for is_arg, arg in getattr(obj, "_cached_op_args", ())):
            obj._clear_cached_op()
            released.append(obj.name)
    return released


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n
