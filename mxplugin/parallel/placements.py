"""Placements: how the partitioner splits one child of a serial network.

A plan (see partition.py) maps child paths to placements. Each placement
checks that it can split the block it is given (`check`, raising
ArgumentError that names the child and what disagreed) and builds the
tensor-parallel block that replaces it and takes over this rank's slices of
the serial block's weights (`replace`).

    ColwiseParallel()   Dense -> ColumnParallelDense; output split over the mp
                        group unless gather_output=True
    RowwiseParallel()   Dense -> RowParallelDense; input split over the mp group
                        unless input_is_parallel=False; output whole
    ShardedOutput()     the classifier: Dense -> ColumnParallelDense whose split
                        scores are the network's output, for
                        ShardedSoftmaxCrossEntropyLoss
    VocabParallel()     Embedding -> VocabParallelEmbedding; output whole
    HeadParallel(...)   a user's attention block: Q/K/V column-wise, output
                        projection row-wise, head count divided by mp
    Replicate()         left as it is (what every unnamed child gets)

Note [Split features between layers]
ColwiseParallel's default (gather_output=False) and RowwiseParallel's
(input_is_parallel=True) are the Megatron-LM pair, as PyTorch's placements
of the same names: the hidden features stay split between the two layers and
the pair costs one allreduce forward and one backward. Between them only
element-wise blocks may act (activations, dropout). In a Sequential the
partitioner checks this; in a block with its own forward it cannot, and the
user's forward must hold to it.
"""
from dataclasses import dataclass

from mxnet import gluon

from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_partition as plan_ref
from mxplugin.parallel import _reference_placements as ref
from mxplugin.parallel._reference import reference
from mxplugin.parallel._tree import describe, runs_forward_of
from mxplugin.parallel.embedding import VocabParallelEmbedding
from mxplugin.parallel.layers import ColumnParallelDense, RowParallelDense


@reference(ref.PLACEMENT)
class Placement:
    """Base of the placements: how parallelize() splits one child of a serial
    network. Subclass it for a split of your own. parallelize() asks each
    named child's placement for children() (placements of the child's own
    children), calls check() on every entry before changing anything, then
    replace() on each, in the network's order.

    Two class attributes say how features flow through the replacement,
    which parallelize() checks in Sequential blocks: output_split (its output
    is this rank's block of features, for a layer taking a split input; False
    here) and input_split (its input must be such a block; False here)."""
    output_split = False
    input_split = False

    @reference(ref.PLACEMENT_CHECK)
    def check(self, path, block, mesh):
        """Raises ArgumentError if `block` (at `path`) cannot be split so; the
        base accepts every block."""

    @reference(ref.PLACEMENT_REPLACE)
    def replace(self, block, mesh):
        """The tensor-parallel block that replaces `block`, holding this rank's
        slices of its weights; None to keep `block` (after changing it). The
        base keeps it unchanged."""
        return None

    @reference(ref.PLACEMENT_CHILDREN)
    def children(self, block):
        """{child key: placement} this placement implies for `block`'s
        children; the base implies none."""
        return {}


def _fail(path, block, placement, why):
    raise ArgumentError(f"parallelize: child '{path}' ({describe(block)}) cannot take {placement}: {why}")


def _check_dense(path, block, placement, mesh, split_dim):
    if not isinstance(block, gluon.nn.Dense):
        _fail(path, block, placement, "it is not a gluon.nn.Dense")
    if not runs_forward_of(block, gluon.nn.Dense):
        _fail(path, block, placement, f"{type(block).__name__} overrides Dense's forward, which the split "
              "layer would not run")
    units, in_units = block.weight.shape
    if not in_units:
        _fail(path, block, placement, "its in_units are not known yet (deferred initialisation); give the Dense "
              "in_units=..., or run one forward pass before parallelize()")
    width = units if split_dim == "units" else in_units
    if width % mesh.mp:
        _fail(path, block, placement, f"{split_dim}={width} is not divisible by the model-parallel size "
              f"mp={mesh.mp}")


def _split_dense(layer_class, dense, mesh, **options):
    """A `layer_class` (a split Dense) built as `dense` was, with `options`,
    holding this rank's slices of `dense`'s values."""
    units, in_units = dense.weight.shape
    bias = dense.bias
    layer = layer_class(units=units, in_units=in_units, use_bias=bias is not None,
                        activation=dense.act._act_type if dense.act is not None else None, flatten=dense._flatten,
                        dtype=dense.weight.dtype, weight_initializer=dense.weight.init,
                        bias_initializer=bias.init if bias is not None else "zeros", prefix=dense.prefix, mesh=mesh,
                        **options)
    layer.take_values(dense._reg_params)
    return layer


