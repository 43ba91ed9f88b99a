"""Sharded optimizer states (ZeRO stage 1): each rank owns one slice of every
bucket and keeps the optimizer states (and multi-precision master weights)
of that slice only.

Note [Sharded optimizer states]
A step of a sharded trainer, bucket by bucket (buckets.py), in reduction order:
  1. reduce-scatter of the flat gradient (Sum, prescaled by 1/f): this rank
     gets the sum of its slice [lo, hi) only;
  2. the slice's weights are copied out of the members' weight arrays
     (weights stay separate arrays, see buckets.py) and updated with the
     slice's states -- by the core's kernel (native_update.update_flat) or
     the optimizer's MXNet op on the flat slice. Both are element-wise, so a
     slice updated as one array equals per-parameter updates;
  3. allgather of the updated slices into a flat buffer, copied back into
     every member's weight.
Reduce-scatter + allgather move the bytes of one allreduce. Slices follow
reducescatter's split: rank r of n gets size // n elements, plus one when
r < size % n, so any bucket size works (a rank may own nothing of a bucket
smaller than n). Every step is asynchronous: the engine orders the copies,
kernels and collectives by the arrays they read and write.

The checkpoint (states_bytes) is the unsharded one: each state is
allgathered per bucket and cut per parameter, and loading cuts this rank's
slice out of per-parameter states, so a job resumes at any size, sharded or
not.
"""
import mxnet as mx
import numpy as np

from mxplugin import basics, ops
from mxplugin.errors import ArgumentError
from mxplugin.ops import Sum, _base_name, _core_module, _describe, _push, _record, _reduce_code, _set_id
from mxplugin.training import native_update
from mxplugin.training.buckets import ELEMENTWISE_OPTIMIZERS, slice_state
from mxplugin.training.compression import Compression

# Optimizers whose slices can be updated on their own: their state is
# element-wise and so is their update (buckets.ELEMENTWISE_OPTIMIZERS); and
# lamb, whose per-parameter norms are summed across the slices (Note
# [Sharded LAMB]).
SHARDABLE_OPTIMIZERS = ELEMENTWISE_OPTIMIZERS | {"lamb"}


def check_shardable(optimizer, compression, local_sgd_steps):
    """Raises ArgumentError naming what cannot combine with sharded states."""
    name = type(optimizer).__name__.lower()
    if name not in SHARDABLE_OPTIMIZERS:
        raise ArgumentError(
            f"shard_optimizer_states=True cannot shard the states of optimizer '{name}': a slice of a bucket "
            f"can be updated on its own only when the update is element-wise (or, as lamb's, needs only "
            f"per-parameter norms summed across slices). Shardable: "
            f"{', '.join(sorted(SHARDABLE_OPTIMIZERS))}. Use shard_optimizer_states=False for '{name}'.")
    if compression is not Compression.none:
        raise ArgumentError("shard_optimizer_states=True does not combine with gradient compression: the "
                            "reduce-scatter sends the gradient as it is. Pass compression=Compression.none.")
    if local_sgd_steps:
        raise ArgumentError("shard_optimizer_states=True does not combine with local_sgd_steps: local SGD "
                            "updates every parameter on every rank, which needs every state there.")


def slice_bounds(size, n, r):
    """[lo, hi) of rank r's slice of `size` elements split over n ranks, as
    reducescatter splits a first dimension."""
    q, extra = divmod(size, n)
    lo = r * q + min(r, extra)
    return lo, lo + q + (1 if r < extra else 0)


def _map_state(state, fn):
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(_map_state(s, fn) for s in state)
    if isinstance(state, mx.nd.NDArray):
        return fn(state)
    return state


def state_arrays(state):
    if isinstance(state, (tuple, list)):
        return [a for s in state for a in state_arrays(s)]
    return [state] if isinstance(state, mx.nd.NDArray) else []


