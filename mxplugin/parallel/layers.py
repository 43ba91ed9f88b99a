"""Tensor-parallel Dense layers (Megatron-LM's column and row split).

A Dense layer computes y = x W^T + b with W of shape (units, in_units).

- ColumnParallelDense keeps rows [m*units/mp, (m+1)*units/mp) of W (and of b)
  on mp rank m: each rank computes its block of the output features.
- RowParallelDense keeps columns [m*in_units/mp, (m+1)*in_units/mp) of W: each
  rank multiplies its block of the input features, the partial products are
  summed over the mp group, then the whole bias is added.

Column followed by Row (gather_output=False, input_is_parallel=True) is the
tensor-parallel MLP: one allreduce forward and one backward per pair.

NumPy interface: under npx.set_np() the blocks take and return mx.np.ndarrays
and run the same legacy operators on views of them (Note [Legacy inside] in
_kinds.py), so the numbers are the legacy run's.

Hybridization: the collectives run as imperative autograd.Functions, so these
blocks always run imperatively. hybridize() is accepted (so a container can
hybridize its other children) but leaves them un-hybridized, and they cannot
be traced into a parent's symbolic graph: put them in nn.Sequential or a plain
Block, not in a hybridized HybridSequential/HybridBlock.

Note [Collective names]
Collectives pair up across ranks by name. Gluon's block names ("dense3")
count the blocks each process has created, so a rank that built one more
block (an evaluation copy, a model to save) names every later layer
differently. The layers therefore name their collectives by a label that is
the same on every rank: the child path when parallelize() made the layer
("encoder.ffn.0"), else the class name, followed by the kind and the counter
that next_name() adds (Note [Ring names] in collectives.py).
"""
import mxnet as mx
import numpy as np
from mxnet import gluon

from mxplugin.array_kinds import is_numpy
from mxplugin.parallel import _reference_layers as ref
from mxplugin.parallel._kinds import LegacyForward, set_data
from mxplugin.parallel._reference import reference
from mxplugin.parallel.collectives import (copy_to_group, gather_axis, gather_from_group, next_name,
                                           reduce_from_group, scatter_to_group)
from mxplugin.errors import ArgumentError
from mxplugin.parallel.mesh import default_mesh, mark_distributed


class _ShardOf(mx.init.Initializer):
    """Initialises the whole (unsplit) array exactly as an unsplit Dense layer
    would (same initializer, same random draws) and keeps one shard of it, so
    that a sharded model starts from the unsplit model's values given the same
    seed on every rank. The whole array is of the kind of `arr` (a NumPy
    array when the Parameter was initialised under npx.set_np()), as an
    unsplit Dense's would be, so the initializer runs as it would there."""

    def __init__(self, full_shape, index, init=None):
        super().__init__()
        self._full_shape, self._index, self._init = tuple(full_shape), index, init

    def _init_weight(self, desc, arr):
        zeros = mx.np.zeros if is_numpy(arr) else mx.nd.zeros
        full = zeros(self._full_shape, dtype=arr.dtype, ctx=arr.context)
        if self._init is not None:  # as a Parameter with its own init
            mx.init.create(self._init)._init_weight(desc, full)
        else:  # as a Parameter without one: the global initializer, by name suffix
            desc.global_init(mx.init.InitDesc(str(desc)), full)
        arr[:] = full[self._index]


def _as_ndarray(value, what):
    if isinstance(value, mx.nd.NDArray):
        return value
    if isinstance(value, np.ndarray):
        return mx.nd.array(value, dtype=value.dtype)
    raise TypeError(f"{what} must be an NDArray or a numpy array, got {type(value).__name__}")


def _check_shape(value, shape, what):
    if tuple(value.shape) != tuple(shape):
        raise ArgumentError(f"{what} has shape {tuple(value.shape)}, expected {tuple(shape)}")


