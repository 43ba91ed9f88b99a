"""What ranks exchange before a collective's data moves, with small
blocking allgathers: allgather's first dimensions together with what must
agree (so that a disagreement raises from the call on every rank, as in
Horovod), and alltoall's splits (checked to be integers first). The output
NDArray then has its final shape when Python gets it."""
import mxnet as mx
import numpy as np

from mxplugin import basics
from mxplugin.errors import ArgumentError, MismatchError, values_by_rank


def _core_module():
    from mxplugin._loader import core_module

    return core_module


def exchange_int64(values, name, process_set, set_id, group=None):
    """Blocking allgather of a small int64 vector from every rank of the set
    (used to learn output shapes before the data moves asynchronously).
    A rank that has joined (joined.join) gives a row of zeros.
    group: the name of the call it is part of, negotiated with it, so that
    a rank that calls something else under that name, or refuses the call,
    fails this exchange too rather than leave it waiting."""
    m = _core_module()
    mine = np.ascontiguousarray(values, dtype=np.int64)
    n = len(process_set.ranks)
    out = np.empty(n * len(mine), dtype=np.int64)
    handle = basics._core().enqueue(
        [m.Op(name, m.OP_ALLGATHER, m.DTYPES["int64"], [len(mine)], mine.ctypes.data, out.ctypes.data,
              out_shape=[len(out)], zeros_when_joined=True)], set_id, False, 0, group)
    handle.wait()
    return out.reshape(n, len(mine))


# allgather exchanges, before any data moves, each rank's first dimension and
# what must agree (dtype, number of dimensions, trailing dimensions), so that a
# disagreement raises from allgather itself on every rank, as in Horovod.
TRAILING_SLOTS = 7


def allgather_signature(dtype, shape):
    trailing = list(shape[1:])
    if len(trailing) > TRAILING_SLOTS:  # keep the vector's length fixed: fold the rest into one number
        trailing = trailing[:TRAILING_SLOTS - 1] + [hash(tuple(trailing[TRAILING_SLOTS - 1:])) & (2 ** 62 - 1)]
    return [shape[0], dtype, len(shape)] + trailing + [-1] * (TRAILING_SLOTS - len(trailing))


def check_allgather_rows(rows, name, process_set):
    if (rows[:, 1:] == rows[0, 1:]).all():  # the usual case, cheaply (this runs for every allgather)
        return
    # Ranks that have joined (joined.join) sent zeros, and contribute no rows;
    # a real signature has a number of dimensions (>= 1).
    ranks = process_set.ranks if process_set.ranks is not None else list(range(len(rows)))
    present = rows[:, 2] != 0
    rows, ranks = rows[present], [r for r, p in zip(ranks, present) if p]
    if len(rows) == 0 or (rows[:, 1:] == rows[0, 1:]).all():
        return
    names = {code: dtype for dtype, code in _core_module().DTYPES.items()}

    def describe(row):
        dims = [int(d) for d in row[3:3 + min(int(row[2]) - 1, TRAILING_SLOTS)]]
        return f"{names.get(int(row[1]), row[1])}, rank-{int(row[2])} with trailing dims {tuple(dims)}"

    detail = values_by_rank(ranks, [tuple(int(v) for v in row[1:]) for row in rows], [describe(r) for r in rows])
    if detail:
        raise MismatchError(f"Mismatched allgather for tensor '{name}': {detail}. Every rank must gather "
                            "tensors of one dtype whose dimensions after the first agree.")


def integer_splits(splits):
    """splits as a list of ints: an int32/int64 NDArray or NumPy array, or a
    list or tuple of Python ints. Anything else (floats above all, which
    would be truncated into a silently wrong exchange) is an ArgumentError."""
    if isinstance(splits, mx.nd.NDArray):
        splits = splits.asnumpy()
    if isinstance(splits, np.ndarray):
        if splits.dtype not in (np.int32, np.int64):
            raise ArgumentError(f"alltoall: splits must be int32 or int64, got an array of {splits.dtype}")
        return [int(v) for v in splits.reshape(-1)]
    if isinstance(splits, (list, tuple)):
        bad = [v for v in splits if not isinstance(v, (int, np.integer)) or isinstance(v, bool)]
        if bad:
            raise ArgumentError(f"alltoall: splits must be integers, got {bad[0]!r} ({type(bad[0]).__name__})")
        return [int(v) for v in splits]
    raise ArgumentError(f"alltoall: splits must be an int32/int64 NDArray or a list or tuple of ints, "
                        f"got {type(splits).__name__}")