@reference(ref.COLWISE)
@dataclass(frozen=True)
class ColwiseParallel(Placement):
    """Dense split by output features (rows of the weight), becoming a
    ColumnParallelDense. The input must be the same on every rank of the mp
    group. gather_output=False (default): each rank returns its units/mp
    features, for a RowwiseParallel Dense after it (only element-wise blocks,
    activations and dropout, may act between the two: the Megatron-LM pair,
    one allreduce forward and one backward); True: every rank gets all
    units."""
    gather_output: bool = False

    @property
    def output_split(self):
        """Whether the replacement's output is this rank's block of features
        (True unless gather_output)."""
        return not self.gather_output

    @reference(ref.COLWISE_CHECK)
    def check(self, path, block, mesh):
        """Raises ArgumentError unless `block` is a plain gluon.nn.Dense whose
        units divide by mp."""
        _check_dense(path, block, self, mesh, "units")

    @reference(ref.COLWISE_REPLACE)
    def replace(self, block, mesh):
        """The ColumnParallelDense that replaces the Dense `block`."""
        return _split_dense(ColumnParallelDense, block, mesh, gather_output=self.gather_output)


@reference(ref.ROWWISE)
@dataclass(frozen=True)
class RowwiseParallel(Placement):
    """Dense split by input features (columns of the weight), becoming a
    RowParallelDense; the partial products are summed over the mp group and
    every rank gets the whole output. input_is_parallel=True (default): the
    input is this rank's block of features from a ColwiseParallel Dense;
    False: the whole input, sliced here."""
    input_is_parallel: bool = True

    @property
    def input_split(self):
        """Whether the replacement's input must be this rank's block of
        features (input_is_parallel)."""
        return self.input_is_parallel

    @reference(ref.ROWWISE_CHECK)
    def check(self, path, block, mesh):
        """Raises ArgumentError unless `block` is a plain gluon.nn.Dense whose
        in_units divide by mp."""
        _check_dense(path, block, self, mesh, "in_units")

    @reference(ref.ROWWISE_REPLACE)
    def replace(self, block, mesh):
        """The RowParallelDense that replaces the Dense `block`."""
        return _split_dense(RowParallelDense, block, mesh, input_is_parallel=self.input_is_parallel)


@reference(ref.SHARDED_OUTPUT)
@dataclass(frozen=True)
class ShardedOutput(Placement):
    """The classifier: a Dense split by classes whose split scores are the
    network's output (mp rank m returns classes [m*C/mp, (m+1)*C/mp)); it
    must be the network's last layer (element-wise blocks aside). Train
    with ShardedSoftmaxCrossEntropyLoss, measure with sharded_accuracy."""
    output_split = True

    @reference(ref.COLWISE_CHECK)
    def check(self, path, block, mesh):
        """Raises ArgumentError unless `block` is a plain gluon.nn.Dense whose
        units (classes) divide by mp."""
        _check_dense(path, block, self, mesh, "units")

    @reference(ref.SHARDED_OUTPUT_REPLACE)
    def replace(self, block, mesh):
        """The ColumnParallelDense (gather_output=False) that replaces the
        Dense `block`."""
        return _split_dense(ColumnParallelDense, block, mesh, gather_output=False)


@reference(ref.VOCAB)
@dataclass(frozen=True)
class VocabParallel(Placement):
    """Embedding split by rows (the vocabulary), becoming a
    VocabParallelEmbedding; every rank gets the whole embeddings (one
    allreduce forward)."""

    @reference(ref.VOCAB_CHECK)
    def check(self, path, block, mesh):
        """Raises ArgumentError unless `block` is a plain gluon.nn.Embedding
        with dense gradients whose input_dim divides by mp."""
        if not isinstance(block, gluon.nn.Embedding):
            _fail(path, block, self, "it is not a gluon.nn.Embedding")
        if not runs_forward_of(block, gluon.nn.Embedding):
            _fail(path, block, self, f"{type(block).__name__} overrides Embedding's forward")
        if block._kwargs["sparse_grad"]:
            _fail(path, block, self, "sparse_grad=True is not supported (the shard's gradient is dense)")
        vocab = block._kwargs["input_dim"]
        if vocab % mesh.mp:
            _fail(path, block, self, f"input_dim={vocab} is not divisible by the model-parallel size mp={mesh.mp}")

    @reference(ref.VOCAB_REPLACE)
    def replace(self, block, mesh):
        """The VocabParallelEmbedding that replaces the Embedding `block`."""
        kw = block._kwargs
        layer = VocabParallelEmbedding(kw["input_dim"], kw["output_dim"], mesh=mesh, dtype=kw["dtype"],
                                       weight_initializer=block.weight.init, prefix=block.prefix)
        layer.take_values(block._reg_params)
        return layer


