"""Differentiable collectives: mxplugin's collectives as autograd.Functions.

Two families, for two ways of counting the loss (Note [Which gradient]):

- allreduce, allgather, broadcast, reducescatter: each rank's loss is its own
  term of a total loss summed over the ranks of the set. The backward of a
  collective is its adjoint: allreduce <-> allreduce, allgather <->
  reducescatter (sum, keep this rank's rows), broadcast <-> sum to the root.

- copy_to_group, reduce_from_group, gather_from_group, scatter_to_group: every
  rank of the set holds the same replicated loss (tensor parallelism). The
  forward and backward pair up as in Megatron-LM: identity / allreduce-sum,
  allreduce-sum / identity, gather / keep-my-slice, keep-my-slice / gather.

Each takes legacy NDArrays and NumPy-interface arrays alike and returns the
caller's kind (Note [Legacy inside] in _kinds.py).

Note [Which gradient]
If the ranks of a model-parallel group all compute the same loss L from the
same replicated activations, the first family would count L once per rank:
an allreduce-sum followed by the replicated L gives each input the gradient
of size * L. The second family differentiates L itself, so replicated tensors
get the true gradient on every rank and no rank has to rescale anything.

Note [Backward outputs depend on collectives]
A backward runs on MXNet's custom-function threads, and MXNet considers it
done once the gradients it returns are written. A collective started there
whose result no returned gradient depends on may still be reading the output
gradient at that point, while MXNet already reuses that memory (seen as
corrupted sums in the broadcast backward of non-root ranks). So every backward
returns something computed from each collective it starts: a rank that
contributes but needs nothing back returns zeros_like(result).

Note [Sums outside autograd]
An autograd.Function costs about 380 us a step on this 2-core machine beyond
its collective (about 100 us to record the forward, the rest in MXNet's
custom-function thread hand-offs of the backward). reduce_from_group needs
none: its backward is the identity, so it records MXNet's own identity op
(whose backward hands dL/dy to x unchanged) and then, outside autograd,
writes the sum over the set into that op's output; the engine orders the
two writes, and the identity's backward reads neither value. The small TP
MLP of bench/tp_small.py: 5.20 -> 4.83 ms a step at mp 2 (same job,
alternating), gradients bit-identical. copy_to_group's backward is a sum,
which only a Function can start. A native operator would remove the rest,
but MXNet 1.9.1 cannot take one from this extension: registering one in its
op registry (NNVM_REGISTER_OP) crashes at load, because libmxnet calls the
attribute functions with its own libstdc++'s std::function convention (it
passed a dmlc::any* by value where the handler built here takes it by
reference), and the C-ABI extension route (lib_api.h, MXLoadLib) has no
asynchronous operators, so a collective would block an engine worker while
peers may need theirs to submit.

Note [Ring names]
Collectives pair up by name, so every call takes its name from a counter per
process set, kind and label (the caller's `name`): the n-th such call is
"parallel.<label>.<kind>.<n mod NAME_RING>" ("parallel.<kind>.<n mod
NAME_RING>" without a label) on every rank of the set, which SPMD code makes
in the same order; the backward adds ".grad". The kind is part of the name
because the core negotiates calls by name across kinds: two kinds sharing a
name could meet there as a mismatch while a rank lags. Names come
round again every NAME_RING calls of a label so that the core's response
cache knows them: a layer's collective is negotiated in full NAME_RING times,
then a cached round each step (fresh names every call were never cached: a
full round each, and a cache filled with names never seen again). A name
still in flight when it comes round waits behind its earlier call (Note
[Reused names] in src/core/core.cc); a label whose calls change shape is
negotiated again for each change, correctly.
"""
import itertools

import mxnet as mx

from mxplugin import basics, calls, ops
from mxplugin.array_kinds import legacy, like
from mxplugin.basics import global_process_set
from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_collectives as ref
from mxplugin.parallel._reference import reference

_name_counters = {}  # (process set id, label, kind) -> calls made
NAME_RING = 8


