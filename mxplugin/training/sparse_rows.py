"""Row-sparse gradients across ranks (nn.Embedding(..., sparse_grad=True)).

Note [Sparse gradients travel as rows]: a row_sparse gradient holds only
the rows its batch touched (indices, and a row of values for each). One
process on the combined batch would hold the union of every rank's rows,
each the sum of what the ranks computed for it. So every rank's indices
and values are allgathered in one grouped call (bytes grow with the rows
touched, not with the vocabulary), duplicate rows are summed, and the
result replaces the rank's gradient; the optimizer's own sparse (lazy)
update then runs on the union of rows on every rank, which is what one
process runs. A rank that touched no rows sends none. Densifying
(DistributedTrainer's sparse_as_dense=True) is the user's choice: a dense
allreduce, and the optimizer's dense update, which decays every row."""
import contextlib

import mxnet as mx
import numpy as np

from mxplugin.ops import grouped_allgather


def is_row_sparse(array):
    """Whether `array` is a row_sparse NDArray (any object without stype is not)."""
    return getattr(array, "stype", "default") == "row_sparse"


def summed_rows(grad, name, process_set, scale=1.0):
    """The sum over `process_set` of every rank's row_sparse `grad` (each
    rank's rows, duplicates summed), times `scale`: a new RowSparseNDArray
    of grad's shape with sorted, unique indices. A collective: every rank
    of the set calls it with the same name, dtype and row width. Waits for
    the gathered rows (the sum is made on the host)."""
    # NumPy shape semantics for the while: legacy MXNet takes a 0 extent for
    # "unknown" and refuses to copy a gradient of no rows.
    with _np_shape_quietly():
        indices = grad.indices.astype("int64")
        all_indices, all_values = grouped_allgather([indices, grad.data], name=name, process_set=process_set)
        rows, sums = _sum_duplicates(all_indices.asnumpy(), all_values.asnumpy())
    if not len(rows):  # no rank touched any (MXNet's legacy arrays take a 0 extent for an unknown one)
        return mx.nd.sparse.zeros("row_sparse", grad.shape, ctx=grad.context, dtype=grad.dtype)
    if scale != 1.0:
        sums *= np.asarray(scale, dtype=sums.dtype)
    return mx.nd.sparse.row_sparse_array((sums, rows), shape=grad.shape, ctx=grad.context, dtype=grad.dtype)


@contextlib.contextmanager
def _np_shape_quietly():
    """mx.util.np_shape(True) without MXNet's "NumPy-shape semantics has been
    activated in your code" log line, which names the user's code for a
    switch mxplugin makes; the line stays the user's to see should they
    turn the semantics on themselves."""
    logged = getattr(mx.util, "_set_np_shape_logged", None)
    if logged is not None:
        mx.util._set_np_shape_logged = True
    try:
        with mx.util.np_shape(True):
            yield
    finally:
        if logged is not None:
            mx.util._set_np_shape_logged = logged


def _sum_duplicates(indices, values):
    """(sorted unique indices, the sum of the values of each)."""
    if not len(indices):
        return indices, values
    order = np.argsort(indices, kind="stable")
    ordered = indices[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.add.reduceat(values[order], starts, axis=0)


def reduce_in_place(grad, name, process_set, scale=1.0):
    """Replaces `grad` (row_sparse) by summed_rows() of it; returns how many rows that holds."""
    summed = summed_rows(grad, name, process_set, scale)
    summed.copyto(grad)
    return summed.indices.shape[0]


def clear(grad):
    """`grad` (row_sparse) holds no rows: what a backward that touched none leaves."""
    mx.nd.sparse.zeros("row_sparse", grad.shape, ctx=grad.context, dtype=grad.dtype).copyto(grad)