class _ParallelBlock(LegacyForward, gluon.HybridBlock):
    """What every tensor-parallel block shares: the mesh, the hybridize()
    policy, and shards described by an index into the full array.

    `_shards` maps each parameter's attribute name to the index (a tuple of
    slices) of this rank's block in the full array, or None for a parameter
    that is replicated whole; `_full_shapes` maps it to the full array's
    shape. The full-array methods below read only these two."""

    def __init__(self, mesh, **kwargs):
        super().__init__(**kwargs)
        self._mesh = mesh if mesh is not None else default_mesh()
        self._shards = {}
        self._full_shapes = {}
        self.label = type(self).__name__  # Note [Collective names]

    @property
    def mesh(self):
        return self._mesh

    def hybridize(self, active=True, **kwargs):
        """Accepted for containers' sake; these blocks stay imperative (see the module docstring)."""
        super().hybridize(False, **kwargs)

    def _check_imperative(self, F):
        if F is not mx.nd:
            raise NotImplementedError(
                f"{type(self).__name__} runs its collectives imperatively and cannot be part of a hybridized "
                "graph; hold it in nn.Sequential or a plain Block instead of a hybridized HybridBlock")

    def _gather(self, data, axis, what):
        ps = self._mesh.mp_set
        return gather_axis(data, axis, next_name(ps, f"{self.label}.{what}"), ps)

    def _shard_of(self, attr, whole):
        """This rank's block of the whole array of parameter `attr`."""
        index = self._shards[attr]
        return whole if index is None else whole[index]

    def full_array(self, attr):
        """The whole array of parameter `attr`: gathered over the mp group
        along the axis its shard splits (a collective call: every rank of the
        group must make it), or a copy of it when it is replicated."""
        data, index = getattr(self, attr).data(), self._shards[attr]
        if index is None:
            return data.copy()
        axis = next(i for i, part in enumerate(index) if part != slice(None))
        return self._gather(data, axis, attr)

    def full_weight(self):
        """The whole weight, gathered over the mp group (a collective call)."""
        return self.full_array("weight")

    def full_arrays(self):
        """{attribute name: whole array} of every parameter, gathered over the
        mp group where split (a collective call over the group)."""
        return {attr: self.full_array(attr) for attr in self._shards}

    def _load_full_array(self, attr, whole):
        whole = _as_ndarray(whole, attr)
        _check_shape(whole, self._full_shapes[attr], attr)
        set_data(getattr(self, attr), self._shard_of(attr, whole))

    def load_full_arrays(self, arrays):
        """Sets this rank's shards from {attribute name: whole array}."""
        for attr, whole in arrays.items():
            self._load_full_array(attr, whole)

    def take_values(self, serial_params):
        """Takes this rank's shards of the values of `serial_params`
        ({attribute name: Parameter} of the serial block this one replaces),
        and their lr_mult, wd_mult and grad_req. Uninitialised serial
        parameters leave this block's own uninitialised: its initializers
        draw the whole array as the serial ones would (_ShardOf)."""
        for attr in self._shards:
            mine, theirs = getattr(self, attr), serial_params[attr]
            mine.lr_mult, mine.wd_mult, mine.grad_req = theirs.lr_mult, theirs.wd_mult, theirs.grad_req
            if theirs._data is None:
                continue
            mine.initialize(init=mx.init.Zero(), ctx=theirs.list_ctx(), force_reinit=True)
            set_data(mine, self._shard_of(attr, theirs.list_data()[0]))


class _ParallelDense(_ParallelBlock):
    """What both Dense splits share: the parameters and the full-array helpers."""

    def __init__(self, units, in_units, weight_shape, weight_index, bias_shape, bias_index, use_bias,
                 activation, mesh, flatten, dtype, weight_initializer, bias_initializer, **kwargs):
        super().__init__(mesh, **kwargs)
        self._units, self._in_units, self._flatten = units, in_units, flatten
        self._shards["weight"], self._full_shapes["weight"] = weight_index, (units, in_units)
        with self.name_scope():
            self.weight = self.params.get("weight", shape=weight_shape, dtype=dtype,
                                          init=_ShardOf((units, in_units), weight_index, weight_initializer),
                                          allow_deferred_init=False)
            mark_distributed(self.weight)
            if use_bias:
                init = bias_initializer if bias_index is None else _ShardOf((units,), bias_index, bias_initializer)
                self.bias = self.params.get("bias", shape=bias_shape, dtype=dtype, init=init,
                                            allow_deferred_init=False)
                self._shards["bias"], self._full_shapes["bias"] = bias_index, (units,)
                if bias_index is not None:
                    mark_distributed(self.bias)
            else:
                self.bias = None
            self.act = gluon.nn.Activation(activation, prefix=activation + "_") if activation else None

    def load_full(self, weight, bias=None):
        """Sets this rank's shard from the full (unsplit) weight of shape
        (units, in_units) and, if given, the full bias of shape (units,)."""
        self._load_full_array("weight", weight)
        if bias is not None:
            if self.bias is None:
                raise ArgumentError(f"{self.name} has no bias (use_bias=False)")
            self._load_full_array("bias", bias)

    def full_bias(self):
        """The whole bias (units,), or None without a bias (a collective call
        when the bias is split)."""
        return None if self.bias is None else self.full_array("bias")


