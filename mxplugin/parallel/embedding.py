"""Vocabulary-parallel embedding: the rows of the (input_dim, output_dim)
table split over the mp group (Megatron-LM's VocabParallelEmbedding).

mp rank m holds rows [m*V/mp, (m+1)*V/mp). Each rank looks up the ids that
fall in its rows and writes zeros for the others; the sum over the group
(one allreduce forward, none backward) is the serial lookup, since every id
falls in exactly one rank's rows. The gradient of a shard is the serial
gradient of its rows: rows of ids outside the shard receive only zeros.
"""

from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_layers as ref
from mxplugin.parallel._reference import reference
from mxplugin.parallel.collectives import reduce_from_group
from mxplugin.parallel.layers import _ParallelBlock, _ShardOf
from mxplugin.parallel.mesh import default_mesh, mark_distributed


@reference(ref.VOCAB_PARALLEL_EMBEDDING)
class VocabParallelEmbedding(_ParallelBlock):
    """gluon.nn.Embedding(input_dim, output_dim) with its rows split over the
    mesh's mp group (input_dim must divide by mp): mp rank m holds rows
    [m*V/mp, (m+1)*V/mp) of the V rows. Takes the ids (any shape, the same on
    every rank of the group) and returns the full embeddings on every rank of
    the group, at one allreduce forward and none backward. Imperative only,
    like the parallel Dense layers. full_weight() gathers the whole table (a
    collective call over the mp group)."""

    def __init__(self, input_dim, output_dim, mesh=None, dtype="float32", weight_initializer=None, **kwargs):
        mesh = mesh if mesh is not None else default_mesh()
        if input_dim % mesh.mp:
            raise ArgumentError(f"VocabParallelEmbedding: input_dim={input_dim} does not split evenly over "
                                f"mp={mesh.mp} ranks")
        super().__init__(mesh, **kwargs)
        self._input_dim, self._output_dim, self._dtype = input_dim, output_dim, dtype
        self._local_rows = input_dim // mesh.mp
        self._first_row = mesh.mp_rank * self._local_rows
        rows = slice(self._first_row, self._first_row + self._local_rows)
        self._shards["weight"], self._full_shapes["weight"] = (rows,), (input_dim, output_dim)
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(self._local_rows, output_dim), dtype=dtype,
                                          init=_ShardOf((input_dim, output_dim), (rows,), weight_initializer),
                                          allow_deferred_init=False)
        mark_distributed(self.weight)

    @reference(ref.EMBEDDING_FORWARD)
    def hybrid_forward(self, F, x, weight):
        """The layer's computation, which Gluon runs when the layer is called
        (call the layer, not this method): the lookups of the ids in this
        rank's rows, zeros for the others, summed over the mp group."""
        self._check_imperative(F)
        local = x - self._first_row
        inside = (local >= 0) * (local < self._local_rows)
        y = F.Embedding(local * inside, weight, input_dim=self._local_rows, output_dim=self._output_dim,
                        dtype=self._dtype)
        y = F.broadcast_mul(y, inside.expand_dims(-1).astype(y.dtype))
        return reduce_from_group(y, self._mesh.mp_set, name=self.label)

    @reference(ref.EMBEDDING_LOAD_FULL)
    def load_full(self, weight):
        """Sets this rank's rows from the full (input_dim, output_dim) table."""
        self._load_full_array("weight", weight)

    def __repr__(self):
        return (f"{type(self).__name__}({self._input_dim} -> {self._output_dim}, {self._local_rows} rows per "
                f"rank, mesh={self._mesh})")