def _check_set(process_set):
    if not isinstance(process_set, basics.ProcessSet):
        raise TypeError(f"process_set must be a mxplugin.ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ArgumentError(f"{process_set} is not registered; call mxplugin.add_process_set() first")
    return len(process_set.ranks)


def next_name(process_set, kind, name=None):
    """The name of this call of `kind` labelled `name` on `process_set`,
    equal on all its ranks (Note [Ring names])."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    counter = _name_counters.setdefault((process_set.process_set_id, name, kind), itertools.count())
    return f"parallel.{name + '.' if name else ''}{kind}.{next(counter) % NAME_RING}"


def _check_array(x):
    if not isinstance(x, mx.nd.NDArray):
        raise TypeError(f"expected an mxnet.nd.NDArray, got {type(x).__name__}")


def _normal_axis(x, axis):
    if x.ndim == 0:
        raise ArgumentError("gather/scatter along an axis needs an array with at least one dimension")
    if not -x.ndim <= axis < x.ndim:
        raise ArgumentError(f"axis {axis} is out of range for an array of {x.ndim} dimensions")
    return axis % x.ndim


def gather_axis(x, axis, name, process_set):
    """Non-differentiable: concatenates the equal-sized blocks of every rank of
    the set along `axis`, in rank order (in x's array kind)."""
    n = _check_set(process_set)
    axis = _normal_axis(x, axis)
    if n == 1:
        return x.copy()
    return like(x, _gather_legacy(legacy(x), axis, n, name, process_set))


def _gather_legacy(x, axis, n, name, process_set):
    # allgather concatenates along the first dimension: gather (1, *shape)
    # blocks into (n, *shape), then move the rank axis next to `axis` and merge.
    stacked = ops.allgather(x.reshape((1,) + x.shape), name=name, process_set=process_set)
    if axis > 0:
        stacked = mx.nd.moveaxis(stacked, 0, axis)
    shape = x.shape[:axis] + (n * x.shape[axis],) + x.shape[axis + 1:]
    return stacked.reshape(shape)


def _my_block(x, axis, process_set):
    n = len(process_set.ranks)
    if x.shape[axis] % n:
        raise ArgumentError(f"axis {axis} of size {x.shape[axis]} does not split evenly over {n} ranks")
    k = x.shape[axis] // n
    me = process_set.rank()
    return mx.nd.slice_axis(x, axis=axis, begin=me * k, end=(me + 1) * k)


# --- sum-of-losses family --------------------------------------------------------

class _Allreduce(mx.autograd.Function):
    def __init__(self, op, name, process_set):
        super().__init__()
        self._op, self._name, self._set = op, name, process_set

    def forward(self, x):
        return ops.allreduce(x, op=self._op, name=self._name, process_set=self._set)

    def backward(self, dy):
        # Sum: dx = sum_k dy_k. Average: dx = sum_k dy_k / n, an Average again.
        return ops.allreduce(dy, op=self._op, name=self._name + ".grad", process_set=self._set)


@reference(ref.ALLREDUCE)
def allreduce(x, op=ops.Average, name=None, process_set=global_process_set):
    """Differentiable allreduce (op Sum or Average) for a loss summed over
    the ranks (each rank's loss its own term): the gradient of each rank's
    input is the same reduction of the ranks' output gradients. Where every
    rank holds the same loss (tensor parallelism), use reduce_from_group."""
    _check_array(x)
    n = _check_set(process_set)
    if op not in (ops.Sum, ops.Average):
        raise ArgumentError("differentiable allreduce supports op=Sum and op=Average")
    if n == 1:
        return x.copy()
    return like(x, _Allreduce(op, next_name(process_set, "allreduce", name), process_set)(legacy(x)))


class _Allgather(mx.autograd.Function):
    def __init__(self, name, process_set):
        super().__init__()
        self._name, self._set = name, process_set
        self._rows = None

    def forward(self, x):
        rows = ops.allgather(mx.nd.array([x.shape[0]], dtype="int64"), name=self._name + ".rows",
                             process_set=self._set)
        self._rows = [int(r) for r in rows.asnumpy()]
        return ops.allgather(x, name=self._name, process_set=self._set)

    def backward(self, dy):
        # dx_r = (sum_k dy_k)[rows of r]: a reducescatter when its even split
        # matches the rows every rank contributed, else allreduce and slice.
        name = self._name + ".grad"
        if len(set(self._rows)) == 1:
            return ops.reducescatter(dy, op=ops.Sum, name=name, process_set=self._set)
        me = self._set.rank()
        start = sum(self._rows[:me])
        total = ops.allreduce(dy, op=ops.Sum, name=name, process_set=self._set)
        return total[start:start + self._rows[me]]


@reference(ref.ALLGATHER)
def allgather(x, name=None, process_set=global_process_set):
    """Differentiable allgather along the first dimension (which may differ
    per rank) for a loss summed over the ranks: the gradient of each rank's
    input is its rows of the sum of all ranks' output gradients. Where every
    rank holds the same loss (tensor parallelism), use gather_from_group."""
    _check_array(x)
    n = _check_set(process_set)
    if x.ndim == 0:
        raise ArgumentError("allgather needs an array with at least one dimension")
    if n == 1:
        return x.copy()
    return like(x, _Allgather(next_name(process_set, "allgather", name), process_set)(legacy(x)))


class _Broadcast(mx.autograd.Function):
    def __init__(self, root_rank, name, process_set):
        super().__init__()
        self._root, self._name, self._set = root_rank, name, process_set

    def forward(self, x):
        return ops.broadcast(x, self._root, name=self._name, process_set=self._set)

    def backward(self, dy):
        total = ops.allreduce(dy, op=ops.Sum, name=self._name + ".grad", process_set=self._set)
        # zeros_like(total), not zeros_like(dy): Note [Backward outputs depend on collectives]
        return total if basics.rank() == self._root else mx.nd.zeros_like(total)


@reference(ref.BROADCAST)
def broadcast(x, root_rank, name=None, process_set=global_process_set):
    """Differentiable broadcast from global rank `root_rank` for a loss
    summed over the ranks: the root's input gets the sum of all ranks'
    output gradients, the others' zeros."""
    _check_array(x)
    n = _check_set(process_set)
    if root_rank not in process_set.ranks:
        raise ArgumentError(f"root_rank {root_rank} is not a member of {process_set}")
    if n == 1:
        return x.copy()
    return like(x, _Broadcast(int(root_rank), next_name(process_set, "broadcast", name), process_set)(legacy(x)))


class _Reducescatter(mx.autograd.Function):
    def __init__(self, op, name, process_set):
        super().__init__()
        self._op, self._name, self._set = op, name, process_set

    def forward(self, x):
        return ops.reducescatter(x, op=self._op, name=self._name, process_set=self._set)

    def backward(self, dy):
        full = ops.allgather(dy, name=self._name + ".grad", process_set=self._set)
        return full / len(self._set.ranks) if self._op == ops.Average else full


@reference(ref.REDUCESCATTER)
def reducescatter(x, op=ops.Average, name=None, process_set=global_process_set):
    """Differentiable reducescatter (op Sum or Average) over the first
    dimension (lower ranks get one extra row when it does not divide), for a
    loss summed over the ranks: the gradient of each rank's input is the
    allgather of the ranks' output gradients (divided by the set's size for
    Average)."""
    _check_array(x)
    n = _check_set(process_set)
    if op not in (ops.Sum, ops.Average):
        raise ArgumentError("differentiable reducescatter supports op=Sum and op=Average")
    if x.ndim == 0:
        raise ArgumentError("reducescatter needs an array with at least one dimension")
    if n == 1:
        return x.copy()
    return like(x, _Reducescatter(op, next_name(process_set, "reducescatter", name), process_set)(legacy(x)))


# --- replicated-loss family (tensor parallelism) ----------------------------------

class _CopyToGroup(mx.autograd.Function):
    def __init__(self, name, process_set):
        super().__init__()
        self._name, self._set = name, process_set

    def forward(self, x):
        return x.copy()  # an output must not be the input NDArray itself

    def backward(self, dy):
        return ops.allreduce(dy, op=ops.Sum, name=self._name + ".grad", process_set=self._set)


class _GatherFromGroup(mx.autograd.Function):
    def __init__(self, axis, name, process_set):
        super().__init__()
        self._axis, self._name, self._set = axis, name, process_set

    def forward(self, x):
        return gather_axis(x, self._axis, self._name, self._set)

    def backward(self, dy):
        return _my_block(dy, self._axis, self._set)


class _ScatterToGroup(mx.autograd.Function):
    def __init__(self, axis, name, process_set):
        super().__init__()
        self._axis, self._name, self._set = axis, name, process_set

    def forward(self, x):
        return _my_block(x, self._axis, self._set)

    def backward(self, dy):
        return gather_axis(dy, self._axis, self._name + ".grad", self._set)


@reference(ref.COPY_TO_GROUP)
def copy_to_group(x, process_set=global_process_set, name=None):
    """Tensor parallelism, where every rank of the set holds the same loss:
    the identity forward, and a backward that sums the gradient over the
    set. Put it where a replicated tensor enters rank-specific (sharded)
    computation."""
    _check_array(x)
    if _check_set(process_set) == 1:
        return x
    return like(x, _CopyToGroup(next_name(process_set, "copy_to_group", name), process_set)(legacy(x)))


def _sum_into(x, out, name, process_set):
    """The allreduce-sum of `x` written into `out`, as ops.allreduce makes it
    (the same name, the same engine op), without autograd."""
    def body(base):
        ops._push_allreduce([x], [out], base, ops.Sum, 1.0, 1.0, process_set, 0, name)
        return out
    with mx.autograd.pause():
        return calls.submit("allreduce", name, process_set, body)


@reference(ref.REDUCE_FROM_GROUP)
def reduce_from_group(x, process_set=global_process_set, name=None):
    """Tensor parallelism, where every rank of the set holds the same loss:
    sums the ranks' partial results over the set; the backward passes the
    (replicated) gradient through unchanged."""
    _check_array(x)
    if _check_set(process_set) == 1:
        return x
    name = next_name(process_set, "reduce_from_group", name)
    if not mx.autograd.is_recording():
        return ops.allreduce(x, op=ops.Sum, name=name, process_set=process_set)
    view = legacy(x)  # Note [Legacy inside] in _kinds.py
    y = mx.nd.identity(view)  # recorded: its backward hands dL/dy to x unchanged
    return like(x, _sum_into(view, y, name, process_set))  # then y's value becomes the sum


@reference(ref.GATHER_FROM_GROUP)
def gather_from_group(x, process_set=global_process_set, axis=-1, name=None):
    """Tensor parallelism, where every rank of the set holds the same loss:
    concatenates every rank's equal-sized block along `axis`; the backward
    keeps this rank's block of the (replicated) gradient."""
    _check_array(x)
    axis = _normal_axis(x, axis)
    if _check_set(process_set) == 1:
        return x
    return like(x, _GatherFromGroup(axis, next_name(process_set, "gather_from_group", name), process_set)(legacy(x)))


@reference(ref.SCATTER_TO_GROUP)
def scatter_to_group(x, process_set=global_process_set, axis=-1, name=None):
    """Tensor parallelism, where every rank of the set holds the same loss:
    keeps this rank's block of a replicated `x` along `axis` (which must
    divide evenly); the backward gathers the blocks' gradients from every
    rank."""
    _check_array(x)
    axis = _normal_axis(x, axis)
    n = _check_set(process_set)
    if x.shape[axis] % n:
        raise ArgumentError(f"scatter_to_group: axis {axis} of size {x.shape[axis]} does not split evenly over "
                         f"{n} ranks")
    if n == 1:
        return x
    return like(x, _ScatterToGroup(axis, next_name(process_set, "scatter_to_group", name), process_set)(legacy(x)))
