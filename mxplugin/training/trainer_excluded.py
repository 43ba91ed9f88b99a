"""The parameters a DistributedTrainer keeps out of its buckets
(row_sparse gradients, parameters on several contexts): how their
gradients are reduced. A mixin of DistributedTrainer (trainer.py), whose
state it reads: _layout's excluded parameters, _prefix, _process_set,
_predivide, _sparse_as_dense, _dense_grads."""
import mxnet as mx

from mxplugin.ops import Sum, allreduce_
from mxplugin.training import sparse_rows


class ExcludedReductions:
    """DistributedTrainer's reductions of the parameters outside its buckets."""

    def _densify(self, layout):
        """sparse_as_dense=True: each row_sparse gradient's dense copy, which
        is reduced and updated in its place this step (at any size, so that
        one process makes the same dense update as N)."""
        self._dense_grads = {}
        if self._sparse_as_dense:
            for index, p in layout.excluded:
                grad, weight = p.list_grad()[0], p.list_data()[0]
                if sparse_rows.is_row_sparse(grad):
                    # A rank whose backward did not use the parameter touched no rows: zeros, not the last step's
                    fresh = weight._fresh_grad
                    self._dense_grads[index] = grad.tostype("default") if fresh else mx.nd.zeros(
                        grad.shape, ctx=grad.context, dtype=grad.dtype)
                    weight._fresh_grad = fresh or self._world()  # other ranks may have touched rows

    def _reduce_excluded(self, layout):
        """Parameters outside the buckets: row_sparse gradients as rows (Note
        [Sparse gradients travel as rows] in sparse_rows.py), the rest
        (sparse_as_dense copies, several contexts) one allreduce each."""
        for index, p in layout.excluded:
            name = f"{self._prefix}param{index}"
            for g in p.list_grad():
                if index in self._dense_grads:
                    g = self._dense_grads[index]
                elif sparse_rows.is_row_sparse(g):
                    weight = p.list_data()[0]
                    if not weight._fresh_grad:  # this rank's backward did not use it: it touched no rows
                        sparse_rows.clear(g)
                    if sparse_rows.reduce_in_place(g, name, self._process_set, 1.0 / self._predivide):
                        weight._fresh_grad = True  # the combined batch touched rows, as one process's would
                    continue
                allreduce_(g, name=name, priority=-index, op=Sum, prescale_factor=1.0 / self._predivide,
                           process_set=self._process_set)