class BucketSlice:
    """This rank's slice of one bucket: the reduced gradient, the weights and
    the optimizer states of elements [lo, hi), and the flat buffer the
    updated slices are gathered into."""

    def __init__(self, bucket, rank, size, optimizer, gathered, weight, grad):
        self.bucket = bucket
        self.lo, self.hi = slice_bounds(bucket.size, size, rank)
        self.size = self.hi - self.lo
        # Views of buffers that other slices share (TurnBuffers): their
        # contents last from the slice's reduce-scatter to store_weights()
        # only. One rank: the slice is the bucket, whose gradient it takes.
        self.grad = bucket.grad if size == 1 else grad
        self.weight, self.gathered = weight, gathered
        # (member, its elements [a, b), their place [x, y) in this slice)
        self.pieces = []
        for k, (start, stop) in enumerate(bucket.offsets):
            a, b = max(start, self.lo), min(stop, self.hi)
            if a < b:
                self.pieces.append((k, a - start, b - start, a - self.lo, b - self.lo))
        # Note [Views made once]: slicing and reshaping an NDArray costs
        # Python and C API calls; made per member and step they took longer
        # than the copies themselves (a bucket has up to hundreds of members).
        self._loads = [(bucket.weights[k].reshape((-1,))[a:b], self.weight[x:y]) for k, a, b, x, y in self.pieces]
        self._stores = [(gathered[a:b].reshape(w.shape), w) for w, (a, b) in zip(bucket.weights, bucket.offsets)]
        self.indices = [i for i, _ in bucket.entries]
        self.state = None
        if self.size:
            self.load_weights()
            self.state = optimizer.create_state_multi_precision(bucket.index, self.weight)

    def load_weights(self):
        """Copies the members' current weights into the slice (a user may have
        set them since the last step)."""
        for src, dst in self._loads:
            src.copyto(dst)

    def store_weights(self):
        """Copies the gathered flat weights back into every member."""
        for src, dst in self._stores:
            src.copyto(dst)

    def load_param_states(self, states):
        """Cuts this slice out of per-parameter states (a checkpoint's)."""
        if self.state is None:
            return
        for k, a, b, x, y in self.pieces:
            src = states.get(self.bucket.entries[k][0])
            if src is not None:
                _copy_piece(self.state, src, a, b, x, y)


def _copy_piece(dst, src, a, b, x, y):
    if dst is None or src is None:
        return
    if isinstance(dst, (tuple, list)):
        for d, s in zip(dst, src):
            _copy_piece(d, s, a, b, x, y)
    elif isinstance(dst, mx.nd.NDArray):
        dst[x:y] = src.reshape((-1,))[a:b].as_in_context(dst.context).astype(dst.dtype, copy=False)