@reference(ref.HEAD)
@dataclass(frozen=True)
class HeadParallel(Placement):
    """A user's multi-head attention block, split by heads: mp rank m computes
    heads [m*H/mp, (m+1)*H/mp). Its query, key and value projections are
    split column-wise and its output projection row-wise, and the head count
    the forward reads is divided by mp.

    The contract: the forward computes the heads' shapes only from these
    attributes (or from -1 in reshapes), and mixes heads only through the
    output projection. Fused QKV projections (one Dense for all three) are not
    supported: their rows are not head-major over the three."""
    projections: tuple = ("query", "key", "value")
    output: str = "proj"
    num_heads: str = "_num_heads"
    per_rank: tuple = ()

    @reference(ref.HEAD_CHECK)
    def check(self, path, block, mesh):
        """Raises ArgumentError unless `block` has the attributes and children
        named, with counts that divide by mp."""
        heads = getattr(block, self.num_heads, None)
        if not isinstance(heads, int) or isinstance(heads, bool):
            _fail(path, block, self, f"it has no integer attribute '{self.num_heads}' (num_heads= names the "
                  f"attribute holding the head count)")
        if heads % mesh.mp:
            _fail(path, block, self, f"{self.num_heads}={heads} heads are not divisible by the model-parallel "
                  f"size mp={mesh.mp}")
        for attr in self.per_rank:
            value = getattr(block, attr, None)
            if not isinstance(value, int) or isinstance(value, bool):
                _fail(path, block, self, f"it has no integer attribute '{attr}' (named in per_rank)")
            if value % mesh.mp:
                _fail(path, block, self, f"{attr}={value} is not divisible by the model-parallel size mp={mesh.mp}")
        for key in (*self.projections, self.output):
            if key not in block._children:
                _fail(path, block, self, f"it has no child '{key}' (children: {', '.join(block._children) or 'none'})")
        for key in self.projections:
            units = block._children[key].weight.shape[0] if isinstance(block._children[key], gluon.nn.Dense) else 0
            if units and units % heads:
                _fail(path, block, self, f"projection '{key}' has {units} output features, not a multiple of "
                      f"{self.num_heads}={heads}")

    @reference(ref.HEAD_CHILDREN)
    def children(self, block):
        """The projections' placements: column-wise for Q, K and V, row-wise
        for the output projection."""
        plan = {key: ColwiseParallel() for key in self.projections}
        plan[self.output] = RowwiseParallel()
        return plan

    @reference(ref.HEAD_REPLACE)
    def replace(self, block, mesh):
        """Divides the block's head count (and per_rank attributes) by mp and
        keeps the block (None)."""
        for attr in (self.num_heads, *self.per_rank):
            setattr(block, attr, getattr(block, attr) // mesh.mp)
        return None


@reference(ref.REPLICATE)
@dataclass(frozen=True)
class Replicate(Placement):
    """Left whole on every rank: what every child the plan does not name
    gets. Name a child with it to say so in the plan."""


@reference(plan_ref.PLAN)
class Plan:
    """An ordered {child path or pattern: Placement}, with notes saying why
    (auto_plan fills them). print(plan) shows both. A Plan equals another,
    or a dict, with the same placements; its entries are in `placements`
    and its notes in `notes`."""

    def __init__(self, placements, notes=()):
        if not hasattr(placements, "items"):
            raise TypeError(f"a plan is a dict of child name -> placement, got {type(placements).__name__}")
        for key, placement in placements.items():
            if not isinstance(key, str):
                raise TypeError(f"plan keys are child names or patterns (str), got {key!r}")
            if not isinstance(placement, Placement):
                raise TypeError(f"plan entry '{key}': {placement!r} is not a placement (ColwiseParallel(), "
                                "RowwiseParallel(), ShardedOutput(), VocabParallel(), HeadParallel(...), Replicate())")
        self.placements = dict(placements)
        self.notes = list(notes)

    def __eq__(self, other):
        other = other.placements if isinstance(other, Plan) else other
        return isinstance(other, dict) and self.placements == other

    def __repr__(self):
        return f"Plan({self.placements!r})"

    def __str__(self):
        width = max((len(k) for k in self.placements), default=0)
        lines = [f"{len(self.placements)} placement(s); every other child replicated"]
        lines += [f"  {key:<{width}}  {placement}" for key, placement in self.placements.items()]
        if self.notes:
            lines += ["notes:"] + [f"  {note}" for note in self.notes]
        return "\n".join(lines)