@reference(ref.COLUMN_PARALLEL_DENSE)
class ColumnParallelDense(_ParallelDense):
    """Dense layer whose output features are split over the mp group.

    Holds units/mp rows of the weight (and bias) of Dense(units, in_units):
    mp rank m computes output features [m*units/mp, (m+1)*units/mp).
    The input must be the same on every rank of the mp group (its gradient is
    summed over the group). With gather_output the full output is gathered
    along the last axis on every rank; without, each rank returns its block of
    units/mp output features (to feed a RowParallelDense with
    input_is_parallel=True, or a ShardedSoftmaxCrossEntropyLoss).

    The whole arrays are read with full_weight() and full_bias() (collective
    calls over the mp group) and set with load_full(weight, bias=None), of
    which each rank keeps its slices. The layer runs imperatively:
    hybridize() leaves it so; hold it in nn.Sequential or a plain Block, not
    in a hybridized HybridBlock. Under npx.set_np() it takes and returns
    mx.np.ndarrays.
    """

    def __init__(self, units, in_units, gather_output=True, use_bias=True, activation=None, mesh=None,
                 flatten=True, dtype="float32", weight_initializer=None, bias_initializer="zeros", **kwargs):
        mesh = mesh if mesh is not None else default_mesh()
        if units % mesh.mp:
            raise ArgumentError(f"ColumnParallelDense: units={units} does not split evenly over mp={mesh.mp} ranks")
        local = units // mesh.mp
        rows = slice(mesh.mp_rank * local, (mesh.mp_rank + 1) * local)
        super().__init__(units, in_units, (local, in_units), (rows,), (local,), (rows,), use_bias, activation,
                         mesh, flatten, dtype, weight_initializer, bias_initializer, **kwargs)
        self._local_units = local
        self._gather_output = gather_output

    @reference(ref.COLUMN_FORWARD)
    def hybrid_forward(self, F, x, weight, bias=None):
        """The layer's computation, which Gluon runs when the layer is called
        (call the layer, not this method): this rank's output features, then
        gathered over the mp group with gather_output."""
        self._check_imperative(F)
        x = copy_to_group(x, self._mesh.mp_set, name=self.label)
        y = F.FullyConnected(x, weight, bias, no_bias=bias is None, num_hidden=self._local_units,
                             flatten=self._flatten)
        if self.act is not None:
            y = self.act(y)
        if self._gather_output:
            y = gather_from_group(y, self._mesh.mp_set, axis=-1, name=self.label)
        return y

    def __repr__(self):
        return (f"{type(self).__name__}({self._in_units} -> {self._units}, {self._local_units} per rank, "
                f"gather_output={self._gather_output}, mesh={self._mesh})")


@reference(ref.ROW_PARALLEL_DENSE)
class RowParallelDense(_ParallelDense):
    """Dense layer whose input features are split over the mp group.

    Holds in_units/mp columns of the weight of Dense(units, in_units); the bias
    is whole, replicated and added once after the partial products are summed
    over the mp group (it is not marked distributed). With input_is_parallel
    the input is this rank's block of in_units/mp features (from a
    ColumnParallelDense with gather_output=False); otherwise the full input,
    the same on every rank of the group, is sliced here. The output is the
    full output on every rank of the group; the activation, if any, is
    applied to it.

    The whole arrays are read with full_weight() and full_bias() and set with
    load_full(weight, bias=None), as for ColumnParallelDense; the layer runs
    imperatively as that one does.
    """

    def __init__(self, units, in_units, input_is_parallel=False, use_bias=True, activation=None, mesh=None,
                 flatten=True, dtype="float32", weight_initializer=None, bias_initializer="zeros", **kwargs):
        mesh = mesh if mesh is not None else default_mesh()
        if in_units % mesh.mp:
            raise ArgumentError(f"RowParallelDense: in_units={in_units} does not split evenly over mp={mesh.mp} "
                             "ranks")
        local = in_units // mesh.mp
        cols = slice(mesh.mp_rank * local, (mesh.mp_rank + 1) * local)
        super().__init__(units, in_units, (units, local), (slice(None), cols), (units,), None, use_bias,
                         activation, mesh, flatten, dtype, weight_initializer, bias_initializer, **kwargs)
        self._local_in_units = local
        self._input_is_parallel = input_is_parallel

    @reference(ref.ROW_FORWARD)
    def hybrid_forward(self, F, x, weight, bias=None):
        """The layer's computation, which Gluon runs when the layer is called
        (call the layer, not this method): this rank's partial product,
        summed over the mp group, plus the bias."""
        self._check_imperative(F)
        if self._flatten and x.ndim > 2:
            if self._input_is_parallel:
                # Flattening (N, T, in_units/mp) would interleave the positions'
                # feature blocks; the serial layer's flattened columns are not
                # this rank's contiguous block.
                raise ArgumentError(
                    f"{self.name}: input_is_parallel with flatten=True takes 2-d inputs, got shape {x.shape}; "
                    "use flatten=False (as the Dense it replaces should) to apply it along the last axis")
            x = x.reshape((0, -1))
        if not self._input_is_parallel:
            x = scatter_to_group(x, self._mesh.mp_set, axis=-1, name=self.label)
        partial = F.FullyConnected(x, weight, no_bias=True, num_hidden=self._units, flatten=self._flatten)
        y = reduce_from_group(partial, self._mesh.mp_set, name=self.label)
        if bias is not None:
            y = F.broadcast_add(y, bias)
        if self.act is not None:
            y = self.act(y)
        return y

    def __repr__(self):
        return (f"{type(self).__name__}({self._in_units} -> {self._units}, {self._local_in_units} inputs per "
                f"rank, input_is_parallel={self._input_is_parallel}, mesh={self._mesh})")