class ShardedStates:
    """The slices of all buckets of a layout, and the step that uses them
    (Note [Sharded optimizer states])."""

    def __init__(self, layout, optimizer, process_set, prefix):
        self.layout = layout
        self.process_set = process_set
        self.prefix = prefix
        size = process_set.size() if process_set.included() else 1
        rank = process_set.rank() if process_set.included() else 0
        self.world = size
        buckets = layout.buckets
        bounds = [slice_bounds(b.size, size, rank) for b in buckets]
        sizes = [hi - lo for lo, hi in bounds]
        gathered = TurnBuffers(buckets, [b.size for b in buckets])
        weights, grads = TurnBuffers(buckets, sizes), TurnBuffers(buckets, sizes)
        self.slices = [BucketSlice(b, rank, size, optimizer, gathered.view(b, b.size), weights.view(b, n),
                                   grads.view(b, n)) for b, n in zip(buckets, sizes)]
        # Set: the next update reduce-scatters, with this predivide factor;
        # None: allreduce_grads() summed the whole buckets, slices are copied.
        self._predivide = None

    def reduce_scatter(self, predivide):
        """Step 1 for every bucket, this rank's slice of the summed gradient,
        by a reduce-scatter that the next update() runs bucket by bucket
        (each into a buffer taken in turns: Note [Buffers taken in turns])."""
        self._predivide = predivide

    def _fill_grad(self, s, i):
        if self.world == 1:
            return  # one rank: the slice's gradient is the bucket's
        if self._predivide is not None:
            _reducescatter_into(s.bucket.grad, s.grad, f"{self.prefix}bucket{i}", 1.0 / self._predivide,
                                self.process_set, -i)
        elif s.size:
            s.bucket.grad[s.lo:s.hi].copyto(s.grad)

    def update(self, optimizer):
        """Steps 1 to 3, bucket by bucket: reduce-scatter (or take from
        summed buckets), update the slices, gather them into the weights."""
        core = basics._core_module()
        kernel = native_update.has_kernel(optimizer)
        lamb = type(optimizer).__name__.lower() == "lamb"
        for i, s in enumerate(self.slices):
            self._fill_grad(s, i)
            if lamb:
                if s.size:
                    s.load_weights()
                self._update_lamb(optimizer, s, i)
            elif s.size:
                s.load_weights()
                if kernel and native_update.supports(optimizer, s.bucket):
                    native_update.update_flat(optimizer, s.indices, s.weight, s.grad, s.state, core)
                else:
                    optimizer._update_count(s.indices[1:])  # update_multi_precision counts the first
                    optimizer.update_multi_precision(s.indices[0], s.weight, s.grad, s.state)
            else:
                optimizer._update_count(s.indices)  # the step counts stay those of every rank
            if self.world == 1:
                s.gathered[:] = s.weight
            else:
                _allgather_into(s.weight, s.gathered, f"{self.prefix}gather{i}", self.process_set, -i)
            s.store_weights()
        self._predivide = None

    def _update_lamb(self, opt, s, i):
        """Note [Sharded LAMB]: LAMB scales each parameter's step by
        ||weight|| / ||g||, norms over the whole parameter, whose elements
        may lie in several ranks' slices. Its phase 1 (moments, g) is
        element-wise, so it runs on the slice; then every rank sums the
        squares of its pieces of each member, one allreduce per bucket of
        2 x members floats (a rank owning nothing of the bucket sends
        zeros), and phase 2 applies each member's norms to its piece. The
        norms differ from one process's in the last bits only (another
        summation order)."""
        indices = s.indices
        opt._update_count(indices)
        t = opt._index_update_count[indices[0]]
        lr, wd = opt._get_lr(indices[0]), opt._get_wd(indices[0])  # one bucket, one lr and wd
        members = len(s.bucket.entries)
        partial = mx.nd.zeros((2 * members,), ctx=s.bucket.ctx, dtype="float32")
        mp = opt.multi_precision and s.weight.dtype == np.float16
        g = None
        if s.size:
            kwargs = {"beta1": opt.beta1, "beta2": opt.beta2, "epsilon": opt.epsilon, "t": t,
                      "bias_correction": opt.bias_correction, "rescale_grad": opt.rescale_grad, "wd": wd}
            if opt.clip_gradient:
                kwargs["clip_gradient"] = opt.clip_gradient
            # With master weights the whole update runs on them in float32, as
            # the optimizer's multi_mp_lamb_update does (MXNet 1.9.1's
            # single-tensor mp_lamb_update_phase2 leaves the master weights
            # behind from the second step on).
            w = s.state[0] if mp else s.weight
            mean, var = s.state[1] if mp else s.state
            grad = s.grad.astype("float32") if mp else s.grad
            g = mx.nd.lamb_update_phase1(w, grad, mean, var, **kwargs)
            for k, _, _, x, y in s.pieces:
                partial[k] = mx.nd.sum(mx.nd.square(w[x:y]))
                partial[members + k] = mx.nd.sum(mx.nd.square(g[x:y]))
        if self.world > 1:
            ops.allreduce_(partial, name=f"{self.prefix}lambnorms{i}", op=Sum, process_set=self.process_set,
                           priority=-i)
        if not s.size:
            return
        norms = mx.nd.sqrt(partial)
        bounds = {}
        if opt.lower_bound:
            bounds["lower_bound"] = opt.lower_bound
        if opt.upper_bound:
            bounds["upper_bound"] = opt.upper_bound
        for k, _, _, x, y in s.pieces:
            piece = w[x:y]
            mx.nd.lamb_update_phase2(piece, g[x:y], norms[k:k + 1], norms[members + k:members + k + 1], lr=lr,
                                     out=piece, **bounds)
        if mp:
            s.weight[:] = w.astype(s.weight.dtype)

    def state_bytes(self):
        return sum(nbytes(a) for s in self.slices for a in state_arrays(s.state))

    def gathered_param_states(self):
        """Per-parameter states as an unsharded trainer holds them (every rank
        gets them: one allgather per state array of each bucket)."""
        out = {}
        for i, s in enumerate(self.slices):
            full = self._gather_state(s, i)
            for (index, p), (a, b) in zip(s.bucket.entries, s.bucket.offsets):
                out[index] = slice_state(full, a, b, p.shape)
        return out

    def _gather_state(self, s, i):
        template = s.state
        if template is None:
            return None
        counter = iter(range(1 << 30))

        def gather(arr):
            j = next(counter)
            out = mx.nd.zeros((s.bucket.size,), ctx=arr.context, dtype=arr.dtype)
            if self.world == 1:
                out[:] = arr
            else:
                _allgather_into(arr, out, f"{self.prefix}state{i}.{j}", self.process_set, 0)
            return out

        return _map_state(template, gather)

    def load_param_states(self, states):
        for s in self.slices:
            s.load_param_states(states)


class TurnBuffers:
    """Note [Buffers taken in turns]: per bucket, the slice's reduced
    gradient, its weights and the flat buffer the slices are gathered into
    are needed only from the slice's reduce-scatter to the copy into the
    members' weights. One of each per bucket would hold another copy of the
    whole model and two of 1/N of it, more memory than sharding saves on
    Adam's states at 2 ranks; so the buckets of one device and dtype take
    turns on two buffers (of each kind) of the largest size they need. Each
    bucket's reduce-scatter, copies, update, gather and copies back are
    pushed before the next bucket's, so the engine orders every use of a
    buffer after its last one; the second buffer lets one bucket's work run
    while the one before is still copied out."""

    def __init__(self, buckets, sizes):
        largest, self._turns, self._buffers = {}, {}, {}
        for b, n in zip(buckets, sizes):
            largest[_kind(b)] = max(largest.get(_kind(b), 0), n)
        for b in buckets:
            if _kind(b) not in self._buffers:
                self._buffers[_kind(b)] = [mx.nd.zeros((largest[_kind(b)],), ctx=b.ctx, dtype=b.grad.dtype)
                                           for _ in range(2)]

    def view(self, bucket, n):
        """The first n elements of the buffer whose turn it is for the next
        bucket of this bucket's kind."""
        key = _kind(bucket)
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        buf = self._buffers[key][turn % 2]
        return buf if buf.size == n else buf[:n]


def _kind(bucket):
    return str(bucket.ctx), str(bucket.grad.dtype)


def nbytes(arr):
    """Bytes an NDArray holds."""
    return int(arr.size) * np.dtype(arr.dtype).itemsize


def _reducescatter_into(tensor, output, name, prescale, process_set, priority):
    """reducescatter (Sum) of the flat `tensor` into this rank's preallocated
    slice `output` (its size is the split slice_bounds gives)."""
    dtype, device, shape = _describe(tensor)
    base = _base_name("reducescatter", name)
    m = _core_module()
    entry = _record(base, m.OP_REDUCESCATTER, tensor, output, dtype, device, shape, out_shape=list(output.shape),
                    reduce_op=_reduce_code(Sum),
                    prescale=prescale, postscale=1.0)
    _set_id(process_set)
    _push([entry], process_set, priority, base)


def _allgather_into(tensor, output, name, process_set, priority):
    """allgather of each rank's slice into the preallocated flat `output`
    (sizes known from slice_bounds, so no size exchange first)."""
    dtype, device, shape = _describe(tensor)
    base = _base_name("allgather", name)
    m = _core_module()
    entry = _record(base, m.OP_ALLGATHER, tensor, output, dtype, device, shape, out_shape=list(output.shape))
    _push([entry], process_set, priority, base)
